package orders

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// scripted is a Processor whose outcomes are set per order id.
type scripted struct {
	mu    sync.Mutex
	calls map[string]int
	do    func(o Order, call int) (Outcome, error)
}

func (s *scripted) Process(ctx context.Context, o Order) (Outcome, error) {
	s.mu.Lock()
	if s.calls == nil {
		s.calls = map[string]int{}
	}
	s.calls[o.ID]++
	n := s.calls[o.ID]
	s.mu.Unlock()
	return s.do(o, n)
}

func TestRunCountsOutcomes(t *testing.T) {
	orders := []Order{
		{ID: "accept", Lines: []Line{{SKU: "a", Qty: 2}, {SKU: "b", Qty: 1}}},
		{ID: "accept2", Lines: []Line{{SKU: "a", Qty: 3}}},
		{ID: "reject", Lines: []Line{{SKU: "a", Qty: 9}}},
		{ID: "flaky", Lines: []Line{{SKU: "c", Qty: 1}}},
		{ID: "broken", Lines: []Line{{SKU: "d", Qty: 1}}},
		{ID: "half", Lines: []Line{{SKU: "e", Qty: 1}}},
	}
	p := &scripted{do: func(o Order, call int) (Outcome, error) {
		wait := Outcome{Locked: true, LockWait: time.Millisecond}
		switch o.ID {
		case "accept", "accept2":
			wait.Accepted = true
			return wait, nil
		case "reject":
			return wait, nil
		case "flaky":
			if call < 3 {
				return Outcome{}, errors.New("not obtained")
			}
			wait.Accepted = true
			return wait, nil
		case "broken":
			return Outcome{}, errors.New("always down")
		default: // half
			return Outcome{Written: true, Locked: true}, errors.New("lost while writing")
		}
	}}
	var done atomic.Int64
	res := Run(context.Background(), p, orders, RunConfig{Workers: 3, Attempts: 4, Done: func() { done.Add(1) }})

	assert.Equal(t, 6, res.Orders)
	assert.Equal(t, int64(6), done.Load())
	assert.Equal(t, 3, res.Accepted)
	assert.Equal(t, 1, res.Rejected)
	assert.Equal(t, 1, res.Errors)
	assert.Equal(t, 1, res.Unknown)
	assert.Equal(t, 2+3, res.Retries, "flaky retried twice, broken three times")
	assert.Equal(t, 1, p.calls["half"], "an order that may have written is never retried")
	assert.Equal(t, map[string]int64{"a": 5, "b": 1, "c": 1}, res.SoldBySKU)
	assert.Len(t, res.LockWaits, 5)
	assert.Len(t, res.FirstErrors, 2)
	assert.Len(t, res.FirstRetried, 5, "the first five of five retries")
	assert.Contains(t, res.FirstRetried, "order flaky: not obtained")
}

func TestRunStopsWhenCancelled(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	orders := make([]Order, 1000)
	for i := range orders {
		orders[i] = Order{ID: SKU(i)}
	}
	var started atomic.Int64
	p := &scripted{do: func(o Order, call int) (Outcome, error) {
		if started.Add(1) == 10 {
			cancel()
		}
		return Outcome{Accepted: true}, nil
	}}
	res := Run(ctx, p, orders, RunConfig{Workers: 2})
	require.Less(t, res.Orders, len(orders))
	assert.Equal(t, int(started.Load()), res.Orders, "every order taken up is counted")
}
