package cluster_test

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

// wallClock follows the host's wall clock against the process's monotonic
// clock. Redis expires keys by its wall clock, while batchlock counts a
// holder's validity on the monotonic one: a step of the wall clock forward
// ends every lease early by as much. That is outside the contract (clocks
// run at the same rate), and no fault of the soak's makes it, but the host
// may. The soak samples the clock throughout, says how far it moved, and
// excuses an overlap of two owners only where the wall clock moved forward
// by at least the overlap after the earlier lease was granted or last
// lengthened and before the later holder began (clockMadeOverlap).
type wallClock struct {
	origin time.Time

	mu sync.Mutex
	// moves are the samples at which the wall clock's lead over the
	// monotonic clock had changed by more than clockResolution since the
	// last one kept, in order; the first is at origin.
	moves []clockSample
	last  time.Time // the latest sample, kept or not
}

// clockSample is the wall clock's lead over the monotonic clock since
// origin (negative when behind) as read at a moment.
type clockSample struct {
	at   time.Time
	lead time.Duration
}

// clockResolution is the smallest change of the lead that is kept: reading
// both clocks at once jitters by a microsecond or less.
const clockResolution = 100 * time.Microsecond

// clockInterval is how often the soak samples the clock: a step is placed
// within that much.
const clockInterval = 20 * time.Millisecond

func newWallClock() *wallClock {
	now := time.Now()
	return &wallClock{origin: now, moves: []clockSample{{at: now}}, last: now}
}

// sample reads both clocks now.
func (w *wallClock) sample() {
	now := time.Now()
	lead := now.Round(0).Sub(w.origin.Round(0)) - now.Sub(w.origin)
	w.mu.Lock()
	defer w.mu.Unlock()
	w.last = now
	if d := lead - w.moves[len(w.moves)-1].lead; d > clockResolution || d < -clockResolution {
		w.moves = append(w.moves, clockSample{at: now, lead: lead})
	}
}

// follow samples the clock every clockInterval until the returned stop is
// called; stop returns once sampling has ended.
func (w *wallClock) follow() (stop func()) {
	done, ended := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(ended)
		tick := time.NewTicker(clockInterval)
		defer tick.Stop()
		for {
			select {
			case <-done:
				w.sample()
				return
			case <-tick.C:
				w.sample()
			}
		}
	}()
	return func() {
		close(done)
		<-ended
	}
}

// leadAt is the lead as of the last kept sample at or before t.
func (w *wallClock) leadAt(t time.Time) time.Duration {
	lead := w.moves[0].lead
	for _, m := range w.moves {
		if m.at.After(t) {
			break
		}
		lead = m.lead
	}
	return lead
}

// forwardBetween is how far the wall clock moved forward against the
// monotonic clock between from and to: the largest lead sampled up to a
// sample interval after to, less the lead at from.
func (w *wallClock) forwardBetween(from, to time.Time) time.Duration {
	w.mu.Lock()
	defer w.mu.Unlock()
	base := w.leadAt(from)
	most := base
	for _, m := range w.moves {
		if m.at.After(from) && !m.at.After(to.Add(clockInterval)) {
			most = max(most, m.lead)
		}
	}
	return most - base
}

func (w *wallClock) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	var largest clockSample
	for i := 1; i < len(w.moves); i++ {
		step := w.moves[i].lead - w.moves[i-1].lead
		if step.Abs() > largest.lead.Abs() {
			largest = clockSample{at: w.moves[i].at, lead: step}
		}
	}
	end := w.moves[len(w.moves)-1].lead
	if largest.lead == 0 {
		return fmt.Sprintf("the wall clock kept to the monotonic clock within %v over %v", clockResolution, w.last.Sub(w.origin).Round(time.Second))
	}
	return fmt.Sprintf("the wall clock moved %v against the monotonic clock over %v, in %d moves of over %v; the largest, %v, at %s",
		end, w.last.Sub(w.origin).Round(time.Second), len(w.moves)-1, clockResolution, largest.lead, largest.at.Format("15:04:05.000"))
}

func TestWallClockForwardBetween(t *testing.T) {
	t0 := time.Now()
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	w := &wallClock{origin: t0, moves: []clockSample{
		{at: t0},
		{at: at(100), lead: 10 * time.Millisecond},
		{at: at(200), lead: 4 * time.Millisecond},
		{at: at(300), lead: 30 * time.Millisecond},
	}}
	for _, tc := range []struct {
		name     string
		from, to int
		want     time.Duration
	}{
		{name: "no move in between", from: 10, to: 50, want: 0},
		{name: "a move forward in between", from: 50, to: 150, want: 10 * time.Millisecond},
		{name: "a move within a sample interval after to", from: 50, to: 90, want: 10 * time.Millisecond},
		{name: "a move back after one forward: the largest lead counts", from: 50, to: 250, want: 10 * time.Millisecond},
		{name: "a move back alone", from: 150, to: 250, want: 0},
		{name: "counted from the lead at from", from: 250, to: 350, want: 26 * time.Millisecond},
		{name: "moves before from do not count", from: 350, to: 400, want: 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			assert.Equal(t, tc.want, w.forwardBetween(at(tc.from), at(tc.to)))
		})
	}
}
