package batchlock

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/batchlock/batchlock/internal/lease"
	"github.com/batchlock/batchlock/internal/routing"
	"github.com/batchlock/batchlock/internal/wire"
)

// Renewal: the watchdog, which keeps a Client's renewed locks alive, and the
// extension calls it, Extend and a waiting call make.

// watchdog renews the leases of a Client's locks taken without WithTTL: one
// goroutine, started with the first such lock, renews each lock once a third
// of its lease has passed since the lease was last confirmed, so that a lock
// handed out with just over half its lease left is renewed at once. Locks
// due within a sixth of a lease of each other share a round: one script call
// per master for all the locks of an acknowledgement setting. A round runs
// on its own, so that the next one is not held up by a master slow to
// answer, and each lock is confirmed as soon as the masters of its keys have
// answered; a lock is in one round at a time. Loss is detected apart from
// it, by each lock's expiry timer, so a round stuck on a frozen master
// cannot delay it.
type watchdog struct {
	c *Client

	mu      sync.Mutex
	due     map[*Lock]renewal // the watched locks
	running bool
	poke    chan struct{} // a lock was added, or a round ended: the next due time may have changed

	ctx    context.Context // ends with close
	stop   context.CancelFunc
	done   chan struct{}
	rounds sync.WaitGroup
}

// renewal is when a watched lock is renewed next, and whether a round is
// renewing it now.
type renewal struct {
	at   time.Time
	busy bool
}

func newWatchdog(c *Client) *watchdog {
	ctx, stop := context.WithCancel(context.Background())
	return &watchdog{c: c, due: make(map[*Lock]renewal), poke: make(chan struct{}, 1),
		ctx: ctx, stop: stop, done: make(chan struct{})}
}

// add starts watching a freshly taken lock: its expiry timer, and for a
// renewed lock, renewal. It is called from a call the Client counts, so Close
// has not stopped the watchdog yet.
func (wd *watchdog) add(l *Lock) {
	l.arm()
	if !l.renew {
		return
	}
	wd.mu.Lock()
	if l.Err() != nil {
		wd.mu.Unlock()
		return
	}
	wd.due[l] = renewal{at: wd.dueOf(l)}
	if !wd.running {
		wd.running = true
		go wd.loop()
	}
	wd.mu.Unlock()
	wd.wake()
}

func (wd *watchdog) wake() {
	select {
	case wd.poke <- struct{}{}:
	default:
	}
}

// dueOf is when l is renewed next (see validity.renewAt).
func (wd *watchdog) dueOf(l *Lock) time.Time { return l.validity().renewAt(wd.c.cfg.lease) }

func (wd *watchdog) remove(l *Lock) {
	wd.mu.Lock()
	delete(wd.due, l)
	wd.mu.Unlock()
}

func (wd *watchdog) watching(l *Lock) bool {
	wd.mu.Lock()
	defer wd.mu.Unlock()
	_, ok := wd.due[l]
	return ok
}

func (wd *watchdog) loop() {
	defer close(wd.done)
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		next, ok := wd.next()
		if !ok {
			next = time.Now().Add(time.Hour)
		}
		timer.Reset(time.Until(next))
		select {
		case <-wd.ctx.Done():
			wd.rounds.Wait()
			return
		case <-wd.poke:
			continue
		case <-timer.C:
		}
		wd.startRound()
	}
}

// next returns the earliest due time of the watched locks not in a round.
func (wd *watchdog) next() (time.Time, bool) {
	wd.mu.Lock()
	defer wd.mu.Unlock()
	var first time.Time
	for _, r := range wd.due {
		if !r.busy && (first.IsZero() || r.at.Before(first)) {
			first = r.at
		}
	}
	return first, !first.IsZero()
}

