package cluster_test

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/batchlock/batchlock/batchlock"
	"github.com/batchlock/batchlock/hashtag"
	"github.com/batchlock/batchlock/localcluster"
)

// These tests stage the timing faults that once gave two holders of a key or
// left keys held: a reply that comes late, a context that ends mid-call, a
// replica that cannot acknowledge, a connection that drops, a slot that
// moves.

// commander sends a command to one node: a Cluster or Singles.
type commander interface {
	Do(ctx context.Context, addr string, args ...any) (any, error)
}

// sleepNode makes the node at addr run DEBUG SLEEP for d and returns once the
// node is seen busy; the channel yields the command's error when it answers
// again.
func sleepNode(t *testing.T, cl commander, addr string, d time.Duration) <-chan error {
	t.Helper()
	done := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(t.Context(), d+10*time.Second)
		defer cancel()
		_, err := cl.Do(ctx, addr, "DEBUG", "SLEEP", strconv.FormatFloat(d.Seconds(), 'f', 3, 64))
		done <- err
	}()
	require.Eventually(t, func() bool {
		ctx, cancel := context.WithTimeout(t.Context(), 50*time.Millisecond)
		defer cancel()
		_, err := cl.Do(ctx, addr, "PING")
		return err != nil
	}, 5*time.Second, time.Millisecond, "%s did not start sleeping", addr)
	return done
}

// retryWindow is batchlock's documented bound on retrying a call whose
// context has no deadline.
const retryWindow = 10 * time.Second

// keysOnMasters returns n keys on each of the first count masters, and the
// masters.
func keysOnMasters(t *testing.T, cl *localcluster.Cluster, prefix, tag string, count, n int) ([]string, []localcluster.Node) {
	t.Helper()
	masters, err := cl.Masters(ctxTimeout(t, 10*time.Second))
	require.NoError(t, err)
	var keys []string
	for i := range count {
		keys = append(keys, keysOn(t, masters[i], prefix, fmt.Sprintf("%s%d", tag, i), n)...)
	}
	return keys, masters
}

