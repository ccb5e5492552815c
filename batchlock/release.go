package batchlock

import (
	"cmp"
	"context"
	"slices"

	"github.com/batchlock/batchlock/hashtag"
	"github.com/batchlock/batchlock/internal/lease"
	"github.com/batchlock/batchlock/internal/routing"
	"github.com/batchlock/batchlock/internal/wire"
)

// releasing is one lock's share of a release: the groups to drop its hold
// from, and the cancel marks to set.
type releasing struct {
	l      *Lock
	groups []group
	marks  []string
}

// releaseOutcome is what a release did for one lock: the lock keys another
// owner holds, the lock keys and marks whose release did not go through,
// those a call may have released without its reply being read, and the
// first error among them.
type releaseOutcome struct {
	lost, left, unknown []string
	err                 error
}

// releaseAll releases several locks' shares: the keys and marks each master
// serves, for all of them, go in one call per master (at most
// routing.MaxCallKeys keys each).
func (c *Client) releaseAll(ctx context.Context, rs []releasing) []releaseOutcome {
	var parts []routing.Part
	var lockOf []int  // the share of parts[i]
	var isMark []bool // parts[i] is a cancel mark
	for i, r := range rs {
		for _, m := range r.marks {
			parts = append(parts, routing.Part{Slot: hashtag.Slot(m), Route: m, Keys: 1})
			lockOf, isMark = append(lockOf, i), append(isMark, true)
		}
		for _, g := range r.groups {
			for _, k := range g.keys {
				parts = append(parts, routing.Part{Slot: g.slot, Route: k, Keys: 1})
				lockOf, isMark = append(lockOf, i), append(isMark, false)
			}
		}
	}
	out := make([]releaseOutcome, len(rs))
	if len(parts) == 0 {
		return out
	}
	var taken []int // parts found held by another owner
	results := c.route(ctx, routing.Batch{
		Step:   "release",
		Sent:   &c.sent.releases,
		Script: wire.ReleaseScript,
		Parts:  parts,
		Follow: true,
		Args: func(at []int) []any {
			args := make([]any, 0, len(at)+5*len(rs))
			for _, seg := range segmentsBy(lockOf, at) {
				l := rs[lockOf[seg[0]]].l
				m := 0
				for m < len(seg) && isMark[seg[m]] {
					m++
				}
				args = wire.AppendRelease(args, l.owner, l.hold, lease.Millis(l.lease), m, len(seg)-m)
				for _, i := range seg {
					args = append(args, parts[i].Route)
				}
			}
			return args
		},
		Read: func(cl *routing.Call, at []int) ([]int, error) {
			segs := segmentsBy(lockOf, at)
			lists, err := wire.DecodeKeyLists(cl.Reply.Val(), len(segs))
			if err != nil {
				return nil, cl.Describe(ctx, err)
			}
			if lists == nil {
				return nil, nil // every key released
			}
			var away []int
			for n, seg := range segs {
				taken = append(taken, partsNamed(parts, seg, lists[n].Lost)...)
				away = append(away, partsNamed(parts, seg, lists[n].Elsewhere)...)
			}
			return away, nil
		},
	})
	// A key sent again after a run whose reply was lost may have been
	// handed on by that run, and taken by its waiter since: not a loss.
	for _, i := range taken {
		if !results[i].Unknown {
			o := &out[lockOf[i]]
			o.lost = append(o.lost, parts[i].Route)
		}
	}
	for i, r := range results {
		if r.Unknown {
			o := &out[lockOf[i]]
			o.unknown = append(o.unknown, parts[i].Route)
		}
		if r.Err != nil {
			o := &out[lockOf[i]]
			o.left = append(o.left, parts[i].Route)
			if o.err == nil {
				o.err = r.Err
			}
		}
	}
	return out
}

// segmentsBy cuts the parts of a call (indices, ascending) into runs of
// one owner each, as ownerOf (by part) says: a multi-lock script's
// arguments, lock by lock.
func segmentsBy(ownerOf []int, at []int) [][]int {
	var out [][]int
	for n, i := range at {
		if n == 0 || ownerOf[i] != ownerOf[at[n-1]] {
			out = append(out, nil)
		}
		out[len(out)-1] = append(out[len(out)-1], i)
	}
	return out
}

// unreleased is what a lock's release still owes after a release that
// failed in part, and what it found so far.
type unreleased struct {
	groups []group  // the keys whose release did not go through
	marks  []string // the cancel marks not set
	lost   []string // keys found held by another owner
	// unknown are the keys an earlier call may have released unseen: one
	// of them found held by another owner was handed on by that call.
	unknown []string
}

// releaseRest releases what l's earlier releases left (all of l at first),
// and returns the keys found held by another owner, by this release and
// the earlier ones. Called with l.unlocking held.
func (l *Lock) releaseRest(ctx context.Context) ([]string, error) {
	return l.settle(l.c.releaseAll(ctx, []releasing{l.owed()})[0])
}

// owing is what l's release still owes: what its earlier releases left,
// all of l at first. Called with l.unlocking held.
func (l *Lock) owing() *unreleased {
	if l.rest == nil {
		return &unreleased{groups: l.groups, marks: l.marks}
	}
	return l.rest
}

// owed is owing as a share of a release.
func (l *Lock) owed() releasing {
	rest := l.owing()
	return releasing{l: l, groups: rest.groups, marks: rest.marks}
}

// settle records what a release of owed() did, and returns the keys found
// held by another owner, by it and the earlier ones, or its error. Called
// with l.unlocking held.
func (l *Lock) settle(out releaseOutcome) ([]string, error) {
	rest := l.owing()
	lost := slices.Clip(rest.lost)
	for _, k := range out.lost {
		if !slices.Contains(rest.unknown, k) {
			lost = append(lost, k)
		}
	}
	if out.err != nil {
		// A retry sends only what did not go through: a key released
		// since taken by another owner is no loss of this lock.
		l.rest = rest.without(out.left, lost)
		l.rest.unknown = append(slices.Clip(rest.unknown), out.unknown...)
		return nil, out.err
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
	return c.releaseAsideAll(ctx, []releasing{{l: l, groups: groups, marks: marks}})
}

// releaseAsideAll is releaseAside for several locks' shares, one call per
// master for all of them; it returns the first error.
func (c *Client) releaseAsideAll(ctx context.Context, rs []releasing) error {
	empty := true
	for _, r := range rs {
		empty = empty && len(r.groups)+len(r.marks) == 0
	}
	if empty {
		return nil
	}
	done := make(chan error, 1)
	c.calls.Join()
	go func() {
		defer c.calls.Leave()
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), rollbackTimeout)
		defer cancel()
		var err error
		for _, o := range c.releaseAll(rctx, rs) {
			err = cmp.Or(err, o.err)
		}
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
func partsNamed(parts []routing.Part, at []int, named []string) []int {
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

func firstError(results []routing.Result) error {
	for _, r := range results {
		if r.Err != nil {
			return r.Err
		}
	}
	return nil
}