// startRound starts renewing the locks due within a sixth of a lease that no
// round is renewing. Locks taken WithReplicas have their renewal
// acknowledged the same way, so that a failover cannot roll a lease back
// further than the holder was told; they go in a batch of their own per
// acknowledgement setting.
func (wd *watchdog) startRound() {
	horizon := time.Now().Add(lease.RoundHorizon(wd.c.cfg.lease))
	wd.mu.Lock()
	batches := make(map[routing.Ack][]renewing)
	for l, r := range wd.due {
		if !r.busy && !r.at.After(horizon) {
			batches[l.ack] = append(batches[l.ack], wd.renewingOf(l, horizon))
			wd.due[l] = renewal{at: r.at, busy: true}
		}
	}
	wd.mu.Unlock()
	for ack, locks := range batches {
		wd.rounds.Go(func() {
			ctx, cancel := context.WithTimeout(wd.ctx, lease.RenewalPeriod(wd.c.cfg.lease))
			defer cancel()
			wd.renewBatch(ctx, locks, ack)
		})
	}
}

// renewing is a lock a round renews, and the groups of it that it renews:
// all of them, or only those granted to it and not renewed yet when the
// rest is not due.
type renewing struct {
	l      *Lock
	groups []group
}

// renewingOf is what a round that renews the locks due before horizon renews
// of l.
func (wd *watchdog) renewingOf(l *Lock, horizon time.Time) renewing {
	v := l.validity()
	if v.granted != nil && !v.until.IsZero() && v.leaseRenewal(wd.c.cfg.lease).After(horizon) {
		return renewing{l: l, groups: v.granted}
	}
	return renewing{l: l, groups: l.groups}
}

// renewBatch renews locks with one call per master for all of them; a loss
// ends only the lock it belongs to. A lock whose renewal could not be
// confirmed is tried again a twelfth of a lease later (a twelfth of a grant
// for a lock with keys granted), while its expiry timer counts down.
func (wd *watchdog) renewBatch(ctx context.Context, locks []renewing, ack routing.Ack) {
	ms := lease.Millis(wd.c.cfg.lease)
	holds := make([]holdKeys, len(locks))
	for i, r := range locks {
		holds[i] = holdKeys{hold: r.l.hold, lease: ms, groups: r.groups}
	}
	start := time.Now()
	wd.c.extendAll(ctx, holds, ack, func(i int, e extension) {
		l, all := locks[i].l, len(locks[i].groups) == len(locks[i].l.groups)
		switch {
		case len(e.lost) > 0:
			// A lock removed meanwhile is being unlocked: its keys were
			// released by its owner, not lost.
			if wd.watching(l) {
				l.end(endLetGo, fmt.Errorf("%w: %d of %d keys no longer held, such as %q", ErrLockLost, len(e.lost), len(l.keys), wd.c.names.UserKeys(e.lost)[0]))
			}
			wd.remove(l)
		case e.err == nil:
			left := time.Until(l.ValidUntil())
			if l.renewed(start.Add(wd.c.cfg.lease), all) {
				wd.reschedule(l, wd.dueOf(l))
				l.emit(Event{Kind: EventRenewed, Duration: left})
			}
		default:
			retry := lease.RetryAfter(wd.c.cfg.lease)
			if l.validity().granted != nil {
				retry = min(retry, lease.RetryAfter(grantTime))
			}
			wd.reschedule(l, time.Now().Add(retry))
		}
	})
}

// reschedule sets when l is renewed next, out of its round, unless it is no
// longer watched.
func (wd *watchdog) reschedule(l *Lock, at time.Time) {
	wd.mu.Lock()
	if _, ok := wd.due[l]; ok {
		wd.due[l] = renewal{at: at}
	}
	wd.mu.Unlock()
	wd.wake()
}

// close stops renewal and reports every renewed lock lost, since nothing
// keeps it alive any more.
func (wd *watchdog) close() {
	wd.mu.Lock()
	running := wd.running
	locks := wd.due
	wd.due = make(map[*Lock]renewal)
	wd.mu.Unlock()
	wd.stop()
	if running {
		<-wd.done
	}
	for l := range locks {
		l.end(endLost, fmt.Errorf("%w: %w", ErrLockLost, inner(ErrClosed)))
	}
}

