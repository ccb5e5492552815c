package cluster_test

import (
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/batchlock/batchlock/batchlock"
	"github.com/batchlock/batchlock/hashtag"
	"github.com/batchlock/batchlock/localcluster"
)

// mastersOf counts the masters that serve lock keys prefix+keys.
func mastersOf(t *testing.T, cl *localcluster.Cluster, prefix string, keys []string) int {
	t.Helper()
	masters, err := cl.Masters(ctxTimeout(t, 10*time.Second))
	require.NoError(t, err)
	seen := map[string]bool{}
	for _, k := range keys {
		for _, m := range masters {
			if m.ServesSlot(hashtag.Slot(prefix + k)) {
				seen[m.Addr] = true
			}
		}
	}
	return len(seen)
}

// Sixteen goroutines of one Client lock overlapping baskets of hot keys:
// their conflicts are settled in the process, so Redis sees one acquire and
// one release per master a lock touches and nothing else, no two of them
// hold a key at once, and no gate is left once every lock ended.
func TestOneClientSettlesItsConflictsInProcess(t *testing.T) {
	cl := sharedCluster(t)
	rdb := newClient(t)
	var conflicts atomic.Int64
	c, prefix := newLocker(t, rdb, batchlock.WithObserver(func(e batchlock.Event) {
		if e.Kind == batchlock.EventConflict {
			conflicts.Add(1)
		}
	}))
	ctx := ctxTimeout(t, time.Minute)
	hot := spread(12, "two-levels")
	var chk checker
	var calls atomic.Int64 // acquires and releases the locks should cost
	var wg sync.WaitGroup
	for w := range 16 {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(w), 7))
			for range 15 {
				var basket []string
				for _, i := range rng.Perm(len(hot))[:1+rng.IntN(4)] {
					basket = append(basket, hot[i])
				}
				l, err := c.Lock(ctx, basket, batchlock.WithTTL(10*time.Second))
				if !assert.NoError(t, err) {
					return
				}
				start := time.Now()
				tokens := map[string]int64{}
				for _, k := range l.Keys() {
					tokens[k] = l.Token(k)
				}
				time.Sleep(time.Duration(rng.IntN(3)) * time.Millisecond) // the work under the lock
				chk.record(section{Owner: l.Owner(), Keys: l.Keys(), Tokens: tokens, Start: start, End: time.Now()})
				assert.NoError(t, l.Unlock(ctx))
				calls.Add(2 * int64(mastersOf(t, cl, prefix, basket)))
			}
		})
	}
	wg.Wait()
	chk.requireClean(t)
	stats := c.Stats()
	assert.EqualValues(t, calls.Load(), stats.Acquires+stats.Releases, "one acquire and one release per master and lock")
	assert.Zero(t, stats.Extends, "no lease restarts: no lock waited in Redis")
	assert.Equal(t, 16*15, chk.count(), "every lock ran")
	assert.Positive(t, conflicts.Load(), "some waited for another's keys, in the process")
	assert.Zero(t, stats.Gated, "no gate is left")
	assert.Empty(t, lockKeysUnder(t, rdb, prefix))
}

// A Client with many waiters for a hot key does not keep it from another
// Client's waiter, queued in Redis: when the holder releases the key, the
// other Client's waiter gets it before this Client's next one.
func TestWaitersOfAnotherClientAreNotOvertaken(t *testing.T) {
	rdb := newClient(t)
	crowd, prefix := newLocker(t, rdb, batchlock.WithPollInterval(time.Minute))
	other, err := batchlock.New(rdb, batchlock.WithPrefix(prefix), batchlock.WithPollInterval(time.Minute))
	require.NoError(t, err)
	t.Cleanup(func() { _ = other.Close() })
	ctx := ctxTimeout(t, time.Minute)
	key := spread(1, "fair")

	holder, err := crowd.Lock(ctx, key)
	require.NoError(t, err)
	var mu sync.Mutex
	var order []string
	var wg sync.WaitGroup
	take := func(c *batchlock.Client, name string) {
		defer wg.Done()
		l, err := c.Lock(ctx, key)
		if !assert.NoError(t, err) {
			return
		}
		mu.Lock()
		order = append(order, name)
		mu.Unlock()
		assert.NoError(t, l.Unlock(ctx))
	}
	for i := range 5 {
		wg.Add(1)
		go take(crowd, fmt.Sprintf("crowd-%d", i))
	}
	require.Eventually(t, func() bool { return crowd.Stats().Gated == 1 }, 5*time.Second, time.Millisecond)
	wg.Add(1)
	go take(other, "other")
	waitQueued(ctx, t, crowd, key[0], 1)
	require.NoError(t, holder.Unlock(ctx))
	wg.Wait()
	require.Len(t, order, 6)
	assert.Equal(t, "other", order[0], "the other Client's waiter, queued in Redis, goes first: %v", order)
}

