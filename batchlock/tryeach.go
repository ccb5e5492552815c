package batchlock

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/batchlock/batchlock/internal/gates"
	"github.com/batchlock/batchlock/internal/lease"
	"github.com/batchlock/batchlock/internal/script"
)

// MaxEachKeys bounds the keys of all the baskets of one TryEach call
// together: past it the call is ErrInvalid. (Its calls to Redis carry at
// most 1024 keys each, as every call does.)
const MaxEachKeys = 1 << 16

// TryEach tries every basket at once: each is taken whole or not at all, and
// an earlier basket wins a key over a later one of the same call. locks[i] is
// basket i's lock, nil where basket i was refused. err is non-nil only where
// the call failed as a whole (bad input, its context, Redis unreachable, a
// lease used up while the baskets were taken, ErrUpgrade, ErrNoReplicas):
// then nothing of it is held, and locks is nil.
//
// Each basket taken is an ordinary Lock, with an owner of its own (unless
// WithOwner or ContextWithOwner gives all of them one), its fencing tokens,
// its lease (renewed, or WithTTL), WithMaxHold, and Unlock or UnlockEach. The
// options apply to every basket: WithShared's keys are taken shared in every
// basket that has them (two baskets reading one promotion are both taken),
// and WithReplicas waits once per master for the whole call. Within one call
// two baskets never both get a key exclusively, whatever their owners.
// WithWait does nothing here: TryEach never waits.
//
// Conflicts among the baskets, and with the locks the Client holds (its
// in-process gates), are settled in the process, without a call. The rest
// costs one call per master for all the baskets (per 1024 keys), and, only
// where a basket spanning several masters was refused on one of them, one
// more call per master to give back what it took on the others. A basket is
// refused in Redis when another owner holds one of its keys there or waits
// for it in a queue: a try never overtakes a waiter. A refused basket holds
// nothing once the call returns. Its conflict, which an observer is told
// (EventConflict, EventFailed with a *ConflictError), names the keys of
// earlier baskets or other locks of the Client it met, or the first key
// found held on each master, without holders: a refusal stops there, the
// cheapest it can be.
//
// No baskets is no work: an empty result and no error. An empty basket, an
// empty or reserved key, or more than MaxEachKeys keys in all are ErrInvalid,
// before anything is sent.
func (c *Client) TryEach(ctx context.Context, baskets [][]string, opts ...LockOption) (locks []*Lock, err error) {
	defer func() { err = onePrefix(err) }()
	if err := checkContext(ctx); err != nil {
		return nil, err
	}
	lc, err := lockConfigOf(opts)
	if err != nil {
		return nil, err
	}
	isShared, err := c.checkEach(baskets, lc.shared)
	if err != nil {
		return nil, err
	}
	locks = make([]*Lock, len(baskets))
	if len(baskets) == 0 {
		return locks, nil
	}
	ctx, end, err := c.beginTaking(ctx)
	if err != nil {
		return nil, err
	}
	defer end()

	start := time.Now()
	owner, _ := OwnerFromContext(ctx)
	t := &eachCall{c: c, ctx: ctx, lc: lc, baskets: baskets, isShared: isShared, hold: newHold(), fresh: !lc.ownerSet && owner == "",
		locks: make([]*Lock, len(baskets)), refused: make([]bool, len(baskets)), sent: make([]bool, len(baskets))}
	returned := false
	defer func() {
		if !returned {
			// A panic (an observer's): nothing of the call is left, then
			// the panic goes on.
			t.abandon(ctx)
		}
	}()
	err = t.take(ctx, start)
	returned = true
	if err != nil {
		return nil, err
	}
	for i, l := range t.locks {
		if !t.refused[i] {
			locks[i] = l
		}
	}
	return locks, nil
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
	for i, basket := range baskets {
		if total += len(basket); total > MaxEachKeys {
			return nil, invalid("%d keys or more in all: at most %d in one call", total, MaxEachKeys)
		}
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
	c        *Client
	ctx      context.Context // the call's, which its locks keep the values of
	lc       lockConfig
	baskets  [][]string
	isShared map[string]bool
	hold     string
	// fresh: every basket's owner is made for the call (see newLockFor),
	// so that it holds no key.
	fresh bool
	// locks are the baskets' locks, made once a basket is clear of the
	// call's earlier ones (nil before).
	locks   []*Lock
	refused []bool
	// sent are the baskets sent to Redis: admitted in the process.
	sent  []bool
	marks []string // cancel marks of the slots where a call may have run unseen
}

// take admits the baskets in the process, then tries those admitted in
// Redis, gives back what refused ones took, and keeps the locks of those
// taken whole; on an error it has rolled back every basket.
func (t *eachCall) take(ctx context.Context, start time.Time) error {
	err := t.admit()
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
			t.c.handOut(l, t.lc, start)
		}
	}
	return nil
}

