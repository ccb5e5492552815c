package batchlock

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/batchlock/batchlock/internal/wire/wiretest"
)

// acquires counts the acquire calls f was sent.
func acquires(f *wiretest.Fake) int { return len(f.Calls("acquire")) }

// A lock that waits for keys another lock of its Client holds waits in the
// process: it sends nothing to Redis until they are released, and then
// takes them at once.
func TestInProcessWaitSendsNothing(t *testing.T) {
	c, f := newFaked(t)
	first, err := c.Lock(t.Context(), basket, WithOwner("first"))
	require.NoError(t, err)
	sent := acquires(f)

	got := make(chan *Lock, 1)
	go func() {
		l, err := c.Lock(t.Context(), basket[2:], WithOwner("second"))
		assert.NoError(t, err)
		got <- l
	}()
	require.Eventually(t, func() bool { return c.gates.Queued(bySlot(basket[2:])[0]) == 1 },
		5*time.Second, time.Millisecond, "the second lock waits at a gate")
	assert.Equal(t, sent, acquires(f), "nothing is sent while it waits in the process")

	require.NoError(t, first.Unlock(t.Context()))
	second := <-got
	require.NotNil(t, second)
	assert.Equal(t, sent+masters(basket[2:]), acquires(f), "one acquire per master once the keys are free")
	require.NoError(t, second.Unlock(t.Context()))
	assert.Zero(t, c.Stats().Gated, "no gate is kept once every lock ended")
	stats := c.Stats()
	assert.EqualValues(t, masters(basket)+masters(basket[2:]), stats.Acquires, "one acquire per master and lock")
	assert.EqualValues(t, masters(basket)+masters(basket[2:]), stats.Releases, "one release per master and lock")
	assert.Zero(t, stats.Extends, "no lease restart: the second lock waited in the process only")
}

// TryLock refuses at once, naming every key another lock of its Client
// holds, and sends nothing.
func TestTryLockRefusedInProcess(t *testing.T) {
	c, f := newFaked(t)
	held, err := c.TryLock(t.Context(), basket[:3], WithOwner("first"))
	require.NoError(t, err)
	sent := acquires(f)
	_, err = c.TryLock(t.Context(), basket, WithOwner("second"))
	var conflict *ConflictError
	require.ErrorAs(t, err, &conflict)
	assert.ElementsMatch(t, basket[:3], conflict.Keys)
	assert.Equal(t, sent, acquires(f))
	require.NoError(t, held.Unlock(t.Context()))
	assert.Zero(t, c.Stats().Gated)
}

// Locks of one owner pass each other's gates (reentrancy); readers of
// different owners share a key; a waiting writer is not overtaken by later
// readers, but an owner already reading gets in; an owner reading a key that
// asks for it exclusively is refused at once with ErrInvalid. On a real
// server, whose scripts know shared keys (the fake does not).
func TestGatesFollowTheKeysRules(t *testing.T) {
	c, err := New(wiretest.ServerClient(t))
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })
	ctx := t.Context()
	outer, err := c.Lock(ctx, basket, WithOwner("order-1"))
	require.NoError(t, err)
	inner, err := c.TryLock(ctx, basket[:2], WithOwner("order-1"))
	require.NoError(t, err, "reentrant in the process too")
	require.NoError(t, inner.Unlock(ctx))
	require.NoError(t, outer.Unlock(ctx))

	key := []string{"promo:1"}
	reader1, err := c.TryLock(ctx, nil, WithShared(key...), WithOwner("r1"))
	require.NoError(t, err)
	reader2, err := c.TryLock(ctx, nil, WithShared(key...), WithOwner("r2"))
	require.NoError(t, err, "readers share")
	_, err = c.TryLock(ctx, key, WithOwner("r1"))
	require.ErrorIs(t, err, ErrInvalid)
	assert.ErrorContains(t, err, "held shared or in units by this owner")

	writer := make(chan *Lock, 1)
	go func() {
		l, err := c.Lock(ctx, key, WithOwner("w"))
		assert.NoError(t, err)
		writer <- l
	}()
	require.Eventually(t, func() bool { return c.gates.Queued(defaultPrefix+key[0]) == 1 }, 5*time.Second, time.Millisecond)
	_, err = c.TryLock(ctx, nil, WithShared(key...), WithOwner("r3"))
	require.ErrorIs(t, err, ErrNotObtained, "a later reader does not overtake the waiting writer")
	again, err := c.TryLock(ctx, nil, WithShared(key...), WithOwner("r1"))
	require.NoError(t, err, "a reader's owner gets in again")

	for _, l := range []*Lock{reader1, reader2, again} {
		require.NoError(t, l.Unlock(ctx))
	}
	w := <-writer
	require.NotNil(t, w)
	require.NoError(t, w.Unlock(ctx))
	assert.Zero(t, c.Stats().Gated)
}

