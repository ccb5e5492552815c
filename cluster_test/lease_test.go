package cluster_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/batchlock/batchlock/batchlock"
)

func TestWatchdogKeepsLockForManyLeases(t *testing.T) {
	rdb := newClient(t)
	const lease = 600 * time.Millisecond
	var renewals atomic.Int64
	c, prefix := newLocker(t, rdb, batchlock.WithLease(lease), batchlock.WithObserver(func(e batchlock.Event) {
		if e.Kind == batchlock.EventRenewed {
			renewals.Add(1)
		}
	}))
	ctx := ctxTimeout(t, 30*time.Second)
	keys := spread(30, "wd")
	l, err := c.Lock(ctx, keys)
	require.NoError(t, err)

	// Hold for five leases: without renewal the keys would be gone.
	require.Eventually(t, func() bool { return renewals.Load() >= 12 }, 10*time.Second, 10*time.Millisecond)
	assert.NoError(t, l.Err())
	assert.Len(t, lockKeysUnder(t, rdb, prefix), 30)
	ttl, err := rdb.PTTL(ctx, prefix+keys[0]).Result()
	require.NoError(t, err)
	assert.Greater(t, ttl, lease/4, "the lease keeps being pushed forward")
	require.NoError(t, l.Unlock(ctx))
	assert.ErrorIs(t, l.Err(), batchlock.ErrNotHeld)
}

func TestFixedTTLIsNotRenewedAndEndsTheLock(t *testing.T) {
	rdb := newClient(t)
	c, prefix := newLocker(t, rdb)
	ctx := ctxTimeout(t, 30*time.Second)
	l, err := c.Lock(ctx, []string{"ttl-a", "ttl-b"}, batchlock.WithTTL(300*time.Millisecond))
	require.NoError(t, err)
	select {
	case <-l.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("Done did not close when the fixed lease ran out")
	}
	assert.ErrorIs(t, l.Err(), batchlock.ErrLockLost)
	assert.NotContains(t, l.Err().Error(), "renewed", "a WithTTL lock is never renewed")
	require.Eventually(t, func() bool { return len(lockKeysUnder(t, rdb, prefix)) == 0 }, 5*time.Second, 10*time.Millisecond)
	assert.ErrorIs(t, l.Unlock(ctx), batchlock.ErrNotHeld)
}

func TestExtendPushesFixedLease(t *testing.T) {
	rdb := newClient(t)
	c, prefix := newLocker(t, rdb)
	ctx := ctxTimeout(t, 30*time.Second)
	l, err := c.Lock(ctx, []string{"ext"}, batchlock.WithTTL(time.Second))
	require.NoError(t, err)
	require.NoError(t, l.Extend(ctx, time.Minute))
	ttl, err := rdb.PTTL(ctx, prefix+"ext").Result()
	require.NoError(t, err)
	assert.Greater(t, ttl, 50*time.Second)
	require.NoError(t, l.Extend(ctx, time.Second), "a shorter extension keeps the longer lease")
	ttl, err = rdb.PTTL(ctx, prefix+"ext").Result()
	require.NoError(t, err)
	assert.Greater(t, ttl, 50*time.Second)
	assert.ErrorIs(t, l.Extend(ctx, 0), batchlock.ErrInvalid)

	require.NoError(t, rdb.Del(ctx, prefix+"ext").Err())
	assert.ErrorIs(t, l.Extend(ctx, time.Minute), batchlock.ErrNotHeld)
	<-l.Context().Done()
	assert.ErrorIs(t, l.Err(), batchlock.ErrLockLost)
}

