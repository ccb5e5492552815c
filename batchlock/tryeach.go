package batchlock

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/batchlock/batchlock/internal/lease"
	"github.com/batchlock/batchlock/internal/owner"
	"github.com/batchlock/batchlock/internal/routing"
	"github.com/batchlock/batchlock/internal/wire"
)

// TryEach tries every basket at once: each is taken whole or not at all, and
// an earlier basket wins a key over a later one. locks[i] is basket i's Lock,
// with its own owner, or nil where basket i was refused, holding nothing
// (EventConflict says why). err is set only where the call failed as a whole
// (ErrInvalid, ctx, Redis, ErrNoReplicas): then nothing of it is
// held. It never waits, nor takes a key a waiter is queued for, and costs one
// call per master, one more where a basket spanning masters was refused.
func (c *Client) TryEach(ctx context.Context, baskets [][]string, opts ...LockOption) (locks []*Lock, err error) {
	locks, _, err = c.tryEachOf(ctx, baskets, opts, false)
	return locks, err
}

// tryEachOf is TryEach, which with explain also says why each refused
// basket was, in basket order.
func (c *Client) tryEachOf(ctx context.Context, baskets [][]string, opts []LockOption, explain bool) ([]*Lock, []refusal, error) {
	lc, err := lockConfigOf(opts)
	if err != nil {
		return nil, nil, err
	}
	switch {
	case len(lc.units) > 0:
		return nil, nil, invalid("WithUnits: TryEach takes no counted keys; Lock, TryLock and Do do")
	case lc.waitSet:
		return nil, nil, invalid("WithWait: TryEach never waits; Lock and Do do")
	}
	isShared, err := c.checkEach(baskets, lc.shared)
	if err != nil {
		return nil, nil, err
	}
	each := make([]eachBasket, len(baskets))
	for i, b := range baskets {
		each[i] = eachBasket{keys: b, isShared: isShared}
	}
	return c.tryEach(ctx, lc, each, explain)
}

// eachBasket is one basket of a TryEach call: its keys (as given, repeats
// and all), which of them it asks for shared, the units it asks of its
// counted keys (a Processor's), and once planned its keys, groups, and
// units by lock key.
type eachBasket struct {
	keys     []string
	isShared map[string]bool
	units    map[string]int64
	userKeys []string // nil until planned
	groups   []group
	counted  map[string]int64
	// arrived, set for a Processor's basket, is when Add took it: its
	// wait's start. Such a basket is offered by many calls. Its plan is
	// every call's, so that its Lock gets a copy of its keys, which a Lock
	// sorts in place; a refusal in the process names only the first key
	// an earlier basket took (all of them are the same tick's, let go
	// together), as a tick refuses most baskets and their keys would be
	// read in full. named, when set, is shared by every copy of the
	// basket: its keys sorted once, for the events of the calls that
	// refuse it before it has a lock.
	arrived time.Time
	named   *sortedKeys
}

// ofProcessor reports whether b is a Processor's basket.
func (b *eachBasket) ofProcessor() bool { return !b.arrived.IsZero() }

// sortedKeys are a basket's keys sorted without repeats, made on first use.
type sortedKeys struct {
	once sync.Once
	keys []string
}

// sortedKeys returns the basket's keys sorted without repeats: a copy, the
// basket being the caller's.
func (b *eachBasket) sortedKeys() []string {
	sorted := func() []string { return slices.Compact(slices.Sorted(slices.Values(b.keys))) }
	if b.named == nil {
		return sorted()
	}
	b.named.once.Do(func() { b.named.keys = sorted() })
	return b.named.keys
}

// exclusive reports whether the basket asks for key k exclusively.
func (b *eachBasket) exclusive(k string) bool { return !b.isShared[k] && b.units[k] == 0 }