// holdKeys is one lock's share of an extension: its hold, the lease and its
// groups.
type holdKeys struct {
	hold   string
	lease  int64 // ms
	groups []group
}

// extension is what an extension did to one lock: the lock keys that no
// longer carry its hold, and the first error among its keys (or
// ErrNoReplicas).
type extension struct {
	lost []string
	err  error
}

// extend makes the lease of l's hold on groups run at least ttl from now, and
// returns the lock keys that no longer carry it. With WithReplicas, the
// extension counts only once acknowledged: otherwise the error wraps
// ErrNoReplicas.
func (c *Client) extend(ctx context.Context, l *Lock, groups []group, ttl time.Duration) ([]string, error) {
	var out extension
	c.extendAll(ctx, []holdKeys{{hold: l.hold, lease: lease.Millis(ttl), groups: groups}}, l.ack,
		func(_ int, e extension) { out = e })
	return out.lost, out.err
}

// extendAll extends the holds of several locks (the watchdog's round): the
// keys each master serves, for all the locks, go in one call per master (at
// most routing.MaxCallKeys keys each), and the masters are asked apart, so
// that done is called for each lock as soon as the masters of its keys have
// answered, not held up by a master that is slow for others. Locks of one
// owner may share keys: every hold is extended on its own. It returns once
// every lock is done.
func (c *Client) extendAll(ctx context.Context, locks []holdKeys, ack routing.Ack, done func(lock int, e extension)) {
	var parts []routing.Part
	var lockOf []int                   // the lock of parts[i]
	pending := make([]int, len(locks)) // parts of each lock not settled yet
	for i, h := range locks {
		for _, g := range h.groups {
			for _, k := range g.keys {
				parts = append(parts, routing.Part{Slot: g.slot, Route: k, Keys: 1})
				lockOf = append(lockOf, i)
				pending[i]++
			}
		}
	}
	for i := range locks {
		if pending[i] == 0 {
			done(i, extension{})
		}
	}
	if len(parts) == 0 {
		return
	}
	results := make([]extension, len(locks))
	var mu sync.Mutex // guards results and pending
	fail := func(i int, err error) {
		if results[i].err == nil {
			results[i].err = err
		}
	}
	c.route(ctx, routing.Batch{
		Step:   "extend",
		Sent:   &c.sent.extends,
		Script: wire.ExtendScript,
		Parts:  parts,
		Follow: true,
		Ack:    ack,
		Args: func(in []int) []any {
			args := make([]any, 0, len(in)+3*len(locks))
			for _, seg := range segmentsBy(lockOf, in) {
				h := locks[lockOf[seg[0]]]
				args = wire.AppendExtend(args, h.hold, h.lease, len(seg))
				for _, j := range seg {
					args = append(args, parts[j].Route)
				}
			}
			return args
		},
		Read: func(cl *routing.Call, in []int) ([]int, error) {
			segs := segmentsBy(lockOf, in)
			lists, err := wire.DecodeKeyLists(cl.Reply.Val(), len(segs)) // nil: every hold was extended
			if err != nil {
				return nil, cl.Describe(ctx, err)
			}
			mu.Lock()
			defer mu.Unlock()
			var again []int
			for n, seg := range segs {
				i := lockOf[seg[0]]
				if lists != nil {
					results[i].lost = append(results[i].lost, lists[n].Lost...)
					again = append(again, partsNamed(parts, seg, lists[n].Elsewhere)...)
				}
				if !ack.Acknowledged(cl) {
					fail(i, unacknowledged(cl, ack))
				}
			}
			return again, nil
		},
		Settled: func(at []int, routed []routing.Result) {
			var ready []int
			mu.Lock()
			for _, j := range at {
				i := lockOf[j]
				if routed[j].Err != nil {
					fail(i, routed[j].Err)
				}
				if pending[i]--; pending[i] == 0 {
					ready = append(ready, i)
				}
			}
			mu.Unlock()
			for _, i := range ready {
				done(i, results[i])
			}
		},
	})
}
