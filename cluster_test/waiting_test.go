package cluster_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/batchlock/batchlock/batchlock"
)

// A waiter renews the keys it already holds while it waits for the rest.
// When that renewal is slow (its master paused for writes, answering
// nothing else meanwhile, for longer than a place in a queue lasts), the
// waiter still renews its place in the queue of the key it waits for, on
// another master: when that key is released it is handed to this waiter,
// first in the queue, not to the one queued behind it.
func TestSlowRenewalWhileWaitingKeepsThePlace(t *testing.T) {
	cl := newCluster(t)
	rdb := cl.Client()
	t.Cleanup(func() { _ = rdb.Close() })
	ctx := ctxTimeout(t, 2*time.Minute)
	masters, err := cl.Masters(ctx)
	require.NoError(t, err)
	// The waiter's place lasts 3s (three default poll intervals); it renews
	// its held key every 3s, a third of its lease.
	const lease = 9 * time.Second
	first, prefix := newLocker(t, rdb, batchlock.WithLease(lease))
	newClient := func() *batchlock.Client {
		c, err := batchlock.New(rdb, batchlock.WithPrefix(prefix))
		require.NoError(t, err)
		t.Cleanup(func() { _ = c.Close() })
		return c
	}
	holderClient, secondClient := newClient(), newClient()
	held := keysOn(t, masters[0], prefix, "slow-renewal-held", 1)[0]
	wanted := keysOn(t, masters[1], prefix, "slow-renewal-wanted", 1)[0]

	holder, err := holderClient.TryLock(ctx, []string{wanted}, batchlock.WithTTL(time.Minute))
	require.NoError(t, err)
	got := make(chan *batchlock.Lock, 2)
	go func() {
		l, err := first.Lock(ctx, []string{held, wanted})
		assert.NoError(t, err)
		got <- l
	}()
	waitQueued(ctx, t, holderClient, wanted, 1)
	go func() {
		l, err := secondClient.Lock(ctx, []string{wanted})
		assert.NoError(t, err)
		got <- l
	}()
	waitQueued(ctx, t, holderClient, wanted, 2)

	// Pause the held key's master just before the waiter's next renewal of
	// it: seen as its lease growing, it comes a third of a lease later.
	leaseOf := func() time.Duration { return heldKeys(t, holderClient, held)[0].Lease }
	last := leaseOf()
	var renewedAt time.Time
	require.Eventually(t, func() bool {
		l := leaseOf()
		grew := l > last+time.Second
		last = l
		if grew {
			renewedAt = time.Now()
		}
		return grew
	}, 2*lease, 20*time.Millisecond, "the waiter renews the key it holds")
	time.Sleep(time.Until(renewedAt.Add(lease/3 - 200*time.Millisecond))) // the moment of the pause is the fault
	const pause = 5 * time.Second
	_, err = cl.Do(ctx, masters[0].Addr, "CLIENT", "PAUSE", pause.Milliseconds(), "WRITE")
	require.NoError(t, err)
	pausedAt := time.Now()

	// Released once the waiter's place would have lapsed had it only been
	// renewing, while its master is still paused.
	time.Sleep(time.Until(pausedAt.Add(4500 * time.Millisecond))) // the moment of the release is the fault
	require.NoError(t, holder.Unlock(ctx))
	var winner *batchlock.Lock
	select {
	case winner = <-got:
	case <-time.After(30 * time.Second):
		t.Fatal("no waiter got the key")
	}
	assert.Equal(t, []string{held, wanted}, winner.Keys(), "the first waiter, whose renewal was slow, is handed the key")
	require.NoError(t, winner.Unlock(ctx))
	other := <-got
	require.NotNil(t, other)
	require.NoError(t, other.Unlock(ctx))
}
