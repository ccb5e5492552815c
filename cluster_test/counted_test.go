package cluster_test

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/batchlock/batchlock/batchlock"
	"github.com/batchlock/batchlock/hashtag"
)

// units is WithUnits of n units of each key.
func units(n int64, keys ...string) batchlock.LockOption {
	m := make(map[string]int64, len(keys))
	for _, k := range keys {
		m[k] = n
	}
	return batchlock.WithUnits(m)
}

// setCapacities gives each key capacity units.
func setCapacities(t *testing.T, c *batchlock.Client, capacity int64, keys ...string) {
	t.Helper()
	for _, k := range keys {
		require.NoError(t, c.SetCapacity(ctxTimeout(t, 10*time.Second), k, capacity))
	}
}

// A basket of counted, exclusive and shared keys on three masters is taken
// all or nothing: a second owner whose units do not fit on one master holds
// nothing anywhere, and once they fit holds them beside the first. A
// Consume takes the units from each key's capacity, on its own master.
func TestCountedAllOrNothingAcrossMasters(t *testing.T) {
	c, prefix := newLocker(t, newClient(t))
	ctx := ctxTimeout(t, 30*time.Second)
	keys, _ := keysOnMasters(t, sharedCluster(t), prefix, "counted", 3, 3)
	counted := []string{keys[0], keys[3], keys[6]} // one on each master
	exclusive := []string{keys[1], keys[4], keys[7]}
	shared := []string{keys[2], keys[5], keys[8]}
	setCapacities(t, c, 5, counted...)
	first, err := c.TryLock(ctx, exclusive, batchlock.WithShared(shared...), units(3, counted...), batchlock.WithOwner("a"))
	require.NoError(t, err)

	peer := peerOf(t, newClient(t), prefix)
	fits := map[string]int64{counted[0]: 2, counted[1]: 2, counted[2]: 3}
	_, err = peer.TryLock(ctx, []string{"sku:counted:free"}, batchlock.WithShared(shared...), batchlock.WithUnits(fits), batchlock.WithOwner("b"))
	var conflict *batchlock.ConflictError
	require.ErrorAs(t, err, &conflict)
	assert.Equal(t, []string{counted[2]}, conflict.Keys, "3 more do not fit 5 with 3 held there alone")
	for _, h := range heldKeys(t, c, append([]string{"sku:counted:free"}, keys...)...) {
		assert.NotContains(t, h.Holders, "b", "%s kept by a refused TryLock", h.Key)
	}

	second, err := peer.TryLock(ctx, []string{"sku:counted:free"}, batchlock.WithShared(shared...), units(2, counted...), batchlock.WithOwner("b"))
	require.NoError(t, err)
	for _, h := range heldKeys(t, c, counted...) {
		assert.Equal(t, map[string]int64{"a": 3, "b": 2}, h.Units, h.Key)
		assert.Zero(t, h.Free, h.Key)
		assert.Greater(t, second.Token(h.Key), first.Token(h.Key), "%s: a new hold, a newer token", h.Key)
	}
	require.NoError(t, second.Consume(ctx))
	require.NoError(t, first.Unlock(ctx))
	for _, h := range heldKeys(t, c, counted...) {
		assert.Equal(t, int64(3), h.Capacity, "%s: 2 sold", h.Key)
		assert.Empty(t, h.Holders)
	}
	assert.Empty(t, lockKeysUnder(t, newClient(t), prefix))
}

