package cluster_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/batchlock/batchlock/batchlock"
)

// Two owners are inside a shared section on the same keys, spread over
// every master, at once: each holds its lock while the other takes and
// holds its own. They share each key's token. An exclusive TryLock on one
// of the keys conflicts naming it, and so does a mixed batch, naming its
// shared and exclusive conflicts alike.
func TestSharedHoldersOverlap(t *testing.T) {
	c, prefix := newLocker(t, newClient(t))
	ctx := ctxTimeout(t, 30*time.Second)
	keys := spread(30, "shared")
	first, err := c.TryLock(ctx, nil, batchlock.WithShared(keys...), batchlock.WithOwner("reader-1"))
	require.NoError(t, err)
	second, err := c.TryLock(ctx, nil, batchlock.WithShared(keys...), batchlock.WithOwner("reader-2"))
	require.NoError(t, err, "a second reader gets keys held shared")
	require.NoError(t, first.Err())
	require.NoError(t, second.Err())

	held, err := c.Inspect(ctx, keys...)
	require.NoError(t, err)
	for i, h := range held {
		assert.True(t, h.Shared, "%s is held shared", keys[i])
		assert.Equal(t, []string{"reader-1", "reader-2"}, h.Holders, "%s: both readers hold it at once", keys[i])
		assert.Equal(t, 2, h.Holds)
		assert.Equal(t, first.Token(keys[i]), second.Token(keys[i]), "readers share the token of %s", keys[i])
		assert.Equal(t, h.Token, first.Token(keys[i]))
	}

	_, err = c.TryLock(ctx, keys[7:8], batchlock.WithOwner("writer"))
	var conflict *batchlock.ConflictError
	require.ErrorAs(t, err, &conflict)
	assert.Equal(t, keys[7:8], conflict.Keys)

	// A mixed batch: an exclusive key held shared by others, a shared key
	// held exclusively by another, and free keys of both kinds.
	blocker, err := c.TryLock(ctx, []string{"sku:shared:held"}, batchlock.WithOwner("blocker"))
	require.NoError(t, err)
	_, err = c.TryLock(ctx, []string{keys[3], "sku:shared:free-x"},
		batchlock.WithShared("sku:shared:held", keys[4], "sku:shared:free-s"), batchlock.WithOwner("mixed"))
	require.ErrorAs(t, err, &conflict)
	assert.ElementsMatch(t, []string{keys[3], "sku:shared:held"}, conflict.Keys)
	for _, h := range heldKeys(t, c, "sku:shared:free-x", "sku:shared:free-s", keys[4]) {
		assert.NotContains(t, h.Holders, "mixed", "%s kept by a refused TryLock", h.Key)
	}

	require.NoError(t, first.Unlock(ctx))
	assert.Equal(t, []string{"reader-2"}, holderOf(t, c, keys[0]).Holders, "a reader's release leaves the other's hold")
	require.NoError(t, second.Unlock(ctx))
	require.NoError(t, blocker.Unlock(ctx))
	assert.Empty(t, lockKeysUnder(t, newClient(t), prefix))
}