// A waiter that another Client's release hands its key to goes on with that
// key and all the rest of its keys on that master in one call: besides the
// refused attempt, the conflict costs the call that continues (the check
// that no release came before the waiter listened is a read, not an
// attempt), and nothing is given back or restarted.
func TestHandOffContinuesInOneCall(t *testing.T) {
	cl := sharedCluster(t)
	rdb := newClient(t)
	waiter, prefix := newLocker(t, rdb, batchlock.WithPollInterval(time.Minute))
	holder, err := batchlock.New(rdb, batchlock.WithPrefix(prefix))
	require.NoError(t, err)
	t.Cleanup(func() { _ = holder.Close() })
	ctx := ctxTimeout(t, 30*time.Second)
	masters, err := cl.Masters(ctx)
	require.NoError(t, err)
	keys := keysOn(t, masters[0], prefix, "continue", 4)
	first := keys[0]
	for _, k := range keys {
		if slot, firstSlot := hashtag.Slot(prefix+k), hashtag.Slot(prefix+first); slot < firstSlot || slot == firstSlot && k < first {
			first = k
		}
	}
	held, err := holder.Lock(ctx, []string{first})
	require.NoError(t, err)

	got := make(chan *batchlock.Lock, 1)
	go func() {
		l, err := waiter.Lock(ctx, keys)
		assert.NoError(t, err)
		got <- l
	}()
	waitQueued(ctx, t, holder, first, 1)
	require.NoError(t, held.Unlock(ctx))
	l := <-got
	require.NotNil(t, l)
	stats := waiter.Stats()
	assert.EqualValues(t, 2, stats.Acquires, "refused, then every key in one call")
	assert.Zero(t, stats.Releases, "nothing was given back")
	assert.Zero(t, stats.Extends, "no lease restart: the wait left the lease whole")
	require.NoError(t, l.Unlock(ctx))
}

// A call refused in Redis at a key keeps no gate of a later key while it
// waits: G1 of Client p holds b; Client q takes a and queues for b; G2 of p
// asks for a and c and is refused in Redis at a. G1 then locks c, free in
// Redis, without waiting for G2 (with G2 keeping c's gate, G1 waited for
// G2, G2 for q, q for G1: a deadlock), and TryLock finds c free once G2
// waits; once G1 lets go, q and then G2 get their keys.
func TestNoDeadlockAcrossTheTwoLevels(t *testing.T) {
	rdb := newClient(t)
	p, prefix := newLocker(t, rdb, batchlock.WithPollInterval(time.Minute))
	q := peerOf(t, rdb, prefix, batchlock.WithPollInterval(time.Minute))
	ctx := ctxTimeout(t, 30*time.Second)
	a, b, c := "{o}a", "{o}b", "{o}c"

	g1, err := p.Lock(ctx, []string{b})
	require.NoError(t, err)
	qLock := make(chan *batchlock.Lock, 1)
	go func() {
		l, err := q.Lock(ctx, []string{a, b})
		assert.NoError(t, err)
		qLock <- l
	}()
	waitQueued(ctx, t, p, b, 1)
	g2Lock := make(chan *batchlock.Lock, 1)
	go func() {
		l, err := p.Lock(ctx, []string{a, c})
		assert.NoError(t, err)
		g2Lock <- l
	}()
	waitQueued(ctx, t, p, a, 1)

	// G2 is queued in Redis a moment before it gives back c's gate, once
	// it has read the reply: poll. Were G2 to keep c, in Redis or at its
	// gate, c would stay busy until G2 got a, which waits for q, which
	// waits for b, which G1 lets go only after this.
	require.Eventually(t, func() bool {
		try, err := p.TryLock(ctx, []string{c})
		if err != nil {
			return false
		}
		require.NoError(t, try.Unlock(ctx))
		return true
	}, 5*time.Second, time.Millisecond, "c is free in Redis, and its gate with it, while G2 waits for a")
	g1c, err := p.Lock(ctxTimeout(t, 3*time.Second), []string{c})
	require.NoError(t, err, "G1 takes c without waiting for G2, which waits for a")
	require.NoError(t, g1c.Unlock(ctx))
	require.NoError(t, g1.Unlock(ctx))

	ql := <-qLock
	require.NotNil(t, ql)
	select {
	case l := <-g2Lock:
		t.Fatalf("G2 got a while q held it: %v", l.Keys())
	default:
	}
	require.NoError(t, ql.Unlock(ctx))
	g2 := <-g2Lock
	require.NotNil(t, g2)
	assert.Equal(t, []string{a, c}, g2.Keys())
	require.NoError(t, g2.Unlock(ctx))
	assert.Zero(t, p.Stats().Gated, "no gate is left")
	assert.Empty(t, lockKeysUnder(t, rdb, prefix))
}

