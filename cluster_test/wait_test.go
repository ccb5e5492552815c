package cluster_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/batchlock/batchlock/batchlock"
)

// A Lock whose WithWait runs out fails with a *ConflictError naming the key
// it waited for, wrapping ErrNotObtained and context.DeadlineExceeded, and
// holds nothing once it returned; the call's own context is not what ended
// it. The same when
// the key is held by another lock of the same Client (an in-process wait).
func TestWaitRunsOut(t *testing.T) {
	const wait = 300 * time.Millisecond
	rdb := newClient(t)
	holderClient, prefix := newLocker(t, rdb)
	other := peerOf(t, rdb, prefix)
	ctx := ctxTimeout(t, 30*time.Second)
	keys := spread(8, "wait")
	holder, err := holderClient.Lock(ctx, keys[5:6])
	require.NoError(t, err)

	for _, tc := range []struct {
		name string
		c    *batchlock.Client
	}{
		{"held by another Client, a wait in Redis", other},
		{"held by another lock of this Client, a wait in the process", holderClient},
	} {
		t.Run(tc.name, func(t *testing.T) {
			start := time.Now()
			_, err := tc.c.Lock(ctx, keys, batchlock.WithWait(wait))
			took := time.Since(start)
			var conflict *batchlock.ConflictError
			require.ErrorAs(t, err, &conflict)
			assert.Equal(t, keys[5:6], conflict.Keys, "the key it waited for")
			assert.Equal(t, map[string][]string{keys[5]: {holder.Owner()}}, conflict.Holders, "and who holds it")
			assert.ErrorIs(t, err, batchlock.ErrNotObtained)
			assert.ErrorIs(t, err, context.DeadlineExceeded)
			assert.GreaterOrEqual(t, took, wait)
			assert.Less(t, took, 10*time.Second, "ended by its wait, not the call's context")
			assert.NoError(t, ctx.Err())
			// The rollback waits for its release under the call's context,
			// which the wait does not end: nothing is left when it returns.
			held, err := holderClient.Inspect(ctx, keys...)
			require.NoError(t, err)
			for i, h := range held {
				assert.Equal(t, i == 5, len(h.Holders) > 0, "%s: only the holder's key is held once the call returned", h.Key)
				assert.Zero(t, h.Waiting, "%s: no place left in a queue", h.Key)
			}
		})
	}
	require.NoError(t, holder.Unlock(ctx))

	l, err := other.Lock(ctx, keys, batchlock.WithWait(wait))
	require.NoError(t, err, "free keys are taken within the wait")
	require.NoError(t, l.Unlock(ctx))
	_, err = other.Lock(ctx, keys, batchlock.WithWait(0))
	require.ErrorIs(t, err, batchlock.ErrInvalid)
}

// TryLock's conflict names who holds each key, found by the attempt itself:
// the owner of a key held exclusively, every reader of a key held shared,
// sorted; in Redis (another Client) and at this Client's gates alike.
func TestConflictNamesTheHolders(t *testing.T) {
	rdb := newClient(t)
	c, prefix := newLocker(t, rdb)
	other := peerOf(t, rdb, prefix)
	ctx := ctxTimeout(t, 30*time.Second)
	keys := spread(4, "holders")
	writer, err := c.Lock(ctx, keys[:1], batchlock.WithOwner("writer"))
	require.NoError(t, err)
	var readers []*batchlock.Lock
	for _, owner := range []string{"reader-b", "reader-a"} {
		r, err := c.Lock(ctx, nil, batchlock.WithShared(keys[2]), batchlock.WithOwner(owner))
		require.NoError(t, err)
		readers = append(readers, r)
	}
	want := map[string][]string{keys[0]: {"writer"}, keys[2]: {"reader-a", "reader-b"}}
	for _, tc := range []struct {
		name string
		c    *batchlock.Client
	}{
		{"in Redis", other},
		{"at the gates", c},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := tc.c.TryLock(ctx, keys, batchlock.WithOwner("asker"))
			var conflict *batchlock.ConflictError
			require.ErrorAs(t, err, &conflict)
			assert.ElementsMatch(t, []string{keys[0], keys[2]}, conflict.Keys)
			assert.Equal(t, want, conflict.Holders)
		})
	}
	require.NoError(t, writer.Unlock(ctx))
	for _, r := range readers {
		require.NoError(t, r.Unlock(ctx))
	}
}

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