func TestLossIsReported(t *testing.T) {
	for _, tc := range []struct {
		name string
		// steal takes key (without the prefix) from its holder: thief is
		// another Client on the same keys.
		steal func(ctx context.Context, rdb *redis.ClusterClient, thief *batchlock.Client, prefix, key string) error
	}{
		{"key deleted", func(ctx context.Context, rdb *redis.ClusterClient, _ *batchlock.Client, prefix, key string) error {
			return rdb.Del(ctx, prefix+key).Err()
		}},
		{"key taken by another owner", func(ctx context.Context, rdb *redis.ClusterClient, thief *batchlock.Client, prefix, key string) error {
			if err := rdb.Del(ctx, prefix+key).Err(); err != nil {
				return err
			}
			_, err := thief.TryLock(ctx, []string{key}, batchlock.WithTTL(time.Minute))
			return err
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rdb := newClient(t)
			const lease = 900 * time.Millisecond
			var lost atomic.Int64
			c, prefix := newLocker(t, rdb, batchlock.WithLease(lease), batchlock.WithObserver(func(e batchlock.Event) {
				if e.Kind == batchlock.EventLost {
					lost.Add(1)
				}
			}))
			ctx := ctxTimeout(t, 30*time.Second)
			keys := spread(20, "loss")
			thief, err := batchlock.New(rdb, batchlock.WithPrefix(prefix))
			require.NoError(t, err)
			t.Cleanup(func() { _ = thief.Close() })

			cause := make(chan error, 1)
			started := make(chan struct{})
			var stolenAt time.Time
			var mu sync.Mutex
			err = c.Do(ctx, keys, func(ctx context.Context) error {
				close(started)
				mu.Lock()
				stolenAt = time.Now()
				mu.Unlock()
				if err := tc.steal(ctx, rdb, thief, prefix, keys[7]); err != nil {
					return err
				}
				<-ctx.Done()
				cause <- context.Cause(ctx)
				return ctx.Err()
			})
			<-started
			require.ErrorIs(t, err, batchlock.ErrLockLost, "Do reports the loss")
			require.ErrorIs(t, <-cause, batchlock.ErrLockLost, "fn's context is cancelled with the loss as cause")
			mu.Lock()
			// The documented bound: within a renewal period, plus the
			// round trip of the renewal that finds it.
			assert.Less(t, time.Since(stolenAt), lease/3+time.Second, "loss seen within a renewal period")
			mu.Unlock()
			assert.EqualValues(t, 1, lost.Load())
			// Do unlocked the keys it still held; the stolen one is not ours.
			left := lockKeysUnder(t, rdb, prefix)
			if tc.name == "key deleted" {
				assert.Empty(t, left)
			} else {
				assert.Equal(t, []string{prefix + keys[7]}, left)
			}
		})
	}
}

func TestDoUnlocksOnErrorAndPanic(t *testing.T) {
	rdb := newClient(t)
	c, prefix := newLocker(t, rdb)
	ctx := ctxTimeout(t, 30*time.Second)
	keys := spread(10, "do")

	boom := errors.New("boom")
	err := c.Do(ctx, keys, func(ctx context.Context) error {
		assert.Len(t, lockKeysUnder(t, rdb, prefix), 10)
		l, ok := batchlock.LockFromContext(ctx)
		if assert.True(t, ok, "fn's context carries the lock") {
			assert.Positive(t, l.Token(keys[3]), "fencing tokens are at hand inside Do")
		}
		return boom
	})
	assert.ErrorIs(t, err, boom)
	assert.Empty(t, lockKeysUnder(t, rdb, prefix))

	assert.PanicsWithValue(t, "kaboom", func() {
		_ = c.Do(ctx, keys, func(context.Context) error { panic("kaboom") })
	})
	assert.Empty(t, lockKeysUnder(t, rdb, prefix), "a panic in fn still unlocks")

	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	ran := false
	err = c.Do(cancelled, keys, func(context.Context) error { ran = true; return nil })
	assert.ErrorIs(t, err, context.Canceled)
	assert.False(t, ran)
	assert.Empty(t, lockKeysUnder(t, rdb, prefix))
}

func TestDoNestedIsReentrant(t *testing.T) {
	rdb := newClient(t)
	c, prefix := newLocker(t, rdb)
	ctx := ctxTimeout(t, 30*time.Second)
	err := c.Do(ctx, []string{"n1", "n2"}, func(ctx context.Context) error {
		return c.Do(ctx, []string{"n2", "n3"}, func(ctx context.Context) error {
			assert.Len(t, lockKeysUnder(t, rdb, prefix), 3)
			return nil
		})
	})
	require.NoError(t, err)
	assert.Empty(t, lockKeysUnder(t, rdb, prefix))
}

func TestHandoffByReleaseMessage(t *testing.T) {
	rdb := newClient(t)
	// Polling is slowed to a minute: only the release message can wake the
	// waiter in time.
	c, prefix := newLocker(t, rdb, batchlock.WithPollInterval(time.Minute))
	waiter := peerOf(t, rdb, prefix, batchlock.WithPollInterval(time.Minute))
	ctx := ctxTimeout(t, 30*time.Second)
	keys := spread(20, "msg")
	holder, err := c.Lock(ctx, keys[5:6], batchlock.WithTTL(time.Minute))
	require.NoError(t, err)

	got := make(chan error, 1)
	go func() {
		l, err := waiter.Lock(ctx, keys)
		if err == nil {
			err = l.Unlock(ctx)
		}
		got <- err
	}()
	// The waiter is blocked once it listens on the held key's channel.
	require.Eventually(t, func() bool { return shardSubscribers(ctx, rdb, prefix+keys[5]) > 0 }, 10*time.Second, 5*time.Millisecond)
	released := time.Now()
	require.NoError(t, holder.Unlock(ctx))
	select {
	case err := <-got:
		require.NoError(t, err)
		assert.Less(t, time.Since(released), 10*time.Second)
	case <-time.After(20 * time.Second):
		t.Fatal("waiter was not woken by the release")
	}
	require.Eventually(t, func() bool { return shardSubscribers(ctx, rdb, prefix+keys[5]) == 0 }, 10*time.Second, 5*time.Millisecond, "the waiter unsubscribes once it holds the lock")
}

