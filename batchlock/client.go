package batchlock

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/batchlock/batchlock/internal/gates"
	"github.com/batchlock/batchlock/internal/handoff"
	"github.com/batchlock/batchlock/internal/lifetime"
	"github.com/batchlock/batchlock/internal/routing"
	"github.com/batchlock/batchlock/internal/wire"
)

// Client takes batch locks through one go-redis client. It is safe for
// concurrent use. Close it when done: it owns a watchdog goroutine and the
// pub/sub connections of waiters.
type Client struct {
	rdb        redis.UniversalClient
	deployment deployment
	cfg        config
	runner     *routing.Runner

	watchdog *watchdog
	waiters  *handoff.Hub
	gates    *gates.Table

	// names makes every key name under the prefix.
	names wire.Keyspace
	// fences are the names of the slots' fencing counters, by slot, made
	// on first use.
	fences []atomic.Pointer[string]

	// sent counts the script calls sent, by script (see Stats).
	sent struct{ acquires, releases, extends, forces atomic.Uint64 }
	// taking counts the lock calls taking their keys (see Stats).
	taking atomic.Int64
	// localWaits counts the calls that waited at a gate (see Stats).
	localWaits atomic.Uint64
	// started is when the Client was made; lastRefusal is when a call was
	// last refused in Redis, as nanoseconds after started plus one, zero
	// before the first (see contended).
	started     time.Time
	lastRefusal atomic.Int64

	// held are the locks handed out and not ended yet, so that ForceUnlock
	// ends at once the ones it takes keys from, and Close the rest; none is
	// added once heldClosed.
	heldMu     sync.Mutex
	held       map[*Lock]struct{}
	heldClosed bool

	// closing ends, with ErrClosed as its cause, when Close is called; the
	// contexts of calls in flight end with it.
	closing   context.Context
	stopCalls context.CancelCauseFunc
	// calls counts calls in flight and the rollbacks they left running.
	calls lifetime.Calls
}

// New returns a Client that locks keys through rdb: a *redis.ClusterClient,
// or a *redis.Client for a single node (or a Sentinel failover client).
// A *redis.Ring is refused: it spreads keys by its own hashing, with no
// atomicity across them. rdb stays the caller's; Close does not close it.
//
// Redis 7.0 or newer is required (sharded pub/sub).
func New(rdb redis.UniversalClient, opts ...Option) (*Client, error) {
	d, err := newDeployment(rdb)
	if err != nil {
		return nil, err
	}
	c := &Client{rdb: rdb, deployment: d, cfg: defaultConfig(), held: make(map[*Lock]struct{}), started: time.Now()}
	for _, o := range opts {
		o.apply(&c.cfg)
	}
	if err := c.cfg.validate(); err != nil {
		return nil, err
	}
	c.names = wire.Keyspace(c.cfg.prefix)
	c.fences = make([]atomic.Pointer[string], d.slots())
	c.runner = d.runner()
	c.watchdog = newWatchdog(c)
	c.waiters = handoff.New(handoff.Config{Disabled: !c.cfg.pubsub, Slot: c.deployment.slot,
		PubSub: c.deployment.pubSub, Reload: c.deployment.reloadSlots})
	c.gates = gates.New()
	c.closing, c.stopCalls = context.WithCancelCause(context.Background())
	return c, nil
}

// Close ends the Client: calls in flight fail with ErrClosed and roll back,
// waiting calls return ErrClosed, and every later call fails with ErrClosed.
// Every lock the Client handed out that is still held ends (Done closes, Err
// wraps ErrLockLost and ErrClosed) and is released, all at once, as Unlock
// would release it, so that nothing the Client held outlives it; a later
// Unlock of such a lock returns ErrNotHeld wrapping that cause. Then the
// watchdog and the waiters' pub/sub connections stop. Close waits for the
// rollbacks of failed calls and for those releases (each at most 5s), and
// returns the releases' errors (their keys then go at the end of their
// lease). Close is idempotent; no goroutine of the Client outlives it.
func (c *Client) Close() error {
	// Every lock held now, and none after: a call that would hand one out
	// from now on rolls it back instead. One lost from now on, whose own
	// release may not start (see letGo), is released here.
	held := c.stopHolding()
	if !c.calls.Close() {
		return nil
	}
	c.stopCalls(ErrClosed)
	c.calls.Wait()
	released := c.releaseHeld(held)
	c.watchdog.close()
	return errors.Join(released, c.waiters.Close(), c.runner.Close())
}

// stopHolding returns the locks handed out and not ended yet, and makes
// hold refuse every later one.
func (c *Client) stopHolding() []*Lock {
	c.heldMu.Lock()
	defer c.heldMu.Unlock()
	c.heldClosed = true
	return slices.Collect(maps.Keys(c.held))
}

