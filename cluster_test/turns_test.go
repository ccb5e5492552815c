package cluster_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/batchlock/batchlock/batchlock"
)

// tryTurn calls TryEach for one basket with turns until its Lock is handed
// out, and returns it with the calls it took; every call before refuses it,
// each after the first as a turn still waiting.
func tryTurn(t *testing.T, ctx context.Context, c *batchlock.Client, turns *batchlock.Turns, basket []string) (*batchlock.Lock, int) {
	t.Helper()
	for calls := 1; ; calls++ {
		var why []batchlock.Refusal
		locks, err := c.TryEach(ctx, [][]string{basket}, batchlock.WithTurns(turns), batchlock.WithRefusals(&why))
		require.NoError(t, err)
		if locks[0] != nil {
			return locks[0], calls
		}
		if calls > 1 {
			require.Equal(t, []batchlock.Refusal{{Basket: 0, Turn: true}}, why, "refused as a turn that waits")
		}
		select {
		case <-ctx.Done():
			require.Fail(t, "the turn never came", "%d calls", calls)
		case <-time.After(2 * time.Millisecond):
		}
	}
}

// waitingTurn has holder lock keys[0] and proc's TryEach of keys refused,
// with turns, and returns the holder's lock once the turn waits in the
// queue of keys[0].
func waitingTurn(t *testing.T, ctx context.Context, proc, holder *batchlock.Client, turns *batchlock.Turns, keys []string) *batchlock.Lock {
	t.Helper()
	busy, err := holder.Lock(ctx, keys[:1])
	require.NoError(t, err)
	locks, err := proc.TryEach(ctx, [][]string{keys}, batchlock.WithTurns(turns))
	require.NoError(t, err)
	require.Nil(t, locks[0], "refused by the holder")
	require.Eventually(t, func() bool { return holderOf(t, holder, keys[0]).Waiting == 1 }, 5*time.Second, 5*time.Millisecond,
		"the basket's turn waits in the queue of the holder's key")
	return busy
}

// takeAndLetGo has c take basket with one TryEach (opts), which must get
// it (msg says why), and let it go.
func takeAndLetGo(t *testing.T, ctx context.Context, c *batchlock.Client, basket []string, msg string, opts ...batchlock.LockOption) {
	t.Helper()
	got, err := c.TryEach(ctx, [][]string{basket}, opts...)
	require.NoError(t, err)
	require.NotNil(t, got[0], msg)
	require.NoError(t, c.UnlockEach(ctx, got))
}

// A basket refused by another Client's key takes its turn: it waits in
// that key's queue, so a rival processor's newer baskets cannot take the
// key once it is released, and a later TryEach of the basket (its keys in
// any order) hands out the Lock that waited, with a newer token.
func TestTurnIsNotOvertaken(t *testing.T) {
	cl := sharedCluster(t)
	rdb := newClient(t)
	proc, prefix := newLocker(t, rdb)
	holder, rival := peerOf(t, rdb, prefix), peerOf(t, rdb, prefix)
	ctx := ctxTimeout(t, 30*time.Second)
	keys, _ := keysOnMasters(t, cl, prefix, "turn", 2, 2)
	turns := batchlock.Turns{After: 1}
	busy := waitingTurn(t, ctx, proc, holder, &turns, keys)
	require.NoError(t, busy.Unlock(ctx))
	require.Eventually(t, func() bool { return len(heldBy(t, proc, keys...)) == len(keys) }, 5*time.Second, 5*time.Millisecond,
		"the turn is granted the key, and takes the rest")
	for _, basket := range [][]string{keys, keys[:1], {keys[0], keys[3]}} {
		got, err := rival.TryEach(ctx, [][]string{basket})
		require.NoError(t, err)
		assert.Nil(t, got[0], "a rival's newer basket %v does not overtake the turn", basket)
	}

	l, _ := tryTurn(t, ctx, proc, &turns, []string{keys[3], keys[2], keys[1], keys[0], keys[1]})
	assert.ElementsMatch(t, keys, l.Keys())
	assert.Greater(t, l.Token(keys[0]), busy.Token(keys[0]))
	require.NoError(t, proc.UnlockEach(ctx, []*batchlock.Lock{l}))
	assert.Empty(t, lockKeysUnder(t, rdb, prefix))
}

