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
// goroutine, started with the first such lock, renews every lock every
// lease/3 in one round (one script call per master for all the locks of an
// acknowledgement setting). Loss is detected apart from it, by each lock's
// expiry timer, so a round stuck on a frozen master cannot delay it.
type watchdog struct {
	c *Client

	mu      sync.Mutex
	locks   map[*Lock]struct{}
	running bool
	stop    chan struct{}
	done    chan struct{}
}

func newWatchdog(c *Client) *watchdog {
	return &watchdog{c: c, locks: make(map[*Lock]struct{}), stop: make(chan struct{}), done: make(chan struct{})}
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
	defer wd.mu.Unlock()
	wd.locks[l] = struct{}{}
	if !wd.running {
		wd.running = true
		go wd.loop()
	}
}

func (wd *watchdog) remove(l *Lock) {
	wd.mu.Lock()
	delete(wd.locks, l)
	wd.mu.Unlock()
}

func (wd *watchdog) watching(l *Lock) bool {
	wd.mu.Lock()
	defer wd.mu.Unlock()
	_, ok := wd.locks[l]
	return ok
}

func (wd *watchdog) loop() {
	defer close(wd.done)
	interval := wd.c.cfg.lease / 3
	ticker := time.NewTicker(interval)
	defer ticker.Stop()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		<-wd.stop
		cancel()
	}()
	for {
		select {
		case <-wd.stop:
			return
		case <-ticker.C:
			roundCtx, cancelRound := context.WithTimeout(ctx, interval)
			wd.renew(roundCtx)
			cancelRound()
		}
	}
}

// renew extends every watched lock once. Locks taken WithReplicas have their
// renewal acknowledged the same way, so that a failover cannot roll a lease
// back further than the holder was told; they go in a batch of their own per
// acknowledgement setting.
func (wd *watchdog) renew(ctx context.Context) {
	wd.mu.Lock()
	batches := make(map[script.Ack][]*Lock)
	for l := range wd.locks {
		batches[l.ack] = append(batches[l.ack], l)
	}
	wd.mu.Unlock()

	var wg sync.WaitGroup
	for ack, locks := range batches {
		wg.Add(1)
		go func() {
			defer wg.Done()
			wd.renewBatch(ctx, locks, ack)
		}()
	}
	wg.Wait()
}

// renewBatch renews locks with one call per master for all of them; a loss
// ends only the lock it belongs to.
func (wd *watchdog) renewBatch(ctx context.Context, locks []*Lock, ack script.Ack) {
	ms := lease.Millis(wd.c.cfg.lease)
	holds := make([]holdKeys, len(locks))
	for i, l := range locks {
		holds[i] = holdKeys{hold: l.hold, lease: ms, keys: l.lockKeys()}
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
			wd.c.emit(Event{Kind: EventRenewed, Owner: l.owner, Keys: l.keys})
		}
	}
}

// close stops renewal and reports every renewed lock lost, since nothing
// keeps it alive any more.
func (wd *watchdog) close() {
	wd.mu.Lock()
	running := wd.running
	locks := wd.locks
	wd.locks = make(map[*Lock]struct{})
	wd.mu.Unlock()
	close(wd.stop)
	if running {
		<-wd.done
	}
	for l := range locks {
		l.lose(fmt.Errorf("%w: %w", ErrLockLost, ErrClosed))
	}
}
