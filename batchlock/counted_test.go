package batchlock

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/batchlock/batchlock/internal/wire/wiretest"
)

// Counted keys on a real server, whose scripts know them (the fake does
// not); cluster_test has them across masters.

// newCounted returns a Client of rdb, closed at the end of the test, and
// sets the capacity of each key given.
func newCounted(t *testing.T, rdb redis.UniversalClient, capacities map[string]int64, opts ...Option) *Client {
	t.Helper()
	c, err := New(rdb, opts...)
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })
	for k, n := range capacities {
		require.NoError(t, c.SetCapacity(t.Context(), k, n))
	}
	return c
}

// inspectOne is what Inspect says of key.
func inspectOne(t *testing.T, c *Client, key string) HeldKey {
	t.Helper()
	h, err := c.Inspect(t.Context(), key)
	require.NoError(t, err)
	return h[0]
}

func TestCountedHoldsShareTheCapacity(t *testing.T) {
	c := newCounted(t, wiretest.ServerClient(t), map[string]int64{"sku:1": 10})
	ctx := t.Context()
	a, err := c.TryLock(ctx, []string{"order:a"}, WithUnits(map[string]int64{"sku:1": 6}), WithOwner("a"))
	require.NoError(t, err)
	_, err = c.TryLock(ctx, nil, WithUnits(map[string]int64{"sku:1": 5}), WithOwner("b"))
	var conflict *ConflictError
	require.ErrorAs(t, err, &conflict, "5 more do not fit 10 with 6 held")
	assert.Equal(t, []string{"sku:1"}, conflict.Keys)
	assert.Equal(t, map[string][]string{"sku:1": {"a"}}, conflict.Holders)
	b, err := c.TryLock(ctx, nil, WithUnits(map[string]int64{"sku:1": 4}), WithOwner("b"))
	require.NoError(t, err)
	assert.Greater(t, b.Token("sku:1"), a.Token("sku:1"), "every hold of units has a token of its own, growing")

	h := inspectOne(t, c, "sku:1")
	assert.True(t, h.Counted)
	assert.Equal(t, map[string]int64{"a": 6, "b": 4}, h.Units)
	assert.Equal(t, []string{"a", "b"}, h.Holders)
	assert.Equal(t, int64(10), h.Capacity)
	assert.Zero(t, h.Free)

	require.NoError(t, b.Consume(ctx))
	h = inspectOne(t, c, "sku:1")
	assert.Equal(t, int64(6), h.Capacity, "a sale of 4")
	assert.Equal(t, map[string]int64{"a": 6}, h.Units)
	require.ErrorIs(t, b.Consume(ctx), ErrNotHeld, "consumed once")
	assert.Equal(t, int64(6), inspectOne(t, c, "sku:1").Capacity)

	require.NoError(t, a.Unlock(ctx))
	h = inspectOne(t, c, "sku:1")
	assert.Empty(t, h.Holders)
	assert.Equal(t, int64(6), h.Free, "units let go are not sold")
}

// An owner id is escaped so that no exclusive key's owner field reads as a
// counted key's ("#<units>/<earliest>"), which units would join.
func TestOwnerNamedLikeACountedKey(t *testing.T) {
	c := newCounted(t, wiretest.ServerClient(t), map[string]int64{"sku:1": 10, "sku:2": 10})
	ctx := t.Context()
	for i, owner := range []string{"#", "#0"} {
		key := fmt.Sprintf("sku:%d", i+1)
		l, err := c.TryLock(ctx, []string{key}, WithOwner(owner))
		require.NoError(t, err)
		_, err = c.TryLock(ctx, nil, WithUnits(map[string]int64{key: 1}), WithOwner("b"))
		var conflict *ConflictError
		require.ErrorAs(t, err, &conflict, "units of a key held exclusively by %q", owner)
		h := inspectOne(t, c, key)
		assert.False(t, h.Counted)
		assert.Equal(t, []string{owner}, h.Holders)
		require.NoError(t, l.Unlock(ctx))
	}
}

