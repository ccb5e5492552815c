package cluster_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sync/errgroup"

	"github.com/batchlock/batchlock/batchlock"
)

func TestLockSpansAllMasters(t *testing.T) {
	rdb := newClient(t)
	c, prefix := newLocker(t, rdb)
	ctx := ctxTimeout(t, 30*time.Second)
	keys := spread(300, "all")

	l, err := c.Lock(ctx, keys)
	require.NoError(t, err)
	assert.Len(t, lockKeysUnder(t, rdb, prefix), 300)

	masters := map[string]bool{}
	for _, k := range keys {
		node, err := rdb.MasterForKey(ctx, prefix+k)
		require.NoError(t, err)
		masters[node.Options().Addr] = true
		assert.Equal(t, []string{l.Owner()}, holderOf(t, c, k).Holders)
		assert.Positive(t, l.Token(k))
	}
	assert.Len(t, masters, 3, "keys should spread over every master")

	require.NoError(t, l.Unlock(ctx))
	assert.Empty(t, lockKeysUnder(t, rdb, prefix))
	<-l.Context().Done()
	assert.ErrorIs(t, l.Unlock(ctx), batchlock.ErrNotHeld, "a second unlock reports the lock not held")
}

func TestTryLockAllOrNothing(t *testing.T) {
	rdb := newClient(t)
	c, prefix := newLocker(t, rdb)
	ctx := ctxTimeout(t, 30*time.Second)
	keys := spread(200, "aon")

	// Another owner holds one key in the middle of the global order.
	blocker, err := c.TryLock(ctx, keys[117:118])
	require.NoError(t, err)

	_, err = c.TryLock(ctx, keys)
	var conflict *batchlock.ConflictError
	require.ErrorAs(t, err, &conflict)
	assert.ErrorIs(t, err, batchlock.ErrNotObtained)
	assert.Equal(t, []string{keys[117]}, conflict.Keys)
	assert.Equal(t, []string{prefix + keys[117]}, lockKeysUnder(t, rdb, prefix), "none of the other 199 keys may stay held")

	require.NoError(t, blocker.Unlock(ctx))
	l, err := c.TryLock(ctx, keys)
	require.NoError(t, err)
	require.NoError(t, l.Unlock(ctx))
}

func TestReentrantOverlappingLocks(t *testing.T) {
	rdb := newClient(t)
	c, prefix := newLocker(t, rdb)
	ctx := ctxTimeout(t, 30*time.Second)
	a := []string{"k1", "k2", "k3"}
	b := []string{"k3", "k4"}

	la, err := c.TryLock(ctx, a, batchlock.WithOwner("order-1"))
	require.NoError(t, err)
	lb, err := c.TryLock(ctx, b, batchlock.WithOwner("order-1"))
	require.NoError(t, err, "the same owner may lock an overlapping set")
	assert.Equal(t, la.Token("k3"), lb.Token("k3"), "a reentrant hold joins the ownership and its token")

	// Another owner is refused, and its attempt changes nothing.
	_, err = c.TryLock(ctx, []string{"k3"}, batchlock.WithOwner("order-2"))
	assert.ErrorIs(t, err, batchlock.ErrNotObtained)

	// An unlock by another owner's handle changes nothing.
	other, err := c.TryLock(ctx, []string{"k9"}, batchlock.WithOwner("order-2"))
	require.NoError(t, err)
	require.NoError(t, other.Unlock(ctx))
	assert.Equal(t, 2, holderOf(t, c, "k3").Holds, "two holds on the shared key")

	// Interleaved unlocks: each handle releases only its own holds.
	require.NoError(t, la.Unlock(ctx))
	assert.ElementsMatch(t, []string{prefix + "k3", prefix + "k4"}, lockKeysUnder(t, rdb, prefix))
	_, err = c.TryLock(ctx, []string{"k1"}, batchlock.WithOwner("order-2"))
	require.NoError(t, err, "k1 was freed by the first unlock")
	require.NoError(t, lb.Unlock(ctx))
	assert.ElementsMatch(t, []string{prefix + "k1"}, lockKeysUnder(t, rdb, prefix))
}

