package cluster_test

import (
	"context"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/batchlock/batchlock/batchlock"
	"github.com/batchlock/batchlock/hashtag"
)

// grantee is a Client on prefix whose waiters poll once a minute: within a
// test only a grant gives them a key, and their last refused attempt, from
// which a grant is counted, is the one that queued them. refused counts its
// refused attempts.
type grantee struct {
	*batchlock.Client
	refused atomic.Uint64
}

func newGrantee(t *testing.T, prefix string, opts ...batchlock.Option) *grantee {
	g := &grantee{}
	g.Client = peerOf(t, newClient(t), prefix, append([]batchlock.Option{batchlock.WithPollInterval(time.Minute),
		batchlock.WithObserver(func(e batchlock.Event) {
			if e.Kind == batchlock.EventConflict {
				g.refused.Add(1)
			}
		})}, opts...)...)
	return g
}

// callsBeyondRefusals is how many acquire calls g made that were not
// refused: a call that took a key up.
func (g *grantee) callsBeyondRefusals() uint64 {
	return g.Stats().Acquires - g.refused.Load()
}

// inOrder returns two keys whose lock keys under prefix are in different
// slots, in the global order: the first before the second.
func inOrder(prefix, tag string) (first, second string) {
	first, second = "sku:"+tag+":a", "sku:"+tag+":b"
	for i := 0; hashtag.Slot(prefix+first) == hashtag.Slot(prefix+second); i++ {
		second = "sku:" + tag + ":b" + string(rune('0'+i))
	}
	if hashtag.Slot(prefix+second) < hashtag.Slot(prefix+first) {
		first, second = second, first
	}
	return first, second
}

// granted is a key c held that a grantee waited for and was granted.
type granted struct {
	c      *batchlock.Client
	prefix string
	key    []string
	holder *batchlock.Lock // c's lock, released
	waiter *grantee
	lock   *batchlock.Lock // the waiter's
}

// grantOne has a grantee (a Client with clientOpts) wait for a key c holds,
// its call with opts, then releases the key, and returns once the waiter's
// call returned.
func grantOne(t *testing.T, ctx context.Context, clientOpts []batchlock.Option, opts ...batchlock.LockOption) granted {
	c, prefix := newLocker(t, newClient(t))
	g := granted{c: c, prefix: prefix, key: spread(1, "grant"), waiter: newGrantee(t, prefix, clientOpts...)}
	var err error
	g.holder, err = c.Lock(ctx, g.key)
	require.NoError(t, err)
	got := make(chan *batchlock.Lock, 1)
	go func() {
		l, err := g.waiter.Lock(ctx, g.key, opts...)
		assert.NoError(t, err)
		got <- l
	}()
	waitQueued(ctx, t, c, g.key[0], 1)
	holderToken := g.holder.Token(g.key[0]) // 0 once released
	require.NoError(t, g.holder.Unlock(ctx))
	g.lock = <-got
	require.NotNil(t, g.lock)
	h := holderOf(t, c, g.key[0])
	assert.Equal(t, []string{g.lock.Owner()}, h.Holders)
	assert.Greater(t, g.lock.Token(g.key[0]), holderToken, "a grant is a new ownership: a newer token")
	assert.Equal(t, h.Token, g.lock.Token(g.key[0]), "the token the release took")
	return g
}

// A key released to a waiter of another Client is granted to it by the
// release: the waiter's Lock returns on the grant's message, with the token
// the release took, and no acquire of its own on that master. With a lease
// of the grant's order (3s) the lock is handed out on the grant alone, with
// no call: it counts on the key for the grant's 3s, at least half of it
// left, until the watchdog renews the key, with one call, within the grant;
// a lock released before then costs no renewal.
func TestGrantNeedsNoCallOfTheWaiter(t *testing.T) {
	for _, unlockAtOnce := range []bool{false, true} {
		t.Run(map[bool]string{false: "kept", true: "released at once"}[unlockAtOnce], func(t *testing.T) {
			ctx := ctxTimeout(t, 30*time.Second)
			g := grantOne(t, ctx, []batchlock.Option{batchlock.WithLease(3 * time.Second)})
			l := g.lock
			assert.Zero(t, g.waiter.callsBeyondRefusals(), "no call but refused attempts: none after the grant")
			assert.Zero(t, g.waiter.Stats().Extends, "no restart: the grant is enough for the lease")
			left := time.Until(l.ValidUntil())
			assert.LessOrEqual(t, left, 3*time.Second, "counted on for the grant only")
			assert.GreaterOrEqual(t, left, 1500*time.Millisecond, "handed out with half its lease")
			if !unlockAtOnce {
				require.Eventually(t, func() bool { return g.waiter.Stats().Extends == 1 },
					5*time.Second, 10*time.Millisecond, "the watchdog renews the grant within it")
				require.NoError(t, l.Err())
				assert.Greater(t, holderOf(t, g.c, g.key[0]).Lease, time.Second)
			}
			require.NoError(t, l.Unlock(ctx))
			if unlockAtOnce {
				assert.Zero(t, g.waiter.Stats().Extends, "released before its renewal was due")
			}
			assert.Empty(t, lockKeysUnder(t, newClient(t), g.prefix))
		})
	}
}