// releaseHeld ends locks (lost, ErrClosed) unless they ended already, and
// releases what they hold unless an Unlock did, in parallel, each for at
// most rollbackTimeout.
func (c *Client) releaseHeld(locks []*Lock) error {
	slices.SortFunc(locks, func(a, b *Lock) int { return strings.Compare(a.hold, b.hold) })
	locks = slices.CompactFunc(locks, func(a, b *Lock) bool { return a == b })
	errs := make([]error, len(locks))
	var wg sync.WaitGroup
	for i, l := range locks {
		wg.Go(func() {
			l.lose(fmt.Errorf("%w: %w", ErrLockLost, inner(ErrClosed)))
			if err := l.releaseLost(context.Background()); err != nil {
				errs[i] = fmt.Errorf("batchlock: close: releasing %s: %w", describeKeys(l.sortedKeys()), inner(err))
			}
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}

// begin registers a call that sends requests, so that Close can end it and
// wait for its clean-up. The context it returns ends with ErrClosed when the
// Client closes; end must be called when the call returns.
func (c *Client) begin(ctx context.Context) (_ context.Context, end func(), _ error) {
	if err := checkContext(ctx); err != nil {
		return nil, nil, err // before counting it: a call that panicked would never leave
	}
	if !c.calls.Enter(1) {
		return nil, nil, ErrClosed
	}
	ctx, cancel := context.WithCancelCause(ctx)
	stop := context.AfterFunc(c.closing, func() { cancel(ErrClosed) })
	return ctx, func() {
		stop()
		cancel(nil)
		c.calls.Leave()
	}, nil
}

// beginTaking begins a call that takes keys (see begin), counted in
// Stats.Waiting until end; a context already done fails it at once.
func (c *Client) beginTaking(ctx context.Context) (_ context.Context, end func(), _ error) {
	if ctx != nil && ctx.Err() != nil {
		return nil, nil, ended(ctx)
	}
	ctx, endCall, err := c.begin(ctx)
	if err != nil {
		return nil, nil, err
	}
	c.taking.Add(1)
	return ctx, func() {
		c.taking.Add(-1)
		endCall()
	}, nil
}

// Stats is what a Client did and holds, for metrics and tests.
type Stats struct {
	// The script calls the Client sent, by script, each attempt counted
	// (a call sent again after a lost reply or a moved slot too), not
	// locks: an uncontended lock and unlock costs one acquire and one
	// release per master (per 1024 keys), a TryEach one acquire per master
	// for all its baskets and an UnlockEach one release per master.
	// Acquires also counts a waiting call's every attempt (each refusal, and
	// the attempts that take the keys after the one waited for); Releases
	// also counts the give-backs of keys taken out of order or of refused
	// baskets, and rollbacks; Extends counts the watchdog's rounds (one per
	// master), Extend, and the restarts of leases as a lock is handed out.
	// So Acquires and Releases differ under contention and faults.
	Acquires, Releases, Extends, ForceUnlocks uint64
	// LocalWaits counts the times a Lock call waited in the process for a
	// key another lock of the Client held or was taking.
	LocalWaits uint64
	// Held counts the locks the Client handed out that have not ended;
	// Waiting the Lock, TryLock and Do calls taking their keys now.
	Held, Waiting int
	// Gated counts the keys whose gate, the in-process level of locking, a
	// lock of the Client holds or a call of it waits for: zero once every
	// lock ended.
	Gated int
}

// Stats returns what the Client did and holds so far.
func (c *Client) Stats() Stats {
	return Stats{
		Acquires:     c.sent.acquires.Load(),
		Releases:     c.sent.releases.Load(),
		Extends:      c.sent.extends.Load(),
		ForceUnlocks: c.sent.forces.Load(),
		LocalWaits:   c.localWaits.Load(),
		Held:         c.heldCount(),
		Waiting:      int(c.taking.Load()),
		Gated:        c.gates.Count(),
	}
}

func (c *Client) heldCount() int {
	c.heldMu.Lock()
	defer c.heldMu.Unlock()
	return len(c.held)
}

// hold registers locks about to be handed out, until each ends (see
// Lock.finish); one that ended already is not registered. Once Close
// began it registers none, and reports false: the locks must be rolled
// back.
func (c *Client) hold(locks ...*Lock) bool {
	c.heldMu.Lock()
	defer c.heldMu.Unlock()
	if c.heldClosed {
		return false
	}
	for _, l := range locks {
		if l.Err() == nil {
			c.held[l] = struct{}{}
		}
	}
	return true
}

func (c *Client) unhold(l *Lock) {
	c.heldMu.Lock()
	delete(c.held, l)
	c.heldMu.Unlock()
}

// holding returns the locks handed out whose hold is one of holds.
func (c *Client) holding(holds map[string]bool) []*Lock {
	c.heldMu.Lock()
	defer c.heldMu.Unlock()
	var out []*Lock
	for l := range c.held {
		if holds[l.hold] {
			out = append(out, l)
		}
	}
	return out
}