// A Lock that waits for units on one master keeps, in the global order,
// the units before them on the others, and gets them all once the holder
// lets go; a waiter whose wait runs out leaves nothing, not a unit nor a
// place in a queue.
func TestCountedWaitAcrossMasters(t *testing.T) {
	c, prefix := newLocker(t, newClient(t))
	ctx := ctxTimeout(t, 30*time.Second)
	keys, _ := keysOnMasters(t, sharedCluster(t), prefix, "counted-wait", 3, 1)
	setCapacities(t, c, 4, keys...)
	slices.SortFunc(keys, func(a, b string) int { return cmp.Compare(hashtag.Slot(prefix+a), hashtag.Slot(prefix+b)) })
	last := keys[len(keys)-1] // the last in the global order
	holder, err := c.Lock(ctx, nil, units(4, last), batchlock.WithOwner("holder"))
	require.NoError(t, err)

	peer := peerOf(t, newClient(t), prefix)
	_, err = peer.Lock(ctx, nil, units(1, keys...), batchlock.WithOwner("late"), batchlock.WithWait(300*time.Millisecond))
	require.ErrorIs(t, err, batchlock.ErrNotObtained)
	require.ErrorIs(t, err, context.DeadlineExceeded)
	for _, h := range heldKeys(t, c, keys...) {
		assert.NotContains(t, h.Holders, "late", "%s kept by a wait that ran out", h.Key)
		assert.Zero(t, h.Waiting, "%s: the place went with the wait", h.Key)
	}

	got := make(chan error, 1)
	var waiter *batchlock.Lock
	go func() {
		var err error
		waiter, err = peer.Lock(ctx, nil, units(1, keys...), batchlock.WithOwner("waiter"))
		got <- err
	}()
	require.Eventually(t, func() bool { return holderOf(t, c, last).Waiting == 1 }, 10*time.Second, 5*time.Millisecond,
		"the waiter queues for the units of %s", last)
	for _, k := range keys {
		if k != last {
			assert.Equal(t, map[string]int64{"waiter": 1}, holderOf(t, c, k).Units, "%s, before the key waited for, is kept", k)
		}
	}
	require.NoError(t, holder.Unlock(ctx))
	require.NoError(t, <-got)
	for _, h := range heldKeys(t, c, keys...) {
		assert.Equal(t, map[string]int64{"waiter": 1}, h.Units, h.Key)
	}
	require.NoError(t, waiter.Unlock(ctx))
	assert.Empty(t, lockKeysUnder(t, newClient(t), prefix))
}

// A counted lock taken with WithReplicas is acknowledged as any other; one
// whose key is released behind its back is lost (Done, ErrLockLost), and
// its Consume then sells nothing.
func TestCountedLockReplicatedAndLost(t *testing.T) {
	c, prefix := newLocker(t, newClient(t), batchlock.WithReplicas(1, 2*time.Second))
	ctx := ctxTimeout(t, 30*time.Second)
	keys := spread(2, "counted-lost")
	setCapacities(t, c, 10, keys...)
	l, err := c.Lock(ctx, nil, units(4, keys...))
	require.NoError(t, err)
	_, err = c.ForceUnlock(ctx, keys[1])
	require.NoError(t, err)
	select {
	case <-l.Context().Done():
	case <-ctx.Done():
		t.Fatal("the loss was not told")
	}
	require.ErrorIs(t, l.Err(), batchlock.ErrLockLost)
	require.ErrorIs(t, l.Consume(ctx), batchlock.ErrNotHeld)
	for _, h := range heldKeys(t, c, keys...) {
		assert.Equal(t, int64(10), h.Capacity, "%s: nothing sold by a lost lock", h.Key)
		assert.Empty(t, h.Holders, h.Key)
	}
	assert.Empty(t, lockKeysUnder(t, newClient(t), prefix))
}

// Three Processor replicas whose baskets ask units of five keys of one
// space, stock plentiful or running out: every basket ends taken or sold
// out (Tick.Failed), each tick's units are sold with ConsumeEach, and
// every capacity ends as its start less what was sold, nothing held.
func TestProcessorReplicasOnCountedKeys(t *testing.T) {
	for _, capacity := range []int64{100_000, 200} {
		t.Run(fmt.Sprintf("capacity %d", capacity), func(t *testing.T) {
			rdb := newClient(t)
			c, prefix := newLocker(t, rdb)
			keys := []string{"{space}a", "{space}b", "{space}c", "{space}d", "{space}e"}
			setCapacities(t, c, capacity, keys...)
			ctx := ctxTimeout(t, time.Minute)
			var mu sync.Mutex
			sold := map[string]int64{}
			failed := 0
			var wg sync.WaitGroup
			for r := range 3 {
				replica := peerOf(t, newClient(t), prefix)
				p, err := batchlock.NewProcessor[map[string]int64](replica, 0)
				require.NoError(t, err)
				rng := rand.New(rand.NewPCG(uint64(r), 1))
				for i := range 300 {
					units := map[string]int64{}
					for range 1 + rng.IntN(3) {
						units[keys[rng.IntN(len(keys))]] = 1 + rng.Int64N(3)
					}
					require.NoError(t, p.Add(units, batchlock.Basket{Keys: []string{fmt.Sprintf("{space}order-%d-%d", r, i)}, Units: units}))
				}
				wg.Go(func() {
					defer func() { _, _ = p.Close(ctx) }()
					for done := 0; done < 300; {
						tick, err := p.Next(ctx)
						if err != nil {
							t.Errorf("replica %d, after %d baskets: %v", r, done, err)
							return
						}
						done += len(tick.Baskets) + len(tick.Failed)
						locks := make([]*batchlock.Lock, len(tick.Baskets))
						for i, b := range tick.Baskets {
							locks[i] = b.Lock
						}
						if err := replica.ConsumeEach(ctx, locks); err != nil {
							t.Errorf("replica %d: ConsumeEach: %v", r, err)
						}
						mu.Lock()
						for _, b := range tick.Baskets {
							for k, n := range b.Item {
								sold[k] += n
							}
						}
						for _, f := range tick.Failed {
							if !errors.Is(f.Err, batchlock.ErrOverCapacity) {
								t.Errorf("replica %d: a basket failed: %v", r, f.Err)
							}
							failed++
						}
						mu.Unlock()
						if err := tick.Done(ctx); err != nil {
							t.Errorf("replica %d: Done: %v", r, err)
						}
					}
				})
			}
			wg.Wait()
			for _, h := range heldKeys(t, c, keys...) {
				assert.Equal(t, capacity-sold[h.Key], h.Capacity, "%s: its start less what was sold", h.Key)
				assert.Empty(t, h.Holders, h.Key)
			}
			if capacity == 200 {
				assert.Positive(t, failed, "the stock ran out")
			}
		})
	}
}

