package batchlock

import (
	"context"
	"strings"
	"sync"
	"time"

	"github.com/batchlock/batchlock/internal/lifetime"
)

// Turns keeps the turns of a batch processor's baskets across its TryEach
// calls (WithTurns), so that a basket refused because another Client holds
// or waits for one of its keys is not overtaken, tick after tick, by newer
// baskets of the other processors.
//
// Such a basket, once After calls in a row refused it in Redis and while
// fewer than Baskets baskets hold turns, takes its turn in a call of fewer
// than Backlog baskets (when Backlog is set): the Client locks it in the
// background with a waiting Lock (WithWait(Wait), the call's other
// options), which queues in Redis behind the holders of its keys, as any
// waiting Lock, and is granted each key in turn. A basket is known by
// its keys: baskets of the same keys share one turn, which the first of
// them in a call takes. A later TryEach with the same Turns and a basket of
// the same keys (in any order) hands that Lock out in the basket's place
// once it holds every key, with no call to Redis for it (a Lock lost
// meanwhile, or left with less than half its lease, is released instead,
// and the basket tried afresh next time); until then it refuses the basket
// (Refusal.Turn). Put the refused baskets first in the next call, oldest
// first: the earliest refused in Redis take the turns. The Lock keeps the
// options of the call that gave the turn.
//
// A turn is a waiting Lock, and costs what one costs: while it waits it
// holds the keys before the one it waits for and a place in that key's
// queue, so turns never deadlock, and all of it goes when its wait ends
// (Wait, then the basket is tried afresh), when the Client closes, or with
// the lease and the place's lapse when the process dies. A Lock granted to
// a basket that no call asks for within Place is released. At most Baskets
// turns exist at once: a turn holds keys that newer baskets would have
// taken, so a few, for the oldest baskets, keep them from starving, and the
// rest compete as they come.
//
// A Turns serves one Client: a call of another Client with it is
// ErrInvalid. It is safe for concurrent use; its zero value is ready, with
// After 2, Baskets 1, Wait 5 s, Place 1 s and no Backlog.
type Turns struct {
	// Baskets is how many baskets hold turns at once; default 1.
	Baskets int
	// After is how many calls in a row must refuse a basket in Redis
	// before it takes a turn; default 2. A basket refused once mostly
	// passes in the next call, and a turn costs the other processors: it
	// holds the keys before the one it waits for, and their baskets queue
	// behind it. The count goes with a call that takes the basket, or that
	// leaves it out; calls made at once with one Turns may lose counts.
	After int
	// Wait bounds how long a turn waits for its keys; default 5 s.
	Wait time.Duration
	// Place is how long a basket's Lock waits to be handed out once it
	// holds every key; default 1 s.
	Place time.Duration
	// Backlog, when above 0, is how many baskets make a call a backlog's:
	// such a call starts no turn (it still hands out the Locks of turns
	// that came, and counts refusals), and the basket takes its turn in the
	// first call below Backlog. A processor whose ticks are full has more
	// orders than it takes, and every one of them waits for the backlog to
	// drain; a turn's Lock holds keys others' baskets would take and queues
	// them behind it, which slowed the draining by a fifth, at a quarter
	// more masters' CPU per order, with four processors in the bench. So
	// while every tick is full no turn starts at all, and a basket refused
	// tick after tick by other processors has no place until the backlog
	// is gone: what a turn would buy it is paid by all the orders behind
	// it. Default 0 (or below): every call may start turns.
	Backlog int

	mu       sync.Mutex
	client   *Client // the Client whose baskets they are, from the first call
	byBasket map[string]*turn
	// refusals count, by basket, the calls in a row that refused it in
	// Redis, as the last call left them.
	refusals map[string]int
	wake     chan struct{} // see Ready; made on first use
}

// Turns' defaults.
const (
	defaultTurnAfter   = 2
	defaultTurnBaskets = 1
	defaultTurnWait    = 5 * time.Second
	defaultTurnPlace   = time.Second
)

// turn is one basket's waiting Lock, from its start until a call hands it
// out, or it fails or is given up.
type turn struct {
	// lock is the basket's Lock once taken; nil before, and after a failure.
	lock   *Lock
	handed chan struct{} // closed when a call hands the lock out
	isOver bool          // the lock was handed out, or given up
}

// WithTurns has TryEach give turns to baskets refused in Redis, keep them
// in turns, and hand out the Lock of a basket whose turn came (see Turns).
// Ignored by Lock, TryLock and Do. Default: no turns, a refused basket
// keeps no place.
func WithTurns(turns *Turns) LockOption {
	return lockOptionFunc(func(c *lockConfig) { c.turns = turns })
}

