package batchlock

import (
	"context"
	"fmt"
	"time"

	"github.com/batchlock/batchlock/internal/lease"
	"github.com/batchlock/batchlock/internal/script"
)

// holdKeys is one lock's share of an extension: its hold, the lease and its
// groups.
type holdKeys struct {
	hold   string
	lease  int64 // ms
	groups []group
}

// extend makes the lease of l's hold on groups run at least ttl from now, and
// returns the lock keys that no longer carry it. With WithReplicas, the
// extension counts only once acknowledged: otherwise the error wraps
// ErrNoReplicas.
func (c *Client) extend(ctx context.Context, l *Lock, groups []group, ttl time.Duration) ([]string, error) {
	lost, errs := c.extendAll(ctx, []holdKeys{{hold: l.hold, lease: lease.Millis(ttl), groups: groups}}, l.ack)
	return lost[0], errs[0]
}

// extendAll extends the holds of several locks, one call per master for all
// of them (the watchdog's round), and returns per lock the keys lost and its
// error: the first error among its keys, or ErrNoReplicas. Locks of one owner
// may share keys: every hold is extended on its own.
func (c *Client) extendAll(ctx context.Context, locks []holdKeys, ack script.Ack) ([][]string, []error) {
	lost := make([][]string, len(locks))
	errs := make([]error, len(locks))
	var parts []script.Part
	var lockOf []int // the lock of parts[i]
	for i, h := range locks {
		for _, g := range h.groups {
			for _, k := range g.keys {
				parts = append(parts, script.Part{Slot: g.slot, Route: k, Keys: 1})
				lockOf = append(lockOf, i)
			}
		}
	}
	if len(parts) == 0 {
		return lost, errs
	}
	// segments cuts the parts of a call by lock, in order: the parts of one
	// lock are consecutive.
	segments := func(at []int) [][]int {
		var out [][]int
		for n, i := range at {
			if n == 0 || lockOf[i] != lockOf[at[n-1]] {
				out = append(out, nil)
			}
			out[len(out)-1] = append(out[len(out)-1], i)
		}
		return out
	}
	results := c.runner.Route(ctx, script.Batch{
		Step:   "batchlock: extend",
		Script: extendScript,
		Parts:  parts,
		Follow: true,
		Ack:    ack,
		Args: func(at []int) []any {
			args := make([]any, 0, len(at)+3*len(locks))
			for _, seg := range segments(at) {
				h := locks[lockOf[seg[0]]]
				args = append(args, h.hold, h.lease, len(seg))
				for _, i := range seg {
					args = append(args, parts[i].Route)
				}
			}
			return args
		},
		Read: func(cl *script.Call, at []int) ([]int, error) {
			segs := segments(at)
			vals, err := cl.Reply.Slice()
			if err != nil || len(vals) != 2*len(segs) {
				return nil, script.Describe(ctx, "batchlock: extend", cl, fmt.Errorf("unexpected reply %v", vals))
			}
			var again []int
			for n, seg := range segs {
				i := lockOf[seg[0]]
				lost[i] = append(lost[i], stringsOf(vals[2*n])...)
				again = append(again, partsNamed(parts, seg, stringsOf(vals[2*n+1]))...)
				if !ack.Acknowledged(cl) && errs[i] == nil {
					errs[i] = unacknowledged(cl, ack)
				}
			}
			return again, nil
		},
	})
	for j, r := range results {
		if r.Err != nil && errs[lockOf[j]] == nil {
			errs[lockOf[j]] = r.Err
		}
	}
	return lost, errs
}