// tryEach is TryEach of baskets, checked already, with lc: locks[i] is
// basket i's Lock or nil, and with explain why says why each refused one
// was, in basket order.
func (c *Client) tryEach(ctx context.Context, lc lockConfig, baskets []eachBasket, explain bool) (locks []*Lock, why []refusal, err error) {
	ctx, end, err := c.beginTaking(ctx)
	if err != nil {
		return nil, nil, err
	}
	defer end()
	locks = make([]*Lock, len(baskets))
	if len(baskets) == 0 {
		return locks, nil, nil
	}

	start := time.Now()
	ctxOwner, _ := owner.FromContext(ctx)
	t := &eachCall{c: c, ctx: ctx, lc: lc, baskets: baskets, hold: wire.NewHold(), fresh: !lc.ownerSet && ctxOwner == "", explain: explain,
		locks: make([]*Lock, len(baskets)), refused: make([]bool, len(baskets)), sent: make([]bool, len(baskets))}
	returned := false
	defer func() {
		if !returned {
			// A panic (an observer's): nothing of the call is left, then
			// the panic goes on.
			c.abandon(ctx, slices.DeleteFunc(slices.Clone(t.locks), func(l *Lock) bool { return l == nil }), t.sentShares())
		}
	}()
	err = t.take(ctx, start)
	returned = true
	if err != nil {
		return nil, nil, err
	}
	for i, l := range t.locks {
		if !t.refused[i] {
			locks[i] = l
		}
	}
	slices.SortFunc(t.why, func(a, b refusal) int { return cmp.Compare(a.basket, b.basket) })
	return locks, t.why, nil
}

// refusal says why tryEach refused a basket: the basket's index among the
// call's baskets, the keys it met (without the prefix: those an earlier
// basket or another lock of the Client took, or the first found held in
// Redis on each master), where it happened, and, in Redis, the longest
// lease left of the keys that refused it (0 when not told), or what makes
// the basket bad.
type refusal struct {
	basket int
	keys   []string
	cause  refusalCause
	wait   time.Duration
	err    error
}

// checkEach validates every basket and the shared keys, which it returns
// as a set.
func (c *Client) checkEach(baskets [][]string, shared []string) (map[string]bool, error) {
	isShared := make(map[string]bool, len(shared))
	for i, k := range shared {
		if err := c.checkKey(k, "shared key", i); err != nil {
			return nil, err
		}
		isShared[k] = true
	}
	total := 0
	for _, basket := range baskets {
		total += len(basket)
	}
	if total > maxEachKeys {
		return nil, invalid("%d keys in all: at most %d in one call", total, maxEachKeys)
	}
	for i, basket := range baskets {
		if len(basket) == 0 {
			return nil, invalid("basket %d has no keys", i)
		}
		for j, k := range basket {
			if c.checkKey(k, "key", j) != nil {
				return nil, c.checkKey(k, fmt.Sprintf("basket %d: key", i), j) // named, once found
			}
		}
	}
	return isShared, nil
}

// eachCall is one TryEach call: its baskets' locks, those refused, and the
// hold whose cancel marks stand for all of them.
type eachCall struct {
	c       *Client
	ctx     context.Context // the call's, which its locks keep the values of
	lc      lockConfig
	baskets []eachBasket
	hold    string
	// fresh: every basket's owner is made for the call (see newLock),
	// so that it holds no key.
	fresh bool
	// locks are the baskets' locks, made once a basket is clear of the
	// call's earlier ones (nil before).
	locks   []*Lock
	refused []bool
	// sent are the baskets sent to Redis: admitted in the process.
	sent  []bool
	marks []string // cancel marks of the slots where a call may have run unseen
	// why says why each refused basket was refused, with explain.
	why     []refusal
	explain bool
}

// take admits the baskets in the process, then tries those admitted in
// Redis, gives back what refused ones took, and keeps the locks of those
// taken whole; on an error it has rolled back every basket.
func (t *eachCall) take(ctx context.Context, start time.Time) error {
	err := t.admit(ctx)
	var sent time.Time
	var held [][]bool
	if err == nil {
		sent = time.Now()
		held, err = t.acquire(ctx)
	}
	if err == nil {
		err = t.giveBack(ctx, held)
	}
	if err == nil {
		err = t.keep(ctx, sent)
	}
	if err != nil {
		t.fail(ctx, start, err)
		return err
	}
	for i, l := range t.locks {
		if !t.refused[i] {
			t.c.handOut(l, t.lc, cmp.Or(t.baskets[i].arrived, start))
		}
	}
	return nil
}