// Rival processors each lock a third of a basket (a master's share) again
// and again, letting go only for a moment between two ticks, so that the
// whole basket is almost never free at once. A processor with turns is
// handed it all the same: its turn waits in the queues, and each release
// hands it a key.
func TestTurnOutlastsARivalLoop(t *testing.T) {
	cl := sharedCluster(t)
	rdb := newClient(t)
	proc, prefix := newLocker(t, rdb)
	ctx := ctxTimeout(t, 30*time.Second)
	keys, _ := keysOnMasters(t, cl, prefix, "rival", 3, 3)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var rivalTicks, rivalTaken atomic.Int64
	for r := range 3 {
		rival := peerOf(t, rdb, prefix)
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				got, err := rival.TryEach(ctx, [][]string{keys[3*r : 3*r+3]})
				if !assert.NoError(t, err) {
					return
				}
				rivalTicks.Add(1)
				if got[0] == nil {
					continue
				}
				rivalTaken.Add(1)
				time.Sleep(5 * time.Millisecond) // the rival's tick: stock read and written
				assert.NoError(t, rival.UnlockEach(ctx, got))
			}
		})
	}
	require.Eventually(t, func() bool { return rivalTaken.Load() >= 30 }, 10*time.Second, time.Millisecond, "the rivals loop")
	turns := batchlock.Turns{After: 1}
	l, calls := tryTurn(t, ctx, proc, &turns, keys)
	close(stop)
	wg.Wait()
	t.Logf("handed out at call %d; the rivals took their shares %d times in %d ticks", calls, rivalTaken.Load(), rivalTicks.Load())
	require.NoError(t, proc.UnlockEach(ctx, []*batchlock.Lock{l}))
	assert.Empty(t, lockKeysUnder(t, rdb, prefix))
}

// A turn ends with its Client: its place in the queue goes at Close, so
// the key goes to the next taker as soon as its holder lets go.
func TestTurnEndsWithItsClient(t *testing.T) {
	rdb := newClient(t)
	proc, prefix := newLocker(t, rdb)
	holder, rival := peerOf(t, rdb, prefix), peerOf(t, rdb, prefix)
	ctx := ctxTimeout(t, 30*time.Second)
	keys := spread(4, "closed")
	turns := batchlock.Turns{After: 1}
	busy := waitingTurn(t, ctx, proc, holder, &turns, keys)
	require.NoError(t, proc.Close(), "the processor stops")
	assert.Zero(t, holderOf(t, holder, keys[0]).Waiting, "the turn's place is gone")
	require.NoError(t, busy.Unlock(ctx))
	takeAndLetGo(t, ctx, rival, keys, "nothing of the turn is left")
	assert.Empty(t, lockKeysUnder(t, rdb, prefix))
}

// A turn whose Lock no call asks for within Place (the processor dropped
// the order) is released: its keys are free for anyone, and the basket,
// asked for again, is tried afresh.
func TestTurnNotAskedForIsReleased(t *testing.T) {
	rdb := newClient(t)
	proc, prefix := newLocker(t, rdb)
	holder, rival := peerOf(t, rdb, prefix), peerOf(t, rdb, prefix)
	ctx := ctxTimeout(t, 30*time.Second)
	keys := spread(4, "dropped")
	turns := batchlock.Turns{After: 1, Place: 200 * time.Millisecond}
	busy := waitingTurn(t, ctx, proc, holder, &turns, keys)
	require.NoError(t, busy.Unlock(ctx))
	require.Eventually(t, func() bool { return len(heldBy(t, proc, keys...)) == len(keys) }, 5*time.Second, 5*time.Millisecond,
		"the turn takes the basket")
	require.Eventually(t, func() bool { return len(heldBy(t, proc, keys...)) == 0 }, 5*time.Second, 10*time.Millisecond,
		"released once Place passed")
	takeAndLetGo(t, ctx, rival, keys, "the turn's keys are free")
	takeAndLetGo(t, ctx, proc, keys, "tried afresh", batchlock.WithTurns(&turns))
	assert.Empty(t, lockKeysUnder(t, rdb, prefix))
}

// A Turns serves the Client that first used it: another Client's call with
// it is refused before anything is sent.
func TestTurnsServeOneClient(t *testing.T) {
	rdb := newClient(t)
	proc, prefix := newLocker(t, rdb)
	other := peerOf(t, rdb, prefix)
	ctx := ctxTimeout(t, 10*time.Second)
	turns := batchlock.Turns{After: 1}
	locks, err := proc.TryEach(ctx, [][]string{{"a"}}, batchlock.WithTurns(&turns))
	require.NoError(t, err)
	require.NoError(t, proc.UnlockEach(ctx, locks))
	_, err = other.TryEach(ctx, [][]string{{"b"}}, batchlock.WithTurns(&turns))
	require.ErrorIs(t, err, batchlock.ErrInvalid)
	assert.ErrorContains(t, err, "another Client")
	assert.Empty(t, lockKeysUnder(t, rdb, prefix))
}