// A waiter granted its key in Redis that then finds a later key's gate held
// by another lock of its Client takes the granted key up at once (its grant
// does not lapse) and waits at that gate with its keys renewed, however long:
// after three leases its first key is still its own, and once the gate opens
// it holds both, with a lease from its last renewal.
func TestWaitAtAGateRenewsTheKeysHeld(t *testing.T) {
	rdb := newClient(t)
	const leaseLen = time.Second
	p, prefix := newLocker(t, rdb, batchlock.WithLease(leaseLen), batchlock.WithPollInterval(time.Minute))
	q := peerOf(t, rdb, prefix)
	ctx := ctxTimeout(t, 30*time.Second)
	x, y := "{r}x", "{r}y"

	held, err := q.Lock(ctx, []string{x})
	require.NoError(t, err)
	got := make(chan *batchlock.Lock, 1)
	go func() {
		l, err := p.Lock(ctx, []string{x, y})
		assert.NoError(t, err)
		got <- l
	}()
	waitQueued(ctx, t, p, x, 1)
	g1, err := p.Lock(ctx, []string{y})
	require.NoError(t, err, "y's gate is free while the other call waits for x")
	heldToken := held.Token(x) // 0 once released
	require.NoError(t, held.Unlock(ctx))
	require.Eventually(t, func() bool {
		h := holderOf(t, p, x)
		return len(h.Holders) == 1 && h.Holders[0] != held.Owner()
	}, 5*time.Second, 5*time.Millisecond, "x is taken by the waiter")
	waiter := holderOf(t, p, x).Holders
	deadline := time.Now().Add(3 * leaseLen)
	for time.Now().Before(deadline) {
		assert.Equal(t, waiter, holderOf(t, p, x).Holders, "x stays the waiter's while it waits at y's gate")
		time.Sleep(50 * time.Millisecond)
	}
	require.NoError(t, g1.Unlock(ctx))
	l := <-got
	require.NotNil(t, l)
	assert.Equal(t, waiter, []string{l.Owner()})
	assert.Greater(t, l.Token(x), heldToken)
	assert.Greater(t, time.Until(l.ValidUntil()), leaseLen/2)
	require.NoError(t, l.Unlock(ctx))
	assert.Zero(t, p.Stats().Gated)
	assert.Empty(t, lockKeysUnder(t, rdb, prefix))
}

// A waiter granted its key, that then finds a later key of its group held
// shared by its own owner in the process (ErrInvalid at the gate), fails
// leaving nothing: the key granted to it is released at once, not kept
// until the grant lapses.
func TestUpgradeAtAGateAfterAHandOffReleasesTheGrant(t *testing.T) {
	rdb := newClient(t)
	p, prefix := newLocker(t, rdb, batchlock.WithPollInterval(time.Minute))
	q := peerOf(t, rdb, prefix)
	ctx := ctxTimeout(t, 30*time.Second)
	x, y := "{r}x", "{r}y"

	held, err := q.Lock(ctx, []string{x})
	require.NoError(t, err)
	failed := make(chan error, 1)
	go func() {
		_, err := p.Lock(ctx, []string{x, y}, batchlock.WithOwner("O"))
		failed <- err
	}()
	waitQueued(ctx, t, p, x, 1)
	reader, err := p.Lock(ctx, nil, batchlock.WithOwner("O"), batchlock.WithShared(y))
	require.NoError(t, err, "y's gate was given back while the call waits for x")
	require.NoError(t, held.Unlock(ctx))
	err = <-failed
	require.ErrorIs(t, err, batchlock.ErrInvalid)
	assert.ErrorContains(t, err, "held shared or in units by this owner")
	l, err := q.TryLock(ctx, []string{x})
	require.NoError(t, err, "x, handed to the call that failed, is free again at once")
	require.NoError(t, l.Unlock(ctx))
	require.NoError(t, reader.Unlock(ctx))
	assert.Zero(t, p.Stats().Gated)
	assert.Empty(t, lockKeysUnder(t, rdb, prefix))
}
