package batchlock

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/batchlock/batchlock/hashtag"
	"github.com/batchlock/batchlock/internal/owner"
	"github.com/batchlock/batchlock/internal/routing"
	"github.com/batchlock/batchlock/internal/wire/wiretest"
)

// The acquisition loop against wiretest.Fake: what a call takes, gives back,
// rolls back and waits for.

var basket = []string{"sku:1", "sku:2", "sku:3", "sku:4", "sku:5", "sku:6"}

// bySlot returns basket's lock keys in the order the Client takes them.
func bySlot(keys []string) []string {
	var out []string
	for _, g := range hashtag.GroupBySlot(lockKeys(keys)) {
		out = append(out, g.Keys...)
	}
	return out
}

func lockKeys(keys []string) []string {
	out := make([]string, len(keys))
	for i, k := range keys {
		out[i] = defaultPrefix + k
	}
	return out
}

// slotsServedWith counts the slots of keys (lock keys) that the fake master
// of key serves.
func slotsServedWith(key string, keys []string) int {
	want, _ := wiretest.FakeMaster(context.Background(), key)
	slots := map[int]bool{}
	for _, k := range keys {
		if m, _ := wiretest.FakeMaster(context.Background(), k); m == want {
			slots[hashtag.Slot(k)] = true
		}
	}
	return len(slots)
}

type failure func(name string, c *routing.Call) (bool, error)

// failOn fails the calls of name on lock key, times times (forever when
// negative), with err; ran says whether the script took effect anyway.
func failOn(name, key string, times int, ran bool, err error) failure {
	var n atomic.Int64
	return func(got string, c *routing.Call) (bool, error) {
		if got != name || !slicesContains(c.Args, key) {
			return false, nil
		}
		if times >= 0 && n.Add(1) > int64(times) {
			return false, nil
		}
		return ran, err
	}
}

func slicesContains(args []any, key string) bool {
	for _, a := range args {
		if a == key {
			return true
		}
	}
	return false
}

func TestTryLock(t *testing.T) {
	order := bySlot(basket)
	middle := order[3]
	for _, tc := range []struct {
		name    string
		setup   func(f *wiretest.Fake)
		opts    []LockOption
		ctx     time.Duration // the call's timeout; 0: none
		wantErr []error
		errText string
		// after the call: the lock keys held, by owner ("me" or "other")
		wantHeld  map[string]string
		wantMarks int // cancel marks left by the rollback
	}{
		{name: "free keys are all taken", wantHeld: ownedBy("me", order...)},
		{name: "a key held by another owner: conflict, nothing kept",
			setup:    func(f *wiretest.Fake) { f.Hold("other", time.Minute, middle) },
			wantErr:  []error{ErrNotObtained},
			errText:  strings.TrimPrefix(middle, defaultPrefix),
			wantHeld: ownedBy("other", middle)},
		{name: "the owner's own key is joined",
			setup:    func(f *wiretest.Fake) { f.Hold("me", time.Minute, middle) },
			wantHeld: ownedBy("me", order...)},
		{name: "a transient error is retried",
			setup: func(f *wiretest.Fake) {
				f.Fault = failOn("acquire", middle, 2, false, redisErr("TRYAGAIN Multiple keys request during rehashing of slot"))
			},
			wantHeld: ownedBy("me", order...)},
		{name: "a lost reply leaves the groups of its call unknown: released, each marked cancelled",
			setup:     func(f *wiretest.Fake) { f.Fault = failOn("acquire", middle, -1, true, redisErr("ERR reply lost")) },
			wantErr:   []error{},
			errText:   "reply lost",
			wantHeld:  map[string]string{},
			wantMarks: slotsServedWith(middle, order)},
		{name: "a slot in migration until the context ends: named, nothing marked",
			setup: func(f *wiretest.Fake) {
				f.Fault = failOn("acquire", middle, -1, false, redisErr("TRYAGAIN Multiple keys request during rehashing of slot"))
			},
			ctx:      80 * time.Millisecond,
			wantErr:  []error{context.DeadlineExceeded},
			errText:  "is being migrated",
			wantHeld: map[string]string{}},
		{name: "replies past half the lease: rolled back",
			setup:    func(f *wiretest.Fake) { f.Delay = 60 * time.Millisecond },
			opts:     []LockOption{WithTTL(100 * time.Millisecond)},
			wantErr:  []error{ErrNotObtained},
			errText:  "lease ran out",
			wantHeld: map[string]string{}},
		{name: "too few replicas: rolled back",
			setup:    func(f *wiretest.Fake) { f.Acks = 0 },
			opts:     []LockOption{WithReplicas(1, time.Millisecond)},
			wantErr:  []error{ErrNotObtained, ErrNoReplicas},
			wantHeld: map[string]string{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, f := newFaked(t)
			if tc.setup != nil {
				tc.setup(f)
			}
			ctx := t.Context()
			if tc.ctx > 0 {
				var cancel context.CancelFunc
				ctx, cancel = context.WithTimeout(ctx, tc.ctx)
				defer cancel()
			}
			l, err := c.TryLock(ctx, basket, append([]LockOption{WithOwner("me")}, tc.opts...)...)
			if tc.wantErr == nil {
				require.NoError(t, err)
				for _, k := range basket {
					assert.Positive(t, l.Token(k), "token of %s", k)
				}
				assert.NoError(t, l.Err())
			} else {
				require.Error(t, err)
				require.Nil(t, l)
				for _, w := range tc.wantErr {
					assert.ErrorIs(t, err, w)
				}
				assert.ErrorContains(t, err, tc.errText)
			}
			// A rollback whose context ended goes on in the background.
			require.Eventually(t, func() bool { return len(f.Held()) == len(tc.wantHeld) }, time.Second, time.Millisecond)
			assert.Equal(t, tc.wantHeld, f.Held())
			assert.Len(t, f.CancelMarks(), tc.wantMarks)
		})
	}
}