// A capacity change whose reply comes late (its master asleep past the
// client's read timeout) is made once: AddCapacity reports the capacity
// it made, and Inspect finds that one, whatever the client sent again.
func TestCapacityChangedOnceAcrossALateReply(t *testing.T) {
	cl := sharedCluster(t)
	c, prefix := newLocker(t, newClient(t))
	keys, masters := keysOnMasters(t, cl, prefix, "late-restock", 1, 1)
	setCapacities(t, c, 10, keys[0])
	slept := sleepNode(t, cl, masters[0].Addr, 1800*time.Millisecond) // past the read timeout, 1 s
	got, err := c.AddCapacity(ctxTimeout(t, 20*time.Second), keys[0], 5)
	require.NoError(t, <-slept)
	h := holderOf(t, c, keys[0])
	if err != nil {
		assert.Contains(t, []int64{10, 15}, h.Capacity, "a change that failed was made once or not at all: %v", err)
		return
	}
	assert.Equal(t, int64(15), got, "the capacity AddCapacity made")
	assert.Equal(t, int64(15), h.Capacity, "the capacity Redis has")
}

// A Consume of a lock taken WithReplicas waits for its sale to reach the
// replica, as the take did: with the replica's link paused it fails with
// ErrNoReplicas, the lock released and its units sold on the master all
// the same; with the link back, a Consume counts.
func TestConsumeWithReplicasWaitsForTheSale(t *testing.T) {
	cl := sharedCluster(t)
	ctx := ctxTimeout(t, time.Minute)
	c, prefix := newLocker(t, newClient(t), batchlock.WithReplicas(1, 300*time.Millisecond))
	keys, masters := keysOnMasters(t, cl, prefix, "consume-acked", 1, 1)
	setCapacities(t, c, 10, keys...)
	replica, err := cl.ReplicaOf(ctx, masters[0].Addr)
	require.NoError(t, err)

	l, err := c.Lock(ctx, nil, units(4, keys...))
	require.NoError(t, err, "taken while the replica follows")
	require.NoError(t, cl.PauseReplication(ctx, replica.Addr))
	t.Cleanup(func() { _ = cl.ResumeReplication(context.Background(), replica.Addr) })
	err = l.Consume(ctx)
	require.ErrorIs(t, err, batchlock.ErrNoReplicas)
	assert.Contains(t, err.Error(), "0 of 1 replicas")
	h := holderOf(t, c, keys[0])
	assert.Equal(t, int64(6), h.Capacity, "sold on the master")
	assert.Empty(t, h.Holders, "released all the same")
	require.ErrorIs(t, l.Consume(ctx), batchlock.ErrNotHeld, "a Consume after it sells nothing more")

	require.NoError(t, cl.ResumeReplication(ctx, replica.Addr))
	l, err = c.Lock(ctx, nil, units(2, keys...))
	require.NoError(t, err)
	require.NoError(t, l.Consume(ctx), "acknowledged once the replica follows")
	assert.Equal(t, int64(4), holderOf(t, c, keys[0]).Capacity)
	assert.Empty(t, lockKeysUnder(t, newClient(t), prefix))
}