// admit settles, in the process, the conflicts among the baskets (an
// earlier one wins) and with the Client's other locks (the gates): a basket
// refused here is told its conflict and holds no gate. Only a basket clear
// of the earlier ones is planned and gets its lock.
func (t *eachCall) admit() error {
	c := t.c
	taken := map[string]bool{} // user key: taken by an earlier basket; true when exclusively
	for i, basket := range t.baskets {
		var busy []string
		for _, k := range basket {
			if exclusive, ok := taken[k]; ok && (exclusive || !t.isShared[k]) && !slices.Contains(busy, k) {
				busy = append(busy, k)
			}
		}
		if len(busy) > 0 {
			t.refuse(i, &ConflictError{Keys: busy})
			continue
		}
		var exclusive, readers []string
		for _, k := range basket {
			if t.isShared[k] {
				readers = append(readers, k)
			} else {
				exclusive = append(exclusive, k)
			}
		}
		userKeys, groups, err := c.plan(exclusive, readers)
		if err != nil {
			return err // checked before: not reached
		}
		l := c.newLockFor(t.ctx, t.lc, userKeys, groups)
		t.locks[i] = l
		gated, err := t.enterGates(l)
		if err != nil {
			return err
		}
		if len(gated) > 0 {
			t.refuse(i, &ConflictError{Keys: c.userKeys(gated), Holders: c.gateHolders(gated)})
			continue
		}
		t.sent[i] = true
		for _, k := range basket {
			taken[k] = taken[k] || !t.isShared[k]
		}
	}
	return nil
}

// enterGates takes, without waiting, the gate of each of l's keys; it
// returns the keys whose gate another lock of the Client holds (then l
// holds no gate), or ErrUpgrade.
func (t *eachCall) enterGates(l *Lock) ([]string, error) {
	var busy []string
	for _, g := range l.groups {
		for k, key := range g.keys {
			switch v, _ := t.c.gates.Ask(key, l.owner, g.shared(k), false); v {
			case gates.Pass:
				l.addGated(key, g.shared(k))
			case gates.Upgrade:
				l.leaveGates()
				return nil, t.c.upgradeAtGate(key)
			default:
				busy = append(busy, key)
			}
		}
	}
	if len(busy) > 0 {
		l.leaveGates()
	}
	return busy, nil
}

// refuse drops basket i, with the conflict that refused it; a basket
// refused before it got its lock gets one to be told with only when an
// observer listens.
func (t *eachCall) refuse(i int, conflict *ConflictError) {
	t.refused[i] = true
	l := t.locks[i]
	if l == nil {
		if t.c.cfg.observer == nil {
			return
		}
		l = t.c.newLockFor(t.ctx, t.lc, t.baskets[i], nil)
	}
	l.leaveGates()
	l.emit(Event{Kind: EventConflict, Conflict: conflict.Keys})
	l.emit(Event{Kind: EventFailed, Err: conflict})
}

// eachPart is one group of one basket, as the call's parts list them.
type eachPart struct {
	lock, group int
}

// acquire tries the admitted baskets, one call per master for all of
// them, and returns, per basket, which of its groups it now holds. A basket
// refused on any master is refused.
func (t *eachCall) acquire(ctx context.Context) ([][]bool, error) {
	c := t.c
	var parts []script.Part
	var of []eachPart
	var lockOf []int // the basket of parts[j]
	held := make([][]bool, len(t.locks))
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
			parts = append(parts, script.Part{Slot: g.slot, Route: g.fenceKey, Keys: len(g.keys)})
			of = append(of, eachPart{i, gi})
			lockOf = append(lockOf, i)
		}
	}
	if len(parts) == 0 {
		return held, nil
	}
	refused := map[int]*ConflictError{}
	leaseMs := lease.Millis(first.lease)
	results := c.route(ctx, script.Batch{
		Step:   "batchlock: try each",
		Sent:   &c.sent.acquires,
		Script: tryEachScript,
		Parts:  parts,
		Ack:    first.ack,
		Args: func(at []int) []any {
			return t.args(parts, of, lockOf, at, leaseMs)
		},
		Read: func(cl *script.Call, at []int) ([]int, error) {
			return t.read(cl, of, lockOf, at, held, refused, first.ack)
		},
	})
	marked := map[string]bool{}
	var err error
	for j, r := range results {
		if r.Unknown {
			if mark := c.cancelMark(parts[j].Slot, t.hold); !marked[mark] {
				marked[mark] = true
				t.marks = append(t.marks, mark)
			}
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
		t.refuse(i, conflict)
	}
	return held, nil
}