// admit settles, in the process, the conflicts among the baskets (an
// earlier one wins) and with the Client's other locks (the gates, asked
// without waiting): a basket refused here is told its conflict and holds no
// gate. Only a basket clear of the earlier ones is planned and gets its
// lock.
func (t *eachCall) admit(ctx context.Context) error {
	c := t.c
	// taken are the user keys taken by earlier baskets, and the basket
	// (its index and 1) that last met each: a basket's keys may repeat.
	taken := map[string]takenKey{}
	for i := range t.baskets {
		b := &t.baskets[i]
		var busy []string
		for _, k := range b.keys {
			// Shared and counted keys are settled among the baskets in
			// Redis.
			if was, ok := taken[k]; ok && (was.exclusive || b.exclusive(k)) && was.metBy != i+1 {
				busy = append(busy, k)
				if b.ofProcessor() {
					break
				}
				taken[k] = takenKey{was.exclusive, i + 1}
			}
		}
		if len(busy) > 0 {
			t.refuse(i, refusal{cause: refusedEarlier}, &ConflictError{Keys: busy})
			continue
		}
		if b.userKeys == nil {
			if err := b.plan(c); err != nil {
				return err // checked before: not reached
			}
		}
		keys := b.userKeys
		if b.ofProcessor() {
			keys = slices.Clone(keys)
		}
		l := c.newLock(t.ctx, t.lc, keys, b.groups)
		l.units = b.counted
		t.locks[i] = l
		gated, err := l.enterGates(ctx, false, nil)
		if err != nil {
			return err
		}
		if len(gated) > 0 {
			t.refuse(i, refusal{cause: refusedGate}, &ConflictError{Keys: c.names.UserKeys(gated), Holders: c.gateHolders(gated)})
			continue
		}
		t.sent[i] = true
		for _, k := range b.keys {
			taken[k] = takenKey{exclusive: taken[k].exclusive || b.exclusive(k)}
		}
	}
	return nil
}

// takenKey is a key taken by an earlier basket of a call (admit): whether
// exclusively, and the basket that last met it there.
type takenKey struct {
	exclusive bool
	metBy     int
}

// plan plans the basket's keys and groups (Client.plan).
func (b *eachBasket) plan(c *Client) error {
	exclusive, shared := b.split()
	var err error
	b.userKeys, b.groups, b.counted, err = c.plan(exclusive, shared, b.units)
	return err
}

// split returns the basket's keys asked for exclusively, and those asked
// for shared; the counted ones are in units.
func (b *eachBasket) split() (exclusive, shared []string) {
	for _, k := range b.keys {
		switch {
		case b.isShared[k]:
			shared = append(shared, k)
		case b.units[k] == 0:
			exclusive = append(exclusive, k)
		}
	}
	return exclusive, shared
}

// Why a basket was refused (see refusal).
type refusalCause int

const (
	refusedEarlier refusalCause = iota // an earlier basket of the call took a key
	refusedGate                        // another lock of the Client holds a key
	refusedHeld                        // in Redis: another Client holds a key, or waits for it
	refusedBad                         // in Redis: a key asked for in units has no capacity, or too little
)

// refuse drops basket i, with the conflict that refused it and why (and,
// refused in Redis, the longest lease left of the keys met), which
// the Processor and the observer are told; a basket refused before it got
// its lock gets one to be told with only when an observer listens.
func (t *eachCall) refuse(i int, r refusal, conflict *ConflictError) {
	t.refused[i] = true
	if t.explain {
		r.basket, r.keys = i, conflict.Keys
		t.why = append(t.why, r)
	}
	e := Event{Kind: EventConflict, Conflict: conflict.Keys, Err: conflict}
	if l := t.locks[i]; l != nil {
		l.leaveGates()
		l.emit(e)
	} else if t.c.cfg.observer != nil {
		// No lock, no gate: the owner it would have had.
		e.Owner, e.Keys = t.c.ownerFor(t.ctx, t.lc), t.baskets[i].sortedKeys()
		t.c.cfg.observer(e)
	}
}

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
	refused := map[int]*redisRefusal{}
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
		err = cmp.Or(err, r.Err)
	}
	for i, l := range t.locks {
		if t.sent[i] {
			l.marks = t.marks
		}
	}
	if err != nil {
		return nil, err
	}
	for _, i := range slices.Sorted(maps.Keys(refused)) {
		r := refused[i]
		why := refusal{cause: refusedHeld, wait: r.wait, err: r.err}
		if r.err != nil {
			why.cause = refusedBad
		}
		t.refuse(i, why, r.conflict)
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
				if len(l.units) > 0 {
					args = wire.AppendCounted(args, g.keys, g.modes, l.counted)
				}
			}
			return args
		})
	}
	return args
}

