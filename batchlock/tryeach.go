package batchlock

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/batchlock/batchlock/internal/gates"
	"github.com/batchlock/batchlock/internal/wire"
)

// MaxEachKeys bounds the keys of all the baskets of one TryEach call
// together, repeats counted: past it the call is ErrInvalid. (Its calls to
// Redis carry at most 1024 keys each, as every call does.) Lock, TryLock
// and Do take a batch of any size.
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
// nothing once the call returns. WithRefusals says why each was refused,
// and an observer is told (EventRefused, with a *ConflictError): the keys
// of earlier baskets or other locks of the Client it met, or the first key
// found held on each master, without holders: a refusal stops there, the
// cheapest it can be.
//
// No baskets is no work: an empty result and no error. An empty basket, an
// empty or reserved key, or more than MaxEachKeys keys in all are ErrInvalid,
// before anything is sent.
func (c *Client) TryEach(ctx context.Context, baskets [][]string, opts ...LockOption) (locks []*Lock, err error) {
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
	t := &eachCall{c: c, ctx: ctx, lc: lc, baskets: baskets, isShared: isShared, hold: wire.NewHold(), fresh: !lc.ownerSet && owner == "",
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
	for _, basket := range baskets {
		total += len(basket)
	}
	if total > MaxEachKeys {
		return nil, invalid("%d keys in all: at most %d (MaxEachKeys) in one call", total, MaxEachKeys)
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
	marks []string  // cancel marks of the slots where a call may have run unseen
	why   []Refusal // with WithRefusals: why each refused basket was refused
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
	if t.lc.refusals != nil {
		slices.SortFunc(t.why, func(a, b Refusal) int { return cmp.Compare(a.Basket, b.Basket) })
		*t.lc.refusals = append(*t.lc.refusals, t.why...)
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
			t.refuse(i, ByEarlierBasket, &ConflictError{Keys: busy})
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
			t.refuse(i, ByThisClient, &ConflictError{Keys: c.names.UserKeys(gated), Holders: c.gateHolders(gated)})
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

// refuse drops basket i, with the conflict that refused it, met by, which
// WithRefusals and the observer are told; a basket refused before it got
// its lock gets one to be told with only when an observer listens.
func (t *eachCall) refuse(i int, by RefusedBy, conflict *ConflictError) {
	t.refused[i] = true
	if t.lc.refusals != nil {
		t.why = append(t.why, Refusal{Basket: i, By: by, Keys: conflict.Keys})
	}
	l := t.locks[i]
	if l == nil {
		if t.c.cfg.observer == nil {
			return
		}
		l = t.c.newLockFor(t.ctx, t.lc, t.baskets[i], nil)
	}
	l.leaveGates()
	l.emit(Event{Kind: EventRefused, Conflict: conflict.Keys, Err: conflict})
}

// Refusal says why TryEach refused a basket (see WithRefusals).
type Refusal struct {
	Basket int       // the basket's index among the call's baskets
	By     RefusedBy // who held what it met
	// Keys are keys it met (without the prefix): those an earlier basket or
	// another lock of the Client took, or the first key found held on each
	// master (a refusal in Redis stops there).
	Keys []string
}

// RefusedBy says who held the keys a refused basket met.
type RefusedBy int

const (
	// ByEarlierBasket: an earlier basket of the same call took one of its
	// keys: no starvation, since put first in the next call it wins.
	ByEarlierBasket RefusedBy = iota + 1
	// ByThisClient: another lock of the Client holds one (settled in the
	// process, without a call).
	ByThisClient
	// ByOtherClient: another Client, in this process or another, holds one
	// or waits for it in Redis.
	ByOtherClient
)

func (b RefusedBy) String() string {
	switch b {
	case ByEarlierBasket:
		return "earlier basket"
	case ByThisClient:
		return "this client"
	case ByOtherClient:
		return "other client"
	}
	return "unknown"
}
