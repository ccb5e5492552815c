package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"strconv"
	"strings"

	"github.com/redis/go-redis/v9"
)

type unlockOptions struct {
	addrs, prefix string
	force         bool
}

func unlockCommand() command {
	return command{
		name: "unlock",
		summary: `Usage: batchlock unlock --force [--addrs host:port,...] [--prefix batchlock:] KEY...

Releases the locks on KEYs (without the prefix) whoever holds them, and
wakes their waiters. For an operator, when a holder is known dead and its
lease too long to wait for: the holder, if still alive, loses the lock
(its watchdog reports it lost) and its fencing tokens are now stale.
Refuses to run without --force.`,
		flags: func(fs *flag.FlagSet) any {
			o := &unlockOptions{}
			fs.StringVar(&o.addrs, "addrs", "", "cluster seeds, comma-separated (default $BATCHLOCK_CLUSTER_ADDRS)")
			fs.StringVar(&o.prefix, "prefix", defaultPrefix, "lock key prefix, as given to batchlock.WithPrefix")
			fs.BoolVar(&o.force, "force", false, "confirm: release locks that other processes hold")
			return o
		},
		run: func(ctx context.Context, e *env, opts any, args []string) error {
			return runUnlock(ctx, e, opts.(*unlockOptions), args)
		},
	}
}

func runUnlock(ctx context.Context, e *env, o *unlockOptions, keys []string) error {
	if len(keys) == 0 {
		return usagef("no KEY to unlock")
	}
	if !o.force {
		return usagef("unlock releases locks that other processes hold: pass --force to confirm")
	}
	if err := checkPrefix(o.prefix); err != nil {
		return err
	}
	for _, k := range keys {
		if k == "" || strings.HasPrefix(k, "fence:{") || strings.HasPrefix(k, "cancel:{") {
			return usagef("%q is not a lock key", k)
		}
	}
	addrs, err := addrsFromFlagOrEnv(o.addrs)
	if err != nil {
		return err
	}
	rdb, err := connect(ctx, addrs)
	if err != nil {
		return err
	}
	defer rdb.Close()

	var errs []error
	for _, r := range forceUnlock(ctx, rdb, o.prefix, keys) {
		switch {
		case r.err != nil:
			errs = append(errs, fmt.Errorf("releasing %s: %w", r.key, r.err))
		case r.held:
			fmt.Fprintf(e.stdout, "released %s: owner %s, %d holds, fence %d\n", r.key, r.owner, r.holds, r.fence)
		default:
			fmt.Fprintf(e.stdout, "not held %s\n", r.key)
		}
	}
	return errors.Join(errs...)
}

// forceRelease deletes one lock key whatever its holds, and wakes its
// waiters as a release does (same channel, same message). It returns the
// fields the key had, none when it was not held.
var forceRelease = redis.NewScript(`
local fields = redis.call('HGETALL', KEYS[1])
if #fields > 0 then
  redis.call('DEL', KEYS[1])
  redis.call('SPUBLISH', KEYS[1], 'released')
end
return fields
`)

type unlockResult struct {
	key   string
	err   error
	held  bool
	owner string
	holds int
	fence int64
}

// forceUnlock releases every key, in one pipeline, and reports what each
// held.
func forceUnlock(ctx context.Context, rdb *redis.ClusterClient, prefix string, keys []string) []unlockResult {
	pipe := rdb.Pipeline()
	cmds := make([]*redis.Cmd, len(keys))
	for i, k := range keys {
		// By source, not digest: one-off, and nothing to reload after a
		// failover.
		cmds[i] = forceRelease.Eval(ctx, pipe, []string{prefix + k})
	}
	_, _ = pipe.Exec(ctx)
	results := make([]unlockResult, len(keys))
	for i, cmd := range cmds {
		fields, err := cmd.StringSlice()
		r := unlockResult{key: keys[i], err: err, held: len(fields) > 0}
		for j := 0; j+1 < len(fields); j += 2 {
			switch f, v := fields[j], fields[j+1]; {
			case f == "owner":
				r.owner = v
			case f == "fence":
				r.fence, _ = strconv.ParseInt(v, 10, 64)
			case strings.HasPrefix(f, "h:"):
				r.holds++
			}
		}
		results[i] = r
	}
	return results
}