// badUnits are the replies that make a basket of counted keys bad, by
// status, with their errors' makers.
var badUnits = map[int64]func(key string) error{
	wire.AcquireNoUnits:   noCapacity,
	wire.AcquireOverUnits: func(key string) error { return fmt.Errorf("%w: %q", ErrOverCapacity, key) },
}

// redisRefusal is why Redis refused a basket: its conflicts, and the
// longest lease left of the keys held.
type redisRefusal struct {
	conflict *ConflictError
	wait     time.Duration
	err      error // the basket is bad: a key asked for in units has no capacity, or too little
}

// read records what one call of tryeach.lua did, basket by basket as an
// attempt's reply reads (Client.read): the groups it took, the baskets it
// refused (with their conflicts); it returns the parts of the baskets that
// found a slot elsewhere (which changed nothing of them).
func (t *eachCall) read(cl *routing.Call, of []eachPart, lockOf, at []int,
	held [][]bool, refused map[int]*redisRefusal, ack routing.Ack) ([]int, error) {
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
		groups := make([]int, len(seg))
		for k, j := range seg {
			groups[k] = of[j].group
		}
		why := refused[i]
		if why == nil {
			why = &redisRefusal{conflict: &ConflictError{Holders: map[string][]string{}}}
		}
		if bad := badUnits[r.Status]; bad != nil {
			// A bad basket, refused alone: the call goes on.
			key := c.names.UserKey(r.Key)
			why.conflict.Keys = append(why.conflict.Keys, key)
			why.err = bad(key)
			refused[i] = why
			continue
		}
		out := attemptOutcome{refused: -1}
		elsewhere, err := c.read(cl, l, &out, l.groups, groups, r, false)
		switch {
		case err != nil:
			return nil, err
		case elsewhere:
			again = append(again, seg...)
		case len(out.conflicts) > 0:
			refused[i] = why
			why.conflict.Keys = append(why.conflict.Keys, c.names.UserKeys(out.conflicts)...)
			why.wait = max(why.wait, out.wait)
			for key, owners := range c.userHolders(out.holders) {
				why.conflict.Holders[key] = owners
			}
		}
		for _, gi := range out.granted {
			held[i][gi] = true
			tookSome = true
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
	if err := t.c.release(ctx, rollingBack, back)[0]; err != nil {
		return fmt.Errorf("%w: could not give back what refused baskets took: %w", ErrNotObtained, inner(err))
	}
	return nil
}

// keep keeps the baskets taken whole, whose leases started when the call
// was sent, each with enough of its lease left (see lease.Enough).
func (t *eachCall) keep(ctx context.Context, sent time.Time) error {
	var kept []*Lock
	for i, l := range t.locks {
		if t.refused[i] {
			continue
		}
		kept = append(kept, l)
		l.handValidity(validity{until: sent.Add(l.lease)})
		if err := l.leaseLeft("the baskets"); err != nil {
			return err
		}
	}
	return t.c.keep(ctx, kept...)
}

// fail rolls back every basket sent to Redis (what it may have taken, and
// the cancel marks of calls of unknown outcome) and lets go of their gates;
// the call failed with err.
func (t *eachCall) fail(ctx context.Context, start time.Time, err error) {
	_ = t.c.release(ctx, rollingBack, t.sentShares())
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
