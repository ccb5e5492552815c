package cluster_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/batchlock/batchlock/batchlock"
)

// A master frozen while a batch is being taken: the call fails with its
// context, and once the master thaws and runs the commands that waited in
// its socket buffers, in whatever order, nothing of the batch is held.
func TestFrozenMasterMidAcquireLeavesNothingHeld(t *testing.T) {
	cl := newCluster(t)
	rdb := cl.Client()
	t.Cleanup(func() { _ = rdb.Close() })
	c, prefix := newLocker(t, rdb)
	ctx := ctxTimeout(t, 60*time.Second)
	keys := spread(60, "frozen")

	// Warm up: scripts loaded, topology known.
	l, err := c.Lock(ctx, keys)
	require.NoError(t, err)
	require.NoError(t, l.Unlock(ctx))

	masters, err := cl.Masters(ctx)
	require.NoError(t, err)
	frozen := masters[1].Addr
	require.NoError(t, cl.Freeze(ctx, frozen))
	// The node stays frozen for less than cluster-node-timeout, so it comes
	// back as the same master and runs what it received meanwhile.
	thawed := make(chan error, 1)
	time.AfterFunc(1200*time.Millisecond, func() { thawed <- cl.Thaw(context.Background(), frozen) })

	short, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel()
	_, err = c.Lock(short, keys)
	require.Error(t, err, "a batch with keys on a frozen master cannot be taken")
	require.NoError(t, <-thawed)

	require.Eventually(t, func() bool { return len(lockKeysUnder(t, rdb, prefix)) == 0 }, 20*time.Second, 20*time.Millisecond,
		"nothing is left held once the frozen master thawed")
	require.NoError(t, cl.WaitReady(ctx))
	l, err = c.TryLock(ctx, keys)
	require.NoError(t, err, "the keys can be taken again")
	require.NoError(t, l.Unlock(ctx))
}

// A master failed over between calls: the promoted replica knows no scripts
// (NOSCRIPT) and the client's map of slots is stale (MOVED); locking goes on,
// and fencing tokens keep growing across the failover.
func TestLockingWorksAcrossFailover(t *testing.T) {
	cl := newCluster(t)
	rdb := cl.Client()
	t.Cleanup(func() { _ = rdb.Close() })
	c, prefix := newLocker(t, rdb)
	ctx := ctxTimeout(t, 90*time.Second)
	keys := spread(90, "failover")

	before, err := c.Lock(ctx, keys, batchlock.WithReplicas(1, 2*time.Second))
	require.NoError(t, err)
	tokens := map[string]int64{}
	for _, k := range keys {
		tokens[k] = before.Token(k)
	}
	require.NoError(t, before.Unlock(ctx))

	masters, err := cl.Masters(ctx)
	require.NoError(t, err)
	promoted, err := cl.Failover(ctx, masters[0].Addr)
	require.NoError(t, err)
	require.NotEqual(t, masters[0].Addr, promoted)

	after, err := c.Lock(ctx, keys)
	require.NoError(t, err, "locking works on the new topology")
	for _, k := range keys {
		assert.Greater(t, after.Token(k), tokens[k], "token of %s grows across the failover", k)
	}
	require.NoError(t, after.Unlock(ctx))
	assert.Empty(t, lockKeysUnder(t, rdb, prefix))
}