// shardSubscribers counts the sharded pub/sub subscribers of channel on the
// master that serves it.
func shardSubscribers(ctx context.Context, rdb *redis.ClusterClient, channel string) int64 {
	node, err := rdb.MasterForKey(ctx, channel)
	if err != nil {
		return -1
	}
	counts, err := node.PubSubShardNumSub(ctx, channel).Result()
	if err != nil {
		return -1
	}
	return counts[channel]
}

func TestHandoffWhenLeaseRunsOut(t *testing.T) {
	rdb := newClient(t)
	c, _ := newLocker(t, rdb, batchlock.WithPollInterval(time.Minute))
	ctx := ctxTimeout(t, 30*time.Second)
	keys := spread(8, "expire")
	// A holder that never unlocks: its lease is all that frees the keys.
	_, err := c.Lock(ctx, keys[:3], batchlock.WithTTL(400*time.Millisecond))
	require.NoError(t, err)
	start := time.Now()
	l, err := c.Lock(ctx, keys)
	require.NoError(t, err)
	assert.Less(t, time.Since(start), 20*time.Second, "woken by the blocker's lease, not the minute-long poll")
	require.NoError(t, l.Unlock(ctx))
}

// Close ends and releases every lock its Client holds, and tells the
// observer each was released, not lost: a deploy that closes a Client must
// not raise the alarm a loss does (batchlockslog logs EventLost as an
// error). The holder still learns its lock ended, and its tokens are 0.
func TestCloseEndsAndReleasesEveryLock(t *testing.T) {
	rdb := newClient(t)
	prefix := testPrefix(t)
	var mu sync.Mutex
	told := map[string]int{}
	c, err := batchlock.New(rdb, batchlock.WithPrefix(prefix), batchlock.WithObserver(func(e batchlock.Event) {
		mu.Lock()
		defer mu.Unlock()
		told[e.Kind]++
		assert.NoError(t, e.Err, "%s event", e.Kind)
	}))
	require.NoError(t, err)
	ctx := ctxTimeout(t, 30*time.Second)
	renewed, err := c.Lock(ctx, []string{"c1"})
	require.NoError(t, err)
	fixed, err := c.Lock(ctx, []string{"c2"}, batchlock.WithTTL(time.Minute))
	require.NoError(t, err)

	require.NoError(t, c.Close())
	require.NoError(t, c.Close(), "Close is idempotent")
	assert.Empty(t, lockKeysUnder(t, rdb, prefix), "Close released every key its Client held")
	mu.Lock()
	assert.Zero(t, told[batchlock.EventLost], "a lock ended by Close is no loss")
	assert.Equal(t, 2, told[batchlock.EventReleased], "each lock told released")
	mu.Unlock()
	for i, l := range []*batchlock.Lock{renewed, fixed} {
		<-l.Context().Done()
		assert.ErrorIs(t, l.Err(), batchlock.ErrLockLost)
		assert.ErrorIs(t, l.Err(), batchlock.ErrClosed)
		assert.Zero(t, l.Token(fmt.Sprintf("c%d", i+1)), "no token once closed")
		err := l.Unlock(ctx)
		assert.ErrorIs(t, err, batchlock.ErrNotHeld)
		assert.ErrorIs(t, err, batchlock.ErrClosed, "Unlock after Close says why the lock ended")
	}
	_, err = c.Lock(ctx, []string{"c3"})
	assert.ErrorIs(t, err, batchlock.ErrClosed)
}

// A lock lost just before Close (force-unlocked through its own Client, on
// one master) lets its other keys go in the background: Close waits for
// that release instead of cutting it short, so its key on the other master
// does not outlive the Client.
func TestCloseAfterALossReleasesTheLostLocksKeys(t *testing.T) {
	cl := sharedCluster(t)
	rdb := newClient(t)
	ctx := ctxTimeout(t, 30*time.Second)
	for i := range 5 {
		c, prefix := newLocker(t, rdb)
		keys, _ := keysOnMasters(t, cl, prefix, fmt.Sprintf("close-lost%d", i), 2, 1)
		l, err := c.Lock(ctx, keys)
		require.NoError(t, err)
		_, err = c.ForceUnlock(ctx, keys[0])
		require.NoError(t, err)
		require.NoError(t, c.Close())
		assert.ErrorIs(t, l.Err(), batchlock.ErrLockLost)
		assert.Empty(t, lockKeysUnder(t, rdb, prefix), "run %d: the lost lock's other key outlived its Client", i)
	}
}

