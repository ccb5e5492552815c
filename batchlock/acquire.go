package batchlock

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/batchlock/batchlock/internal/lease"
	"github.com/batchlock/batchlock/internal/routing"
	"github.com/batchlock/batchlock/internal/wire"
)

// acquireOutcome is what one attempt at some groups found.
type acquireOutcome struct {
	refused        int                 // index of the first refused group, -1 when none was
	partHeld       int                 // keys of the first refused group now held (waiting)
	queued         []int               // refused groups whose first conflict queues this hold (waiting)
	granted        []int               // groups now held
	conflicts      []string            // lock keys held by other owners
	holders        map[string][]string // by conflict: the owners holding it, sorted
	groupConflicts []string            // those of the first refused group
	blockerToken   int64               // the token of the first of them, when told (waiting)
	wait           time.Duration
	unknown        []int    // groups that may be held although no reply says so
	marks          []string // cancel marks of the groups some call may have taken unseen
	err            error
}

// addHolders records who holds each of conflicts, as the script names them:
// escaped owner ids, comma-separated.
func (o *acquireOutcome) addHolders(conflicts, holders []string) {
	for i, key := range conflicts[:min(len(conflicts), len(holders))] {
		if holders[i] == "" {
			continue
		}
		if o.holders == nil {
			o.holders = make(map[string][]string)
		}
		var owners []string
		for id := range strings.SplitSeq(holders[i], ",") {
			owners = append(owners, wire.UnescapeOwner(id))
		}
		o.holders[key] = owners
	}
}

// mayHold returns the groups, among those the attempt was made at, that it
// may have left held or queued for: to give back, or to roll back.
func (o acquireOutcome) mayHold(groups []group) []group {
	var out []group
	seen := map[int]bool{}
	for _, list := range [][]int{o.granted, o.queued, o.unknown} {
		for _, i := range list {
			if !seen[i] {
				seen[i] = true
				out = append(out, groups[i])
			}
		}
	}
	return out
}

// acquire makes one attempt at groups in mode: each call takes its groups in
// order, all or none (modeTry) or up to the first refused one (waiting), and
// the routing layer tries again, slot by slot, groups whose slot was found
// elsewhere (a call that finds one changes nothing).
func (c *Client) acquire(ctx context.Context, l *Lock, groups []group, mode string) acquireOutcome {
	out := acquireOutcome{refused: -1}
	wait := mode != wire.ModeTry
	leaseMs, placeMs := lease.Millis(l.lease), lease.Millis(c.placeLease())
	parts := make([]routing.Part, len(groups))
	for i, g := range groups {
		parts[i] = routing.Part{Slot: g.slot, Route: g.fenceKey, Keys: len(g.keys)}
	}
	results := c.route(ctx, routing.Batch{
		Step:    "acquire",
		Sent:    &c.sent.acquires,
		Script:  wire.AcquireScript,
		Parts:   parts,
		Ordered: true,
		Ack:     l.ack,
		Args: func(at []int) []any {
			return acquireArgs(l, groups, at, leaseMs, mode, placeMs)
		},
		Read: func(cl *routing.Call, at []int) ([]int, error) {
			return c.acquired(l, &out, groups, at, cl, wait)
		},
	})
	marked := map[string]bool{}
	for i, r := range results {
		if r.Unknown {
			if mark := l.c.names.CancelMark(groups[i].slot, l.hold); !marked[mark] {
				marked[mark] = true
				out.marks = append(out.marks, mark)
			}
		}
		if r.Err == nil {
			continue
		}
		if r.Unknown {
			out.unknown = append(out.unknown, i)
		}
		if out.err == nil {
			out.err = r.Err
		}
	}
	return out
}

func acquireArgs(l *Lock, groups []group, at []int, leaseMs int64, mode string, placeMs int64) []any {
	n := 6
	shared := false
	for _, i := range at {
		n += 2 + len(groups[i].keys)
		if groups[i].modes != nil {
			shared = true
		}
	}
	if shared {
		// Each slot says which of its keys are shared.
		mode += wire.SharedModes
		n += len(at)
	}
	first := groups[at[0]]
	args := wire.AppendAcquire(make([]any, 0, n), l.owner, l.hold, leaseMs, mode, l.c.names.CancelMark(first.slot, l.hold), placeMs)
	for _, i := range at {
		g := groups[i]
		args = wire.AppendSlot(args, g.fenceKey, g.keys, g.modes, shared)
	}
	return args
}