func ownedBy(owner string, keys ...string) map[string]string {
	out := map[string]string{}
	for _, k := range keys {
		out[k] = owner
	}
	return out
}

type redisErr string

func (e redisErr) Error() string { return string(e) }
func (redisErr) RedisError()     {}

func TestTryLockConflictListsKeysAndReleasesGrantedGroups(t *testing.T) {
	c, f := newFaked(t)
	order := bySlot(basket)
	f.Hold("other", time.Minute, order[1], order[4])
	_, err := c.TryLock(t.Context(), basket)
	var conflict *ConflictError
	require.ErrorAs(t, err, &conflict)
	assert.ElementsMatch(t, []string{order[1][len(defaultPrefix):], order[4][len(defaultPrefix):]}, conflict.Keys)
	assert.Equal(t, ownedBy("other", order[1], order[4]), f.Held(), "what other masters granted is given back")
	assert.NotEmpty(t, f.Calls("release"))
}

// masters counts the fake masters that serve keys.
func masters(keys []string) int {
	seen := map[string]bool{}
	for _, k := range keys {
		m, _ := wiretest.FakeMaster(context.Background(), k)
		seen[m] = true
	}
	return len(seen)
}

// newCountingConflicts returns a faked Client that counts the conflicts its
// calls meet, for tests to know when a call waits.
func newCountingConflicts(t *testing.T) (*Client, *wiretest.Fake, *atomic.Int64) {
	var conflicts atomic.Int64
	c, f := newFaked(t, WithObserver(func(e Event) {
		if e.Kind == EventConflict {
			conflicts.Add(1)
		}
	}))
	return c, f, &conflicts
}

// newCountingRenewals returns a faked Client with the watchdog lease given,
// and the count of its renewals.
func newCountingRenewals(t *testing.T, lease time.Duration) (*Client, *wiretest.Fake, *atomic.Int64) {
	var renewed atomic.Int64
	c, f := newFaked(t, WithLease(lease), WithObserver(func(e Event) {
		if e.Kind == EventRenewed {
			renewed.Add(1)
		}
	}))
	return c, f, &renewed
}