func TestCountedBadInput(t *testing.T) {
	rdb := wiretest.ServerClient(t)
	c := newCounted(t, rdb, map[string]int64{"sku:1": 10})
	ctx := t.Context()
	for _, tc := range []struct {
		name string
		call func() error
		want error
		text string
	}{
		{"no units", func() error {
			_, err := c.TryLock(ctx, nil, WithUnits(map[string]int64{"sku:1": 0}))
			return err
		}, ErrInvalid, `units of "sku:1": 0 must be > 0`},
		{"a reserved name", func() error {
			_, err := c.TryLock(ctx, nil, WithUnits(map[string]int64{"units:{x}:sku:1": 1}))
			return err
		}, ErrInvalid, "reserved"},
		{"units in TryEach", func() error {
			_, err := c.TryEach(ctx, [][]string{{"a"}}, WithUnits(map[string]int64{"sku:1": 1}))
			return err
		}, ErrInvalid, "TryEach takes no counted keys"},
		{"a negative capacity", func() error { return c.SetCapacity(ctx, "sku:1", -1) }, ErrInvalid, "must be >= 0"},
		{"no capacity set", func() error {
			_, err := c.TryLock(ctx, []string{"a", "z"}, WithUnits(map[string]int64{"sku:1": 1, "sku:2": 1}))
			return err
		}, ErrInvalid, `no capacity set: "sku:2"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.call()
			require.ErrorIs(t, err, tc.want)
			assert.Contains(t, err.Error(), tc.text)
			held, err := c.Held(ctx, "*")
			require.NoError(t, err)
			assert.Empty(t, held, "nothing is left held")
			assert.Equal(t, int64(10), inspectOne(t, c, "sku:1").Capacity)
		})
	}
}

// An owner that holds units joins again with no more units, and gets
// ErrInvalid for more units or for the key exclusively; a key it holds
// exclusively it joins in units.
func TestCountedReentrancy(t *testing.T) {
	c := newCounted(t, wiretest.ServerClient(t), map[string]int64{"sku:1": 10})
	ctx := t.Context()
	outer, err := c.Lock(ctx, nil, WithUnits(map[string]int64{"sku:1": 3}), WithOwner("o"))
	require.NoError(t, err)
	inner, err := c.Lock(ctx, nil, WithUnits(map[string]int64{"sku:1": 2}), WithOwner("o"))
	require.NoError(t, err)
	assert.Equal(t, map[string]int64{"o": 3}, inspectOne(t, c, "sku:1").Units, "no more units")
	require.NoError(t, inner.Consume(ctx))
	assert.Equal(t, int64(10), inspectOne(t, c, "sku:1").Capacity, "the inner hold had no units to sell")

	_, err = c.Lock(ctx, nil, WithUnits(map[string]int64{"sku:1": 4}), WithOwner("o"))
	require.ErrorIs(t, err, ErrInvalid, "more units than it holds")
	assert.ErrorContains(t, err, "held shared or in units by this owner")
	_, err = c.Lock(ctx, []string{"sku:1"}, WithOwner("o"))
	require.ErrorIs(t, err, ErrInvalid, "the key exclusively")
	assert.ErrorContains(t, err, "held shared or in units by this owner")
	require.NoError(t, outer.Unlock(ctx))

	excl, err := c.Lock(ctx, []string{"sku:1"}, WithOwner("o"))
	require.NoError(t, err)
	units, err := c.TryLock(ctx, nil, WithUnits(map[string]int64{"sku:1": 4}), WithOwner("o"))
	require.NoError(t, err, "a key held exclusively is joined in units")
	require.NoError(t, units.Unlock(ctx))
	require.NoError(t, excl.Unlock(ctx))
}

func TestCapacityNeverBelowTheUnitsHeld(t *testing.T) {
	c := newCounted(t, wiretest.ServerClient(t), map[string]int64{"sku:1": 10})
	ctx := t.Context()
	l, err := c.Lock(ctx, nil, WithUnits(map[string]int64{"sku:1": 6}))
	require.NoError(t, err)
	require.ErrorIs(t, c.SetCapacity(ctx, "sku:1", 5), ErrOverCapacity)
	_, err = c.AddCapacity(ctx, "sku:1", -5)
	require.ErrorIs(t, err, ErrOverCapacity)
	assert.Equal(t, int64(10), inspectOne(t, c, "sku:1").Capacity, "nothing changed")
	n, err := c.AddCapacity(ctx, "sku:1", -4)
	require.NoError(t, err)
	assert.Equal(t, int64(6), n)
	require.NoError(t, l.Unlock(ctx))
	require.NoError(t, c.SetCapacity(ctx, "sku:1", 0))
}

// A Lock waits in the key's queue for units to be let go, and a big
// request at the head is not passed by a small one whose units fit.
func TestLockWaitsForUnits(t *testing.T) {
	rdb := wiretest.ServerClient(t)
	holder := newCounted(t, rdb, map[string]int64{"sku:1": 10})
	queued := make(chan struct{}, 1)
	waiter := newCounted(t, rdb, nil, WithObserver(func(e Event) {
		if e.Kind == EventQueued {
			queued <- struct{}{}
		}
	}))
	ctx := t.Context()
	held, err := holder.Lock(ctx, nil, WithUnits(map[string]int64{"sku:1": 6}))
	require.NoError(t, err)
	got := make(chan error, 1)
	var big *Lock
	go func() {
		var err error
		big, err = waiter.Lock(ctx, []string{"order:big"}, WithUnits(map[string]int64{"sku:1": 8}))
		got <- err
	}()
	select {
	case <-queued:
	case err := <-got:
		t.Fatalf("the big request did not wait: %v", err)
	}
	_, err = holder.TryLock(ctx, nil, WithUnits(map[string]int64{"sku:1": 1}))
	require.ErrorIs(t, err, ErrNotObtained, "1 of the 4 free would pass the big request ahead")
	require.NoError(t, held.Unlock(ctx))
	require.NoError(t, <-got)
	assert.Equal(t, map[string]int64{big.Owner(): 8}, inspectOne(t, holder, "sku:1").Units)
	require.NoError(t, big.Consume(ctx))
	assert.Equal(t, int64(2), inspectOne(t, holder, "sku:1").Capacity)
}

// More units than the capacity fail at once (sold out); a restock wakes a
// request waiting for units others hold.
func TestRestockWakesAWaiter(t *testing.T) {
	rdb := wiretest.ServerClient(t)
	queued := make(chan struct{}, 1)
	c := newCounted(t, rdb, map[string]int64{"sku:1": 5}, WithObserver(func(e Event) {
		if e.Kind == EventQueued {
			queued <- struct{}{}
		}
	}))
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	_, err := c.Lock(ctx, nil, WithUnits(map[string]int64{"sku:1": 6}))
	require.ErrorIs(t, err, ErrOverCapacity)
	require.ErrorIs(t, err, ErrNotObtained)
	held, err := c.Lock(ctx, nil, WithUnits(map[string]int64{"sku:1": 4}), WithOwner("holder"))
	require.NoError(t, err)
	got := make(chan error, 1)
	go func() {
		l, err := c.Lock(ctx, nil, WithUnits(map[string]int64{"sku:1": 5}))
		if err == nil {
			err = l.Unlock(ctx)
		}
		got <- err
	}()
	select {
	case <-queued:
	case err := <-got:
		t.Fatalf("5 units with 1 free did not wait: %v", err)
	}
	_, err = c.AddCapacity(ctx, "sku:1", 4)
	require.NoError(t, err)
	require.NoError(t, <-got)
	require.NoError(t, held.Unlock(ctx))
}

// Racing holders of random units, each working a while, never hold more
// than the capacity together, each counting on its units only while its
// lock is valid.
func TestCountedRacingHoldsFitTheCapacity(t *testing.T) {
	rdb := wiretest.ServerClient(t)
	const capacity, workers, rounds = 7, 8, 25
	c := newCounted(t, rdb, map[string]int64{"sku:1": capacity})
	ctx := t.Context()
	var held, most atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for w := range workers {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(w), 1))
			for range rounds {
				n := 1 + rng.Int64N(4)
				l, err := c.Lock(ctx, []string{fmt.Sprintf("order:%d", w)}, WithUnits(map[string]int64{"sku:1": n}))
				if err != nil {
					errs <- err
					return
				}
				now := held.Add(n)
				for m := most.Load(); now > m && !most.CompareAndSwap(m, now); m = most.Load() {
				}
				if time.Now().After(l.ValidUntil()) {
					errs <- errors.New("a lock handed out past its validity")
				}
				time.Sleep(time.Duration(rng.IntN(1000)) * time.Microsecond) // the holder's work
				held.Add(-n)
				if err := l.Unlock(ctx); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	assert.LessOrEqual(t, most.Load(), int64(capacity))
	assert.Positive(t, most.Load())
	assert.Empty(t, inspectOne(t, c, "sku:1").Holders)
}

// Do's function may consume the lock, Do then unlocking nothing.
func TestDoConsumes(t *testing.T) {
	c := newCounted(t, wiretest.ServerClient(t), map[string]int64{"sku:1": 10})
	ctx := t.Context()
	err := c.Do(ctx, []string{"order:1"}, func(ctx context.Context) error {
		l, _ := LockFromContext(ctx)
		return l.Consume(ctx)
	}, WithUnits(map[string]int64{"sku:1": 3}))
	require.NoError(t, err)
	h := inspectOne(t, c, "sku:1")
	assert.Equal(t, int64(7), h.Capacity)
	assert.Empty(t, h.Holders)
	held, err := c.Held(ctx, "*")
	require.NoError(t, err)
	assert.Empty(t, held, "order:1 went with the consume")
}

// A Processor's baskets hold units of a hot key together, as many as fit
// its capacity in a tick, the rest waiting for a later tick, and a basket
// of a key with no capacity is dropped alone, with its error; ConsumeEach
// sells a tick's units in one call, and Done has nothing left to let go of
// those consumed.
func TestProcessorCountedBaskets(t *testing.T) {
	c, p := newReplica(t, wiretest.ServerClient(t), 0)
	ctx := t.Context()
	require.NoError(t, c.SetCapacity(ctx, "sku:hot", 10))
	for i := range 6 {
		order := fmt.Sprintf("order:%d", i)
		require.NoError(t, p.Add(order, Basket{Keys: []string{order}, Units: map[string]int64{"sku:hot": 3}}))
	}
	require.ErrorIs(t, p.Add("bad", Basket{Units: map[string]int64{"sku:hot": 0}}), ErrInvalid)
	require.NoError(t, p.Add("no capacity", Basket{Keys: []string{"order:x"}, Units: map[string]int64{"sku:none": 1}}))
	require.NoError(t, p.Add("sold out", Basket{Units: map[string]int64{"sku:hot": 11}}))

	tick, err := p.Next(ctx)
	require.NoError(t, err)
	assert.Equal(t, []string{"order:0", "order:1", "order:2"}, itemsOf(tick), "9 units of 10 fit, 12 do not")
	require.Len(t, tick.Failed, 2, "a basket of a key with no capacity, or too little, is dropped alone")
	assert.Equal(t, "no capacity", tick.Failed[0].Item)
	require.ErrorIs(t, tick.Failed[0].Err, ErrInvalid)
	assert.ErrorContains(t, tick.Failed[0].Err, `no capacity set: "sku:none"`)
	assert.Equal(t, "sold out", tick.Failed[1].Item)
	require.ErrorIs(t, tick.Failed[1].Err, ErrOverCapacity)
	assert.Empty(t, inspectOne(t, c, "order:x").Holders)
	h := inspectOne(t, c, "sku:hot")
	assert.Len(t, h.Holders, 3)
	assert.Equal(t, int64(1), h.Free)
	require.NoError(t, c.ConsumeEach(ctx, []*Lock{tick.Baskets[0].Lock, tick.Baskets[1].Lock}))
	require.NoError(t, tick.Done(ctx), "Done lets go of the one not consumed")
	h = inspectOne(t, c, "sku:hot")
	assert.Equal(t, int64(4), h.Capacity, "two sales of 3")
	assert.Empty(t, h.Holders)

	tick, err = p.Next(ctx)
	require.NoError(t, err)
	require.Len(t, tick.Baskets, 1, "3 of the 4 left fit")
	assert.Contains(t, []string{"order:3", "order:4", "order:5"}, tick.Baskets[0].Item)
	require.NoError(t, tick.Done(ctx))
	assert.Equal(t, 2, p.c.Stats().Pending)
}

// A hold whose lease ran out sells nothing: Consume says so.
func TestConsumeAfterTheLeaseSellsNothing(t *testing.T) {
	c := newCounted(t, wiretest.ServerClient(t), map[string]int64{"sku:1": 10})
	ctx := t.Context()
	l, err := c.Lock(ctx, nil, WithUnits(map[string]int64{"sku:1": 3}), WithTTL(50*time.Millisecond))
	require.NoError(t, err)
	require.Eventually(t, func() bool { return len(inspectOne(t, c, "sku:1").Holders) == 0 }, 5*time.Second, time.Millisecond)
	require.ErrorIs(t, l.Consume(ctx), ErrNotHeld)
	assert.Equal(t, int64(10), inspectOne(t, c, "sku:1").Capacity)
}