// A lock that loses one key lets its other keys go at once, though its
// holder neither unlocks nor returns: their waiters get them when the loss
// is noticed (at once through the holder's own Client, at the next renewal
// through another one), long before the lease those keys were renewed for
// ends.
func TestLostLockLetsItsOtherKeysGo(t *testing.T) {
	rdb := newClient(t)
	ctx := ctxTimeout(t, 30*time.Second)
	for _, tc := range []struct {
		name  string
		lease time.Duration
		same  bool
		bound time.Duration // under the least lease left on the other keys
	}{
		{"force-unlocked through the same Client", 30 * time.Second, true, 2 * time.Second},
		{"force-unlocked through another Client", 6 * time.Second, false, 2*time.Second + time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, prefix := newLocker(t, rdb, batchlock.WithLease(tc.lease))
			operator, waiter := c, peerOf(t, rdb, prefix)
			if !tc.same {
				operator = peerOf(t, rdb, prefix)
			}
			keys := spread(3, "lost-lets-go")
			held, err := c.Lock(ctx, keys)
			require.NoError(t, err)
			got := make(chan time.Time, 2)
			var waiters sync.WaitGroup
			for _, k := range keys[1:] {
				waiters.Go(func() {
					l, err := waiter.Lock(ctx, []string{k})
					if assert.NoError(t, err) {
						got <- time.Now()
						assert.NoError(t, l.Unlock(ctx))
					}
				})
			}
			for _, k := range keys[1:] {
				waitQueued(ctx, t, waiter, k, 1)
			}
			forcedAt := time.Now()
			_, err = operator.ForceUnlock(ctx, keys[0])
			require.NoError(t, err)
			for range keys[1:] {
				assert.Less(t, (<-got).Sub(forcedAt), tc.bound, "the waiter got its key once the loss was noticed")
			}
			<-held.Context().Done()
			assert.ErrorIs(t, held.Err(), batchlock.ErrLockLost)
			assert.ErrorIs(t, held.Unlock(ctx), batchlock.ErrNotHeld)
			waiters.Wait() // their unlocks, before the Clients close
			assert.Empty(t, lockKeysUnder(t, rdb, prefix))
		})
	}
}

// ForceUnlock through the Client that holds the lock ends the lock at once,
// the default 30s lease notwithstanding; through another Client the holder
// hears of it at its next renewal, within lease/3.
func TestForceUnlockEndsTheHolder(t *testing.T) {
	rdb := newClient(t)
	ctx := ctxTimeout(t, 30*time.Second)
	for _, tc := range []struct {
		name  string
		lease time.Duration
		same  bool
		bound time.Duration
	}{
		{"through the same Client: at once", 30 * time.Second, true, time.Second},
		{"through another Client: within a renewal period", 1500 * time.Millisecond, false, 500*time.Millisecond + time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, prefix := newLocker(t, rdb, batchlock.WithLease(tc.lease))
			operator := c
			if !tc.same {
				var err error
				operator, err = batchlock.New(rdb, batchlock.WithPrefix(prefix))
				require.NoError(t, err)
				t.Cleanup(func() { _ = operator.Close() })
			}
			keys := spread(10, "force-holder")
			var forcedAt time.Time
			err := c.Do(ctx, keys, func(ctx context.Context) error {
				forcedAt = time.Now()
				if _, err := operator.ForceUnlock(ctx, keys[4]); err != nil {
					return err
				}
				<-ctx.Done()
				return context.Cause(ctx)
			})
			require.ErrorIs(t, err, batchlock.ErrLockLost)
			assert.Less(t, time.Since(forcedAt), tc.bound, "the holder was told")
			assert.Empty(t, lockKeysUnder(t, rdb, prefix), "Do released the other keys")
		})
	}
}