// A waiting Lock keeps the groups before the one it waits for, gives back
// those after, asks for the refused group alone until it is free, then for
// the rest, and restarts every lease once all are held when the wait took
// more than a tenth of its TTL.
func TestLockWaitsInOrder(t *testing.T) {
	c, f, conflicts := newCountingConflicts(t)
	order := bySlot(basket)
	f.Hold("other", time.Minute, order[3])

	const ttl = 3 * time.Second
	asked := time.Now()
	got := make(chan error, 1)
	var l *Lock
	go func() {
		var err error
		l, err = c.Lock(t.Context(), basket, WithOwner("me"), WithTTL(ttl))
		got <- err
	}()
	require.Eventually(t, func() bool { return conflicts.Load() >= 3 }, 5*time.Second, time.Millisecond)
	held := f.Held()
	for i, k := range order {
		switch {
		case i < 3:
			assert.Equal(t, "me", held[k], "%s, before the refused key, is kept", k)
		case i > 3:
			assert.Empty(t, held[k], "%s, after it, is given back", k)
		}
	}
	// The first attempt asks for every group, one call per master; the next
	// ones for the refused group alone.
	for _, k := range f.Calls("acquire")[masters(order):] {
		assert.Equal(t, order[3], k, "while it waits, a Lock asks for the refused group alone")
	}
	extendsBefore := len(f.Calls("extend"))

	// Free the key once the wait took more than a tenth of the TTL (and
	// less than a third, when the held groups would be renewed meanwhile).
	require.Eventually(t, func() bool { return time.Since(asked) > ttl/10+20*time.Millisecond }, ttl, time.Millisecond)
	f.Free(order[3])
	require.NoError(t, <-got)
	assert.Equal(t, ownedBy("me", order...), f.Held())
	assert.Len(t, f.Calls("extend")[extendsBefore:], masters(order), "every group's lease restarts, one call per master")
	assert.WithinDuration(t, time.Now().Add(ttl), l.ValidUntil(), ttl/10)
	require.NoError(t, l.Unlock(t.Context()))
	assert.Empty(t, f.Held())
}

func TestLockWaitEnds(t *testing.T) {
	order := bySlot(basket)
	for _, tc := range []struct {
		name string
		end  func(c *Client, cancel context.CancelFunc)
		want error
	}{
		{"with its context", func(_ *Client, cancel context.CancelFunc) { cancel() }, context.Canceled},
		{"with Close", func(c *Client, _ context.CancelFunc) { _ = c.Close() }, ErrClosed},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, f, conflicts := newCountingConflicts(t)
			f.Hold("other", time.Minute, order[4])
			ctx, cancel := context.WithCancel(t.Context())
			defer cancel()
			got := make(chan error, 1)
			go func() {
				_, err := c.Lock(ctx, basket)
				got <- err
			}()
			require.Eventually(t, func() bool { return conflicts.Load() >= 1 }, 5*time.Second, time.Millisecond)
			tc.end(c, cancel)
			err := <-got
			assert.ErrorIs(t, err, ErrNotObtained)
			assert.ErrorIs(t, err, tc.want)
			require.Eventually(t, func() bool { return len(f.Held()) == 1 }, time.Second, time.Millisecond)
			assert.Equal(t, ownedBy("other", order[4]), f.Held(), "what the waiter held is released")
		})
	}
}

func TestLockRestartNeedsAcknowledgement(t *testing.T) {
	c, f, conflicts := newCountingConflicts(t)
	order := bySlot(basket)
	f.Hold("other", time.Minute, order[2])
	got := make(chan error, 1)
	go func() {
		_, err := c.Lock(t.Context(), basket, WithReplicas(1, time.Millisecond))
		got <- err
	}()
	require.Eventually(t, func() bool { return conflicts.Load() >= 1 }, 5*time.Second, time.Millisecond)
	f.With(func() { f.Acks = 0 })
	f.Free(order[2])
	err := <-got
	assert.ErrorIs(t, err, ErrNotObtained)
	assert.ErrorIs(t, err, ErrNoReplicas)
	assert.Empty(t, f.Held())
}