// acquired records what the call for groups at (indices into groups) did. It
// returns them all when their slots were elsewhere (nothing was changed), or
// the error the reply means.
func (c *Client) acquired(l *Lock, out *acquireOutcome, groups []group, at []int, cl *routing.Call, wait bool) ([]int, error) {
	vals, _ := cl.Reply.Slice()
	r, err := wire.DecodeAcquire(vals)
	if err != nil {
		// The groups may or may not be held.
		out.unknown = append(out.unknown, at...)
		return nil, cl.Describe(context.Background(), err)
	}
	switch r.Status {
	case wire.AcquireGranted:
		c.granted(l, out, groups, at, r.Tokens)
		if !l.ack.Acknowledged(cl) {
			return nil, fmt.Errorf("%w: %w", ErrNotObtained, inner(unacknowledged(cl, l.ack)))
		}
	case wire.AcquireRefused:
		held := min(r.Held, len(at)-1)
		refused := at[held]
		if held == 0 && len(r.Conflicts) > 0 {
			refused = groupOf(groups, at, r.Conflicts[0])
		}
		out.conflicts = append(out.conflicts, r.Conflicts...)
		out.addHolders(r.Conflicts, r.Holders)
		c.granted(l, out, groups, at[:held], r.Tokens)
		// The part keys' tokens come last, after those of the held groups.
		part := r.Part
		if part > 0 && part <= min(len(r.Tokens), len(groups[refused].keys)) {
			l.setTokens(groups[refused].keys[:part], r.Tokens[len(r.Tokens)-part:])
		}
		if wait {
			out.queued = append(out.queued, refused)
		}
		if out.refused < 0 || refused < out.refused {
			out.refused = refused
			out.partHeld = part
			out.groupConflicts = inGroup(groups[refused], r.Conflicts)
			out.wait = r.Wait
			out.blockerToken = r.BlockerToken
		}
		if held+part > 0 && !l.ack.Acknowledged(cl) {
			return nil, fmt.Errorf("%w: %w", ErrNotObtained, inner(unacknowledged(cl, l.ack)))
		}
	case wire.AcquireElsewhere:
		return at, nil
	case wire.AcquireUpgrade:
		// Nothing was changed, and waiting would not help.
		return nil, fmt.Errorf("%w: %w: %q", ErrNotObtained, inner(ErrUpgrade), c.names.UserKey(r.Key))
	case wire.AcquireCancelled:
		// A rollback overtook this acquire: the groups may or may not be
		// held.
		out.unknown = append(out.unknown, at...)
		return nil, cl.Describe(context.Background(), errors.New("a rollback overtook it"))
	}
	return nil, nil
}

// granted records groups at (indices into groups) as held, with the tokens
// of their keys in order.
func (c *Client) granted(l *Lock, out *acquireOutcome, groups []group, at []int, tokens []int64) {
	n := 0
	for _, gi := range at {
		out.granted = append(out.granted, gi)
		l.setTokens(groups[gi].keys, tokens[min(n, len(tokens)):])
		n += len(groups[gi].keys)
	}
}

// setTokens records the fencing tokens of keys, in order, as far as tokens
// go.
func (l *Lock) setTokens(keys []string, tokens []int64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for i, k := range keys[:min(len(keys), len(tokens))] {
		l.tokens[k] = tokens[i]
	}
}

// groupOf returns the index (among at) of the group holding key.
func groupOf(groups []group, at []int, key string) int {
	for _, gi := range at {
		for _, k := range groups[gi].keys {
			if k == key {
				return gi
			}
		}
	}
	return at[0]
}

func inGroup(g group, keys []string) []string {
	var out []string
	for _, k := range keys {
		for _, gk := range g.keys {
			if gk == k {
				out = append(out, k)
				break
			}
		}
	}
	return out
}

// unacknowledged says that fewer replicas than asked for acknowledged cl.
func unacknowledged(cl *routing.Call, ack routing.Ack) error {
	return fmt.Errorf("%w: slot %d: %d of %d replicas acknowledged within %v",
		ErrNoReplicas, cl.Slot, max(cl.Acks, 0), ack.Replicas, ack.Timeout)
}