func TestContextWithOwner(t *testing.T) {
	rdb := newClient(t)
	c, _ := newLocker(t, rdb)
	ctx := batchlock.ContextWithOwner(ctxTimeout(t, 30*time.Second), "batch-7")
	l1, err := c.TryLock(ctx, []string{"x"})
	require.NoError(t, err)
	l2, err := c.TryLock(ctx, []string{"x"})
	require.NoError(t, err)
	assert.Equal(t, "batch-7", l2.Owner())
	_, err = c.TryLock(t.Context(), []string{"x"})
	assert.ErrorIs(t, err, batchlock.ErrNotObtained, "without the owner a call is a stranger")
	require.NoError(t, l1.Unlock(ctx))
	require.NoError(t, l2.Unlock(ctx))
}

func TestNestedLockNeverShortensLease(t *testing.T) {
	rdb := newClient(t)
	c, prefix := newLocker(t, rdb)
	ctx := ctxTimeout(t, 30*time.Second)
	outer, err := c.TryLock(ctx, []string{"lease"}, batchlock.WithOwner("o"), batchlock.WithTTL(time.Minute))
	require.NoError(t, err)
	inner, err := c.TryLock(ctx, []string{"lease"}, batchlock.WithOwner("o"), batchlock.WithTTL(time.Second))
	require.NoError(t, err)
	ttl, err := rdb.PTTL(ctx, prefix+"lease").Result()
	require.NoError(t, err)
	assert.Greater(t, ttl, 50*time.Second)
	require.NoError(t, inner.Unlock(ctx))
	require.NoError(t, outer.Unlock(ctx))
}

func TestNoDeadlockOppositeOrders(t *testing.T) {
	rdb := newClient(t)
	c, prefix := newLocker(t, rdb)
	ctx := ctxTimeout(t, 60*time.Second)
	keys := spread(40, "dl")
	reversed := append([]string(nil), keys...)
	sort.Sort(sort.Reverse(sort.StringSlice(reversed)))

	g, ctx := errgroup.WithContext(ctx)
	for w := 0; w < 6; w++ {
		g.Go(func() error {
			for round := 0; round < 25; round++ {
				set := keys[(w*7)%20 : (w*7)%20+20]
				if w%2 == 1 {
					set = reversed[(w*5)%20 : (w*5)%20+20]
				}
				l, err := c.Lock(ctx, set, batchlock.WithTTL(10*time.Second))
				if err != nil {
					return fmt.Errorf("worker %d round %d: %w", w, round, err)
				}
				if err := l.Unlock(ctx); err != nil {
					return err
				}
			}
			return nil
		})
	}
	require.NoError(t, g.Wait(), "every worker finishes: no deadlock")
	assert.Empty(t, lockKeysUnder(t, rdb, prefix))
}

func TestMutualExclusionCounters(t *testing.T) {
	rdb := newClient(t)
	c, prefix := newLocker(t, rdb)
	ctx := ctxTimeout(t, 60*time.Second)
	keys := spread(12, "cnt")
	const workers, rounds = 6, 15

	g, gctx := errgroup.WithContext(ctx)
	for w := 0; w < workers; w++ {
		g.Go(func() error {
			for r := 0; r < rounds; r++ {
				set := basket(keys, w, r)
				err := c.Do(gctx, set, func(ctx context.Context) error {
					// Read, pause, write: a lost update shows without the lock.
					vals := make([]int, len(set))
					for i, k := range set {
						v, err := rdb.Get(ctx, prefix+"data:"+k).Int()
						if err != nil && !errors.Is(err, redis.Nil) {
							return err
						}
						vals[i] = v
					}
					time.Sleep(time.Millisecond)
					for i, k := range set {
						if err := rdb.Set(ctx, prefix+"data:"+k, vals[i]+1, 0).Err(); err != nil {
							return err
						}
					}
					return nil
				})
				if err != nil {
					return err
				}
			}
			return nil
		})
	}
	require.NoError(t, g.Wait())

	want := map[string]int{}
	for w := 0; w < workers; w++ {
		for r := 0; r < rounds; r++ {
			for _, k := range basket(keys, w, r) {
				want[k]++
			}
		}
	}
	for k, n := range want {
		got, err := rdb.Get(ctx, prefix+"data:"+k).Int()
		require.NoError(t, err)
		assert.Equal(t, n, got, "updates of %s", k)
	}
}