// A writer that waits for readers gets the key at the last reader's
// release, handed to it (waiters poll once a minute here), and readers that
// come after it queue behind it rather than overtake it. At the writer's
// release, the readers queued behind it get the key together, with a token
// newer than the writer's.
func TestWaitingWriterIsNotOvertakenByReaders(t *testing.T) {
	q := newQueue(t)
	c, prefix := q.client(), q.prefix
	ctx := ctxTimeout(t, 30*time.Second)
	key := spread(1, "writer-first")
	readers := make([]*batchlock.Lock, 2)
	for i := range readers {
		var err error
		readers[i], err = c.Lock(ctx, nil, batchlock.WithShared(key...), batchlock.WithOwner(fmt.Sprintf("reader-%d", i)))
		require.NoError(t, err)
	}

	writer := make(chan *batchlock.Lock, 1)
	writerClient := q.client()
	go func() {
		l, err := writerClient.Lock(ctx, key, batchlock.WithOwner("writer"))
		assert.NoError(t, err)
		writer <- l
	}()
	waitQueued(ctx, t, c, key[0], 1)

	_, err := q.client().TryLock(ctx, nil, batchlock.WithShared(key...), batchlock.WithOwner("late-reader"))
	var conflict *batchlock.ConflictError
	require.ErrorAs(t, err, &conflict, "a reader coming after a waiting writer does not overtake it")
	late := make(chan *batchlock.Lock, 2)
	for i := range 2 {
		lateClient := q.client()
		go func() {
			l, err := lateClient.Lock(ctx, nil, batchlock.WithShared(key...), batchlock.WithOwner(fmt.Sprintf("late-%d", i)))
			assert.NoError(t, err)
			late <- l
		}()
		waitQueued(ctx, t, c, key[0], 2+i)
	}
	// An owner already inside a shared section gets the key again at once:
	// making it wait behind a writer that waits for it would deadlock.
	again, err := c.TryLock(ctx, nil, batchlock.WithShared(key...), batchlock.WithOwner("reader-0"))
	require.NoError(t, err, "a reader's own shared hold is reentrant past a waiting writer")
	require.NoError(t, again.Unlock(ctx))

	require.NoError(t, readers[0].Unlock(ctx))
	select {
	case <-writer:
		t.Fatal("the writer got the key while a reader still held it")
	default:
	}
	readersToken := readers[1].Token(key[0]) // 0 once released
	require.NoError(t, readers[1].Unlock(ctx))
	w := <-writer // polling once a minute, only a hand-off gives it the key in time
	require.NotNil(t, w)
	h := holderOf(t, c, key[0])
	assert.False(t, h.Shared)
	assert.Equal(t, []string{"writer"}, h.Holders)
	assert.Equal(t, 2, h.Waiting, "the late readers still wait")
	assert.Greater(t, w.Token(key[0]), readersToken, "the writer's token is newer than the readers'")

	writerToken := w.Token(key[0]) // 0 once released
	require.NoError(t, w.Unlock(ctx))
	got := []*batchlock.Lock{<-late, <-late}
	require.NotNil(t, got[0])
	require.NotNil(t, got[1])
	h = holderOf(t, c, key[0])
	assert.True(t, h.Shared)
	assert.Equal(t, []string{"late-0", "late-1"}, h.Holders, "both readers were handed the key together")
	assert.Equal(t, got[0].Token(key[0]), got[1].Token(key[0]))
	assert.Greater(t, got[0].Token(key[0]), writerToken, "readers after a writer get a newer token")
	for _, l := range got {
		require.NoError(t, l.Unlock(ctx))
	}
	assert.Empty(t, lockKeysUnder(t, newClient(t), prefix))
}

// An owner's holds are reentrant across modes: a key it holds exclusively
// it gets shared too, the key staying exclusive; a key it holds shared it
// cannot take exclusively (ErrInvalid, at once, even for a waiting Lock),
// and nothing of the refused call is left held.
func TestSharedReentrancyAcrossModes(t *testing.T) {
	c, prefix := newLocker(t, newClient(t))
	ctx := ctxTimeout(t, 30*time.Second)
	keys := spread(10, "modes")
	owner := batchlock.WithOwner("o")

	excl, err := c.TryLock(ctx, keys[:1], owner)
	require.NoError(t, err)
	down, err := c.TryLock(ctx, nil, batchlock.WithShared(keys[0]), owner)
	require.NoError(t, err)
	assert.Equal(t, excl.Token(keys[0]), down.Token(keys[0]), "joined the exclusive ownership")
	h := holderOf(t, c, keys[0])
	assert.False(t, h.Shared, "stays exclusive")
	assert.Equal(t, 2, h.Holds)
	_, err = c.TryLock(ctx, nil, batchlock.WithShared(keys[0]), batchlock.WithOwner("other"))
	require.ErrorIs(t, err, batchlock.ErrNotObtained, "another reader is kept out of an exclusive key")
	require.NoError(t, excl.Unlock(ctx))
	require.NoError(t, down.Unlock(ctx))

	reader, err := c.TryLock(ctx, nil, batchlock.WithShared(keys[5]), owner)
	require.NoError(t, err)
	for _, wait := range []bool{false, true} {
		lock := c.TryLock
		if wait {
			lock = c.Lock
		}
		_, err := lock(ctx, keys, owner)
		require.ErrorIs(t, err, batchlock.ErrInvalid, "wait %v", wait)
		assert.ErrorContains(t, err, "held shared or in units by this owner")
		require.ErrorIs(t, err, batchlock.ErrNotObtained)
		assert.Contains(t, err.Error(), strconv.Quote(keys[5]))
		for _, h := range heldKeys(t, c, keys...) {
			if h.Key == keys[5] {
				assert.Equal(t, []string{"o"}, h.Holders)
				assert.Equal(t, 1, h.Holds)
				continue
			}
			assert.Empty(t, h.Holders, "%s kept by a refused upgrade (wait %v)", h.Key, wait)
		}
	}
	require.NoError(t, reader.Unlock(ctx))
	assert.Empty(t, lockKeysUnder(t, newClient(t), prefix))
}

