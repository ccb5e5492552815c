package batchlock

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/batchlock/batchlock/internal/lease"
	"github.com/batchlock/batchlock/internal/routing"
	"github.com/batchlock/batchlock/internal/wire"
)

// eachPart is one group of one basket, as the call's parts list them.
type eachPart struct {
	lock, group int
}

// acquire tries the admitted baskets, one call per master for all of
// them, and returns, per basket, which of its groups it may now hold: those
// a reply said it took, and those of a call whose reply was lost. A basket
// refused on any master is refused.
func (t *eachCall) acquire(ctx context.Context) ([][]bool, error) {
	c := t.c
	var parts []routing.Part
	var of []eachPart
	var lockOf []int // the basket of parts[j]
	held := make([][]bool, len(t.locks))
	// tried are the parts sent before: a call sent again after a lost
	// reply may find the keys that call took for the same hold, so it
	// reads them (wire.ModeFirst) rather than refuse them unread.
	var tried []bool
	var first *Lock // an admitted basket: its lease and acknowledgement are every basket's
	for i, l := range t.locks {
		if t.refused[i] {
			continue
		}
		if first == nil {
			first = l
		}
		held[i] = make([]bool, len(l.groups))
		for gi, g := range l.groups {
			parts = append(parts, routing.Part{Slot: g.slot, Route: g.fenceKey, Keys: len(g.keys)})
			of = append(of, eachPart{i, gi})
			lockOf = append(lockOf, i)
			tried = append(tried, false)
		}
	}
	if len(parts) == 0 {
		return held, nil
	}
	refused := map[int]*ConflictError{}
	leaseMs := lease.Millis(first.lease)
	results := c.route(ctx, routing.Batch{
		Step:   "try each",
		Sent:   &c.sent.acquires,
		Script: wire.TryEachScript,
		Parts:  parts,
		Ack:    first.ack,
		Args: func(at []int) []any {
			again := false
			for _, j := range at {
				again = again || tried[j]
				tried[j] = true
			}
			return t.args(parts, of, lockOf, at, leaseMs, again)
		},
		Read: func(cl *routing.Call, at []int) ([]int, error) {
			return t.read(cl, of, lockOf, at, held, refused, first.ack)
		},
	})
	marked := map[string]bool{}
	var err error
	for j, r := range results {
		if r.Unknown {
			if mark := c.names.CancelMark(parts[j].Slot, t.hold); !marked[mark] {
				marked[mark] = true
				t.marks = append(t.marks, mark)
			}
			held[of[j].lock][of[j].group] = true
		}
		if r.Err != nil && err == nil {
			err = r.Err
		}
	}
	for i, l := range t.locks {
		if t.sent[i] {
			l.marks = t.marks
		}
	}
	if err != nil {
		return nil, err
	}
	for i, conflict := range refused {
		t.refuse(i, ByOtherClient, conflict)
	}
	return held, nil
}

// args are the arguments of tryeach.lua for the parts at (ascending): the
// parts of one basket are consecutive. again says that some of them were
// sent before.
func (t *eachCall) args(parts []routing.Part, of []eachPart, lockOf, at []int, leaseMs int64, again bool) []any {
	shared := false
	n := 3
	for _, j := range at {
		g := t.locks[of[j].lock].groups[of[j].group]
		shared = shared || g.modes != nil
		n += 3 + len(g.keys)
	}
	mode := wire.ModeFirst
	if t.fresh && !again {
		mode = wire.ModeFresh
	}
	if shared {
		mode += wire.SharedModes
	}
	args := wire.AppendTryEach(make([]any, 0, n), leaseMs, mode, t.c.names.CancelMark(parts[at[0]].Slot, t.hold))
	for _, seg := range segmentsBy(lockOf, at) {
		l := t.locks[lockOf[seg[0]]]
		args = wire.AppendBasket(args, l.owner, l.hold, func(args []any) []any {
			for _, j := range seg {
				g := l.groups[of[j].group]
				args = wire.AppendSlot(args, g.fenceKey, g.keys, g.modes, shared)
			}
			return args
		})
	}
	return args
}