// basket picks three distinct keys for worker w in round r.
func basket(keys []string, w, r int) []string {
	i := (w*5 + r*7) % len(keys)
	return []string{keys[i], keys[(i+1)%len(keys)], keys[(i+4)%len(keys)]}
}

func TestFencingTokensGrow(t *testing.T) {
	rdb := newClient(t)
	c, _ := newLocker(t, rdb)
	ctx := ctxTimeout(t, 30*time.Second)
	keys := spread(20, "fence")
	last := map[string]int64{}
	for round := 0; round < 10; round++ {
		l, err := c.Lock(ctx, keys, batchlock.WithOwner(fmt.Sprintf("owner-%d", round)))
		require.NoError(t, err)
		for _, k := range keys {
			tok := l.Token(k)
			assert.Greater(t, tok, last[k], "token of %s in round %d", k, round)
			last[k] = tok
		}
		assert.Zero(t, l.Token("not-in-this-lock"))
		require.NoError(t, l.Unlock(ctx))
	}
}

func TestLargeBatchIsChunked(t *testing.T) {
	rdb := newClient(t)
	c, prefix := newLocker(t, rdb)
	ctx := ctxTimeout(t, 60*time.Second)
	keys := spread(10000, "big")
	// 2000 keys in one slot exceed one script call.
	for i := 0; i < 2000; i++ {
		keys = append(keys, fmt.Sprintf("{hot}:%d", i))
	}
	l, err := c.Lock(ctx, keys)
	require.NoError(t, err)
	assert.Len(t, l.Keys(), 12000)
	assert.Len(t, lockKeysUnder(t, rdb, prefix), 12000)

	_, err = c.TryLock(ctx, []string{"{hot}:1999"})
	assert.ErrorIs(t, err, batchlock.ErrNotObtained)
	require.NoError(t, l.Unlock(ctx))
	assert.Empty(t, lockKeysUnder(t, rdb, prefix))
}

func TestWaitingLockTakesOverAfterUnlock(t *testing.T) {
	rdb := newClient(t)
	c, _ := newLocker(t, rdb)
	ctx := ctxTimeout(t, 30*time.Second)
	keys := spread(50, "wait")
	holder, err := c.Lock(ctx, keys[10:30])
	require.NoError(t, err)

	got := make(chan *batchlock.Lock, 1)
	go func() {
		l, err := c.Lock(ctx, keys)
		assert.NoError(t, err)
		got <- l
	}()
	select {
	case <-got:
		t.Fatal("the waiter got keys that were held")
	case <-time.After(200 * time.Millisecond):
	}
	require.NoError(t, holder.Unlock(ctx))
	l := <-got
	require.NotNil(t, l)
	assert.Len(t, l.Keys(), 50)
	require.NoError(t, l.Unlock(ctx))
}

// A Lock whose context ends while it waits returns then, its rollback
// landing in the background (docs/design.md's all-or-nothing promise): the
// moment it returns, every key but the blocker's is free or held by the
// call's own owner, never anyone else's; within rollbackBound all are
// free. 200 keys over every master, many times, since the rollback's
// calls race the return.
func TestWaitEndsWithContextAndRollsBack(t *testing.T) {
	rdb := newClient(t)
	c, prefix := newLocker(t, rdb)
	ctx := ctxTimeout(t, 2*time.Minute)
	keys := spread(200, "ctx")
	holder, err := c.Lock(ctx, keys[140:141])
	require.NoError(t, err)
	blocker := prefix + keys[140]
	lingered := 0
	for run := range 10 {
		owner := fmt.Sprintf("doomed-%d", run)
		short, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
		_, err = c.Lock(short, keys, batchlock.WithOwner(owner))
		cancel()
		require.ErrorIs(t, err, batchlock.ErrNotObtained)
		require.ErrorIs(t, err, context.DeadlineExceeded)
		for _, h := range heldKeys(t, c, keys...) {
			if h.Key == keys[140] || len(h.Holders) == 0 {
				continue
			}
			lingered++
			assert.Equal(t, []string{owner}, h.Holders, "run %d: %s at the call's return", run, h.Key)
		}
		require.Eventually(t, func() bool {
			return slices.Equal([]string{blocker}, lockKeysUnder(t, rdb, prefix))
		}, rollbackBound+time.Second, 10*time.Millisecond, "run %d: the groups held while waiting are rolled back", run)
	}
	t.Logf("%d keys still held by the call's owner as it returned, over 10 runs", lingered)
	require.NoError(t, holder.Unlock(ctx))
}

