package cluster_test

import (
	"cmp"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/batchlock/batchlock/batchlock"
	"github.com/batchlock/batchlock/hashtag"
)

// A conflict between Clients costs the refused attempt and no more once
// the waiter's Client has lately been refused: its calls then ask one master
// at a time, so nothing is taken after the key refused to be given back and
// taken again. A Client not refused lately asks every master at once, and
// its first conflict costs the give-backs.
func TestContendedClientAsksOneMasterAtATime(t *testing.T) {
	c, prefix := newLocker(t, newClient(t))
	keys, _ := keysOnMasters(t, sharedCluster(t), prefix, "contended", 3, 1)
	inSlotOrder(prefix, keys)
	first := keys[:1] // on the master asked first
	waiter := newGrantee(t, prefix)
	ctx := ctxTimeout(t, 30*time.Second)

	conflict := func() (acquires, releases uint64) {
		holder, err := c.Lock(ctx, first)
		require.NoError(t, err)
		before := waiter.Stats()
		got := make(chan *batchlock.Lock, 1)
		go func() {
			l, err := waiter.Lock(ctx, keys)
			assert.NoError(t, err)
			got <- l
		}()
		waitQueued(ctx, t, c, first[0], 1)
		require.NoError(t, holder.Unlock(ctx))
		l := <-got
		require.NotNil(t, l)
		after := waiter.Stats()
		assert.Equal(t, keys, l.Keys())
		require.NoError(t, l.Unlock(ctx))
		return after.Acquires - before.Acquires, after.Releases - before.Releases
	}

	acquires, releases := conflict()
	assert.Equal(t, uint64(3+2), acquires, "every master at once, then the two after the key granted again")
	assert.Equal(t, uint64(2), releases, "what the first attempt took after the key refused, given back")

	acquires, releases = conflict()
	assert.Equal(t, uint64(1+2), acquires, "the refused attempt, then the other masters one at a time")
	assert.Zero(t, releases, "nothing taken out of order")
	assert.Empty(t, lockKeysUnder(t, newClient(t), prefix))
}

// A call that asks one master at a time counts its lease from its first
// attempt that took keys: when a master in the middle is slow, the keys
// taken before run on their lease meanwhile, with nothing to renew them, and
// the call restarts them, or fails when they ran out, rather than hand out
// keys that are gone with a validity counted from its last attempt.
func TestContendedCallCountsItsLeaseFromItsFirstMaster(t *testing.T) {
	cl := sharedCluster(t)
	c, prefix := newLocker(t, newClient(t))
	keys, _ := keysOnMasters(t, cl, prefix, "contended-lease", 3, 1)
	inSlotOrder(prefix, keys)
	middle, err := cl.MasterOfSlot(ctxTimeout(t, 10*time.Second), hashtag.Slot(prefix+keys[1]))
	require.NoError(t, err)
	waiter := peerOf(t, newClient(t), prefix, batchlock.WithLease(300*time.Millisecond))
	ctx := ctxTimeout(t, 30*time.Second)

	// A refusal makes the waiter's Client ask one master at a time.
	holder, err := c.Lock(ctx, keys[:1])
	require.NoError(t, err)
	got := make(chan error, 1)
	go func() {
		l, err := waiter.Lock(ctx, keys[:1])
		if err == nil {
			err = l.Unlock(ctx)
		}
		got <- err
	}()
	waitQueued(ctx, t, c, keys[0], 1)
	require.NoError(t, holder.Unlock(ctx))
	require.NoError(t, <-got)

	woke := sleepNode(t, cl, middle.Addr, 900*time.Millisecond)
	l, err := waiter.Lock(ctx, keys)
	require.NoError(t, <-woke)
	if err != nil {
		require.ErrorIs(t, err, batchlock.ErrNotObtained)
		require.Eventually(t, func() bool { return len(lockKeysUnder(t, newClient(t), prefix)) == 0 },
			10*time.Second, 20*time.Millisecond, "the failed call leaves nothing")
		return
	}
	for _, k := range keys {
		assert.Equal(t, []string{l.Owner()}, holderOf(t, c, k).Holders, "%s is held as Lock says", k)
	}
	require.NoError(t, l.Unlock(ctx))
}

// inSlotOrder sorts keys as batchlock takes them: by the slot of their lock
// key under prefix.
func inSlotOrder(prefix string, keys []string) {
	slices.SortFunc(keys, func(a, b string) int {
		return cmp.Compare(hashtag.Slot(prefix+a), hashtag.Slot(prefix+b))
	})
}