// Defect 1: a reply that comes after the lease it grants has run out must not
// make a lock. Keys on two masters, one of them asleep for longer than the
// lease: the call fails, and nothing stays held.
func TestNoLockIsReturnedPastItsLease(t *testing.T) {
	cl := sharedCluster(t)
	rdb := newClient(t)
	for _, tc := range []struct {
		name  string
		lease batchlock.Option
		opts  []batchlock.LockOption
		wait  bool
	}{
		{"TryLock WithTTL", nil, []batchlock.LockOption{batchlock.WithTTL(100 * time.Millisecond)}, false},
		{"Lock WithTTL", nil, []batchlock.LockOption{batchlock.WithTTL(100 * time.Millisecond)}, true},
		{"TryLock renewed", batchlock.WithLease(300 * time.Millisecond), nil, false},
		{"Lock renewed", batchlock.WithLease(300 * time.Millisecond), nil, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var opts []batchlock.Option
			if tc.lease != nil {
				opts = append(opts, tc.lease)
			}
			c, prefix := newLocker(t, rdb, opts...)
			other, err := batchlock.New(rdb, append(opts, batchlock.WithPrefix(prefix))...)
			require.NoError(t, err)
			t.Cleanup(func() { _ = other.Close() })
			ctx := ctxTimeout(t, 30*time.Second)
			keys, masters := keysOnMasters(t, cl, prefix, "late", 2, 2)
			warm, err := c.TryLock(ctx, keys)
			require.NoError(t, err)
			require.NoError(t, warm.Unlock(ctx))

			woke := sleepNode(t, cl, masters[1].Addr, 400*time.Millisecond)
			var l *batchlock.Lock
			if tc.wait {
				l, err = c.Lock(ctx, keys, tc.opts...)
			} else {
				l, err = c.TryLock(ctx, keys, tc.opts...)
			}
			require.NoError(t, <-woke)
			if err == nil {
				// Another owner can take the fast master's keys while this
				// lock still says it holds them.
				_, stolen := other.TryLock(ctx, keys[:2], batchlock.WithTTL(time.Minute))
				t.Fatalf("a lock was returned after its lease ran out (Err %v; another owner's TryLock: %v)", l.Err(), stolen)
			}
			require.ErrorIs(t, err, batchlock.ErrNotObtained)
			assert.ErrorContains(t, err, "lease")
			require.Eventually(t, func() bool { return len(lockKeysUnder(t, rdb, prefix)) == 0 }, 10*time.Second, 10*time.Millisecond,
				"the late lock is rolled back")
			l, err = other.TryLock(ctx, keys)
			require.NoError(t, err)
			require.NoError(t, l.Unlock(ctx))
		})
	}
}

// Defect 6: a reentrant hold with a short lease stops keeping the key once
// its lease ends, though its handle was never unlocked.
func TestExpiredNestedHoldDoesNotKeepTheKey(t *testing.T) {
	rdb := newClient(t)
	c, _ := newLocker(t, rdb)
	ctx := ctxTimeout(t, 30*time.Second)
	keys := spread(6, "nested-ttl")
	outer, err := c.Lock(ctx, keys)
	require.NoError(t, err)
	const ttl = 200 * time.Millisecond
	inner, err := c.Lock(ctx, keys[:3], batchlock.WithOwner(outer.Owner()), batchlock.WithTTL(ttl))
	require.NoError(t, err)
	taken := time.Now()
	select {
	case <-inner.Context().Done():
	case <-time.After(10 * time.Second):
		t.Fatal("the inner lease did not end")
	}
	require.NoError(t, outer.Unlock(ctx))
	// Kept by the outer lock's release, the inner hold would last the
	// outer lock's lease (30 s).
	var l *batchlock.Lock
	eventuallyPastServerLease(t, taken, ttl, func() bool {
		l, err = c.TryLock(ctx, keys)
		return err == nil
	}, "the keys are free once the outer lock is released")
	require.NoError(t, l.Unlock(ctx))
}

// Extend reports keys lost on one master even when another master's part of
// the call fails.
func TestExtendReportsLossDespiteAnotherMastersError(t *testing.T) {
	cl := sharedCluster(t)
	rdb := newClient(t)
	c, prefix := newLocker(t, rdb)
	ctx := ctxTimeout(t, 30*time.Second)
	keys, masters := keysOnMasters(t, cl, prefix, "extend-lost", 2, 2)
	l, err := c.TryLock(ctx, keys, batchlock.WithTTL(time.Minute))
	require.NoError(t, err)
	require.NoError(t, rdb.Del(ctx, prefix+keys[0]).Err())

	woke := sleepNode(t, cl, masters[1].Addr, 500*time.Millisecond)
	short, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	err = l.Extend(short, time.Minute)
	cancel()
	require.NoError(t, <-woke)
	require.ErrorIs(t, err, batchlock.ErrNotHeld, "the deleted key is reported")
	<-l.Context().Done()
	assert.ErrorIs(t, l.Err(), batchlock.ErrLockLost)
	_ = l.Unlock(ctx)
}
