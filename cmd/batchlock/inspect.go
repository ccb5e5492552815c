package main

import (
	"context"
	"flag"
	"fmt"
	"github.com/batchlock/batchlock/cmd/batchlock/internal/cli"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/batchlock/batchlock/batchlock"
)

type inspectOptions struct {
	cli.ClusterFlags
	pattern string
	json    bool
}

func inspectCommand() cli.Command {
	return cli.Command{
		Name: "inspect",
		Summary: `Usage: batchlock inspect [--addrs host:port,...] [--prefix batchlock:] [--pattern '*'] [--json]

Lists the locks held in the cluster, one lock key a line, with the names of
batchlock.HeldKey: KEY (without the prefix), MODE (exclusive, shared or
counted), HOLDERS (every owner holding it; of a counted key, with "=" and
its units), HOLDS (live holds), WAITING (calls queued for it), LEASE (what
is left of its lease), TOKEN (the fencing token of the ownership) and
MASTER. --json gives the same as key, owner, mode, holders, holds,
waiting, lease_ms (milliseconds), token and master, and for a counted key
units (by holder), capacity and free. Every master is scanned; the fencing
counters, cancel marks and capacities are left out.`,
		Flags: func(fs *flag.FlagSet) any {
			o := &inspectOptions{}
			o.Define(fs)
			fs.StringVar(&o.pattern, "pattern", "*", "glob of the keys to list, without the prefix")
			fs.BoolVar(&o.json, "json", false, "print JSON instead of a table")
			return o
		},
		Run: func(ctx context.Context, e *cli.Env, opts any, args []string) error {
			return runInspect(ctx, e, opts.(*inspectOptions), args)
		},
	}
}

func runInspect(ctx context.Context, e *cli.Env, o *inspectOptions, args []string) error {
	if len(args) > 0 {
		return cli.Usagef("unexpected argument %q", args[0])
	}
	locks, closeAll, err := o.Open(ctx)
	if err != nil {
		return err
	}
	defer closeAll()
	held, err := locks.Held(ctx, o.pattern)
	if err != nil {
		return err
	}
	if o.json {
		return cli.WriteJSON(e.Stdout, asJSON(held))
	}
	return writeLocks(e.Stdout, held, o.Prefix(), o.pattern)
}

// heldLock is one lock key as inspect --json shows it: a
// batchlock.HeldKey, with its mode spelt out and its lease in milliseconds.
type heldLock struct {
	Key   string `json:"key"`
	Owner string `json:"owner"`
	// Mode is "exclusive" or "shared"; Holders are every owner holding it.
	Mode    string   `json:"mode"`
	Holders []string `json:"holders"`
	Holds   int      `json:"holds"`
	// Waiting counts the calls queued for the key.
	Waiting int    `json:"waiting"`
	LeaseMS int64  `json:"lease_ms"` // what is left of the lease, in milliseconds
	Token   int64  `json:"token"`    // the fencing token of the ownership
	Master  string `json:"master"`
	// Of a counted key: the units of each holder, its capacity and the
	// units free.
	Units    map[string]int64 `json:"units,omitempty"`
	Capacity *int64           `json:"capacity,omitempty"`
	Free     *int64           `json:"free,omitempty"`
}

func asJSON(held []batchlock.HeldKey) []heldLock {
	out := make([]heldLock, len(held))
	for i, h := range held {
		out[i] = heldLock{Key: h.Key, Owner: firstOf(h.Holders), Mode: modeName(h), Holders: h.Holders, Holds: h.Holds, Waiting: h.Waiting,
			LeaseMS: h.Lease.Milliseconds(), Token: h.Token, Master: h.Master}
		if h.Counted {
			capacity, free := h.Capacity, h.Free
			out[i].Units, out[i].Capacity, out[i].Free = h.Units, &capacity, &free
		}
	}
	return out
}

// inspectHeader names the columns of inspect's table after the fields of
// batchlock.HeldKey.
const inspectHeader = "KEY\tMODE\tHOLDERS\tHOLDS\tWAITING\tLEASE\tTOKEN\tMASTER"

func writeLocks(w io.Writer, locks []batchlock.HeldKey, prefix, pattern string) error {
	if len(locks) == 0 {
		_, err := fmt.Fprintf(w, "no locks held (prefix %q, pattern %q)\n", prefix, pattern)
		return err
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, inspectHeader)
	for _, l := range locks {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%d\t%s\t%d\t%s\n", l.Key, modeName(l), holdersOf(l), l.Holds, l.Waiting,
			l.Lease.Round(time.Millisecond), l.Token, l.Master)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	_, err := fmt.Fprintln(w, cli.Plural(len(locks), "lock"))
	return err
}

// modeName names how a key is held.
func modeName(h batchlock.HeldKey) string {
	switch {
	case h.Shared:
		return "shared"
	case h.Counted:
		return "counted"
	}
	return "exclusive"
}

// holdersOf lists a key's holders, those of a counted key with their units.
func holdersOf(h batchlock.HeldKey) string {
	if !h.Counted {
		return strings.Join(h.Holders, ",")
	}
	named := make([]string, len(h.Holders))
	for i, o := range h.Holders {
		named[i] = fmt.Sprintf("%s=%d", o, h.Units[o])
	}
	return strings.Join(named, ",")
}

// firstOf is the first of owners, or "" for none: the owner inspect's JSON
// names, the first holder of a key held shared.
func firstOf(owners []string) string {
	if len(owners) == 0 {
		return ""
	}
	return owners[0]
}