// Ready receives once a turn's Lock holds every key, for a processor that
// waits for work between its calls to call again at once: the Lock waits
// for that call, holding its keys. A receive may find the Lock handed out
// or given up already.
func (t *Turns) Ready() <-chan struct{} {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.wakeLocked()
}

// wakeLocked returns the channel Ready receives on, made on first use; t.mu
// is held.
func (t *Turns) wakeLocked() chan struct{} {
	if t.wake == nil {
		t.wake = make(chan struct{}, 1)
	}
	return t.wake
}

// bind makes the turns c's, unless they are another Client's.
func (t *Turns) bind(c *Client) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.client == nil {
		t.client = c
	}
	if t.client != c {
		return invalid("turns of another Client: a Turns serves one Client")
	}
	return nil
}

// basketID names a basket by its keys, whatever their order and repeats.
func basketID(sorted []string) string {
	return strings.Join(sorted, "\x00")
}

// of returns the turn of the basket named id, nil when it has none, and
// whether it holds its Lock, to hand out.
func (t *Turns) of(id string) (tn *turn, ready bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	tn = t.byBasket[id]
	return tn, tn != nil && tn.lock != nil && !tn.isOver
}

// any reports whether some basket holds a turn.
func (t *Turns) any() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.byBasket) > 0
}

// handOut hands out the Lock of the basket named id, unless it was given
// up meanwhile, and forgets the turn.
func (t *Turns) handOut(id string, tn *turn) *Lock {
	t.mu.Lock()
	defer t.mu.Unlock()
	if tn.isOver || tn.lock == nil {
		return nil
	}
	tn.isOver = true
	close(tn.handed)
	delete(t.byBasket, id)
	return tn.lock
}

// counts returns the refusals counted by the last call, and how many make
// a turn.
func (t *Turns) counts() (map[string]int, int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.refusals, positiveOr(t.After, defaultTurnAfter)
}

// counted keeps the refusals counted by a call, for the next.
func (t *Turns) counted(refusals map[string]int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.refusals = refusals
}

// room returns how many more baskets may take a turn in a call of baskets
// baskets.
func (t *Turns) room(baskets int) int {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.Backlog > 0 && baskets >= t.Backlog {
		return 0
	}
	return max(positiveOr(t.Baskets, defaultTurnBaskets)-len(t.byBasket), 0)
}

// start gives the basket named id its turn: c locks exclusive and shared
// with lc on ctx's values, waiting for them, and keeps the Lock until a
// call hands it out or Place passes. It reports false when the Client is
// closing.
func (t *Turns) start(c *Client, ctx context.Context, id string, exclusive, shared []string, lc lockConfig) bool {
	if !c.calls.Enter(1) {
		return false
	}
	tn := &turn{handed: make(chan struct{})}
	t.mu.Lock()
	if t.byBasket == nil {
		t.byBasket = map[string]*turn{}
	}
	t.byBasket[id] = tn
	t.mu.Unlock()
	lc.shared, lc.refusals, lc.turns = shared, nil, nil
	lc.wait, lc.waitSet = positiveOr(t.Wait, defaultTurnWait), true
	go func() {
		defer c.calls.Leave()
		l, err := c.lockWith(context.WithoutCancel(ctx), exclusive, lc, true)
		t.mu.Lock()
		tn.lock = l
		if err != nil && t.byBasket[id] == tn {
			delete(t.byBasket, id) // the basket is tried afresh
		}
		wake := t.wakeLocked()
		t.mu.Unlock()
		if err != nil {
			return
		}
		select {
		case wake <- struct{}{}:
		default: // one is pending already
		}
		timer := time.NewTimer(positiveOr(t.Place, defaultTurnPlace))
		defer timer.Stop()
		select {
		case <-tn.handed:
			return
		case <-c.closing.Done():
			return // Close releases it
		case <-timer.C:
		}
		if t.giveUp(id, tn) {
			uctx, cancel := lifetime.Detached(context.Background())
			defer cancel()
			_ = l.Unlock(uctx)
		}
	}()
	return true
}

// giveUp forgets tn, whose Lock no call asked for in time, unless a call
// handed it out meanwhile; it reports whether the Lock is to be released.
func (t *Turns) giveUp(id string, tn *turn) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if tn.isOver {
		return false
	}
	tn.isOver = true
	if t.byBasket[id] == tn {
		delete(t.byBasket, id)
	}
	return true
}

// positiveOr returns v, or def when v is not above 0: a Turns setting or
// its default.
func positiveOr[T ~int | ~int64](v, def T) T {
	if v > 0 {
		return v
	}
	return def
}