// A wait at a gate ends with the call's context, leaving nothing behind;
// a gate is let go the moment its lock ends, whatever ends it: the lease
// running out, a loss, ForceUnlock.
func TestGatesEndWithTheirLock(t *testing.T) {
	c, f := newFaked(t, WithLease(150*time.Millisecond))
	ctx := t.Context()
	held, err := c.Lock(ctx, basket, WithOwner("first"))
	require.NoError(t, err)
	short, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	_, err = c.Lock(short, basket[:1], WithOwner("impatient"))
	cancel()
	require.ErrorIs(t, err, ErrNotObtained)
	require.ErrorIs(t, err, context.DeadlineExceeded)

	for _, tc := range []struct {
		name string
		opts []LockOption
		end  func()
	}{
		{"lost", nil, func() { f.Free(defaultPrefix + basket[3]) }},
		{"force-unlocked", nil, func() {
			_, err := c.ForceUnlock(ctx, basket[0])
			require.NoError(t, err)
		}},
		{"lease ran out", []LockOption{WithTTL(100 * time.Millisecond)}, func() {}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if held == nil {
				var err error
				held, err = c.Lock(ctx, basket, append([]LockOption{WithOwner("first")}, tc.opts...)...)
				require.NoError(t, err)
			}
			got := make(chan error, 1)
			go func() {
				l, err := c.Lock(ctx, basket, WithOwner("next"))
				if err == nil {
					err = l.Unlock(ctx)
				}
				got <- err
			}()
			tc.end()
			select {
			case err := <-got:
				require.NoError(t, err, "the next lock gets the keys once the first ended")
			case <-time.After(5 * time.Second):
				t.Fatal("the gates were not let go when the lock ended")
			}
			<-held.Context().Done()
			assert.True(t, errors.Is(held.Err(), ErrLockLost))
			held = nil
		})
	}
	assert.Zero(t, c.Stats().Gated)
}

// A lock that waited a moment for a key held in Redis by another owner is
// handed out without restarting the leases of the keys it took first, a
// renewed one (the watchdog renews it in time) and a WithTTL one with more
// than nine tenths of its lease left; a WithTTL lock whose wait took more
// than a tenth has them restarted.
func TestLeaseRestartOnlyWhenNeeded(t *testing.T) {
	for _, tc := range []struct {
		name     string
		opts     []LockOption
		wait     time.Duration
		restarts bool
	}{
		{"renewed", nil, 50 * time.Millisecond, false},
		{"WithTTL, a short wait", []LockOption{WithTTL(time.Minute)}, 50 * time.Millisecond, false},
		{"WithTTL, a tenth of it waited", []LockOption{WithTTL(time.Second)}, 150 * time.Millisecond, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, f := newFaked(t)
			f.Hold("other", tc.wait, bySlot(basket)[3])
			l, err := c.Lock(t.Context(), basket, tc.opts...)
			require.NoError(t, err)
			assert.Equal(t, tc.restarts, len(f.Calls("extend")) > 0, "extend calls: %v", f.Calls("extend"))
			require.NoError(t, l.Unlock(t.Context()))
		})
	}
}

