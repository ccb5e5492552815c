package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"github.com/batchlock/batchlock/cmd/batchlock/internal/cli"
	"strings"

	"github.com/batchlock/batchlock/batchlock"
)

type unlockOptions struct {
	cli.ClusterFlags
	force bool
}

func unlockCommand() cli.Command {
	return cli.Command{
		Name: "unlock",
		Summary: `Usage: batchlock unlock --force [--addrs host:port,...] [--prefix batchlock:] KEY...

Releases the locks on KEYs (without the prefix) whoever holds them, and
wakes their waiters. For an operator, when a holder is known dead and its
lease too long to wait for: the holder, if still alive, loses the lock
(its watchdog reports it lost) and its fencing tokens are now stale.
Prints, key by key, "released KEY: owner OWNER, N holds, token TOKEN" or
"not held KEY". Refuses to run without --force.`,
		Flags: func(fs *flag.FlagSet) any {
			o := &unlockOptions{}
			o.Define(fs)
			fs.BoolVar(&o.force, "force", false, "confirm: release locks that other processes hold")
			return o
		},
		Run: func(ctx context.Context, e *cli.Env, opts any, args []string) error {
			return runUnlock(ctx, e, opts.(*unlockOptions), args)
		},
	}
}

func runUnlock(ctx context.Context, e *cli.Env, o *unlockOptions, keys []string) error {
	if len(keys) == 0 {
		return cli.Usagef("no KEY to unlock")
	}
	if !o.force {
		return cli.Usagef("unlock releases locks that other processes hold: pass --force to confirm")
	}
	locks, closeAll, err := o.Open(ctx)
	if err != nil {
		return err
	}
	defer closeAll()
	released, err := locks.ForceUnlock(ctx, keys...)
	if errors.Is(err, batchlock.ErrInvalid) {
		return cli.Usagef("%v", err)
	}
	for _, r := range released {
		switch {
		case r.Err != nil:
		case r.Token != 0:
			fmt.Fprintf(e.Stdout, "released %s: owner %s, %s, token %d\n", r.Key, strings.Join(r.Holders, ","), cli.Plural(r.Holds, "hold"), r.Token)
		default:
			fmt.Fprintf(e.Stdout, "not held %s\n", r.Key)
		}
	}
	return err
}
