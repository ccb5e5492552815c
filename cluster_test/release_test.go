package cluster_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/batchlock/batchlock/batchlock"
	"github.com/batchlock/batchlock/localcluster"
)

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
	// forgotten 600ms after it was made, so fewer than all five are
	// remembered at once (a set that only grew would hold all five; about
	// three, on a machine not loaded), and none a lease after the last.
	c2, steady := newLocker(t, rdb)
	keys2 := keysInOneSlotOn(t, masters[2], "steady", 3)
	warm, err = c2.TryLock(ctxTimeout(t, 10*time.Second), keys2)
	require.NoError(t, err)
	require.NoError(t, warm.Unlock(ctxTimeout(t, 10*time.Second)))
	for range 5 {
		timedOutTryLock(t, cl, c2, masters[2].Addr, keys2, 600*time.Millisecond)
	}
	n, _ = cancellations(t, rdb, steady)
	assert.Less(t, n, int64(5), "cancellations older than their lease are forgotten")
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
