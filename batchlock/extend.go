package batchlock

import (
	"context"
	"sync"
	"time"

	"github.com/batchlock/batchlock/internal/lease"
	"github.com/batchlock/batchlock/internal/routing"
	"github.com/batchlock/batchlock/internal/wire"
)

// holdKeys is one lock's share of an extension: its hold, the lease and its
// groups.
type holdKeys struct {
	hold   string
	lease  int64 // ms
	groups []group
}

// extended is what an extension did to one lock: the lock keys that no
// longer carry its hold, and the first error among its keys (or
// ErrNoReplicas).
type extended struct {
	lost []string
	err  error
}

// extend makes the lease of l's hold on groups run at least ttl from now, and
// returns the lock keys that no longer carry it. With WithReplicas, the
// extension counts only once acknowledged: otherwise the error wraps
// ErrNoReplicas.
func (c *Client) extend(ctx context.Context, l *Lock, groups []group, ttl time.Duration) ([]string, error) {
	var out extended
	c.extendAll(ctx, []holdKeys{{hold: l.hold, lease: lease.Millis(ttl), groups: groups}}, l.ack,
		func(_ int, e extended) { out = e })
	return out.lost, out.err
}

// extendAll extends the holds of several locks (the watchdog's round): the
// keys each master serves, for all the locks, go in one call per master (at
// most routing.MaxCallKeys keys each), and the masters are asked apart, so
// that done is called for each lock as soon as the masters of its keys have
// answered, not held up by a master that is slow for others. Locks of one
// owner may share keys: every hold is extended on its own. It returns once
// every lock is done.
func (c *Client) extendAll(ctx context.Context, locks []holdKeys, ack routing.Ack, done func(lock int, e extended)) {
	var parts []routing.Part
	var lockOf []int                   // the lock of parts[i]
	pending := make([]int, len(locks)) // parts of each lock not settled yet
	for i, h := range locks {
		for _, g := range h.groups {
			for _, k := range g.keys {
				parts = append(parts, routing.Part{Slot: g.slot, Route: k, Keys: 1})
				lockOf = append(lockOf, i)
				pending[i]++
			}
		}
	}
	for i := range locks {
		if pending[i] == 0 {
			done(i, extended{})
		}
	}
	if len(parts) == 0 {
		return
	}
	results := make([]extended, len(locks))
	var mu sync.Mutex // guards results and pending
	fail := func(i int, err error) {
		if results[i].err == nil {
			results[i].err = err
		}
	}
	c.route(ctx, routing.Batch{
		Step:   "extend",
		Sent:   &c.sent.extends,
		Script: wire.ExtendScript,
		Parts:  parts,
		Follow: true,
		Ack:    ack,
		Args: func(in []int) []any {
			args := make([]any, 0, len(in)+3*len(locks))
			for _, seg := range segmentsBy(lockOf, in) {
				h := locks[lockOf[seg[0]]]
				args = wire.AppendExtend(args, h.hold, h.lease, len(seg))
				for _, j := range seg {
					args = append(args, parts[j].Route)
				}
			}
			return args
		},
		Read: func(cl *routing.Call, in []int) ([]int, error) {
			segs := segmentsBy(lockOf, in)
			lists, err := wire.DecodeKeyLists(cl.Reply.Val(), len(segs)) // nil: every hold was extended
			if err != nil {
				return nil, cl.Describe(ctx, err)
			}
			mu.Lock()
			defer mu.Unlock()
			var again []int
			for n, seg := range segs {
				i := lockOf[seg[0]]
				if lists != nil {
					results[i].lost = append(results[i].lost, lists[n].Lost...)
					again = append(again, partsNamed(parts, seg, lists[n].Elsewhere)...)
				}
				if !ack.Acknowledged(cl) {
					fail(i, unacknowledged(cl, ack))
				}
			}
			return again, nil
		},
		Settled: func(at []int, routed []routing.Result) {
			var ready []int
			mu.Lock()
			for _, j := range at {
				i := lockOf[j]
				if routed[j].Err != nil {
					fail(i, routed[j].Err)
				}
				if pending[i]--; pending[i] == 0 {
					ready = append(ready, i)
				}
			}
			mu.Unlock()
			for _, i := range ready {
				done(i, results[i])
			}
		},
	})
}
