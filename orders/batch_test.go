package orders

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// tickerFunc is a Ticker that takes every order refuse does not refuse,
// telling wait as their lock wait, then works for work; it records when
// each tick came and what it held.
type tickerFunc struct {
	refuse func(o Order) bool
	wait   time.Duration
	work   time.Duration
	mu     sync.Mutex
	ticks  []seenTick
}

type seenTick struct {
	at  time.Time
	ids []string
}

func (f *tickerFunc) Tick(_ context.Context, batch []Order) ([]Fulfilled, []int, error) {
	seen := seenTick{at: time.Now()}
	out := make([]Fulfilled, len(batch))
	var refused []int
	for i, o := range batch {
		seen.ids = append(seen.ids, o.ID)
		if f.refuse != nil && f.refuse(o) {
			refused = append(refused, i)
			continue
		}
		out[i] = Fulfilled{Outcome: Outcome{Accepted: true, Locked: true, LockWait: f.wait}}
	}
	f.mu.Lock()
	f.ticks = append(f.ticks, seen)
	f.mu.Unlock()
	time.Sleep(f.work)
	return out, refused, nil
}

func tickOrders(t *testing.T, n int) []Order {
	t.Helper()
	orders, err := Generate(GenConfig{SKUs: 100, Orders: n, MaxBasket: 10, MaxQty: 1, Seed: 5})
	require.NoError(t, err)
	return orders
}

// In an open loop a tick holds only orders that have arrived, so the
// orders of a run spread over ticks; each basket's size goes with its wait.
func TestRunTicksOpenLoopTakesWhatHasArrived(t *testing.T) {
	const rate = 1000.0
	orders := tickOrders(t, 60)
	index := map[string]int{}
	for i, o := range orders {
		index[o.ID] = i
	}
	f := &tickerFunc{}
	start := time.Now()
	res := RunTicks(t.Context(), f, orders, Ticks{Size: 256, Rate: rate}, RunConfig{Attempts: 1})

	assert.Equal(t, len(orders), res.Accepted)
	assert.Zero(t, res.Backlog)
	require.GreaterOrEqual(t, len(f.ticks), 2, "60 orders arriving over 60 ms in one tick")
	for _, tick := range f.ticks {
		for _, id := range tick.ids {
			arrives := start.Add(time.Duration(float64(index[id]) / rate * float64(time.Second)))
			assert.False(t, arrives.After(tick.at), "order %s in a tick %v before it arrived", id, arrives.Sub(tick.at))
		}
	}
	require.Len(t, res.LockWaitSizes, len(res.LockWaits))
	var want []int
	for _, o := range orders {
		want = append(want, len(o.Lines))
	}
	sizes := slices.Clone(res.LockWaitSizes)
	slices.Sort(sizes)
	slices.Sort(want)
	assert.Equal(t, want, sizes)
}

// The backlog is the orders that had arrived and were not done when the
// run was stopped: an order every tick refuses, in a closed loop and in an
// open one; in an open loop it is overdue once it has waited OverdueAfter,
// in a closed one, where every order is there from the start, always.
func TestRunTicksBacklog(t *testing.T) {
	tests := []struct {
		name         string
		rate         float64
		overdueAfter time.Duration
		overdue      int
	}{
		{"closed loop", 0, time.Hour, 1},
		{"open loop, waited longer than overdue", 10_000, time.Nanosecond, 1},
		{"open loop, not overdue yet", 10_000, time.Hour, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			orders := tickOrders(t, 20)
			stuck := orders[3].ID
			stop := make(chan struct{})
			var done sync.WaitGroup
			done.Add(len(orders) - 1)
			go func() {
				done.Wait()
				close(stop)
			}()
			f := &tickerFunc{refuse: func(o Order) bool { return o.ID == stuck }}
			res := RunTicks(t.Context(), f, orders, Ticks{Size: 8, Rate: tt.rate},
				RunConfig{Attempts: 1, Stop: stop, Done: done.Done, OverdueAfter: tt.overdueAfter})
			assert.Equal(t, len(orders)-1, res.Accepted)
			assert.Equal(t, 1, res.Backlog, "the order refused every tick")
			assert.Equal(t, tt.overdue, res.Overdue)
			assert.Positive(t, res.Refusals)
		})
	}
}

// An order's lock wait is its wait for a tick plus the lock wait its tick
// told, not the tick's work after the lock.
func TestRunTicksLockWaitEndsAtTheLock(t *testing.T) {
	const told, work = time.Hour, 50 * time.Millisecond
	f := &tickerFunc{wait: told, work: work}
	res := RunTicks(t.Context(), f, tickOrders(t, 5), Ticks{Size: 256}, RunConfig{Attempts: 1})
	require.Len(t, res.LockWaits, 5)
	for _, w := range res.LockWaits {
		assert.GreaterOrEqual(t, w, told, "the tick's own lock wait is kept")
		assert.Less(t, w, told+work, "the tick's work after the lock is not a lock wait")
	}
}

// In an open loop a tick that took nothing waits for the next arrival
// rather than ticking its refused orders again at once, also once every
// order has arrived: one order is refused until 50ms after the others were
// taken, ten arrivals' time.
func TestRunTicksOpenLoopDoesNotSpin(t *testing.T) {
	orders := tickOrders(t, 10)
	var taken sync.WaitGroup
	taken.Add(len(orders) - 1)
	others := make(chan struct{})
	go func() {
		taken.Wait()
		time.Sleep(50 * time.Millisecond) // the refusal the run must sit out
		close(others)
	}()
	first := orders[0].ID
	f := &tickerFunc{refuse: func(o Order) bool {
		if o.ID != first {
			taken.Done()
			return false
		}
		select {
		case <-others:
			return false
		default:
			return true
		}
	}}
	res := RunTicks(t.Context(), f, orders, Ticks{Size: 256, Rate: 200}, RunConfig{Attempts: 1})
	assert.Equal(t, len(orders), res.Accepted)
	assert.LessOrEqual(t, res.Ticks, 3*len(orders), "ticks of %d orders, refused ones waiting for arrivals", len(orders))
}