func TestExtend(t *testing.T) {
	for _, tc := range []struct {
		name      string
		before    func(f *wiretest.Fake)
		want      []error
		lengthens bool
		lost      bool
	}{
		{name: "lengthens the lease", lengthens: true},
		{name: "a key gone: lost", before: func(f *wiretest.Fake) { f.Free(defaultPrefix + basket[2]) }, want: []error{ErrNotHeld}, lost: true},
		{name: "unacknowledged: lengthens nothing", before: func(f *wiretest.Fake) { f.With(func() { f.Acks = 0 }) }, want: []error{ErrNoReplicas}},
		{name: "a master that fails: lengthens nothing",
			before: func(f *wiretest.Fake) {
				f.With(func() { f.Fault = failOn("extend", defaultPrefix+basket[0], -1, false, redisErr("ERR down")) })
			},
			want: []error{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, f := newFaked(t)
			l, err := c.TryLock(t.Context(), basket, WithTTL(time.Minute), WithReplicas(1, time.Millisecond))
			require.NoError(t, err)
			before := l.ValidUntil()
			if tc.before != nil {
				tc.before(f)
			}
			err = l.Extend(t.Context(), time.Hour)
			if tc.want == nil {
				require.NoError(t, err)
			} else {
				require.Error(t, err)
			}
			for _, w := range tc.want {
				assert.ErrorIs(t, err, w)
			}
			if tc.lengthens {
				assert.True(t, l.ValidUntil().After(before.Add(50*time.Minute)))
			} else {
				assert.Equal(t, before, l.ValidUntil())
			}
			if tc.lost {
				<-l.Context().Done()
				assert.ErrorIs(t, l.Err(), ErrLockLost)
				assert.ErrorIs(t, l.Extend(t.Context(), time.Hour), ErrLockLost, "a lost lock is not extended")
			} else {
				assert.NoError(t, l.Err())
			}
			assert.ErrorIs(t, l.Extend(t.Context(), 0), ErrInvalid)
		})
	}
}

func TestUnlock(t *testing.T) {
	c, f := newFaked(t)
	l, err := c.TryLock(t.Context(), basket, WithTTL(time.Hour))
	require.NoError(t, err)

	f.With(func() { f.Fault = failOn("release", defaultPrefix+basket[1], 1, false, io.ErrClosedPipe) })
	err = l.Unlock(t.Context())
	require.ErrorIs(t, err, io.ErrClosedPipe, "the release of one group failed")
	assert.NoError(t, l.Err(), "the lock is not released yet")
	failed, _ := wiretest.FakeMaster(t.Context(), defaultPrefix+basket[1])
	for _, k := range lockKeys(basket) {
		m, _ := wiretest.FakeMaster(t.Context(), k)
		_, held := f.Held()[k]
		assert.Equal(t, m == failed, held, "%s: the keys of the failed master's call are still held, the others released", k)
	}

	ended, cancel := context.WithCancel(t.Context())
	cancel()
	require.NoError(t, l.Unlock(ended), "tried again, with an ended context: released")
	assert.Empty(t, f.Held())
	assert.ErrorIs(t, l.Err(), ErrNotHeld)
	<-l.Context().Done()
	assert.ErrorIs(t, context.Cause(l.Context()), ErrNotHeld)
	assert.ErrorIs(t, l.Unlock(t.Context()), ErrNotHeld, "released once")
}

func TestUnlockReportsKeysTakenByAnother(t *testing.T) {
	c, f := newFaked(t)
	l, err := c.TryLock(t.Context(), basket, WithTTL(time.Hour))
	require.NoError(t, err)
	f.Free(defaultPrefix + basket[0])
	f.Hold("other", time.Minute, defaultPrefix+basket[0])
	err = l.Unlock(t.Context())
	assert.ErrorIs(t, err, ErrNotHeld)
	assert.ErrorContains(t, err, "held by another owner")
	assert.Equal(t, ownedBy("other", defaultPrefix+basket[0]), f.Held(), "the other keys are released all the same")
}

func TestFixedLeaseEndsTheLock(t *testing.T) {
	c, f := newFaked(t)
	l, err := c.TryLock(t.Context(), basket, WithTTL(50*time.Millisecond))
	require.NoError(t, err)
	<-l.Context().Done()
	assert.ErrorIs(t, l.Err(), ErrLockLost)
	assert.False(t, time.Now().Before(l.ValidUntil()), "Done closes when the validity ends, not before")
	require.Eventually(t, func() bool { return len(f.Held()) == 0 }, time.Second, time.Millisecond)
}

