package batchlock

import (
	"context"
	"fmt"
	"time"

	"github.com/batchlock/batchlock/internal/lease"
	"github.com/batchlock/batchlock/internal/script"
)

// This file holds the three things done to a lock's holds on groups of keys:
// acquire, release and extend, one script call per group.

// acquireOutcome is what one pipelined attempt at some groups found.
type acquireOutcome struct {
	refused        int      // index of the first refused group, -1 when none was
	granted        []int    // groups now held
	conflicts      []string // lock keys held by other owners, in all refused groups
	groupConflicts []string // those of the first refused group
	wait           time.Duration
	unknown        []int // groups that may be held despite an error
	err            error
}

func (c *Client) acquire(ctx context.Context, l *Lock, groups []group) acquireOutcome {
	calls := make([]*script.Call, len(groups))
	ms := lease.Millis(l.lease)
	for i, g := range groups {
		keys := make([]string, 0, len(g.keys)+2)
		keys = append(append(keys, g.fenceKey, g.cancelKey(l.hold)), g.keys...)
		calls[i] = &script.Call{Slot: g.slot, Keys: keys, Args: []any{l.owner, l.hold, ms}}
	}
	c.runner.Run(ctx, acquireScript, calls, l.ack)

	out := acquireOutcome{refused: -1}
	for i, cl := range calls {
		vals, err := cl.Reply.Slice()
		status := int64(-2)
		if err == nil && len(vals) > 0 {
			status, _ = vals[0].(int64)
		}
		switch {
		case err == nil && status == acquireGranted && len(vals) == len(groups[i].keys)+1:
			out.granted = append(out.granted, i)
			if !l.ack.Acknowledged(cl) && out.err == nil {
				out.err = fmt.Errorf("%w: %w", ErrNotObtained, unacknowledged(cl, l.ack))
			}
			l.mu.Lock()
			for j, v := range vals[1:] {
				l.tokens[groups[i].keys[j]], _ = v.(int64)
			}
			l.mu.Unlock()
		case err == nil && status == acquireRefused && len(vals) >= 3:
			c.refused(&out, i, vals)
		default:
			// An error, a cancelled hold (a rollback overtook this
			// acquire) or a reply of another shape: unless every attempt
			// was refused unrun, the group may or may not be held.
			if cl.Ran {
				out.unknown = append(out.unknown, i)
			}
			if err == nil {
				err = fmt.Errorf("unexpected reply %v", vals)
			}
			if out.err == nil {
				out.err = script.Describe(ctx, "batchlock: acquire", cl, err)
			}
		}
	}
	return out
}

func (c *Client) refused(out *acquireOutcome, i int, vals []any) {
	wait, _ := vals[1].(int64)
	keys := make([]string, 0, len(vals)-2)
	for _, v := range vals[2:] {
		if s, ok := v.(string); ok {
			keys = append(keys, s)
		}
	}
	out.conflicts = append(out.conflicts, keys...)
	if out.refused < 0 {
		out.refused = i
		out.groupConflicts = keys
		out.wait = time.Duration(wait) * time.Millisecond
	}
}

// unacknowledged says that fewer replicas than asked for acknowledged cl.
func unacknowledged(cl *script.Call, ack script.Ack) error {
	return fmt.Errorf("%w: slot %d: %d of %d replicas acknowledged within %v",
		ErrNoReplicas, cl.Slot, max(cl.Acks, 0), ack.Replicas, ack.Timeout)
}

// rollback releases every hold the call may have taken: groups[:held], and
// the groups of the last attempt (which started at held) that were granted
// or whose outcome is unknown. Releases are idempotent; a group of unknown
// outcome is also marked cancelled, so that its acquire, should it still be
// in flight (a frozen master), cannot take it later.
//
// The releases run on a context of their own, so that they are made even
// when ctx is done, for at most rollbackTimeout. rollback waits for them
// while ctx lasts; once it is done, they go on in the background (Close
// waits for them), so that the call returns within its context.
func (c *Client) rollback(ctx context.Context, l *Lock, held int, last acquireOutcome) {
	groups := append([]group(nil), l.groups[:held]...)
	for _, i := range last.granted {
		groups = append(groups, l.groups[held+i])
	}
	unknown := make(map[int]bool, len(last.unknown))
	for _, i := range last.unknown {
		unknown[len(groups)] = true
		groups = append(groups, l.groups[held+i])
	}
	if len(groups) == 0 {
		return
	}
	done := make(chan struct{})
	c.calls.Join()
	go func() {
		defer c.calls.Leave()
		defer close(done)
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), rollbackTimeout)
		defer cancel()
		_, _ = c.release(rctx, l, groups, unknown)
	}()
	select {
	case <-done:
	case <-ctx.Done():
	}
}

// release drops l's hold from groups, and returns the lock keys that another
// owner holds. unknown marks (by index in groups) the groups whose hold must
// also be marked cancelled, for one lease.
func (c *Client) release(ctx context.Context, l *Lock, groups []group, unknown map[int]bool) ([]string, error) {
	if len(groups) == 0 {
		return nil, nil
	}
	remember := lease.Millis(l.lease)
	calls := make([]*script.Call, len(groups))
	for i, g := range groups {
		cancelled, keys := "0", g.keys
		if unknown[i] {
			cancelled = "1"
			keys = append([]string{g.cancelKey(l.hold)}, g.keys...)
		}
		calls[i] = &script.Call{Slot: g.slot, Keys: keys, Args: []any{l.owner, l.hold, cancelled, remember}}
	}
	c.runner.Run(ctx, releaseScript, calls, script.Ack{})
	return collectKeys(ctx, calls, "release")
}

// extend makes the lease of l's hold on groups run at least ttl from now, and
// returns the lock keys that no longer carry it. With WithReplicas, the
// extension counts only once acknowledged: otherwise the error wraps
// ErrNoReplicas.
func (c *Client) extend(ctx context.Context, l *Lock, groups []group, ttl time.Duration) ([]string, error) {
	ms := lease.Millis(ttl)
	calls := make([]*script.Call, len(groups))
	for i, g := range groups {
		calls[i] = &script.Call{Slot: g.slot, Keys: g.keys, Args: []any{l.hold, ms}}
	}
	c.runner.Run(ctx, extendScript, calls, l.ack)
	lost, err := collectKeys(ctx, calls, "extend")
	if err == nil {
		err = checkAcks(calls, l.ack)
	}
	return lost, err
}

// checkAcks returns an error wrapping ErrNoReplicas when fewer replicas than
// asked for acknowledged some call.
func checkAcks(calls []*script.Call, ack script.Ack) error {
	for _, cl := range calls {
		if !ack.Acknowledged(cl) {
			return unacknowledged(cl, ack)
		}
	}
	return nil
}

// collectKeys gathers the lists of keys the calls replied, and the first
// error, from calls of the named step.
func collectKeys(ctx context.Context, calls []*script.Call, step string) ([]string, error) {
	var keys []string
	var firstErr error
	for _, cl := range calls {
		vals, err := cl.Reply.StringSlice()
		if err != nil {
			if firstErr == nil {
				firstErr = script.Describe(ctx, "batchlock: "+step, cl, err)
			}
			continue
		}
		keys = append(keys, vals...)
	}
	return keys, firstErr
}

// userKeys strips the prefix from lock keys.
func (c *Client) userKeys(lockKeys []string) []string {
	out := make([]string, len(lockKeys))
	for i, k := range lockKeys {
		out[i] = k[len(c.cfg.prefix):]
	}
	return out
}
