package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/redis/go-redis/v9"
)

const defaultPrefix = "batchlock:"

type inspectOptions struct {
	addrs, prefix, pattern string
	json                   bool
}

func inspectCommand() command {
	return command{
		name: "inspect",
		summary: `Usage: batchlock inspect [--addrs host:port,...] [--prefix batchlock:] [--pattern '*'] [--json]

Lists the locks held in the cluster: key (without the prefix), owner,
number of holds, remaining lease and fencing token. Every master is
scanned; the fencing counters and cancellation sets are left out.`,
		flags: func(fs *flag.FlagSet) any {
			o := &inspectOptions{}
			fs.StringVar(&o.addrs, "addrs", "", "cluster seeds, comma-separated (default $BATCHLOCK_CLUSTER_ADDRS)")
			fs.StringVar(&o.prefix, "prefix", defaultPrefix, "lock key prefix, as given to batchlock.WithPrefix")
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
	if err := checkPrefix(o.prefix); err != nil {
		return err
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
	locks, err := listLocks(ctx, rdb, o.prefix, o.pattern)
	if err != nil {
		return err
	}
	if o.json {
		return writeJSON(e.stdout, locks)
	}
	return writeLocks(e.stdout, locks, o.prefix, o.pattern)
}

// heldLock is one lock key as inspect shows it.
type heldLock struct {
	Key   string `json:"key"`
	Owner string `json:"owner"`
	Holds int    `json:"holds"`
	// TTLms is the remaining lease in milliseconds, -1 when the key has
	// none (which batchlock never leaves).
	TTLms int64  `json:"ttl_ms"`
	Fence int64  `json:"fence"`
	Node  string `json:"master"`
}

// scanBatch is the SCAN COUNT hint, and the number of keys read per
// pipeline.
const scanBatch = 1000

// listLocks scans every master for lock keys under prefix whose rest
// matches pattern, sorted by key.
func listLocks(ctx context.Context, rdb *redis.ClusterClient, prefix, pattern string) ([]heldLock, error) {
	var mu sync.Mutex
	locks := []heldLock{} // JSON: [] rather than null
	match := escapeGlob(prefix) + pattern
	err := rdb.ForEachMaster(ctx, func(ctx context.Context, node *redis.Client) error {
		var batch []string
		flush := func() error {
			found, err := readLocks(ctx, node, prefix, batch)
			batch = batch[:0]
			mu.Lock()
			locks = append(locks, found...)
			mu.Unlock()
			return err
		}
		// Lock keys are hashes; the fencing counters (strings) and the
		// cancellation sets are thereby skipped too.
		iter := node.ScanType(ctx, 0, match, scanBatch, "hash").Iterator()
		for iter.Next(ctx) {
			key := iter.Val()
			rest := key[len(prefix):]
			if strings.HasPrefix(rest, "fence:{") || strings.HasPrefix(rest, "cancel:{") {
				continue
			}
			if batch = append(batch, key); len(batch) == scanBatch {
				if err := flush(); err != nil {
					return err
				}
			}
		}
		if err := iter.Err(); err != nil {
			return fmt.Errorf("scanning %s: %w", node.Options().Addr, err)
		}
		return flush()
	})
	if err != nil {
		return nil, fmt.Errorf("listing locks: %w", err)
	}
	slices.SortFunc(locks, func(a, b heldLock) int { return strings.Compare(a.Key, b.Key) })
	return locks, nil
}

// readLocks reads lock keys of one master in one pipeline. Keys released
// since the scan, and hashes that are not locks, are left out.
func readLocks(ctx context.Context, node *redis.Client, prefix string, keys []string) ([]heldLock, error) {
	if len(keys) == 0 {
		return nil, nil
	}
	pipe := node.Pipeline()
	fields := make([]*redis.MapStringStringCmd, len(keys))
	ttls := make([]*redis.DurationCmd, len(keys))
	for i, k := range keys {
		fields[i] = pipe.HGetAll(ctx, k)
		ttls[i] = pipe.PTTL(ctx, k)
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return nil, fmt.Errorf("reading locks on %s: %w", node.Options().Addr, err)
	}
	var out []heldLock
	for i, k := range keys {
		h := fields[i].Val()
		owner, ok := h["owner"]
		if !ok {
			continue
		}
		l := heldLock{Key: k[len(prefix):], Owner: owner, TTLms: -1, Node: node.Options().Addr}
		for f := range h {
			if strings.HasPrefix(f, "h:") {
				l.Holds++
			}
		}
		l.Fence, _ = strconv.ParseInt(h["fence"], 10, 64)
		if ttl := ttls[i].Val(); ttl > 0 {
			l.TTLms = ttl.Milliseconds()
		}
		out = append(out, l)
	}
	return out, nil
}

// escapeGlob makes s match itself in a SCAN MATCH pattern.
func escapeGlob(s string) string {
	var b strings.Builder
	for _, r := range s {
		if strings.ContainsRune(`*?[]\`, r) {
			b.WriteByte('\\')
		}
		b.WriteRune(r)
	}
	return b.String()
}

func writeLocks(w io.Writer, locks []heldLock, prefix, pattern string) error {
	if len(locks) == 0 {
		_, err := fmt.Fprintf(w, "no locks held (prefix %q, pattern %q)\n", prefix, pattern)
		return err
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "KEY\tOWNER\tHOLDS\tLEASE\tFENCE\tMASTER")
	for _, l := range locks {
		lease := "none"
		if l.TTLms >= 0 {
			lease = (time.Duration(l.TTLms) * time.Millisecond).String()
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%d\t%s\n", l.Key, l.Owner, l.Holds, lease, l.Fence, l.Node)
	}
	fmt.Fprintf(tw, "%d locks\n", len(locks))
	return tw.Flush()
}

func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}
