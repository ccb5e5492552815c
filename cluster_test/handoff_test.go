package cluster_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/batchlock/batchlock/batchlock"
	"github.com/batchlock/batchlock/hashtag"
)

// queue makes Clients on one prefix whose waiters poll once a minute, so
// that within a test only a hand-off can give them a key, and counts each
// owner's refused attempts and hand-offs over all of them. Its Clients are to each other
// as Clients of separate processes: their locks meet in Redis's queue
// (locks of one Client would meet at its in-process gates first).
type queue struct {
	t      *testing.T
	prefix string

	mu      sync.Mutex
	refused map[string]int
	handed  map[string]int
}

func newQueue(t *testing.T) *queue {
	return &queue{t: t, prefix: testPrefix(t), refused: map[string]int{}, handed: map[string]int{}}
}

// client is a new Client of the queue.
func (q *queue) client() *batchlock.Client {
	return peerOf(q.t, newClient(q.t), q.prefix, batchlock.WithPollInterval(time.Minute), batchlock.WithObserver(func(e batchlock.Event) {
		q.mu.Lock()
		defer q.mu.Unlock()
		switch e.Kind {
		case batchlock.EventConflict:
			q.refused[e.Owner]++
		case batchlock.EventHandedOff:
			q.handed[e.Owner]++
		}
	}))
}

// handOffs counts the hand-offs owner's waiters were told of so far.
func (q *queue) handOffs(owner string) int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.handed[owner]
}

// refusals counts owner's refused attempts so far.
func (q *queue) refusals(owner string) int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.refused[owner]
}

// waitQueued polls until n calls are queued for key.
func waitQueued(ctx context.Context, t *testing.T, c *batchlock.Client, key string, n int) {
	t.Helper()
	require.Eventually(t, func() bool {
		held, err := c.Inspect(ctx, key)
		return err == nil && held[0].Waiting == n
	}, 10*time.Second, 5*time.Millisecond, "%d calls queued for %s", n, key)
}

// A release hands the key to the first waiter in arrival order, with a
// fencing token newer than the last; the other waiters are not woken, so
// none of them tries again for nothing.
func TestHandOffInArrivalOrder(t *testing.T) {
	q := newQueue(t)
	c := q.client()
	ctx := ctxTimeout(t, 30*time.Second)
	key := spread(1, "handoff")
	holder, err := c.Lock(ctx, key)
	require.NoError(t, err)

	type grant struct {
		owner string
		token int64
	}
	grants := make(chan grant, 3)
	owners := []string{"first", "second", "third"}
	var done sync.WaitGroup
	for i, owner := range owners {
		done.Add(1)
		waiter := q.client()
		go func() {
			defer done.Done()
			l, err := waiter.Lock(ctx, key, batchlock.WithOwner(owner))
			if !assert.NoError(t, err) {
				grants <- grant{owner: owner}
				return
			}
			grants <- grant{owner, l.Token(key[0])}
			assert.NoError(t, l.Unlock(ctx))
		}()
		waitQueued(ctx, t, c, key[0], i+1)
	}
	last := holder.Token(key[0])
	require.NoError(t, holder.Unlock(ctx))
	for _, want := range owners {
		g := <-grants
		assert.Equal(t, want, g.owner, "the key goes to the waiters in the order they came")
		assert.Greater(t, g.token, last, "a hand-off is a new ownership: a newer token")
		last = g.token
	}
	done.Wait()
	for _, owner := range owners {
		// Refused once; once listening, it reads the key rather than try
		// again, and is woken only by its hand-off: never for nothing.
		assert.Equal(t, 1, q.refusals(owner), "%s tried again for nothing", owner)
	}
	assert.Empty(t, lockKeysUnder(t, newClient(t), q.prefix))
}

// A waiter that gives up leaves the queue: the key goes to the next one at
// once, not after the place of the one gone lapses.
func TestImpatientWaiterLeavesTheQueue(t *testing.T) {
	q := newQueue(t)
	c, impatientClient, nextClient := q.client(), q.client(), q.client()
	ctx := ctxTimeout(t, 30*time.Second)
	keys := spread(20, "impatient")
	holder, err := c.Lock(ctx, keys[5:6])
	require.NoError(t, err)

	impatient, cancel := context.WithCancel(ctx)
	gaveUp := make(chan error, 1)
	go func() {
		_, err := impatientClient.Lock(impatient, keys)
		gaveUp <- err
	}()
	waitQueued(ctx, t, c, keys[5], 1)
	got := make(chan *batchlock.Lock, 1)
	go func() {
		l, err := nextClient.Lock(ctx, keys[5:6])
		assert.NoError(t, err)
		got <- l
	}()
	waitQueued(ctx, t, c, keys[5], 2)
	cancel()
	require.ErrorIs(t, <-gaveUp, context.Canceled)
	waitQueued(ctx, t, c, keys[5], 1)

	require.NoError(t, holder.Unlock(ctx))
	l := <-got
	require.NotNil(t, l)
	held, err := c.Inspect(ctx, keys...)
	require.NoError(t, err)
	for i, h := range held {
		if i == 5 {
			assert.Equal(t, []string{l.Owner()}, h.Holders)
			continue
		}
		assert.Empty(t, h.Holders, "%s is held after the impatient waiter gave up", keys[i])
	}
	require.NoError(t, l.Unlock(ctx))
}