func TestSingleNodeClient(t *testing.T) {
	single := startStandalone(t)
	ctx := ctxTimeout(t, 30*time.Second)
	c, prefix := newLocker(t, single)
	keys := []string{"b", "a", "{x}c", "a"}
	l, err := c.TryLock(ctx, keys)
	require.NoError(t, err)
	assert.Equal(t, []string{"a", "b", "{x}c"}, l.Keys())
	_, err = c.TryLock(ctx, keys[:1])
	assert.ErrorIs(t, err, batchlock.ErrNotObtained)

	waited := make(chan error, 1)
	go func() {
		w, err := c.Lock(ctx, []string{"a", "z"})
		if err == nil {
			err = w.Unlock(ctx)
		}
		waited <- err
	}()
	require.NoError(t, l.Unlock(ctx))
	require.NoError(t, <-waited)
	assert.Empty(t, lockKeysUnder(t, single, prefix))
}

func TestBadInputTouchesNothing(t *testing.T) {
	rdb := newClient(t)
	ctx := ctxTimeout(t, 30*time.Second)
	c, prefix := newLocker(t, rdb)

	cases := []struct {
		name string
		keys []string
		opts []batchlock.LockOption
		want string
	}{
		{"no keys", nil, nil, "no keys"},
		{"empty key", []string{"a", ""}, nil, "key 1 must not be empty"},
		{"reserved key", []string{"fence:{x}"}, nil, "reserved"},
		{"zero ttl", []string{"a"}, []batchlock.LockOption{batchlock.WithTTL(0)}, "ttl"},
		{"negative ttl", []string{"a"}, []batchlock.LockOption{batchlock.WithTTL(-time.Second)}, "ttl"},
		{"empty owner", []string{"a"}, []batchlock.LockOption{batchlock.WithOwner("")}, "owner"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			for _, call := range []func(context.Context, []string, ...batchlock.LockOption) (*batchlock.Lock, error){c.Lock, c.TryLock} {
				_, err := call(ctx, tc.keys, tc.opts...)
				require.ErrorIs(t, err, batchlock.ErrInvalid)
				assert.Contains(t, err.Error(), tc.want)
			}
			err := c.Do(ctx, tc.keys, func(context.Context) error { return nil }, tc.opts...)
			require.ErrorIs(t, err, batchlock.ErrInvalid)
		})
	}
	assert.Zero(t, allKeysUnder(t, rdb, prefix), "bad input writes nothing")

	_, err := batchlock.New(rdb, batchlock.WithPrefix("a{b"))
	assert.ErrorIs(t, err, batchlock.ErrInvalid)
	_, err = batchlock.New(nil)
	assert.ErrorIs(t, err, batchlock.ErrInvalid)
	_, err = batchlock.New((*redis.ClusterClient)(nil))
	assert.ErrorIs(t, err, batchlock.ErrInvalid)
}

func TestDuplicatesAreOneKey(t *testing.T) {
	rdb := newClient(t)
	c, _ := newLocker(t, rdb)
	ctx := ctxTimeout(t, 30*time.Second)
	l, err := c.TryLock(ctx, []string{"d", "d", "e", "d"})
	require.NoError(t, err)
	assert.Equal(t, []string{"d", "e"}, l.Keys())
	assert.Equal(t, 1, holderOf(t, c, "d").Holds, "one hold for a key given three times")
	require.NoError(t, l.Unlock(ctx))
}