// Read-modify-write of counters on exclusive keys loses no update while
// every worker also reads a hot key shared: the readers overlap (observed,
// not assumed), the writers never do, and the checker finds the history
// clean.
func TestMixedBatchesUnderLoad(t *testing.T) {
	rdb := newClient(t)
	c, prefix := newLocker(t, rdb)
	ctx := ctxTimeout(t, time.Minute)
	const workers, rounds = 8, 25
	counters := spread(4, "counter")
	hot := "promo:hot"
	var chk checker
	var inside, most atomic.Int32
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for r := range rounds {
				counter := counters[(w+r)%len(counters)]
				owner := fmt.Sprintf("w%d-%d", w, r)
				err := c.Do(ctx, []string{counter}, func(ctx context.Context) error {
					l, _ := batchlock.LockFromContext(ctx)
					start := time.Now()
					n := inside.Add(1)
					for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
					}
					defer inside.Add(-1)
					v, err := rdb.Get(ctx, prefix+"value:"+counter).Int()
					if err != nil && !errors.Is(err, redis.Nil) {
						return err
					}
					time.Sleep(2 * time.Millisecond) // the read-modify-write window
					if err := rdb.Set(ctx, prefix+"value:"+counter, v+1, 0).Err(); err != nil {
						return err
					}
					chk.record(section{Owner: owner, Keys: []string{counter, hot},
						Tokens: map[string]int64{counter: l.Token(counter), hot: l.Token(hot)},
						Shared: map[string]bool{hot: true}, Start: start, End: time.Now()})
					return nil
				}, batchlock.WithShared(hot), batchlock.WithOwner(owner))
				if !assert.NoError(t, err) {
					return
				}
			}
		})
	}
	wg.Wait()
	total := 0
	for _, counter := range counters {
		v, err := rdb.Get(ctx, prefix+"value:"+counter).Int()
		require.NoError(t, err)
		total += v
	}
	assert.Equal(t, workers*rounds, total, "no update lost")
	assert.Greater(t, most.Load(), int32(1), "readers of the hot key were inside at once")
	chk.requireClean(t)
	for _, k := range lockKeysUnder(t, rdb, prefix) {
		assert.Contains(t, k, prefix+"value:", "%s left held", k)
	}
}

// A waiting mixed batch that gives up leaves nothing held: the shared keys
// it took before the one it waited for are released, and so is its place
// in that key's queue.
func TestMixedBatchThatGivesUpLeavesNothing(t *testing.T) {
	c, prefix := newLocker(t, newClient(t))
	ctx := ctxTimeout(t, 30*time.Second)
	keys := spread(40, "gives-up")
	blocker, err := c.TryLock(ctx, keys[20:21], batchlock.WithOwner("blocker"))
	require.NoError(t, err)
	wctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel()
	_, err = c.Lock(wctx, keys[:20], batchlock.WithShared(keys[20:]...), batchlock.WithOwner("mixed"))
	require.ErrorIs(t, err, context.DeadlineExceeded)
	// The rollback goes on in the background once the call's context is
	// done (for at most 5s): poll for its end.
	require.EventuallyWithT(t, func(collect *assert.CollectT) {
		held, err := c.Inspect(ctx, keys...)
		if !assert.NoError(collect, err) {
			return
		}
		for _, h := range held {
			if h.Key == keys[20] {
				assert.Equal(collect, []string{"blocker"}, h.Holders)
				assert.Zero(collect, h.Waiting, "the place in the queue goes with the call")
				continue
			}
			assert.Empty(collect, h.Holders, "%s left held by a mixed batch that gave up", h.Key)
		}
	}, 10*time.Second, 10*time.Millisecond)
	require.NoError(t, blocker.Unlock(ctx))
	assert.Empty(t, lockKeysUnder(t, newClient(t), prefix))
}