// A release that hands its key on, or announces it, in a slot being
// migrated goes through whole: it reads the key before it writes, because a
// key it had deleted would no longer be local there, and writing it again
// would fail half-way, the key gone and the waiter never told.
func TestHandOffInASlotBeingMigrated(t *testing.T) {
	cl := newCluster(t)
	rdb := cl.Client()
	t.Cleanup(func() { _ = rdb.Close() })
	c, prefix := newLocker(t, rdb, batchlock.WithPollInterval(time.Minute))
	waiter := peerOf(t, rdb, prefix, batchlock.WithPollInterval(time.Minute))
	ctx := ctxTimeout(t, time.Minute)
	key := []string{"{handoff-mig}:1"}
	holder, err := c.Lock(ctx, key)
	require.NoError(t, err)
	got := make(chan *batchlock.Lock, 1)
	go func() {
		l, err := waiter.Lock(ctx, key)
		assert.NoError(t, err)
		got <- l
	}()
	waitQueued(ctx, t, c, key[0], 1)

	stable := halfMigrate(ctx, t, cl, hashtag.Slot(prefix+key[0]))

	holderToken := holder.Token(key[0]) // 0 once released
	require.NoError(t, holder.Unlock(ctx), "the key has not moved: its release goes through")
	held, err := c.Inspect(ctx, key...)
	require.NoError(t, err)
	assert.Equal(t, 1, held[0].Holds, "the key is granted to the waiter, not deleted")
	// Keys of a slot in migration cannot be taken (see docs/design.md, What is guaranteed); the
	// waiter renews its grant once the slot is stable again, within the
	// retry window.
	stable()
	select {
	case l := <-got:
		require.NotNil(t, l)
		assert.Greater(t, l.Token(key[0]), holderToken)
		require.NoError(t, l.Unlock(ctx))
	case <-time.After(30 * time.Second):
		t.Fatal("the waiter was not handed the key")
	}
	assert.Empty(t, lockKeysUnder(t, rdb, prefix))
}

// Defect 8: wake-ups survive a dropped pub/sub connection, also when the
// Client listens to channels of several slots of one master.
func TestWakeUpsSurvivePubSubReconnect(t *testing.T) {
	cl := sharedCluster(t)
	rdb := newClient(t)
	c, prefix := newLocker(t, rdb, batchlock.WithPollInterval(time.Minute))
	ctx := ctxTimeout(t, 60*time.Second)
	masters, err := cl.Masters(ctx)
	require.NoError(t, err)
	keys := keysOn(t, masters[1], prefix, "wake", 2)
	a, b := keys[0], keys[1]
	require.NotEqual(t, hashtag.Slot(prefix+a), hashtag.Slot(prefix+b))
	holder, err := c.TryLock(ctx, []string{a, b}, batchlock.WithTTL(time.Minute))
	require.NoError(t, err)

	waiter := peerOf(t, rdb, prefix, batchlock.WithPollInterval(time.Minute))
	got := make(chan error, 2)
	for _, k := range []string{a, b} {
		go func() {
			l, err := waiter.Lock(ctx, []string{k})
			if err == nil {
				err = l.Unlock(ctx)
			}
			got <- err
		}()
	}
	subscribed := func() bool {
		return shardSubscribers(ctx, rdb, prefix+a) > 0 && shardSubscribers(ctx, rdb, prefix+b) > 0
	}
	require.Eventually(t, subscribed, 10*time.Second, 5*time.Millisecond)
	_, err = cl.Do(ctx, masters[1].Addr, "CLIENT", "KILL", "TYPE", "pubsub")
	require.NoError(t, err)
	require.Eventually(t, subscribed, 5*time.Second, 5*time.Millisecond, "the waiters listen again after the reconnect")

	require.NoError(t, holder.Unlock(ctx))
	for range 2 {
		select {
		case err := <-got:
			require.NoError(t, err)
		case <-time.After(20 * time.Second):
			t.Fatal("a waiter was not woken after the reconnect (it polls once a minute)")
		}
	}
}