// A lock whose last key came by a grant, with a lease far longer than the
// grant, is restarted to its lease by one call as it is handed out, so that
// it gets at least half its lease, as a lock taken fresh does: it rides out
// a 2.5s pause of the key's master, which would outlast the grant.
func TestGrantedLockHandedOutWithHalfItsLease(t *testing.T) {
	cl := sharedCluster(t)
	ctx := ctxTimeout(t, 30*time.Second)
	g := grantOne(t, ctx, nil)
	l := g.lock
	assert.Zero(t, g.waiter.callsBeyondRefusals(), "no acquire after the grant")
	assert.EqualValues(t, 1, g.waiter.Stats().Extends, "one restart, on the key's master")
	assert.Greater(t, time.Until(l.ValidUntil()), 15*time.Second, "half the 30s lease at least")

	master, err := cl.MasterOfSlot(ctx, hashtag.Slot(g.prefix+g.key[0]))
	require.NoError(t, err)
	_, err = cl.Do(ctx, master.Addr, "CLIENT", "PAUSE", 2500, "WRITE")
	require.NoError(t, err)
	select {
	case <-l.Context().Done():
		t.Fatalf("lost during the pause: %v", l.Err())
	case <-time.After(3 * time.Second): // the pause and past the grant's end: what is checked
	}
	require.NoError(t, l.Unlock(ctx))
	assert.Empty(t, lockKeysUnder(t, newClient(t), g.prefix))
}

// A lock that cannot renew what it was granted without a call (WithTTL:
// nothing renews it; WithReplicas: the grant counts once replicas have it)
// takes the key up with its next attempt, as before grants: its validity is
// its own lease.
func TestGrantTakenUpByAFixedOrAcknowledgedLock(t *testing.T) {
	for name, opt := range map[string]batchlock.LockOption{
		"WithTTL":      batchlock.WithTTL(20 * time.Second),
		"WithReplicas": batchlock.WithReplicas(1, 2*time.Second),
	} {
		t.Run(name, func(t *testing.T) {
			ctx := ctxTimeout(t, 30*time.Second)
			g := grantOne(t, ctx, nil, opt)
			assert.Equal(t, uint64(1), g.waiter.callsBeyondRefusals(), "the attempt that took the grant up")
			assert.Greater(t, time.Until(g.lock.ValidUntil()), 10*time.Second)
			require.NoError(t, g.lock.Unlock(ctx))
		})
	}
}

// grantScene is a waiter granted the first of two keys and queued for the
// second: c held the first and another Client holds the second
// (holdSecond) while a grantee asks for both.
type grantScene struct {
	c             *batchlock.Client
	prefix        string
	first, second string
	holdSecond    *batchlock.Lock
}

// newGrantScene sets the scene, the grantee's call run by lock in a
// goroutine of its own, and returns once that call is queued for the
// second key.
func newGrantScene(t *testing.T, ctx context.Context, tag string, lock func(w *grantee, keys []string)) *grantScene {
	c, prefix := newLocker(t, newClient(t))
	s := &grantScene{c: c, prefix: prefix}
	s.first, s.second = inOrder(prefix, tag)
	holdFirst, err := c.Lock(ctx, []string{s.first})
	require.NoError(t, err)
	s.holdSecond, err = peerOf(t, newClient(t), prefix).Lock(ctx, []string{s.second})
	require.NoError(t, err)
	waiter := newGrantee(t, prefix)
	go lock(waiter, []string{s.first, s.second})
	waitQueued(ctx, t, c, s.first, 1)
	require.NoError(t, holdFirst.Unlock(ctx))
	waitQueued(ctx, t, c, s.second, 1)
	require.Len(t, holderOf(t, c, s.first).Holders, 1, "the first key granted to the waiter")
	return s
}