func TestWatchdogRenewsAndReportsLoss(t *testing.T) {
	const leaseLen = 150 * time.Millisecond
	c, f, renewed := newCountingRenewals(t, leaseLen)
	l, err := c.Lock(t.Context(), basket)
	require.NoError(t, err)
	plain, err := c.Lock(t.Context(), []string{"other:1"})
	require.NoError(t, err)
	require.Eventually(t, func() bool { return renewed.Load() >= 8 }, 5*time.Second, time.Millisecond, "renewed over several leases")
	assert.NoError(t, l.Err())
	assert.Len(t, f.Held(), len(basket)+1)

	f.Free(defaultPrefix + basket[3])
	select {
	case <-l.Context().Done():
	case <-time.After(5 * time.Second):
		t.Fatal("a lock missing a key was not reported lost")
	}
	assert.ErrorIs(t, l.Err(), ErrLockLost)
	assert.NoError(t, plain.Err(), "a loss ends only the lock it belongs to")
	require.Eventually(t, func() bool { return len(f.Held()) == 1 }, time.Second, time.Millisecond,
		"the lost lock's other keys are let go at once, not at the end of their lease")
	unlocked := l.Unlock(t.Context())
	assert.ErrorIs(t, unlocked, ErrNotHeld)
	assert.ErrorIs(t, unlocked, ErrLockLost, "an Unlock after says why")

	require.NoError(t, c.Close())
	<-plain.Context().Done()
	assert.ErrorIs(t, plain.Err(), ErrLockLost)
	assert.ErrorIs(t, plain.Err(), ErrClosed)
	assert.Empty(t, f.Held(), "Close released the lock it held")
	_, err = c.TryLock(t.Context(), basket)
	assert.ErrorIs(t, err, ErrClosed)
	unlocked = plain.Unlock(t.Context())
	require.ErrorIs(t, unlocked, ErrClosed, "Unlock after Close says why the lock ended")
	require.ErrorIs(t, unlocked, ErrNotHeld)
}

// Close lets every key its Client holds go: renewed locks and WithTTL ones,
// nested holds of one owner, all ended with ErrClosed; a lock being taken
// is rolled back; a release that fails is returned by Close, and its keys
// are left to their lease.
func TestCloseReleasesEveryLockHeld(t *testing.T) {
	c, f := newFaked(t)
	ctx := t.Context()
	renewed, err := c.Lock(ctx, basket[:2])
	require.NoError(t, err)
	fixed, err := c.Lock(ctx, basket[2:4], WithTTL(time.Hour))
	require.NoError(t, err)
	nested, err := c.Lock(ContextWithOwner(ctx, fixed.Owner()), basket[2:3])
	require.NoError(t, err)
	require.Len(t, f.Held(), 4)

	require.NoError(t, c.Close())
	assert.Empty(t, f.Held(), "nothing the Client held outlives it")
	for _, l := range []*Lock{renewed, fixed, nested} {
		<-l.Context().Done()
		assert.ErrorIs(t, l.Err(), ErrClosed)
		assert.ErrorIs(t, l.Unlock(ctx), ErrNotHeld)
	}
	assert.Zero(t, c.Stats().Gated)

	c, f = newFaked(t)
	l, err := c.Lock(ctx, basket, WithTTL(time.Hour))
	require.NoError(t, err)
	f.With(func() { f.Fault = failOn("release", defaultPrefix+basket[1], 100, false, io.ErrClosedPipe) })
	err = c.Close()
	require.ErrorIs(t, err, io.ErrClosedPipe, "the failed release is Close's error")
	assert.ErrorContains(t, err, "close: releasing")
	assert.ErrorIs(t, l.Err(), ErrClosed)
	assert.Contains(t, f.Held(), defaultPrefix+basket[1], "left to its lease")
}

func TestDo(t *testing.T) {
	c, f := newFaked(t, WithLease(150*time.Millisecond))
	boom := errors.New("boom")
	err := c.Do(t.Context(), basket, func(ctx context.Context) error {
		l, ok := LockFromContext(ctx)
		require.True(t, ok)
		assert.Positive(t, l.Token(basket[0]))
		id, _ := owner.FromContext(ctx)
		assert.Equal(t, l.Owner(), id)
		inner, err := c.TryLock(ctx, basket[:2])
		require.NoError(t, err, "reentrant inside Do")
		require.NoError(t, inner.Unlock(ctx))
		return boom
	})
	assert.ErrorIs(t, err, boom)
	assert.Empty(t, f.Held(), "Do unlocks")

	err = c.Do(t.Context(), basket, func(ctx context.Context) error {
		f.Free(defaultPrefix + basket[5])
		<-ctx.Done()
		return context.Cause(ctx)
	})
	assert.ErrorIs(t, err, ErrLockLost, "fn's context ends with the loss")
	assert.ErrorIs(t, c.Do(t.Context(), basket, nil), ErrInvalid)
}