// A shared lock is kept alive by the watchdog and acknowledged with
// WithReplicas like an exclusive one, and is reported lost the same way
// when its key goes (here an operator's ForceUnlock), while the other
// reader of the key is told too.
func TestSharedLockRenewedAcknowledgedAndLost(t *testing.T) {
	c, _ := newLocker(t, newClient(t), batchlock.WithLease(300*time.Millisecond))
	ctx := ctxTimeout(t, 30*time.Second)
	keys := spread(6, "shared-lease")
	acked := batchlock.WithReplicas(1, time.Second)
	writer, err := c.Lock(ctx, keys[:3], batchlock.WithShared(keys[3:]...), acked)
	require.NoError(t, err)
	_, err = c.TryLock(ctx, keys[:1], batchlock.WithShared(keys[3:]...), acked)
	require.ErrorIs(t, err, batchlock.ErrNotObtained, "the exclusive keys are the first lock's")
	reader, err := c.Lock(ctx, nil, batchlock.WithShared(keys[3:]...), acked)
	require.NoError(t, err)
	readers := []*batchlock.Lock{writer, reader}
	first := readers[0].ValidUntil()
	require.Eventually(t, func() bool { return readers[0].ValidUntil().After(first.Add(200 * time.Millisecond)) },
		5*time.Second, 10*time.Millisecond, "the watchdog renews a lock with shared keys")

	_, err = c.ForceUnlock(ctx, keys[4])
	require.NoError(t, err)
	for i, l := range readers {
		select {
		case <-l.Context().Done():
		case <-ctx.Done():
			t.Fatalf("reader %d was not told its shared key went", i)
		}
		require.ErrorIs(t, l.Err(), batchlock.ErrLockLost)
		require.ErrorIs(t, l.Unlock(ctx), batchlock.ErrNotHeld)
	}
	assert.Empty(t, heldKeys(t, c, keys[:3]...)[0].Holders, "the lost lock's Unlock released the rest")
}

// Readers queued behind a writer are told when the writer gives up, and
// join the readers inside at once (waiters poll once a minute here, so
// only that message lets them in within the test).
func TestReadersBehindAWriterThatGivesUpJoin(t *testing.T) {
	q := newQueue(t)
	c, writerClient, readerClient, prefix := q.client(), q.client(), q.client(), q.prefix
	ctx := ctxTimeout(t, 30*time.Second)
	key := spread(1, "writer-gives-up")
	inside, err := c.Lock(ctx, nil, batchlock.WithShared(key...))
	require.NoError(t, err)

	impatient, giveUp := context.WithCancel(ctx)
	gaveUp := make(chan error, 1)
	go func() {
		_, err := writerClient.Lock(impatient, key)
		gaveUp <- err
	}()
	waitQueued(ctx, t, c, key[0], 1)
	joined := make(chan *batchlock.Lock, 1)
	go func() {
		l, err := readerClient.Lock(ctx, nil, batchlock.WithShared(key...))
		assert.NoError(t, err)
		joined <- l
	}()
	waitQueued(ctx, t, c, key[0], 2)

	giveUp()
	require.ErrorIs(t, <-gaveUp, context.Canceled)
	l := <-joined
	require.NotNil(t, l)
	assert.Equal(t, inside.Token(key[0]), l.Token(key[0]), "joined the readers inside")
	assert.Len(t, holderOf(t, c, key[0]).Holders, 2)
	assert.Zero(t, q.handOffs(l.Owner()), "told to try again, which is no hand-off")
	require.NoError(t, l.Unlock(ctx))
	require.NoError(t, inside.Unlock(ctx))
	assert.Empty(t, lockKeysUnder(t, newClient(t), prefix))
}