// A waiter granted a key and waiting on for a later one renews the grant
// while it waits: the key stays its past the grant's 3s, with the token the
// release gave it, until the rest comes.
func TestGrantRenewedWhileWaitingForTheRest(t *testing.T) {
	ctx := ctxTimeout(t, 40*time.Second)
	got := make(chan *batchlock.Lock, 1)
	s := newGrantScene(t, ctx, "grant-wait", func(w *grantee, keys []string) {
		l, err := w.Lock(ctx, keys)
		assert.NoError(t, err)
		got <- l
	})
	granted := holderOf(t, s.c, s.first)
	assert.Never(t, func() bool {
		h := holderOf(t, s.c, s.first)
		return !slices.Equal(h.Holders, granted.Holders) || h.Token != granted.Token
	}, 5*time.Second, 50*time.Millisecond, "the granted key stays the waiter's past its grant")

	require.NoError(t, s.holdSecond.Unlock(ctx))
	l := <-got
	require.NotNil(t, l)
	assert.Equal(t, granted.Token, l.Token(s.first))
	assert.Equal(t, granted.Holders, []string{l.Owner()})
	assert.Greater(t, time.Until(l.ValidUntil()), 10*time.Second)
	require.NoError(t, l.Unlock(ctx))
	assert.Empty(t, lockKeysUnder(t, newClient(t), s.prefix))
}

// A waiter that gives up after it was granted a key, while it waits for a
// later one, gives the granted key back at once, not when the grant lapses.
func TestWaiterThatGivesUpAfterItsGrantGivesItBack(t *testing.T) {
	ctx := ctxTimeout(t, 30*time.Second)
	impatient, cancel := context.WithCancel(ctx)
	gaveUp := make(chan error, 1)
	s := newGrantScene(t, ctx, "grant-give-up", func(w *grantee, keys []string) {
		_, err := w.Lock(impatient, keys)
		gaveUp <- err
	})
	cancel()
	require.ErrorIs(t, <-gaveUp, context.Canceled)
	// The give-back goes on in the background once the call's context has
	// ended: well within the grant's 3s, which would free the key too.
	require.Eventually(t, func() bool {
		return len(holderOf(t, s.c, s.first).Holders) == 0 && holderOf(t, s.c, s.second).Waiting == 0
	}, time.Second, 5*time.Millisecond, "the granted key given back, the place at the second key left")
	require.NoError(t, s.holdSecond.Unlock(ctx))
	assert.Empty(t, lockKeysUnder(t, newClient(t), s.prefix))
}

// Readers queued behind a writer are granted the key together by its
// release, with one token newer than the writer's, and each goes on without
// an acquire of its own.
func TestReadersGrantedTogether(t *testing.T) {
	c, prefix := newLocker(t, newClient(t))
	ctx := ctxTimeout(t, 30*time.Second)
	key := spread(1, "grant-readers")
	writer, err := c.Lock(ctx, key)
	require.NoError(t, err)
	readers := []*grantee{newGrantee(t, prefix), newGrantee(t, prefix)}
	got := make(chan *batchlock.Lock, len(readers))
	for i, r := range readers {
		go func() {
			l, err := r.Lock(ctx, nil, batchlock.WithShared(key...))
			assert.NoError(t, err)
			got <- l
		}()
		waitQueued(ctx, t, c, key[0], i+1)
	}
	writerToken := writer.Token(key[0]) // 0 once released
	require.NoError(t, writer.Unlock(ctx))
	var tokens []int64
	var owners []string
	for range readers {
		l := <-got
		require.NotNil(t, l)
		tokens = append(tokens, l.Token(key[0]))
		owners = append(owners, l.Owner())
		defer func() { assert.NoError(t, l.Unlock(ctx)) }()
	}
	assert.Equal(t, tokens[0], tokens[1], "one shared ownership, one token")
	assert.Greater(t, tokens[0], writerToken)
	for _, r := range readers {
		assert.Zero(t, r.callsBeyondRefusals(), "no acquire after the grant")
		assert.EqualValues(t, 1, r.Stats().Extends, "the grant restarted to the 30s lease, with one call")
	}
	h := holderOf(t, c, key[0])
	slices.Sort(owners)
	assert.Equal(t, owners, h.Holders)
	assert.True(t, h.Shared)
}
