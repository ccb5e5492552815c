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

// renewalOf is when a lock whose lease is confirmed until validUntil is
// renewed: a third of a lease after that lease began.
func (wd *watchdog) renewalOf(validUntil time.Time) time.Time {
	return validUntil.Add(-wd.c.cfg.lease + lease.RenewalPeriod(wd.c.cfg.lease))
}

// dueOf is when l is renewed next: a third of a lease after its lease began,
// and, while it has keys granted and not renewed yet (see
// waiting.takeGranted), half their grant before it runs out.
func (wd *watchdog) dueOf(l *Lock) time.Time {
	var at time.Time
	if confirmed := l.confirmedUntil(); !confirmed.IsZero() {
		at = wd.renewalOf(confirmed)
	}
	if granted, until := l.grant(); granted != nil {
		if g := grantRenewal(until); at.IsZero() || g.Before(at) {
			at = g
		}
	}
	return at
}

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
	granted, _ := l.grant()
	if confirmed := l.confirmedUntil(); granted != nil && !confirmed.IsZero() && wd.renewalOf(confirmed).After(horizon) {
		return renewing{l: l, groups: granted}
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
	wd.c.extendAll(ctx, holds, ack, func(i int, e extended) {
		l, all := locks[i].l, len(locks[i].groups) == len(locks[i].l.groups)
		switch {
		case len(e.lost) > 0:
			// A lock removed meanwhile is being unlocked: its keys were
			// released by its owner, not lost.
			if wd.watching(l) {
				l.letGo(fmt.Errorf("%w: %d of %d keys no longer held, such as %q", ErrLockLost, len(e.lost), len(l.keys), wd.c.names.UserKeys(e.lost)[0]))
			}
			wd.remove(l)
		case e.err == nil:
			left := time.Until(l.ValidUntil())
			if all {
				l.extended(start.Add(wd.c.cfg.lease))
			} else {
				l.confirmGrant(start.Add(wd.c.cfg.lease))
			}
			wd.reschedule(l, wd.dueOf(l))
			l.emit(Event{Kind: EventRenewed, Duration: left})
		default:
			retry := lease.RetryAfter(wd.c.cfg.lease)
			if granted, _ := l.grant(); granted != nil {
				retry = min(retry, lease.RetryAfter(wire.GrantTime))
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
		l.lose(fmt.Errorf("%w: %w", ErrLockLost, inner(ErrClosed)))
	}
}