// args are the arguments of tryeach.lua for the parts at (ascending): the
// parts of one basket are consecutive.
func (t *eachCall) args(parts []script.Part, of []eachPart, lockOf, at []int, leaseMs int64) []any {
	shared := false
	n := 3
	for _, j := range at {
		g := t.locks[of[j].lock].groups[of[j].group]
		shared = shared || g.modes != nil
		n += 3 + len(g.keys)
	}
	mode := modeFirst
	if t.fresh {
		mode = modeFresh
	}
	if shared {
		mode += "s"
	}
	args := make([]any, 0, n)
	args = append(args, leaseMs, mode, t.c.cancelMark(parts[at[0]].Slot, t.hold))
	for _, seg := range segmentsBy(lockOf, at) {
		l := t.locks[lockOf[seg[0]]]
		args = append(args, escapeOwner(l.owner), l.hold, 0)
		count := len(args) - 1
		for _, j := range seg {
			args = appendGroup(args, l.groups[of[j].group], shared)
		}
		args[count] = len(args) - count - 1
	}
	return args
}

// read records what one call of tryeach.lua did: the groups it took, the
// baskets it refused (with their conflicts); it returns the parts of the
// baskets that found a slot elsewhere (which changed nothing of them).
func (t *eachCall) read(cl *script.Call, of []eachPart, lockOf, at []int,
	held [][]bool, refused map[int]*ConflictError, ack script.Ack) ([]int, error) {
	c := t.c
	vals, _ := cl.Reply.Slice()
	if len(vals) == 1 {
		switch vals[0] {
		case int64(acquireElsewhere):
			return at, nil
		case int64(acquireCancelled):
			return nil, script.Describe(context.Background(), "batchlock: try each", cl, errors.New("a rollback overtook it"))
		}
	}
	segs := segmentsBy(lockOf, at)
	if len(vals) != len(segs) {
		return nil, script.Describe(context.Background(), "batchlock: try each", cl, fmt.Errorf("unexpected reply %v", vals))
	}
	var again []int
	tookSome := false
	for n, seg := range segs {
		i := lockOf[seg[0]]
		l := t.locks[i]
		list, _ := vals[n].([]any)
		r, err := decodeAcquire(list)
		if err != nil {
			return nil, script.Describe(context.Background(), "batchlock: try each", cl, err)
		}
		switch r.status {
		case acquireGranted:
			tookSome = true
			tokens := r.tokens
			for _, j := range seg {
				g := l.groups[of[j].group]
				l.setTokens(g.keys, tokens)
				tokens = tokens[min(len(g.keys), len(tokens)):]
				held[i][of[j].group] = true
			}
		case acquireRefused:
			conflict := refused[i]
			if conflict == nil {
				conflict = &ConflictError{Holders: map[string][]string{}}
				refused[i] = conflict
			}
			var out acquireOutcome
			out.addHolders(r.conflicts, r.holders)
			conflict.Keys = append(conflict.Keys, c.userKeys(r.conflicts)...)
			for key, owners := range c.userHolders(out.holders) {
				conflict.Holders[key] = owners
			}
		case acquireElsewhere:
			again = append(again, seg...)
		case acquireUpgrade:
			return nil, fmt.Errorf("%w: %w: %q", ErrNotObtained, ErrUpgrade, c.userKey(r.key))
		default:
			return nil, script.Describe(context.Background(), "batchlock: try each", cl, fmt.Errorf("unexpected reply %v", list))
		}
	}
	if tookSome && !ack.Acknowledged(cl) {
		return nil, fmt.Errorf("%w: %w", ErrNotObtained, unacknowledged(cl, ack))
	}
	return again, nil
}

// giveBack releases what the baskets refused on some master took on the
// others, one call per master for all of them.
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
	if err := t.c.releaseAsideAll(ctx, back); err != nil {
		return fmt.Errorf("%w: could not give back what refused baskets took: %w", ErrNotObtained, err)
	}
	return nil
}

// keep keeps the baskets taken whole, whose leases started when the call
// was sent: unless the call's caller gave up or the Client is closing, and
// only with enough of their lease left (see lease.Enough).
func (t *eachCall) keep(ctx context.Context, sent time.Time) error {
	c := t.c
	switch {
	case c.closing.Err() != nil:
		return ErrClosed
	case context.Cause(ctx) != nil:
		return context.Cause(ctx)
	}
	for i, l := range t.locks {
		if t.refused[i] {
			continue
		}
		l.confirm(sent.Add(l.lease))
		if left := time.Until(l.ValidUntil()); !lease.Enough(left, l.lease) {
			return fmt.Errorf("%w: the lease ran out while the baskets were taken: %v of %v left",
				ErrNotObtained, max(left, 0).Round(time.Millisecond), l.lease)
		}
	}
	for i, l := range t.locks {
		if !t.refused[i] {
			c.watchdog.add(l)
			c.hold(l)
		}
	}
	return nil
}

// fail rolls back every basket sent to Redis (what it may have taken, and
// the cancel marks of calls of unknown outcome) and lets go of their gates;
// the call failed with err.
func (t *eachCall) fail(ctx context.Context, start time.Time, err error) {
	_ = t.c.releaseAsideAll(ctx, t.sentShares())
	err = onePrefix(err)
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