// Every call on a closed Client fails with ErrClosed, the admin API's and
// the preflight's too, and sends nothing.
func TestCallsOnAClosedClient(t *testing.T) {
	c, f := newFaked(t)
	f.Hold("other", time.Minute, defaultPrefix+basket[0])
	require.NoError(t, c.Close())
	require.NoError(t, c.Close(), "idempotent")
	sent := len(f.Log())
	ctx := t.Context()
	_, lockErr := c.Lock(ctx, basket)
	_, tryErr := c.TryLock(ctx, basket)
	_, eachErr := c.TryEach(ctx, [][]string{basket})
	_, noBasketsErr := c.TryEach(ctx, nil)
	_, heldErr := c.Held(ctx, "*")
	_, inspectErr := c.Inspect(ctx, basket...)
	_, forceErr := c.ForceUnlock(ctx, basket[0])
	results, preflightErr := c.Preflight(ctx)
	assert.Empty(t, results)
	checkErr := c.Check(ctx)
	for _, err := range []error{lockErr, tryErr, eachErr, noBasketsErr, heldErr, inspectErr, forceErr, checkErr, preflightErr,
		c.Do(ctx, basket, func(context.Context) error { return nil })} {
		assert.ErrorIs(t, err, ErrClosed)
	}
	assert.Len(t, f.Log(), sent, "nothing sent")
	assert.Contains(t, f.Held(), defaultPrefix+basket[0], "another Client's key is left alone")
	assert.Equal(t, ErrClosed.Error(), checkErr.Error(), "a closed Client is no failed check")
}

func TestForceUnlock(t *testing.T) {
	c, f := newFaked(t)
	l, err := c.TryLock(t.Context(), basket[:2], WithOwner("stuck"), WithTTL(time.Hour))
	require.NoError(t, err)
	token := l.Token(basket[0]) // 0 once the lock ends
	released, err := c.ForceUnlock(t.Context(), basket[0], "free")
	require.NoError(t, err)
	assert.Equal(t, []HeldKey{
		{Key: basket[0], Holders: []string{"stuck"}, Holds: 1, Token: token},
		{Key: "free"},
	}, released)
	// Through the holder's own Client the lock ends at once, and its other
	// key goes too, in the background.
	require.Eventually(t, func() bool { return len(f.Held()) == 0 }, 5*time.Second, time.Millisecond,
		"the lock ended: its other key goes too")
	assert.ErrorIs(t, l.Err(), ErrLockLost)

	for _, bad := range [][]string{nil, {""}, {"fence:{x}"}, {"ok", "cancel:{x}:h:1"}} {
		_, err := c.ForceUnlock(t.Context(), bad...)
		assert.ErrorIs(t, err, ErrInvalid, "%q", bad)
	}
	_, err = c.Held(t.Context(), "")
	assert.ErrorIs(t, err, ErrInvalid)
}

