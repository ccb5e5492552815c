package cluster_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/batchlock/batchlock/batchlock"
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
