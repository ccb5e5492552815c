package cluster_test

import (
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/batchlock/batchlock/batchlock"
)

// A holder cut off from the master of its key, both ways or one (its
// requests lost, or its replies: a half-open link whose renewals still run
// on the master), learns that its lock is lost no later than the validity it
// was told, and another process gets the key only after that; once the link
// heals nothing is left held.
func TestPartitionedHolderLearnsItsLossInTime(t *testing.T) {
	cl := sharedCluster(t)
	masters, err := cl.Masters(ctxTimeout(t, 10*time.Second))
	require.NoError(t, err)
	for _, tc := range []struct {
		name    string
		streams []string
	}{
		{"both ways", []string{upstream, downstream}},
		{"requests lost", []string{upstream}},
		{"replies lost", []string{downstream}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := ctxTimeout(t, 30*time.Second)
			link := newClientNet(t)
			rdb := redis.NewClusterClient(link.options(cl.ClientOptions()))
			t.Cleanup(func() { _ = rdb.Close() })
			holder, prefix := newLocker(t, rdb, batchlock.WithLease(900*time.Millisecond))
			waiter := peerOf(t, newClient(t), prefix)
			master := masters[0]
			key := keysOn(t, master, prefix, "partition", 1)

			l, err := holder.Lock(ctx, key)
			require.NoError(t, err)
			heal, err := link.cut(master.Addr, tc.streams...)
			require.NoError(t, err)
			t.Cleanup(heal) // healing twice removes nothing more

			got := make(chan time.Time, 1)
			go func() {
				wl, err := waiter.Lock(ctx, key)
				if assert.NoError(t, err) {
					got <- time.Now()
					assert.NoError(t, wl.Unlock(ctx))
				}
				close(got)
			}()
			select {
			case <-l.Context().Done():
			case <-ctx.Done():
				t.Fatal("the holder was never told of its loss")
			}
			lostAt := time.Now()
			assert.ErrorIs(t, l.Err(), batchlock.ErrLockLost)
			assert.False(t, lostAt.After(l.ValidUntil().Add(100*time.Millisecond)),
				"told of the loss %v after the validity it counted on", lostAt.Sub(l.ValidUntil()))
			waited, ok := <-got
			require.True(t, ok, "the waiter gets the key")
			assert.True(t, waited.After(lostAt), "the waiter held the key before the holder stopped counting on it")

			heal()
			_ = l.Unlock(ctx)
			require.Eventually(t, func() bool { return len(lockKeysUnder(t, newClient(t), prefix)) == 0 },
				10*time.Second, 20*time.Millisecond, "nothing left once the link healed")
		})
	}
}
