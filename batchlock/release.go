package batchlock

import (
	"context"
	"slices"

	"github.com/batchlock/batchlock/hashtag"
	"github.com/batchlock/batchlock/internal/lease"
	"github.com/batchlock/batchlock/internal/script"
)

// release drops l's hold from groups, one call per master, and sets the
// cancel marks given; it returns the lock keys that another owner holds, and
// the lock keys and marks whose release did not go through (with the error).
func (c *Client) release(ctx context.Context, l *Lock, groups []group, marks []string) (lost, left []string, _ error) {
	parts := make([]script.Part, 0, len(marks))
	for _, m := range marks {
		parts = append(parts, script.Part{Slot: hashtag.Slot(m), Route: m, Keys: 1})
	}
	for _, g := range groups {
		for _, k := range g.keys {
			parts = append(parts, script.Part{Slot: g.slot, Route: k, Keys: 1})
		}
	}
	if len(parts) == 0 {
		return nil, nil, nil
	}
	owner, remember := escapeOwner(l.owner), lease.Millis(l.lease)
	var taken []int // parts found held by another owner
	results := c.route(ctx, script.Batch{
		Step:   "batchlock: release",
		Sent:   &c.sent.releases,
		Script: releaseScript,
		Parts:  parts,
		Follow: true,
		Args: func(at []int) []any {
			m := 0
			for m < len(at) && at[m] < len(marks) {
				m++
			}
			args := make([]any, 0, 4+len(at))
			args = append(args, owner, l.hold, remember, m)
			for _, i := range at {
				args = append(args, parts[i].Route)
			}
			return args
		},
		Read: func(cl *script.Call, at []int) ([]int, error) {
			lists, err := decodeKeyLists(cl.Reply.Val(), 1)
			if err != nil {
				return nil, script.Describe(ctx, "batchlock: release", cl, err)
			}
			if lists == nil {
				return nil, nil // every key released
			}
			taken = append(taken, partsNamed(parts, at, lists[0].lost)...)
			return partsNamed(parts, at, lists[0].elsewhere), nil
		},
	})
	// A key sent again after a run whose reply was lost may have been
	// handed on by that run, and taken by its waiter since: not a loss.
	for _, i := range taken {
		if !results[i].Unknown {
			lost = append(lost, parts[i].Route)
		}
	}
	for i, r := range results {
		if r.Err != nil {
			left = append(left, parts[i].Route)
		}
	}
	return lost, left, firstError(results)
}

// unreleased is what a lock's release still owes after a release that
// failed in part, and what it found so far.
type unreleased struct {
	groups []group  // the keys whose release did not go through
	marks  []string // the cancel marks not set
	lost   []string // keys found held by another owner
}

// releaseRest releases what l's earlier releases left (all of l at first),
// and returns the keys found held by another owner, by this release and
// the earlier ones. Called with l.unlocking held.
func (l *Lock) releaseRest(ctx context.Context) ([]string, error) {
	rest := l.rest
	if rest == nil {
		rest = &unreleased{groups: l.groups, marks: l.marks}
	}
	lost, left, err := l.c.release(ctx, l, rest.groups, rest.marks)
	lost = append(slices.Clip(rest.lost), lost...)
	if err != nil {
		// A retry sends only what did not go through: a key released
		// since taken by another owner is no loss of this lock.
		l.rest = rest.without(left, lost)
		return nil, err
	}
	l.rest = nil
	return lost, nil
}

// without is what u owes once everything but the keys and marks left went
// through, lost found so far.
func (u *unreleased) without(left, lost []string) *unreleased {
	keep := make(map[string]bool, len(left))
	for _, k := range left {
		keep[k] = true
	}
	out := &unreleased{lost: lost}
	for _, m := range u.marks {
		if keep[m] {
			out.marks = append(out.marks, m)
		}
	}
	for _, g := range u.groups {
		kept := g
		kept.keys, kept.modes = nil, nil
		for i, k := range g.keys {
			if keep[k] {
				kept.keys = append(kept.keys, k)
				if g.modes != nil {
					kept.modes = append(kept.modes, g.modes[i])
				}
			}
		}
		if len(kept.keys) > 0 {
			out.groups = append(out.groups, kept)
		}
	}
	return out
}

// rollback releases groups, every hold a failed call may have taken, and
// sets the lock's cancel marks (of the calls whose outcome was unknown), so
// that such a call, should it still be in flight (a frozen master), cannot
// take anything. Releases are idempotent. It waits for them while ctx lasts;
// once it is done they go on in the background, for at most
// rollbackTimeout (Close waits for them), so that the call returns within
// its context.
func (c *Client) rollback(ctx context.Context, l *Lock, groups []group) {
	_ = c.releaseAside(ctx, l, groups, l.marks)
}

// appendNew appends to list the items it does not hold yet.
func appendNew(list []string, items ...string) []string {
	for _, it := range items {
		if !slices.Contains(list, it) {
			list = append(list, it)
		}
	}
	return list
}

// releaseAside releases groups and sets marks on a context of their own, so
// that they are released even when ctx is done, for at most
// rollbackTimeout. It waits for the release while ctx lasts, and returns
// its error, or ctx's cause when ctx ended first; the release then goes on
// in the background (Close waits for it).
func (c *Client) releaseAside(ctx context.Context, l *Lock, groups []group, marks []string) error {
	if len(groups)+len(marks) == 0 {
		return nil
	}
	done := make(chan error, 1)
	c.calls.Join()
	go func() {
		defer c.calls.Leave()
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), rollbackTimeout)
		defer cancel()
		_, _, err := c.release(rctx, l, groups, marks)
		done <- err
	}()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		return context.Cause(ctx)
	}
}

// partsNamed returns the indices, among at, of the parts whose route key is
// named.
func partsNamed(parts []script.Part, at []int, named []string) []int {
	if len(named) == 0 {
		return nil
	}
	want := make(map[string]bool, len(named))
	for _, k := range named {
		want[k] = true
	}
	var out []int
	for _, i := range at {
		if want[parts[i].Route] {
			out = append(out, i)
		}
	}
	return out
}

func firstError(results []script.Result) error {
	for _, r := range results {
		if r.Err != nil {
			return r.Err
		}
	}
	return nil
}

// userKeys strips the prefix from lock keys.
func (c *Client) userKeys(lockKeys []string) []string {
	out := make([]string, len(lockKeys))
	for i, k := range lockKeys {
		out[i] = k[len(c.cfg.prefix):]
	}
	return out
}

// userKey strips the prefix from a lock key.
func (c *Client) userKey(lockKey string) string { return lockKey[len(c.cfg.prefix):] }