// The admin API: Held shows each key's owner, live holds, lease and token;
// ForceUnlock says what it released and wakes waiters.
func TestAdminHeldAndForceUnlock(t *testing.T) {
	rdb := newClient(t)
	c, prefix := newLocker(t, rdb, batchlock.WithPollInterval(time.Minute))
	ctx := ctxTimeout(t, 30*time.Second)
	keys := spread(4, "admin")
	outer, err := c.Lock(ctx, keys, batchlock.WithOwner("order-9"), batchlock.WithTTL(time.Minute))
	require.NoError(t, err)
	const ttl = 150 * time.Millisecond
	inner, err := c.Lock(ctx, keys[:2], batchlock.WithOwner("order-9"), batchlock.WithTTL(ttl))
	require.NoError(t, err)
	taken := time.Now()
	held, err := c.Held(ctx, "*")
	require.NoError(t, err)
	require.Len(t, held, 4)
	for i, h := range held {
		assert.Equal(t, keys[i], h.Key)
		assert.Equal(t, []string{"order-9"}, h.Holders)
		assert.Equal(t, outer.Token(h.Key), h.Token)
		assert.Greater(t, h.Lease, 50*time.Second)
		assert.NotEmpty(t, h.Master)
		want := 1
		if i < 2 {
			want = 2 // the nested holds count while they run
		}
		assert.Equal(t, want, h.Holds, h.Key)
	}
	<-inner.Context().Done()
	eventuallyPastServerLease(t, taken, ttl, func() bool {
		held, err = c.Held(ctx, keys[0])
		return err == nil && len(held) == 1 && held[0].Holds == 1
	}, "a hold whose lease ended is not counted")

	woken := make(chan error, 1)
	waiter := peerOf(t, rdb, prefix, batchlock.WithPollInterval(time.Minute))
	go func() {
		l, err := waiter.Lock(ctx, keys[3:])
		if err == nil {
			err = l.Unlock(ctx)
		}
		woken <- err
	}()
	require.Eventually(t, func() bool { return shardSubscribers(ctx, rdb, prefix+keys[3]) > 0 }, 10*time.Second, 5*time.Millisecond)
	outerToken := outer.Token(keys[3]) // 0 once the forced release ends outer
	released, err := c.ForceUnlock(ctx, keys[3], "nobody")
	require.NoError(t, err)
	assert.Equal(t, []batchlock.HeldKey{
		{Key: keys[3], Holders: []string{"order-9"}, Holds: 1, Waiting: 1, Token: outerToken},
		{Key: "nobody"},
	}, released)
	select {
	case err := <-woken:
		require.NoError(t, err, "the waiter got the key once it was forced free")
	case <-time.After(20 * time.Second):
		t.Fatal("the waiter was not woken by the forced release")
	}
	// The Client ended its own lock on the key it forced free.
	assert.ErrorIs(t, outer.Err(), batchlock.ErrLockLost)
	require.ErrorIs(t, outer.Unlock(ctx), batchlock.ErrNotHeld, "its other keys are released all the same")
	held, err = c.Held(ctx, "*")
	require.NoError(t, err)
	assert.Empty(t, held)
}

// Close while a call is on its way: the call fails with ErrClosed rather
// than return a lock already reported lost, and leaves nothing held.
func TestCloseDuringLock(t *testing.T) {
	cl := sharedCluster(t)
	rdb := newClient(t)
	prefix := testPrefix(t)
	c, err := batchlock.New(rdb, batchlock.WithPrefix(prefix))
	require.NoError(t, err)
	ctx := ctxTimeout(t, 30*time.Second)
	keys, masters := keysOnMasters(t, cl, prefix, "close-during", 2, 2)
	warm, err := c.TryLock(ctx, keys)
	require.NoError(t, err)
	require.NoError(t, warm.Unlock(ctx))
	// A cluster client's first keyed command fetches COMMAND from a random
	// node, which may be the one about to sleep: done before.
	require.NoError(t, rdb.Exists(ctx, prefix+keys[0]).Err())

	woke := sleepNode(t, cl, masters[1].Addr, 300*time.Millisecond)
	got := make(chan error, 1)
	go func() {
		l, err := c.Lock(ctx, keys)
		if err == nil {
			err = fmt.Errorf("got a lock (Err %v)", l.Err())
		}
		got <- err
	}()
	// The call is on its way once the awake master holds its keys.
	require.Eventually(t, func() bool { return rdb.Exists(ctx, prefix+keys[0]).Val() == 1 }, 5*time.Second, time.Millisecond)
	require.NoError(t, c.Close())
	require.NoError(t, <-woke)
	require.ErrorIs(t, <-got, batchlock.ErrClosed)
	require.Eventually(t, func() bool { return len(lockKeysUnder(t, rdb, prefix)) == 0 }, 10*time.Second, 10*time.Millisecond)
}
