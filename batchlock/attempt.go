package batchlock

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/batchlock/batchlock/internal/lease"
	"github.com/batchlock/batchlock/internal/routing"
	"github.com/batchlock/batchlock/internal/wire"
)

// An attempt is one script call per master (or run of masters) at groups of
// a lock, and what its replies say: the groups it took, with their tokens,
// the keys that refused it and who holds them. Lock's calls make one
// attempt at a time (acquire); TryEach makes one for all its baskets, whose
// replies read the same way (read).

// attemptOutcome is what one attempt at some groups found.
type attemptOutcome struct {
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

// mayHold returns the groups, among those the attempt was made at, that it
// may have left held or queued for: to give back, or to roll back.
func (o attemptOutcome) mayHold(groups []group) []group {
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

// acquire makes one attempt at groups of l in mode: each call takes its
// groups in order, all or none (ModeTry) or up to the first refused one
// (waiting), and the routing tries again, slot by slot, groups whose slot
// was found elsewhere (a call that finds one changes nothing).
func (c *Client) acquire(ctx context.Context, l *Lock, groups []group, mode string) attemptOutcome {
	out := attemptOutcome{refused: -1}
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
			vals, _ := cl.Reply.Slice()
			r, err := wire.DecodeAcquire(vals)
			if err != nil {
				// The groups may or may not be held.
				out.unknown = append(out.unknown, at...)
				return nil, cl.Describe(context.Background(), err)
			}
			before := len(out.granted)
			elsewhere, err := c.read(cl, l, &out, groups, at, r, wait)
			if elsewhere {
				return at, nil
			}
			took := len(out.granted) > before || r.Status == wire.AcquireRefused && r.Part > 0
			if err == nil && took && !l.ack.Acknowledged(cl) {
				err = fmt.Errorf("%w: %w", ErrNotObtained, inner(unacknowledged(cl, l.ack)))
			}
			return nil, err
		},
	})
	marked := map[string]bool{}
	for i, r := range results {
		if r.Unknown {
			if mark := c.names.CancelMark(groups[i].slot, l.hold); !marked[mark] {
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

// placeLease is how long a waiting call's place in a key's queue lasts
// unless it asks again: a few of its polls, which renew it, so that the
// place of a waiter that died lapses soon.
func (c *Client) placeLease() time.Duration { return max(3*c.cfg.pollMax, leastPlace) }

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
		if len(l.units) > 0 {
			args = wire.AppendCounted(args, g.keys, g.modes, l.counted)
		}
	}
	return args
}

// read records in out what a reply r of attempt.lua says of groups at
// (indices into groups) of l: the groups taken, with their tokens, and the
// keys that refused the attempt, with their holders (with wait, what a
// waiting call keeps: the part of the refused group held, its place in the
// queue). It reports whether the groups' slot was found elsewhere (nothing
// was changed), or the error the reply means.
func (c *Client) read(cl *routing.Call, l *Lock, out *attemptOutcome, groups []group, at []int, r wire.AcquireReply, wait bool) (elsewhere bool, err error) {
	switch r.Status {
	case wire.AcquireGranted:
		tookGroups(l, out, groups, at, r.Tokens)
	case wire.AcquireRefused:
		held := min(r.Held, len(at)-1)
		refused := at[held]
		if held == 0 && len(r.Conflicts) > 0 {
			refused = groupOf(groups, at, r.Conflicts[0])
		}
		out.conflicts = append(out.conflicts, r.Conflicts...)
		out.addHolders(r.Conflicts, r.Holders)
		tookGroups(l, out, groups, at[:held], r.Tokens)
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
	case wire.AcquireElsewhere:
		return true, nil
	case wire.AcquireUpgrade:
		// Nothing was changed, and waiting would not help.
		return false, upgradeRefused(c.names.UserKey(r.Key))
	case wire.AcquireNoUnits:
		return false, fmt.Errorf("%w: %w", ErrNotObtained, inner(noCapacity(c.names.UserKey(r.Key))))
	case wire.AcquireOverUnits:
		return false, fmt.Errorf("%w: %w: %q", ErrNotObtained, inner(ErrOverCapacity), c.names.UserKey(r.Key))
	case wire.AcquireCancelled:
		// A rollback overtook this call: the groups may or may not be held.
		out.unknown = append(out.unknown, at...)
		return false, cl.Describe(context.Background(), errors.New("a rollback overtook it"))
	default:
		return false, cl.Describe(context.Background(), fmt.Errorf("unexpected reply %+v", r))
	}
	return false, nil
}

// tookGroups records groups at (indices into groups) as held, with the
// tokens of their keys in order.
func tookGroups(l *Lock, out *attemptOutcome, groups []group, at []int, tokens []int64) {
	n := 0
	for _, gi := range at {
		out.granted = append(out.granted, gi)
		l.setTokens(groups[gi].keys, tokens[min(n, len(tokens)):])
		n += len(groups[gi].keys)
	}
}

// addHolders records who holds each of conflicts, as the script names them:
// escaped owner ids, comma-separated.
func (o *attemptOutcome) addHolders(conflicts, holders []string) {
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

// groupOf returns the index (among at) of the group holding key.
func groupOf(groups []group, at []int, key string) int {
	for _, gi := range at {
		if slices.Contains(groups[gi].keys, key) {
			return gi
		}
	}
	return at[0]
}

func inGroup(g group, keys []string) []string {
	var out []string
	for _, k := range keys {
		if slices.Contains(g.keys, k) {
			out = append(out, k)
		}
	}
	return out
}

// unacknowledged says that fewer replicas than asked for acknowledged cl.
func unacknowledged(cl *routing.Call, ack routing.Ack) error {
	return fmt.Errorf("%w: slot %d: %d of %d replicas acknowledged within %v",
		ErrNoReplicas, cl.Slot, max(cl.Acks, 0), ack.Replicas, ack.Timeout)
}
