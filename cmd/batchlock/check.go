package main

import (
	"context"
	"flag"
	"fmt"
	"time"

	"github.com/batchlock/batchlock/batchlock"
	"github.com/batchlock/batchlock/cmd/batchlock/internal/cli"
)

type checkOptions struct {
	cli.ClusterFlags
	replicas int
}

func checkCommand() cli.Command {
	return cli.Command{
		Name: "check",
		Summary: `Usage: batchlock check [--addrs host:port,...] [--prefix batchlock:] [--replicas n]

Checks, on every master, what batchlock relies on (Redis 7.0+ or Valkey,
named with its version, cross-slot scripts, sharded pub/sub,
maxmemory-policy noeviction, cluster state, the replicas online that
--replicas n asks for, clocks that agree, seeds of one cluster), and the
go-redis settings of this command's own client; prints one line per check,
masters by address, then a summary line, and exits 1 on any problem. Your
application's client settings are checked by its own Client.Check.`,
		Flags: func(fs *flag.FlagSet) any {
			o := &checkOptions{}
			o.Define(fs)
			fs.IntVar(&o.replicas, "replicas", 0, "replicas online each master needs, as given to batchlock.WithReplicas")
			return o
		},
		Run: func(ctx context.Context, e *cli.Env, opts any, args []string) error {
			return runCheck(ctx, e, opts.(*checkOptions), args)
		},
	}
}

func runCheck(ctx context.Context, e *cli.Env, o *checkOptions, args []string) error {
	if len(args) > 0 {
		return cli.Usagef("unexpected argument %q", args[0])
	}
	if o.replicas < 0 {
		return cli.Usagef("--replicas %d must not be negative", o.replicas)
	}
	locks, closeAll, err := o.Open(ctx, batchlock.WithReplicas(o.replicas, time.Second))
	if err != nil {
		return err
	}
	defer closeAll()
	failed, warned := 0, 0
	// Preflight's order is stable (the masters by address, each with its
	// checks in one order, then the clocks, the seeds, the client), so the
	// results are printed under their node as they come.
	results, err := locks.Preflight(ctx)
	if err != nil {
		return err
	}
	group := ""
	for _, r := range results {
		where := "this command's client"
		if r.Node != "" {
			where = r.Node
		} else if r.Check == "clocks" {
			where = "masters"
		} else if r.Check == "one cluster" {
			where = "seeds (--addrs)"
		}
		if where != group {
			group = where
			fmt.Fprintf(e.Stdout, "%s\n", where)
		}
		switch {
		case r.Err != nil && r.Warning:
			warned++
			fmt.Fprintf(e.Stdout, "  WARN  %-20s %v\n", r.Check, r.Err)
		case r.Err != nil:
			failed++
			fmt.Fprintf(e.Stdout, "  FAIL  %-20s %v\n", r.Check, r.Err)
		case r.Found != "":
			fmt.Fprintf(e.Stdout, "  ok    %-20s %s\n", r.Check, r.Found)
		default:
			fmt.Fprintf(e.Stdout, "  ok    %s\n", r.Check)
		}
	}
	if failed > 0 {
		return fmt.Errorf("%s found", cli.Plural(failed, "problem"))
	}
	if warned > 0 {
		fmt.Fprintf(e.Stdout, "all %d checks passed, %s\n", len(results), cli.Plural(warned, "warning"))
		return nil
	}
	fmt.Fprintf(e.Stdout, "all %d checks passed\n", len(results))
	return nil
}