// keysInOneSlotOn returns n keys that share a hash tag served by master.
func keysInOneSlotOn(t *testing.T, master localcluster.Node, name string, n int) []string {
	t.Helper()
	for i := range 10000 {
		tag := fmt.Sprintf("%s-%d", name, i)
		if master.ServesSlot(hashtag.Slot(tag)) {
			keys := make([]string, n)
			for j := range keys {
				keys[j] = fmt.Sprintf("{%s}:%d", tag, j)
			}
			return keys
		}
	}
	t.Fatalf("no tag on %s", master.Addr)
	return nil
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

// Defect 2: with WithReplicas, Extend lengthens a lease only once replicas
// acknowledge it. The replica is frozen, so Extend must fail and leave the
// validity as it was; the master dies and the replica takes over with the
// lease it had: the next owner gets the key only after the first one's
// validity has ended.
func TestExtendWithReplicasNeedsAcknowledgement(t *testing.T) {
	cl := newCluster(t)
	rdb := cl.Client()
	t.Cleanup(func() { _ = rdb.Close() })
	c, prefix := newLocker(t, rdb)
	ctx := ctxTimeout(t, 2*time.Minute)
	masters, err := cl.Masters(ctx)
	require.NoError(t, err)
	master := masters[0]
	keys := keysOn(t, master, prefix, "ext-ack", 4)
	replica, err := cl.ReplicaOf(ctx, master.Addr)
	require.NoError(t, err)

	l, err := c.TryLock(ctx, keys, batchlock.WithTTL(3*time.Second), batchlock.WithReplicas(1, 300*time.Millisecond))
	require.NoError(t, err)
	waitReplicated(ctx, t, cl, master.Addr, replica.Addr)
	before := l.ValidUntil()

	require.NoError(t, cl.Freeze(ctx, replica.Addr))
	_, err = cl.Do(ctx, master.Addr, "CLIENT", "KILL", "TYPE", "replica")
	require.NoError(t, err)
	err = l.Extend(ctx, 30*time.Second)
	require.ErrorIs(t, err, batchlock.ErrNoReplicas, "an unacknowledged extension is refused")
	assert.Equal(t, before, l.ValidUntil(), "and lengthens nothing")

	require.NoError(t, cl.Kill(ctx, master.Addr))
	require.NoError(t, cl.Thaw(ctx, replica.Addr))
	promoted, err := cl.Failover(ctx, master.Addr, localcluster.Takeover())
	require.NoError(t, err)
	require.Equal(t, replica.Addr, promoted)

	other, _ := newLocker(t, rdb, batchlock.WithPrefix(prefix))
	var taken time.Time
	require.Eventually(t, func() bool {
		l2, err := other.TryLock(ctx, keys, batchlock.WithTTL(time.Minute))
		if err != nil {
			return false
		}
		taken = time.Now()
		_ = l2.Unlock(ctx)
		return true
	}, 30*time.Second, 20*time.Millisecond)
	assert.False(t, taken.Before(l.ValidUntil()), "a second owner got the keys %v before the first one's validity ended",
		l.ValidUntil().Sub(taken))
	require.NoError(t, cl.Restart(ctx, master.Addr))
	require.NoError(t, cl.WaitReady(ctx))
}

// Defect 2, the lease restart after a wait: a waiting WithTTL Lock that gets
// its last key after more than a tenth of its TTL restarts the leases of the
// keys it held meanwhile; with WithReplicas that restart needs
// acknowledgement like the acquire.
func TestLeaseRestartWithReplicasNeedsAcknowledgement(t *testing.T) {
	cl := newCluster(t)
	rdb := cl.Client()
	t.Cleanup(func() { _ = rdb.Close() })
	c, prefix := newLocker(t, rdb)
	ctx := ctxTimeout(t, 2*time.Minute)
	keys, masters := keysOnMasters(t, cl, prefix, "restart-ack", 2, 2)
	// The held key sorts after the first master's keys: the waiter takes
	// those, then waits.
	blocked := keys[3]
	require.Greater(t, hashtag.Slot(prefix+blocked), hashtag.Slot(prefix+keys[0]))
	holder, err := c.TryLock(ctx, []string{blocked}, batchlock.WithTTL(time.Minute))
	require.NoError(t, err)

	waiter := peerOf(t, rdb, prefix)
	const ttl = 5 * time.Second
	asked := time.Now()
	got := make(chan error, 1)
	go func() {
		l, err := waiter.Lock(ctx, keys, batchlock.WithTTL(ttl), batchlock.WithReplicas(1, 300*time.Millisecond))
		if err == nil {
			_ = l.Unlock(ctx)
		}
		got <- err
	}()
	require.Eventually(t, func() bool { return shardSubscribers(ctx, rdb, prefix+blocked) > 0 }, 10*time.Second, 5*time.Millisecond)
	replica, err := cl.ReplicaOf(ctx, masters[0].Addr)
	require.NoError(t, err)
	require.NoError(t, cl.Freeze(ctx, replica.Addr))
	t.Cleanup(func() { _ = cl.Thaw(context.Background(), replica.Addr) })
	// A wait of more than a tenth of the TTL: the leases restart once the
	// batch is held.
	require.Eventually(t, func() bool { return time.Since(asked) > ttl/10+50*time.Millisecond }, 10*time.Second, 5*time.Millisecond)
	require.NoError(t, holder.Unlock(ctx))
	select {
	case err := <-got:
		require.ErrorIs(t, err, batchlock.ErrNoReplicas, "the restarted lease of the first master's keys was not acknowledged")
		require.ErrorIs(t, err, batchlock.ErrNotObtained)
	case <-time.After(30 * time.Second):
		t.Fatal("the waiting Lock did not return")
	}
	require.NoError(t, cl.Thaw(ctx, replica.Addr))
	require.Eventually(t, func() bool { return len(lockKeysUnder(t, rdb, prefix)) == 0 }, 10*time.Second, 10*time.Millisecond)
}

// cancellations counts the cancelled holds remembered under prefix: members
// of a set, or keys of their own.
func cancellations(t *testing.T, rdb *redis.ClusterClient, prefix string) (n int64, longest time.Duration) {
	t.Helper()
	ctx := ctxTimeout(t, 10*time.Second)
	var mu sync.Mutex
	require.NoError(t, rdb.ForEachMaster(ctx, func(ctx context.Context, node *redis.Client) error {
		keys, err := node.Keys(ctx, prefix+"cancel:*").Result()
		if err != nil {
			return err
		}
		for _, k := range keys {
			kind, err := node.Type(ctx, k).Result()
			if err != nil {
				return err
			}
			count := int64(1)
			if kind == "set" {
				count = node.SCard(ctx, k).Val()
			}
			ttl := node.PTTL(ctx, k).Val()
			mu.Lock()
			n += count
			longest = max(longest, ttl)
			mu.Unlock()
		}
		return nil
	}))
	return n, longest
}

// timedOutTryLock makes a TryLock whose context ends while the master of keys
// is asleep: its rollback must cancel holds of unknown outcome.
func timedOutTryLock(t *testing.T, cl *localcluster.Cluster, c *batchlock.Client, master string, keys []string, ttl time.Duration) {
	t.Helper()
	woke := sleepNode(t, cl, master, 300*time.Millisecond)
	short, cancel := context.WithTimeout(t.Context(), 50*time.Millisecond)
	defer cancel()
	_, err := c.TryLock(short, keys, batchlock.WithTTL(ttl))
	require.ErrorIs(t, err, context.DeadlineExceeded)
	require.NoError(t, <-woke)
}

// Defects 3 and 4: every cancelled hold is forgotten after its own lease,
// whatever other rollbacks do: they neither keep it alive nor cut it short.
func TestCancelledHoldsAreForgottenOnTheirOwn(t *testing.T) {
	cl := sharedCluster(t)
	rdb := newClient(t)
	c, prefix := newLocker(t, rdb)
	masters, err := cl.Masters(ctxTimeout(t, 10*time.Second))
	require.NoError(t, err)
	keys := keysInOneSlotOn(t, masters[2], "cancel", 3)
	// The client's map of slots is loaded before the master sleeps: loaded
	// from the sleeping node, the acquire would never be sent (and would
	// leave no mark, rightly).
	warm, err := c.TryLock(ctxTimeout(t, 10*time.Second), keys)
	require.NoError(t, err)
	require.NoError(t, warm.Unlock(ctxTimeout(t, 10*time.Second)))

	timedOutTryLock(t, cl, c, masters[2].Addr, keys, time.Hour)
	// The rollback goes on in the background once the call's context ended.
	var n int64
	var longest time.Duration
	require.Eventually(t, func() bool {
		n, longest = cancellations(t, rdb, prefix)
		return n == 1
	}, 5*time.Second, 10*time.Millisecond, "the hour-long hold of unknown outcome is remembered")
	assert.Greater(t, longest, 59*time.Minute)

	timedOutTryLock(t, cl, c, masters[2].Addr, keys, 3*time.Second)
	_, longest = cancellations(t, rdb, prefix)
	assert.Greater(t, longest, 59*time.Minute, "a short rollback does not shorten a long cancellation")

	// Steady rollbacks with a 600ms lease, one about every 300ms: each is
	// forgotten 600ms after it was made, so no more than three are
	// remembered at once (a set that only grew would hold all five).
	c2, steady := newLocker(t, rdb)
	keys2 := keysInOneSlotOn(t, masters[2], "steady", 3)
	warm, err = c2.TryLock(ctxTimeout(t, 10*time.Second), keys2)
	require.NoError(t, err)
	require.NoError(t, warm.Unlock(ctxTimeout(t, 10*time.Second)))
	for range 5 {
		timedOutTryLock(t, cl, c2, masters[2].Addr, keys2, 600*time.Millisecond)
	}
	n, _ = cancellations(t, rdb, steady)
	assert.LessOrEqual(t, n, int64(3), "cancellations older than their lease are forgotten")
	require.Eventually(t, func() bool {
		n, _ := cancellations(t, rdb, steady)
		return n == 0
	}, 5*time.Second, 20*time.Millisecond, "and all are gone a lease after the last")
	assert.Empty(t, lockKeysUnder(t, rdb, prefix))
}

// Defect 5: an Unlock that failed can be tried again, and an Unlock with a
// context that already ended still releases.
func TestUnlockCanBeRetried(t *testing.T) {
	cl := sharedCluster(t)
	rdb := newClient(t)
	c, prefix := newLocker(t, rdb)
	ctx := ctxTimeout(t, 30*time.Second)
	masters, err := cl.Masters(ctx)
	require.NoError(t, err)
	keys := keysOn(t, masters[0], prefix, "unlock-retry", 4)

	l, err := c.TryLock(ctx, keys, batchlock.WithTTL(time.Hour))
	require.NoError(t, err)
	ended, cancel := context.WithCancel(ctx)
	cancel()
	require.NoError(t, l.Unlock(ended), "a deferred Unlock with an ended context still releases")
	assert.Empty(t, lockKeysUnder(t, rdb, prefix))

	l, err = c.TryLock(ctx, keys, batchlock.WithTTL(time.Hour))
	require.NoError(t, err)
	// While the master is paused the release cannot run, and the client
	// gives its connection up when the context ends, so it never runs.
	_, err = cl.Do(ctx, masters[0].Addr, "CLIENT", "PAUSE", "1000", "ALL")
	require.NoError(t, err)
	short, cancelShort := context.WithTimeout(ctx, 200*time.Millisecond)
	err = l.Unlock(short)
	cancelShort()
	require.Error(t, err, "the release cannot reach the paused master")
	require.Eventually(t, func() bool {
		_, err := cl.Do(ctx, masters[0].Addr, "PING")
		return err == nil
	}, 10*time.Second, 10*time.Millisecond, "the pause ends")
	assert.Len(t, lockKeysUnder(t, rdb, prefix), len(keys), "the failed release left the keys held")
	require.NoError(t, l.Unlock(ctx), "Unlock is tried again")
	assert.Empty(t, lockKeysUnder(t, rdb, prefix))
	assert.ErrorIs(t, l.Unlock(ctx), batchlock.ErrNotHeld, "once released, a lock is released")
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
	case <-inner.Done():
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

// Defect 8: wake-ups survive a dropped pub/sub connection, also when the
// Client listens to channels of several slots of one master.
func TestWakeUpsSurvivePubSubReconnect(t *testing.T) {
	cl := sharedCluster(t)
	rdb := newClient(t)
	c, prefix := newLocker(t, rdb, batchlock.WithPollInterval(time.Minute))
	ctx := ctxTimeout(t, 60*time.Second)
	masters, err := cl.Masters(ctx)
	require.NoError(t, err)
	keys := keysOn(t, masters[1], prefix, "wake", 2)
	a, b := keys[0], keys[1]
	require.NotEqual(t, hashtag.Slot(prefix+a), hashtag.Slot(prefix+b))
	holder, err := c.TryLock(ctx, []string{a, b}, batchlock.WithTTL(time.Minute))
	require.NoError(t, err)

	waiter := peerOf(t, rdb, prefix, batchlock.WithPollInterval(time.Minute))
	got := make(chan error, 2)
	for _, k := range []string{a, b} {
		go func() {
			l, err := waiter.Lock(ctx, []string{k})
			if err == nil {
				err = l.Unlock(ctx)
			}
			got <- err
		}()
	}
	subscribed := func() bool {
		return shardSubscribers(ctx, rdb, prefix+a) > 0 && shardSubscribers(ctx, rdb, prefix+b) > 0
	}
	require.Eventually(t, subscribed, 10*time.Second, 5*time.Millisecond)
	_, err = cl.Do(ctx, masters[1].Addr, "CLIENT", "KILL", "TYPE", "pubsub")
	require.NoError(t, err)
	require.Eventually(t, subscribed, 5*time.Second, 5*time.Millisecond, "the waiters listen again after the reconnect")

	require.NoError(t, holder.Unlock(ctx))
	for range 2 {
		select {
		case err := <-got:
			require.NoError(t, err)
		case <-time.After(20 * time.Second):
			t.Fatal("a waiter was not woken after the reconnect (it polls once a minute)")
		}
	}
}

// Defect 9: a slot marked MIGRATING and IMPORTING refuses multi-key scripts
// (TRYAGAIN). Calls end within their context, or within the documented
// bound without a deadline, saying which slot; a held lock can still be
// released; once the slot is stable, locking works again.
func TestSlotInMigrationBoundsCalls(t *testing.T) {
	cl := newCluster(t)
	rdb := cl.Client()
	t.Cleanup(func() { _ = rdb.Close() })
	c, prefix := newLocker(t, rdb)
	ctx := ctxTimeout(t, 2*time.Minute)
	keys := []string{"{mig}:1", "{mig}:2", "{mig}:3"}
	slot := hashtag.Slot(prefix + keys[0])
	held, err := c.TryLock(ctx, keys[:1], batchlock.WithTTL(time.Minute))
	require.NoError(t, err)
	stable := halfMigrate(ctx, t, cl, slot)

	short, cancel := context.WithTimeout(ctx, 2*time.Second)
	began := time.Now()
	_, err = c.TryLock(short, keys[1:])
	cancel()
	took := time.Since(began)
	require.Error(t, err)
	assert.ErrorContains(t, err, fmt.Sprintf("slot %d", slot))
	assert.Less(t, took, 3*time.Second, "the call ends with its context")

	began = time.Now()
	done := make(chan error, 1)
	go func() {
		_, err := c.TryLock(t.Context(), keys[1:])
		done <- err
	}()
	select {
	case err := <-done:
		require.Error(t, err)
		assert.ErrorContains(t, err, fmt.Sprintf("slot %d", slot))
		assert.Less(t, time.Since(began), retryWindow+3*time.Second, "without a deadline the call ends within the retry window")
	case <-time.After(retryWindow + 30*time.Second):
		t.Fatal("a call without a deadline did not end")
	}

	require.NoError(t, held.Unlock(ctx), "a lock whose keys did not move is released")
	stable()
	l, err := c.TryLock(ctx, keys)
	require.NoError(t, err, "locking works again once the slot is stable")
	require.NoError(t, l.Unlock(ctx))
	assert.Empty(t, lockKeysUnder(t, rdb, prefix))
}

// Close while a call is on its way: the call fails with ErrClosed rather
// than return a lock already reported lost, and leaves nothing held.
func TestCloseDuringLock(t *testing.T) {
	cl := sharedCluster(t)
	rdb := newClient(t)
	prefix := testPrefix(t)
	c, err := batchlock.New(rdb, batchlock.WithPrefix(prefix))
	require.NoError(t, err)
	ctx := ctxTimeout(t, 30*time.Second)
	keys, masters := keysOnMasters(t, cl, prefix, "close-during", 2, 2)
	warm, err := c.TryLock(ctx, keys)
	require.NoError(t, err)
	require.NoError(t, warm.Unlock(ctx))
	// A cluster client's first keyed command fetches COMMAND from a random
	// node, which may be the one about to sleep: done before.
	require.NoError(t, rdb.Exists(ctx, prefix+keys[0]).Err())

	woke := sleepNode(t, cl, masters[1].Addr, 300*time.Millisecond)
	got := make(chan error, 1)
	go func() {
		l, err := c.Lock(ctx, keys)
		if err == nil {
			err = fmt.Errorf("got a lock (Err %v)", l.Err())
		}
		got <- err
	}()
	// The call is on its way once the awake master holds its keys.
	require.Eventually(t, func() bool { return rdb.Exists(ctx, prefix+keys[0]).Val() == 1 }, 5*time.Second, time.Millisecond)
	require.NoError(t, c.Close())
	require.NoError(t, <-woke)
	require.ErrorIs(t, <-got, batchlock.ErrClosed)
	require.Eventually(t, func() bool { return len(lockKeysUnder(t, rdb, prefix)) == 0 }, 10*time.Second, 10*time.Millisecond)
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
	<-l.Done()
	assert.ErrorIs(t, l.Err(), batchlock.ErrLockLost)
	_ = l.Unlock(ctx)
}
