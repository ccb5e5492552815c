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

	"fmt"
)

// moveHalfway starts moving the slot of the lock keys given to another
// master and moves just them (the rest of the slot stays behind), as a
// resharding caught half-way does; the migration is finished at the end of
// the test.
func moveHalfway(ctx context.Context, t *testing.T, cl *localcluster.Cluster, lockKeys ...string) {
	t.Helper()
	slot := hashtag.Slot(lockKeys[0])
	_, dst := migrationEnds(ctx, t, cl, slot)
	m, err := cl.BeginMigration(ctx, slot, dst.Addr)
	require.NoError(t, err)
	t.Cleanup(func() { assert.NoError(t, m.Finish(context.Background())) })
	require.NoError(t, m.Move(ctx, lockKeys...))
	n, err := cl.Do(ctx, dst.Addr, "CLUSTER", "COUNTKEYSINSLOT", slot)
	require.NoError(t, err)
	require.EqualValues(t, len(lockKeys), n, "the keys moved")
}

// twoSlotsOn returns two keys served by one master, in two slots.
func twoSlotsOn(t *testing.T, cl *localcluster.Cluster, prefix, tag string) (moved, stays string) {
	t.Helper()
	masters, err := cl.Masters(ctxTimeout(t, 10*time.Second))
	require.NoError(t, err)
	keys := keysOn(t, masters[1], prefix, tag, 8)
	for _, k := range keys[1:] {
		if hashtag.Slot(prefix+k) != hashtag.Slot(prefix+keys[0]) {
			return keys[0], k
		}
	}
	t.Fatalf("no two slots among %v", keys)
	return "", ""
}

// One key of a slot being migrated, already on the importing master, must
// not stop the release, renewal, extension or forced release of keys on the
// same master whose slots never moved, nor fail another lock; the moved key
// itself is followed to the importing master.
func TestMovedKeyBlocksNoOtherKey(t *testing.T) {
	cl := newCluster(t)
	rdb := cl.Client()
	t.Cleanup(func() { _ = rdb.Close() })
	ctx := ctxTimeout(t, 3*time.Minute)

	t.Run("unlock", func(t *testing.T) {
		c, prefix := newLocker(t, rdb)
		a, b := twoSlotsOn(t, cl, prefix, "mig-unlock")
		l, err := c.TryLock(ctx, []string{a, b}, batchlock.WithTTL(time.Minute))
		require.NoError(t, err)
		moveHalfway(ctx, t, cl, prefix+a)

		short, cancel := context.WithTimeout(ctx, 3*time.Second)
		defer cancel()
		require.NoError(t, l.Unlock(short))
		for _, h := range heldKeys(t, c, a, b) {
			assert.Empty(t, h.Holders, "%s is still held", h.Key)
		}
		other, err := c.TryLock(ctx, []string{b})
		require.NoError(t, err, "another owner takes the key that did not move")
		require.NoError(t, other.Unlock(ctx))
	})

	t.Run("renewal", func(t *testing.T) {
		const lease = 1500 * time.Millisecond
		c, prefix := newLocker(t, rdb, batchlock.WithLease(lease))
		a, b := twoSlotsOn(t, cl, prefix, "mig-renew")
		onA, err := c.TryLock(ctx, []string{a})
		require.NoError(t, err)
		onB, err := c.TryLock(ctx, []string{b})
		require.NoError(t, err)
		moveHalfway(ctx, t, cl, prefix+a)

		// Four leases: each lock must be renewed a dozen times.
		select {
		case <-onA.Context().Done():
			t.Fatalf("the lock on the moved key was lost: %v", onA.Err())
		case <-onB.Context().Done():
			t.Fatalf("the lock on the key that did not move was lost: %v", onB.Err())
		case <-time.After(4 * lease):
		}
		for _, h := range heldKeys(t, c, a, b) {
			assert.Greater(t, h.Lease, lease/2, "%s renewed", h.Key)
		}
		require.NoError(t, onA.Unlock(ctx))
		require.NoError(t, onB.Unlock(ctx))
	})

	t.Run("extend and force", func(t *testing.T) {
		c, prefix := newLocker(t, rdb)
		a, b := twoSlotsOn(t, cl, prefix, "mig-extend")
		l, err := c.TryLock(ctx, []string{a, b}, batchlock.WithTTL(10*time.Second))
		require.NoError(t, err)
		moveHalfway(ctx, t, cl, prefix+a)

		short, cancel := context.WithTimeout(ctx, 3*time.Second)
		defer cancel()
		require.NoError(t, l.Extend(short, time.Minute))
		for _, h := range heldKeys(t, c, a, b) {
			assert.Greater(t, h.Lease, 30*time.Second, "%s extended", h.Key)
		}
		released, err := c.ForceUnlock(short, a, b)
		require.NoError(t, err)
		for _, r := range released {
			assert.Positive(t, r.Token, "%s released", r.Key)
		}
		for _, h := range heldKeys(t, c, a, b) {
			assert.Empty(t, h.Holders, "%s is still held", h.Key)
		}
	})
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
