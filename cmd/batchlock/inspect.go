package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/batchlock/batchlock/batchlock"
)

type inspectOptions struct {
	addrs, prefix, pattern string
	json                   bool
}

func inspectCommand() command {
	return command{
		name: "inspect",
		summary: `Usage: batchlock inspect [--addrs host:port,...] [--prefix batchlock:] [--pattern '*'] [--json]

Lists the locks held in the cluster: key (without the prefix), mode
(exclusive, or shared), owners (every holder of a shared key), number of
live holds and of waiters, remaining lease and fencing token. Every master is
scanned; the fencing counters and cancel marks are left out.`,
		flags: func(fs *flag.FlagSet) any {
			o := &inspectOptions{}
			fs.StringVar(&o.addrs, "addrs", "", "cluster seeds, comma-separated (default $BATCHLOCK_CLUSTER_ADDRS)")
			fs.StringVar(&o.prefix, "prefix", batchlock.DefaultPrefix, "lock key prefix, as given to batchlock.WithPrefix")
			fs.StringVar(&o.pattern, "pattern", "*", "glob of the keys to list, without the prefix")
			fs.BoolVar(&o.json, "json", false, "print JSON instead of a table")
			return o
		},
		run: func(ctx context.Context, e *env, opts any, args []string) error {
			return runInspect(ctx, e, opts.(*inspectOptions), args)
		},
	}
}

func runInspect(ctx context.Context, e *env, o *inspectOptions, args []string) error {
	if len(args) > 0 {
		return usagef("unexpected argument %q", args[0])
	}
	locks, closeAll, err := openLocks(ctx, o.addrs, o.prefix)
	if err != nil {
		return err
	}
	defer closeAll()
	held, err := locks.Held(ctx, o.pattern)
	if err != nil {
		return err
	}
	if o.json {
		return writeJSON(e.stdout, asJSON(held))
	}
	return writeLocks(e.stdout, held, o.prefix, o.pattern)
}

// heldLock is one lock key as inspect --json shows it.
type heldLock struct {
	Key   string `json:"key"`
	Owner string `json:"owner"`
	// Mode is "exclusive" or "shared"; Holders are every owner holding it.
	Mode    string   `json:"mode"`
	Holders []string `json:"holders"`
	Holds   int      `json:"holds"`
	// Waiting counts the calls queued for the key.
	Waiting int    `json:"waiting"`
	TTLms   int64  `json:"ttl_ms"` // the remaining lease in milliseconds
	Fence   int64  `json:"fence"`
	Node    string `json:"master"`
}

func asJSON(held []batchlock.HeldKey) []heldLock {
	out := make([]heldLock, len(held))
	for i, h := range held {
		out[i] = heldLock{Key: h.Key, Owner: h.Owner, Mode: modeName(h), Holders: h.Holders, Holds: h.Holds, Waiting: h.Waiting,
			TTLms: h.Lease.Milliseconds(), Fence: h.Token, Node: h.Master}
	}
	return out
}

func writeLocks(w io.Writer, locks []batchlock.HeldKey, prefix, pattern string) error {
	if len(locks) == 0 {
		_, err := fmt.Fprintf(w, "no locks held (prefix %q, pattern %q)\n", prefix, pattern)
		return err
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "KEY\tMODE\tOWNERS\tHOLDS\tWAITING\tLEASE\tFENCE\tMASTER")
	for _, l := range locks {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%d\t%s\t%d\t%s\n", l.Key, modeName(l), strings.Join(l.Holders, ","), l.Holds, l.Waiting,
			l.Lease.Round(time.Millisecond), l.Token, l.Master)
	}
	fmt.Fprintf(tw, "%d locks\n", len(locks))
	return tw.Flush()
}

// modeName names how a key is held.
func modeName(h batchlock.HeldKey) string {
	if h.Shared {
		return "shared"
	}
	return "exclusive"
}

func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}
