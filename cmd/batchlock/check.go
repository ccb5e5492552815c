package main

import (
	"context"
	"flag"
	"fmt"
	"time"

	"github.com/batchlock/batchlock/batchlock"
)

type checkOptions struct {
	clusterFlags
	replicas int
}

func checkCommand() command {
	return command{
		name: "check",
		summary: `Usage: batchlock check [--addrs host:port,...] [--prefix batchlock:] [--replicas n]

Checks, on every master, what batchlock relies on (Redis 7.0+, cross-slot
scripts, sharded pub/sub, maxmemory-policy noeviction, cluster state, the
replicas online that --replicas n asks for, clocks that agree), and the
go-redis settings of this command's own client; prints one line per check,
masters by address, then a summary line, and exits 1 on any problem. Your
application's client settings are checked by its own Client.Check.`,
		flags: func(fs *flag.FlagSet) any {
			o := &checkOptions{}
			o.define(fs)
			fs.IntVar(&o.replicas, "replicas", 0, "replicas online each master needs, as given to batchlock.WithReplicas")
			return o
		},
		run: func(ctx context.Context, e *env, opts any, args []string) error {
			return runCheck(ctx, e, opts.(*checkOptions), args)
		},
	}
}

func runCheck(ctx context.Context, e *env, o *checkOptions, args []string) error {
	if len(args) > 0 {
		return usagef("unexpected argument %q", args[0])
	}
	if o.replicas < 0 {
		return usagef("--replicas %d must not be negative", o.replicas)
	}
	locks, closeAll, err := o.open(ctx, batchlock.WithReplicas(o.replicas, time.Second))
	if err != nil {
		return err
	}
	defer closeAll()
	failed, warned := 0, 0
	// Preflight's order is stable (the masters by address, each with its
	// checks in one order, then the clocks, then the client), so the
	// results are printed under their node as they come.
	results := locks.Preflight(ctx)
	group := ""
	for _, r := range results {
		where := "this command's client"
		if r.Node != "" {
			where = r.Node
		} else if r.Check == "clocks" {
			where = "masters"
		}
		if where != group {
			group = where
			fmt.Fprintf(e.stdout, "%s\n", where)
		}
		switch {
		case r.Err != nil && r.Warning:
			warned++
			fmt.Fprintf(e.stdout, "  WARN  %-20s %v\n", r.Check, r.Err)
		case r.Err != nil:
			failed++
			fmt.Fprintf(e.stdout, "  FAIL  %-20s %v\n", r.Check, r.Err)
		default:
			fmt.Fprintf(e.stdout, "  ok    %s\n", r.Check)
		}
	}
	if failed > 0 {
		return fmt.Errorf("%s found", plural(failed, "problem"))
	}
	if warned > 0 {
		fmt.Fprintf(e.stdout, "all %d checks passed, %s\n", len(results), plural(warned, "warning"))
		return nil
	}
	fmt.Fprintf(e.stdout, "all %d checks passed\n", len(results))
	return nil
}