// A call that finds a slot elsewhere changed nothing; its slots are tried
// again one call each, and the lock is taken; a slot that stays elsewhere
// fails the call within its context, naming the slot.
func TestSlotFoundElsewhere(t *testing.T) {
	order := bySlot(basket)
	t.Run("moved: tried again slot by slot", func(t *testing.T) {
		c, f := newFaked(t)
		f.Elsewhere = func(name string, c *routing.Call) bool {
			return (name == "acquire" && wiretest.SlotsIn(c) > 1 || name == "release" && wiretest.KeysIn(name, c) > 1) && slicesContains(c.Args, order[0])
		}
		l, err := c.TryLock(t.Context(), basket, WithTTL(time.Minute))
		require.NoError(t, err)
		assert.Equal(t, ownedBy(l.Owner(), order...), f.Held())
		require.NoError(t, l.Unlock(t.Context()))
		assert.Empty(t, f.Held(), "the release too is tried again slot by slot")
	})
	t.Run("in migration until the context ends", func(t *testing.T) {
		c, f := newFaked(t)
		f.Elsewhere = func(name string, c *routing.Call) bool { return name == "acquire" && slicesContains(c.Args, order[2]) }
		ctx, cancel := context.WithTimeout(t.Context(), 100*time.Millisecond)
		defer cancel()
		_, err := c.Lock(ctx, basket)
		require.ErrorIs(t, err, context.DeadlineExceeded)
		assert.ErrorContains(t, err, fmt.Sprintf("slot %d", hashtag.Slot(order[2])))
		assert.ErrorContains(t, err, "being migrated")
		require.Eventually(t, func() bool { return len(f.Held()) == 0 }, time.Second, time.Millisecond, "nothing is left held")
	})
	t.Run("in migration until WithWait ends", func(t *testing.T) {
		c, f := newFaked(t)
		f.Elsewhere = func(name string, c *routing.Call) bool { return name == "acquire" && slicesContains(c.Args, order[2]) }
		_, err := c.Lock(t.Context(), basket, WithWait(100*time.Millisecond))
		require.ErrorIs(t, err, ErrNotObtained, "as the README's error switch expects of a WithWait that runs out")
		require.ErrorIs(t, err, context.DeadlineExceeded)
		assert.ErrorContains(t, err, "waited 100ms")
		assert.ErrorContains(t, err, "being migrated")
		require.Eventually(t, func() bool { return len(f.Held()) == 0 }, time.Second, time.Millisecond, "nothing is left held")
	})
}

// Two renewed locks of one owner on a shared key (a lock taken inside Do, on
// keys Do holds) are each renewed on it: when the inner one is released, the
// outer one still holds the key, and nobody else can take it.
func TestWatchdogRenewsEveryHoldOfASharedKey(t *testing.T) {
	const leaseLen = 150 * time.Millisecond
	c, f, renewed := newCountingRenewals(t, leaseLen)
	outer, err := c.Lock(t.Context(), basket, WithOwner("order-1"))
	require.NoError(t, err)
	inner, err := c.Lock(t.Context(), basket[:2], WithOwner("order-1"))
	require.NoError(t, err)
	require.Eventually(t, func() bool { return renewed.Load() >= 12 }, 5*time.Second, time.Millisecond, "renewed over several leases")
	require.NoError(t, inner.Unlock(t.Context()))
	assert.Equal(t, ownedBy("order-1", lockKeys(basket)...), f.Held(), "the outer lock still holds every key")
	_, err = c.TryLock(t.Context(), basket[:1], WithOwner("other"))
	assert.ErrorIs(t, err, ErrNotObtained, "and nobody else can take the shared ones")
	assert.NoError(t, outer.Err())
	require.NoError(t, outer.Unlock(t.Context()))
}

// Bad shared keys are refused like bad keys, by every call, before anything
// is sent.
func TestBadSharedKeysSendNothing(t *testing.T) {
	c, f := newFaked(t)
	for _, bad := range [][]string{{""}, {"ok", ""}, {"fence:{x}"}} {
		_, err := c.TryLock(t.Context(), basket[:1], WithShared(bad...))
		assert.ErrorIs(t, err, ErrInvalid, "TryLock %q", bad)
		_, err = c.Lock(t.Context(), nil, WithShared(bad...))
		assert.ErrorIs(t, err, ErrInvalid, "Lock %q", bad)
		err = c.Do(t.Context(), nil, func(context.Context) error { return nil }, WithShared(bad...))
		assert.ErrorIs(t, err, ErrInvalid, "Do %q", bad)
	}
	_, err := c.Lock(t.Context(), nil, WithShared())
	assert.ErrorIs(t, err, ErrInvalid, "no keys either way")
	assert.Empty(t, f.Log(), "nothing sent")
}

// An option a call would ignore is refused by it, before anything is sent:
// TryLock never waits.
func TestTryLockRefusesWithWait(t *testing.T) {
	c, f := newFaked(t)
	_, err := c.TryLock(t.Context(), basket, WithWait(time.Second))
	require.ErrorIs(t, err, ErrInvalid)
	assert.ErrorContains(t, err, "WithWait: TryLock never waits")
	assert.Empty(t, f.Log(), "nothing sent")
}