// A waiter that another Client's release hands its key to pays for the
// conflict with one call: the refused attempt, then the call that continues
// with every key, no give-back and no lease restart. (On one node the batch
// is one group; cluster_test's TestHandOffContinuesInOneCall has groups on
// several masters.)
func TestHandOffCostsOneMoreCall(t *testing.T) {
	rdb := wiretest.ServerClient(t)
	holder, err := New(rdb)
	require.NoError(t, err)
	t.Cleanup(func() { _ = holder.Close() })
	waiter, err := New(rdb)
	require.NoError(t, err)
	t.Cleanup(func() { _ = waiter.Close() })
	ctx := t.Context()
	first := bySlot(basket)[0][len(defaultPrefix):]
	held, err := holder.Lock(ctx, []string{first})
	require.NoError(t, err)

	got := make(chan *Lock, 1)
	go func() {
		l, err := waiter.Lock(ctx, basket)
		assert.NoError(t, err)
		got <- l
	}()
	require.Eventually(t, func() bool {
		locks, err := holder.Inspect(ctx, first)
		return err == nil && locks[0].Waiting == 1
	}, 5*time.Second, time.Millisecond, "the waiter queues for %s", first)
	require.NoError(t, held.Unlock(ctx))
	l := <-got
	require.NotNil(t, l)
	stats := waiter.Stats()
	assert.EqualValues(t, 2, stats.Acquires, "the refused attempt, then the call that continues with every key")
	assert.Zero(t, stats.Releases, "nothing was given back")
	assert.Zero(t, stats.Extends, "no lease restart: the wait left the lease whole")
	require.NoError(t, l.Unlock(ctx))
}

// A call that reaches the head of a gate's queue asking to upgrade a key its
// owner now reads is answered with ErrInvalid at once, and the waiters
// behind it go on: it may not wait there, as it would wait for itself.
func TestUpgradeAtTheHeadOfTheQueueIsRefused(t *testing.T) {
	c, _ := newFaked(t)
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	key := basket[:1]
	gateKey := bySlot(key)[0]
	reader, err := c.Lock(ctx, nil, WithShared(key...), WithOwner("p"))
	require.NoError(t, err)

	type result struct {
		l   *Lock
		err error
	}
	lockAs := func(owner string, opts ...LockOption) chan result {
		out := make(chan result, 1)
		go func() {
			l, err := c.Lock(ctx, key, append(opts, WithOwner(owner))...)
			out <- result{l, err}
		}()
		return out
	}
	writer := lockAs("b")
	require.Eventually(t, func() bool { return c.gates.Queued(gateKey) == 1 }, 5*time.Second, time.Millisecond)
	oReads := make(chan result, 1)
	go func() {
		l, err := c.Lock(ctx, nil, WithShared(key...), WithOwner("o"))
		oReads <- result{l, err}
	}()
	require.Eventually(t, func() bool { return c.gates.Queued(gateKey) == 2 }, 5*time.Second, time.Millisecond)
	oWrites := lockAs("o")
	require.Eventually(t, func() bool { return c.gates.Queued(gateKey) == 3 }, 5*time.Second, time.Millisecond)
	after := lockAs("c")
	require.Eventually(t, func() bool { return c.gates.Queued(gateKey) == 4 }, 5*time.Second, time.Millisecond)

	require.NoError(t, reader.Unlock(ctx))
	w := <-writer
	require.NoError(t, w.err)
	require.NoError(t, w.l.Unlock(ctx))
	r := <-oReads
	require.NoError(t, r.err)
	upgrade := <-oWrites
	require.ErrorIs(t, upgrade.err, ErrInvalid, "at the head, behind its own owner's read")
	assert.ErrorContains(t, upgrade.err, "held shared or in units by this owner")
	require.NoError(t, r.l.Unlock(ctx))
	last := <-after
	require.NoError(t, last.err, "the waiter behind it goes on")
	require.NoError(t, last.l.Unlock(ctx))
	assert.Zero(t, c.Stats().Gated)
}

// An observer that panics while its call waits at a gate leaves nothing
// behind: the call leaves the queue and gives back the gates it held, so
// the Client's other locks still get the keys.
func TestPanicWhileWaitingAtAGateLeavesNoGate(t *testing.T) {
	var panicking atomic.Bool
	c, _ := newFaked(t, WithObserver(func(e Event) {
		if e.Kind == EventConflict && e.Owner == "panics" && panicking.Load() {
			panic("observer")
		}
	}))
	ctx := t.Context()
	holder, err := c.Lock(ctx, basket[3:4], WithOwner("holder"))
	require.NoError(t, err)
	panicking.Store(true)
	func() {
		defer func() { assert.Equal(t, "observer", recover()) }()
		_, _ = c.Lock(ctx, basket, WithOwner("panics"))
	}()
	require.NoError(t, holder.Unlock(ctx))
	assert.Zero(t, c.Stats().Gated, "no gate kept by the call that panicked")
	l, err := c.TryLock(ctx, basket, WithOwner("next"))
	require.NoError(t, err, "every key can be taken again")
	require.NoError(t, l.Unlock(ctx))
}
