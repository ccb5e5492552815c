package batchlock

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/batchlock/batchlock/internal/lease"
	"github.com/batchlock/batchlock/internal/script"
)

// watchdog renews the leases of a Client's locks taken without WithTTL: one
// goroutine, started with the first such lock, renews each lock once a third
// of its lease has passed since the lease was last confirmed, so that a lock
// handed out with just over half its lease left is renewed at once. Locks
// due within a sixth of a lease of each other share a round: one script call
// per master for all the locks of an acknowledgement setting. Loss is
// detected apart from it, by each lock's expiry timer, so a round stuck on a
// frozen master cannot delay it.
type watchdog struct {
	c *Client

	mu      sync.Mutex
	due     map[*Lock]time.Time // when each watched lock is next renewed
	running bool
	poke    chan struct{} // a lock was added: its due time may come first

	ctx  context.Context // ends with close
	stop context.CancelFunc
	done chan struct{}
}

func newWatchdog(c *Client) *watchdog {
	ctx, stop := context.WithCancel(context.Background())
	return &watchdog{c: c, due: make(map[*Lock]time.Time), poke: make(chan struct{}, 1),
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
	wd.due[l] = wd.renewal(l.ValidUntil())
	if !wd.running {
		wd.running = true
		go wd.loop()
	}
	wd.mu.Unlock()
	select {
	case wd.poke <- struct{}{}:
	default:
	}
}

// renewal is when a lock whose lease is confirmed until validUntil is
// renewed: a third of a lease after that lease began.
func (wd *watchdog) renewal(validUntil time.Time) time.Time {
	return validUntil.Add(-2 * wd.c.cfg.lease / 3)
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
			return
		case <-wd.poke:
			continue
		case <-timer.C:
		}
		roundCtx, cancel := context.WithTimeout(wd.ctx, wd.c.cfg.lease/3)
		wd.renew(roundCtx)
		cancel()
	}
}

// next returns the earliest due time of the watched locks.
func (wd *watchdog) next() (time.Time, bool) {
	wd.mu.Lock()
	defer wd.mu.Unlock()
	var first time.Time
	for _, due := range wd.due {
		if first.IsZero() || due.Before(first) {
			first = due
		}
	}
	return first, !first.IsZero()
}

// renew extends the locks due within a sixth of a lease. Locks taken
// WithReplicas have their renewal acknowledged the same way, so that a
// failover cannot roll a lease back further than the holder was told; they
// go in a batch of their own per acknowledgement setting.
func (wd *watchdog) renew(ctx context.Context) {
	horizon := time.Now().Add(wd.c.cfg.lease / 6)
	wd.mu.Lock()
	batches := make(map[script.Ack][]*Lock)
	for l, due := range wd.due {
		if !due.After(horizon) {
			batches[l.ack] = append(batches[l.ack], l)
		}
	}
	wd.mu.Unlock()

	var wg sync.WaitGroup
	for ack, locks := range batches {
		wg.Go(func() { wd.renewBatch(ctx, locks, ack) })
	}
	wg.Wait()
}

// renewBatch renews locks with one call per master for all of them; a loss
// ends only the lock it belongs to. A lock whose renewal could not be
// confirmed is tried again a twelfth of a lease later, while its expiry
// timer counts down.
func (wd *watchdog) renewBatch(ctx context.Context, locks []*Lock, ack script.Ack) {
	ms := lease.Millis(wd.c.cfg.lease)
	holds := make([]holdKeys, len(locks))
	for i, l := range locks {
		holds[i] = holdKeys{hold: l.hold, lease: ms, groups: l.groups}
	}
	start := time.Now()
	lost, errs := wd.c.extendAll(ctx, holds, ack)
	for i, l := range locks {
		switch {
		case len(lost[i]) > 0 && wd.watching(l):
			// A lock removed meanwhile is being unlocked: its keys were
			// released by its owner, not lost.
			l.lose(fmt.Errorf("%w: %d of %d keys no longer held, such as %q", ErrLockLost, len(lost[i]), len(l.keys), wd.c.userKeys(lost[i])[0]))
		case errs[i] == nil:
			l.confirm(start.Add(wd.c.cfg.lease))
			wd.reschedule(l, wd.renewal(start.Add(wd.c.cfg.lease)))
			wd.c.emit(Event{Kind: EventRenewed, Owner: l.owner, Keys: l.keys})
		default:
			wd.reschedule(l, time.Now().Add(wd.c.cfg.lease/12))
		}
	}
}

// reschedule sets when l is renewed next, unless it is no longer watched.
func (wd *watchdog) reschedule(l *Lock, due time.Time) {
	wd.mu.Lock()
	defer wd.mu.Unlock()
	if _, ok := wd.due[l]; ok {
		wd.due[l] = due
	}
}

// close stops renewal and reports every renewed lock lost, since nothing
// keeps it alive any more.
func (wd *watchdog) close() {
	wd.mu.Lock()
	running := wd.running
	locks := wd.due
	wd.due = make(map[*Lock]time.Time)
	wd.mu.Unlock()
	wd.stop()
	if running {
		<-wd.done
	}
	for l := range locks {
		l.lose(fmt.Errorf("%w: %w", ErrLockLost, ErrClosed))
	}
}