// read records what one call of tryeach.lua did: the groups it took, the
// baskets it refused (with their conflicts); it returns the parts of the
// baskets that found a slot elsewhere (which changed nothing of them).
func (t *eachCall) read(cl *routing.Call, of []eachPart, lockOf, at []int,
	held [][]bool, refused map[int]*ConflictError, ack routing.Ack) ([]int, error) {
	c := t.c
	vals, _ := cl.Reply.Slice()
	if len(vals) == 1 {
		switch vals[0] {
		case int64(wire.AcquireElsewhere):
			return at, nil
		case int64(wire.AcquireCancelled):
			return nil, cl.Describe(context.Background(), errors.New("a rollback overtook it"))
		}
	}
	segs := segmentsBy(lockOf, at)
	if len(vals) != len(segs) {
		return nil, cl.Describe(context.Background(), fmt.Errorf("unexpected reply %v", vals))
	}
	var again []int
	tookSome := false
	for n, seg := range segs {
		i := lockOf[seg[0]]
		l := t.locks[i]
		list, _ := vals[n].([]any)
		r, err := wire.DecodeAcquire(list)
		if err != nil {
			return nil, cl.Describe(context.Background(), err)
		}
		switch r.Status {
		case wire.AcquireGranted:
			tookSome = true
			tokens := r.Tokens
			for _, j := range seg {
				g := l.groups[of[j].group]
				l.setTokens(g.keys, tokens)
				tokens = tokens[min(len(g.keys), len(tokens)):]
				held[i][of[j].group] = true
			}
		case wire.AcquireRefused:
			conflict := refused[i]
			if conflict == nil {
				conflict = &ConflictError{Holders: map[string][]string{}}
				refused[i] = conflict
			}
			var out acquireOutcome
			out.addHolders(r.Conflicts, r.Holders)
			conflict.Keys = append(conflict.Keys, c.names.UserKeys(r.Conflicts)...)
			for key, owners := range c.userHolders(out.holders) {
				conflict.Holders[key] = owners
			}
		case wire.AcquireElsewhere:
			again = append(again, seg...)
		case wire.AcquireUpgrade:
			return nil, fmt.Errorf("%w: %w: %q", ErrNotObtained, inner(ErrUpgrade), c.names.UserKey(r.Key))
		default:
			return nil, cl.Describe(context.Background(), fmt.Errorf("unexpected reply %v", list))
		}
	}
	if tookSome && !ack.Acknowledged(cl) {
		return nil, fmt.Errorf("%w: %w", ErrNotObtained, inner(unacknowledged(cl, ack)))
	}
	return again, nil
}

// giveBack releases what the baskets refused on some master took, or may
// have taken, on the others, one call per master for all of them, and sets
// the call's cancel marks, so that a call of unknown outcome still in
// flight (a frozen master) cannot take them after.
func (t *eachCall) giveBack(ctx context.Context, held [][]bool) error {
	var back []releasing
	for i, groups := range held {
		if !t.refused[i] {
			continue
		}
		var taken []group
		for gi, h := range groups {
			if h {
				taken = append(taken, t.locks[i].groups[gi])
			}
		}
		if len(taken) > 0 {
			back = append(back, releasing{l: t.locks[i], groups: taken})
		}
	}
	if len(back) == 0 {
		return nil
	}
	back[0].marks = t.marks
	if err := t.c.releaseAsideAll(ctx, back); err != nil {
		return fmt.Errorf("%w: could not give back what refused baskets took: %w", ErrNotObtained, inner(err))
	}
	return nil
}

// keep keeps the baskets taken whole, whose leases started when the call
// was sent: unless the call's caller gave up or the Client is closing, and
// only with enough of their lease left (see lease.Enough).
func (t *eachCall) keep(ctx context.Context, sent time.Time) error {
	c := t.c
	if ctx.Err() != nil && c.closing.Err() == nil {
		return ended(ctx)
	}
	var kept []*Lock
	for i, l := range t.locks {
		if t.refused[i] {
			continue
		}
		kept = append(kept, l)
		l.confirm(sent.Add(l.lease))
		if left := time.Until(l.ValidUntil()); !lease.Enough(left, l.lease) {
			return fmt.Errorf("%w: the lease ran out while the baskets were taken: %v of %v left",
				ErrNotObtained, max(left, 0).Round(time.Millisecond), l.lease)
		}
	}
	if !c.hold(kept...) {
		return ErrClosed
	}
	for _, l := range kept {
		c.watchdog.add(l)
	}
	return nil
}

// fail rolls back every basket sent to Redis (what it may have taken, and
// the cancel marks of calls of unknown outcome) and lets go of their gates;
// the call failed with err.
func (t *eachCall) fail(ctx context.Context, start time.Time, err error) {
	_ = t.c.releaseAsideAll(ctx, t.sentShares())
	for i, l := range t.locks {
		// A basket after the one whose admission failed has no lock yet.
		if l != nil && !t.refused[i] {
			t.refused[i] = true
			l.leaveGates()
			l.emit(Event{Kind: EventFailed, Duration: time.Since(start), Err: err})
		}
	}
}

// sentShares is what to release of the baskets sent to Redis: every group,
// and the call's cancel marks, set once for all of them.
func (t *eachCall) sentShares() []releasing {
	var back []releasing
	marks := t.marks
	for i, l := range t.locks {
		if t.sent[i] {
			back = append(back, releasing{l: l, groups: l.groups, marks: marks})
			marks = nil
		}
	}
	return back
}

// abandon ends every basket's lock, which a call that panicked may have
// taken, and rolls them back.
func (t *eachCall) abandon(ctx context.Context) {
	for _, l := range t.locks {
		if l != nil {
			t.c.watchdog.remove(l)
			l.finish(fmt.Errorf("%w: the call that took it panicked", ErrNotHeld))
		}
	}
	_ = t.c.releaseAsideAll(ctx, t.sentShares())
}
