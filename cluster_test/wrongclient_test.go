package cluster_test

import (
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/batchlock/batchlock/batchlock"
)

// A *redis.Client pointed at one node of a cluster is refused at its first
// call, at once, with ErrInvalid naming redis.NewClusterClient, rather than
// after the retries a slot on the move gets.
func TestSingleNodeClientOnAClusterNodeIsRefused(t *testing.T) {
	rdb := redis.NewClient(&redis.Options{Addr: sharedCluster(t).Addrs()[0]})
	t.Cleanup(func() { _ = rdb.Close() })
	c, prefix := newLocker(t, rdb)
	ctx := ctxTimeout(t, 30*time.Second)
	for _, tc := range []struct {
		name string
		call func() error
	}{
		{"TryLock", func() error { _, err := c.TryLock(ctx, spread(10, "wrong-client")); return err }},
		{"Lock", func() error { _, err := c.Lock(ctx, spread(10, "wrong-client")); return err }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			start := time.Now()
			err := tc.call()
			require.ErrorIs(t, err, batchlock.ErrInvalid)
			assert.Contains(t, err.Error(), "redis.NewClusterClient")
			assert.Less(t, time.Since(start), 2*time.Second, "refused at once, not after retries")
		})
	}
	assert.Empty(t, lockKeysUnder(t, newClient(t), prefix), "nothing is left held")

	err := c.Check(ctx)
	require.Error(t, err, "Check, a readiness probe, reports it")
	assert.Contains(t, err.Error(), "cluster state: cluster_enabled:1")
	assert.Contains(t, err.Error(), "redis.NewClusterClient")
}