// A nil context is ErrInvalid at once, for every call that sends something:
// nothing is sent, the call is not left counted in flight, and Close returns.
func TestNilContextIsInvalid(t *testing.T) {
	c, f := newFaked(t)
	l, err := c.Lock(t.Context(), basket)
	require.NoError(t, err)
	sent := len(f.Log())
	var nilCtx context.Context
	calls := map[string]func() error{
		"Lock":        func() error { _, err := c.Lock(nilCtx, basket); return err },
		"TryLock":     func() error { _, err := c.TryLock(nilCtx, basket); return err },
		"TryEach":     func() error { _, err := c.TryEach(nilCtx, [][]string{basket}); return err },
		"Do":          func() error { return c.Do(nilCtx, basket, func(context.Context) error { return nil }) },
		"Held":        func() error { _, err := c.Held(nilCtx, "*"); return err },
		"Inspect":     func() error { _, err := c.Inspect(nilCtx, basket...); return err },
		"ForceUnlock": func() error { _, err := c.ForceUnlock(nilCtx, basket...); return err },
		"Check":       func() error { return c.Check(nilCtx) },
		"Preflight":   func() error { _, err := c.Preflight(nilCtx); return err },
		"Extend":      func() error { return l.Extend(nilCtx, time.Second) },
		"Unlock":      func() error { return l.Unlock(nilCtx) },
	}
	for name, call := range calls {
		t.Run(name, func(t *testing.T) {
			err := call()
			require.ErrorIs(t, err, ErrInvalid)
			assert.Contains(t, err.Error(), "context must not be nil")
		})
	}
	assert.Len(t, f.Log(), sent, "nothing was sent")
	require.NoError(t, l.Unlock(t.Context()), "the lock is still held")
	closed := make(chan error, 1)
	go func() { closed <- c.Close() }()
	select {
	case err := <-closed:
		require.NoError(t, err)
	case <-time.After(10 * time.Second):
		t.Fatal("Close hangs")
	}
}

// A default owner id names its process (host and pid) and is fresh per
// call, so that two calls of one process still exclude each other; an
// owner given with WithOwner is used as it is.
func TestDefaultOwnerNamesTheProcess(t *testing.T) {
	host, err := os.Hostname()
	require.NoError(t, err)
	prefix := host + ":" + strconv.Itoa(os.Getpid()) + ":"
	c, _ := newFaked(t)
	first, err := c.TryLock(t.Context(), basket[:1])
	require.NoError(t, err)
	assert.True(t, strings.HasPrefix(first.Owner(), prefix), first.Owner())
	assert.Len(t, strings.TrimPrefix(first.Owner(), prefix), 16, "and a random part")
	_, err = c.TryLock(t.Context(), basket[:1])
	require.ErrorIs(t, err, ErrNotObtained, "another call of the process is another owner")
	given, err := c.TryLock(t.Context(), basket[1:2], WithOwner("order-42"))
	require.NoError(t, err)
	assert.Equal(t, "order-42", given.Owner())
}

// A nil *Lock, what a failed call returns, holds nothing: a deferred Unlock
// written before the error check returns ErrNotHeld rather than panic, and
// so does every other method that could reach it.
func TestNilLockHoldsNothing(t *testing.T) {
	var l *Lock
	ctx := t.Context()
	assert.ErrorIs(t, l.Unlock(ctx), ErrNotHeld)
	assert.ErrorContains(t, l.Unlock(ctx), "nil *Lock")
	assert.ErrorIs(t, l.Extend(ctx, time.Second), ErrNotHeld)
	assert.ErrorIs(t, l.Err(), ErrNotHeld)
	assert.ErrorIs(t, context.Cause(l.Context()), ErrNotHeld)
	for _, done := range []<-chan struct{}{l.Done(), l.Context().Done()} {
		select {
		case <-done:
		default:
			t.Fatal("a nil lock's Done is not closed")
		}
	}
	assert.Nil(t, l.Keys())
	assert.Empty(t, l.Owner())
	assert.Zero(t, l.Token("a"))
	assert.True(t, l.ValidUntil().IsZero())
	assert.Equal(t, 1, strings.Count(l.Unlock(ctx).Error(), "batchlock:"))
}
