package batchlock

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/batchlock/batchlock/internal/gates"
	"github.com/batchlock/batchlock/internal/handoff"
	"github.com/batchlock/batchlock/internal/lifetime"
	"github.com/batchlock/batchlock/internal/owner"
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
	// processing counts what the Client's Processors did and keep (see
	// Stats).
	processing processing
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
	// calls counts calls in flight and the releases they left running.
	calls lifetime.Calls
	// closed is closed when the first Close has returned, for the others
	// to wait for.
	closed chan struct{}
}

// New returns a Client that locks keys through rdb: a *redis.ClusterClient
// (best made with ClusterOptions), or a *redis.Client for a single node; a
// *redis.Ring is refused. rdb stays the caller's: Close does not close it.
// Redis 7.0 or newer is required.
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
	c.closed = make(chan struct{})
	return c, nil
}

// Close ends the Client: calls in flight and every later call fail with
// ErrClosed. Every lock it handed out still held ends (Err wraps ErrLockLost
// and ErrClosed: its holder must stop) and is released, told as
// EventReleased. Close waits for those releases and rollbacks (each at most
// 5s), returns their errors, and leaves no goroutine; a later Close returns
// nil once the first has returned.
func (c *Client) Close() error {
	// Every lock held now, and none after: a call that would hand one out
	// from now on rolls it back instead. One lost from now on, whose own
	// release may not start (see endLetGo), is released here.
	held := c.stopHolding()
	if !c.calls.Close() {
		<-c.closed
		return nil
	}
	defer close(c.closed)
	c.stopCalls(ErrClosed)
	c.calls.Wait()
	shares := make([]releasing, len(held))
	ended := make([]bool, len(held))
	for i, l := range held {
		ended[i] = l.end(endClosed, fmt.Errorf("%w: %w", ErrLockLost, inner(ErrClosed)))
		shares[i].l = l
	}
	var errs []error
	for i, err := range c.release(context.Background(), lettingGo, shares) {
		if err != nil {
			err = fmt.Errorf("batchlock: close: releasing %s: %w", describeKeys(held[i].sortedKeys()), inner(err))
			errs = append(errs, err)
		}
		if ended[i] {
			held[i].emit(Event{Kind: EventReleased, Duration: time.Since(held[i].acquiredAt), Err: err})
		}
	}
	c.watchdog.close()
	for _, err := range []error{c.waiters.Close(), c.runner.Close()} {
		if err != nil {
			errs = append(errs, fmt.Errorf("batchlock: close: %w", err))
		}
	}
	return errors.Join(errs...)
}

