package cluster_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/batchlock/batchlock/batchlock"
	"github.com/batchlock/batchlock/hashtag"
	"github.com/batchlock/batchlock/localcluster"
)

func TestReplicaAcknowledgement(t *testing.T) {
	rdb := newClient(t)
	ctx := ctxTimeout(t, 30*time.Second)
	keys := spread(40, "ack")

	c, prefix := newLocker(t, rdb, batchlock.WithReplicas(1, 2*time.Second))
	l, err := c.Lock(ctx, keys)
	require.NoError(t, err, "every master has one replica to acknowledge")
	require.NoError(t, l.Unlock(ctx))

	// Each master has one replica: asking for two cannot be met, and the
	// lock is rolled back.
	start := time.Now()
	_, err = c.Lock(ctx, keys, batchlock.WithReplicas(2, 200*time.Millisecond))
	require.ErrorIs(t, err, batchlock.ErrNotObtained)
	require.ErrorIs(t, err, batchlock.ErrNoReplicas)
	assert.Contains(t, err.Error(), "1 of 2 replicas")
	assert.GreaterOrEqual(t, time.Since(start), 200*time.Millisecond, "WAIT waited for its timeout")
	assert.Empty(t, lockKeysUnder(t, rdb, prefix), "an unacknowledged lock is rolled back")

	l, err = c.TryLock(ctx, keys, batchlock.WithReplicas(0, 0))
	require.NoError(t, err, "a call can turn the client's default off")
	require.NoError(t, l.Unlock(ctx))

	_, err = c.TryLock(ctx, keys, batchlock.WithReplicas(-1, time.Second))
	assert.ErrorIs(t, err, batchlock.ErrInvalid)
	_, err = c.TryLock(ctx, keys, batchlock.WithReplicas(1, 0))
	assert.ErrorIs(t, err, batchlock.ErrInvalid)
}

// A lock taken WithReplicas has its renewals acknowledged too: when a replica
// goes, its lease can no longer be confirmed and the lock is reported lost
// rather than silently kept on a master whose failover would lose it.
func TestRenewalNeedsReplicaAcknowledgement(t *testing.T) {
	cl := newCluster(t)
	rdb := cl.Client()
	t.Cleanup(func() { _ = rdb.Close() })
	const lease = 900 * time.Millisecond
	c, _ := newLocker(t, rdb, batchlock.WithLease(lease))
	ctx := ctxTimeout(t, 60*time.Second)
	keys := spread(30, "renew-ack")

	acked, err := c.Lock(ctx, keys, batchlock.WithReplicas(1, 200*time.Millisecond))
	require.NoError(t, err)
	plain, err := c.Lock(ctx, spread(30, "renew-plain"))
	require.NoError(t, err)

	masters, err := cl.Masters(ctx)
	require.NoError(t, err)
	replica, err := cl.ReplicaOf(ctx, masters[0].Addr)
	require.NoError(t, err)
	require.NoError(t, cl.Kill(ctx, replica.Addr))

	select {
	case <-acked.Context().Done():
		assert.ErrorIs(t, acked.Err(), batchlock.ErrLockLost)
	case <-time.After(10 * lease):
		t.Fatal("a lock whose renewals are no longer acknowledged was not reported lost")
	}
	assert.NoError(t, plain.Err(), "a lock without WithReplicas keeps being renewed")
	require.NoError(t, plain.Unlock(ctx))
	_ = acked.Unlock(ctx)
	require.NoError(t, cl.Restart(ctx, replica.Addr))
}

// With two replicas per master, WithReplicas(n) protects a lock from a
// failover only when every replica that can be promoted acknowledged it.
// The lagging replica promoted (CLUSTER FAILOVER TAKEOVER on the one that
// did not acknowledge): a lock acknowledged by one replica of two is gone
// from the new master and a second owner takes the key, the documented
// limit, and its token repeats; asking for both replicas refuses the lock up
// front instead, and the key's token still grows past every token
// acknowledged by both.
func TestReplicasOfTwoAndTheLaggingOnePromoted(t *testing.T) {
	cl := newCluster(t, localcluster.WithReplicasPerMaster(2))
	rdb := cl.Client()
	t.Cleanup(func() { _ = rdb.Close() })
	ctx := ctxTimeout(t, 3*time.Minute)
	masters, err := cl.Masters(ctx)
	require.NoError(t, err)

	for i, tc := range []struct {
		name     string
		replicas int
	}{
		{"acknowledged by one of two: lost when the other is promoted", 1},
		{"acknowledged by both: refused while one lags", 2},
	} {
		master := masters[i] // each case breaks a master of its own
		t.Run(tc.name, func(t *testing.T) {
			c, prefix := newLocker(t, rdb)
			key := keysOn(t, master, prefix, "two-replicas", 1)
			replicas, err := cl.ReplicasOf(ctx, master.Addr)
			require.NoError(t, err)
			require.Len(t, replicas, 2)
			lagging := replicas[1]
			acked, err := c.TryLock(ctx, key, batchlock.WithReplicas(2, 5*time.Second))
			require.NoError(t, err, "both replicas acknowledge while neither lags")
			ackedToken := acked.Token(key[0]) // 0 once released
			require.NoError(t, acked.Unlock(ctx))

			var first *batchlock.Lock
			var lockErr error
			err = cl.PromoteLagging(ctx, master.Addr, lagging.Addr, func(ctx context.Context) error {
				first, lockErr = c.TryLock(ctx, key, batchlock.WithTTL(time.Minute), batchlock.WithReplicas(tc.replicas, 500*time.Millisecond))
				return nil
			})
			require.NoError(t, err)
			require.NoError(t, cl.WaitReady(ctx))
			now, err := cl.MasterOfSlot(ctx, hashtag.Slot(prefix+key[0]))
			require.NoError(t, err)
			require.Equal(t, lagging.Addr, now.Addr, "the lagging replica serves the key")

			// A second process: this Client's own gate still holds the key
			// for the first lock, which nothing has told it is lost.
			second, err := peerOf(t, rdb, prefix).TryLock(ctx, key, batchlock.WithTTL(time.Minute))
			if tc.replicas == 1 {
				require.NoError(t, lockErr, "one replica acknowledged the first lock")
				require.NoError(t, err, "the failover lost the first lock: a second owner takes the key")
				assert.NoError(t, first.Err(), "the first holder was told nothing")
				assert.Equal(t, first.Token(key[0]), second.Token(key[0]),
					"the new master's counter lacks the first lock's increment: the token repeats")
				_ = first.Unlock(ctx)
			} else {
				require.ErrorIs(t, lockErr, batchlock.ErrNoReplicas, "one replica of two cannot acknowledge")
				require.Nil(t, first)
				require.NoError(t, err, "nothing was granted, so nothing was lost")
			}
			assert.Greater(t, second.Token(key[0]), ackedToken, "past every token both replicas acknowledged")
			require.NoError(t, second.Unlock(ctx))
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
	require.NoError(t, cl.WaitReplicated(ctx, master.Addr, replica.Addr))
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