// stopHolding returns the locks handed out and not ended yet, and makes
// hold refuse every later one.
func (c *Client) stopHolding() []*Lock {
	c.heldMu.Lock()
	defer c.heldMu.Unlock()
	c.heldClosed = true
	return slices.Collect(maps.Keys(c.held))
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

// route runs b through the Client's one routing loop, and says what its
// parts met in the library's words. A single-node client whose server is a
// cluster node is bad input, said at once, not a slot on the move to wait
// for.
func (c *Client) route(ctx context.Context, b routing.Batch) []routing.Result {
	results := c.runner.Route(ctx, b)
	for i := range results {
		if e, ok := results[i].Err.(*routing.Error); ok {
			results[i].Err = described(e)
		}
		if errors.Is(results[i].Err, routing.ErrClusterNode) {
			results[i].Err = fmt.Errorf("%w: %w", ErrInvalid, inner(results[i].Err))
		}
	}
	return results
}

// ContextWithOwner returns a context whose Lock, TryLock and Do calls use
// owner as their owner id unless WithOwner says otherwise. Do passes such a
// context to its function, so that a lock taken inside it on the same keys is
// reentrant rather than a deadlock with itself.
func ContextWithOwner(ctx context.Context, id string) context.Context {
	return owner.NewContext(ctx, id)
}

// newOwner is an owner id of the Client's own: "host:pid:", so that tools
// show which process holds a key, then 8 random bytes, enough that no two
// such ids meet.
func (c *Client) newOwner() string { return owner.Process() + wire.RandomID(8) }

// keep keeps locks, every key of them taken, as the Client's, unless their
// call's caller gave up (a context cancelled rather than past its deadline
// is noticed only once replies arrive) or Close began: then the caller
// rolls them back.
func (c *Client) keep(ctx context.Context, locks ...*Lock) error {
	if ctx.Err() != nil && c.closing.Err() == nil {
		return ended(ctx)
	}
	if !c.hold(locks...) {
		return ErrClosed
	}
	for _, l := range locks {
		c.watchdog.add(l)
	}
	return nil
}

// handOut starts l's life with its caller: its hold counted from now, capped
// by WithMaxHold (the call's, else the Client's).
func (c *Client) handOut(l *Lock, lc lockConfig, start time.Time) {
	l.acquiredAt = time.Now()
	if capped := lc.maxHold; capped.set || c.cfg.maxHold.set {
		if !capped.set {
			capped = c.cfg.maxHold
		}
		l.capHold(capped.d)
	}
	l.emit(Event{Kind: EventAcquired, Duration: l.acquiredAt.Sub(start)})
}

// hold registers locks about to be handed out, until each ends (see
// Lock.end); one that ended already is not registered. Once Close
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

// Stats is what a Client did and holds, for metrics and tests.
type Stats struct {
	// The script calls the Client sent, by script, each attempt counted,
	// not locks: an uncontended lock and unlock costs one acquire and one
	// release per master (per 1024 keys), a TryEach one acquire per master
	// for all its baskets. Acquires also counts a waiting call's refused
	// attempts, Releases the give-backs and rollbacks, Extends the
	// watchdog's rounds (per master), Extend and lease restarts.
	Acquires, Releases, Extends, ForceUnlocks uint64
	// LocalWaits counts the waits of Lock calls at the gates: for a key
	// another lock of the Client held or was taking.
	LocalWaits uint64
	// Held counts the locks handed out that have not ended; Waiting the
	// calls taking their keys now; Gated the keys whose gate a lock holds or
	// a call waits for (zero once every lock ended).
	Held, Waiting, Gated int
	// Of the Client's open Processors: Pending the baskets added and not
	// taken yet (the backlog), Queued those of them waiting in their keys'
	// queues; of all its Processors: Ticks the ticks handed out, and the baskets ticks refused,
	// each time, by why: an earlier basket of the tick took a key, another
	// lock of the Client holds one, Redis refused it.
	Pending, Queued                                   int
	Ticks                                             uint64
	RefusedByEarlier, RefusedByClient, RefusedInRedis uint64
}

// processing is what the Client's Processors did and keep (see Stats).
type processing struct {
	ticks   atomic.Uint64
	refused [refusedBad + 1]atomic.Uint64 // by cause
	mu      sync.Mutex
	// open has each open Processor's backlog: its pending baskets and,
	// of those, the queued ones.
	open map[any]func() (pending, queued int)
}

// opened adds a Processor's backlog, closed takes it away.
func (pr *processing) opened(p any, backlog func() (pending, queued int)) {
	pr.mu.Lock()
	defer pr.mu.Unlock()
	if pr.open == nil {
		pr.open = map[any]func() (int, int){}
	}
	pr.open[p] = backlog
}

func (pr *processing) closed(p any) {
	pr.mu.Lock()
	defer pr.mu.Unlock()
	delete(pr.open, p)
}

func (pr *processing) backlog() (pending, queued int) {
	pr.mu.Lock()
	defer pr.mu.Unlock()
	for _, b := range pr.open {
		p, q := b()
		pending, queued = pending+p, queued+q
	}
	return pending, queued
}

// Stats returns what the Client did and holds so far.
func (c *Client) Stats() Stats {
	c.heldMu.Lock()
	held := len(c.held)
	c.heldMu.Unlock()
	pending, queued := c.processing.backlog()
	return Stats{
		Pending:          pending,
		Queued:           queued,
		Ticks:            c.processing.ticks.Load(),
		RefusedByEarlier: c.processing.refused[refusedEarlier].Load(),
		RefusedByClient:  c.processing.refused[refusedGate].Load(),
		RefusedInRedis:   c.processing.refused[refusedHeld].Load(),
		Acquires:         c.sent.acquires.Load(),
		Releases:         c.sent.releases.Load(),
		Extends:          c.sent.extends.Load(),
		ForceUnlocks:     c.sent.forces.Load(),
		LocalWaits:       c.localWaits.Load(),
		Held:             held,
		Waiting:          int(c.taking.Load()),
		Gated:            c.gates.Count(),
	}
}
