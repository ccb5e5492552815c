package batchlock

import (
	"context"
	"fmt"
	"io"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/batchlock/batchlock/internal/routing"
	"github.com/batchlock/batchlock/internal/wire/wiretest"
)

// keysNamed returns n distinct keys.
func keysNamed(prefix string, n int) []string {
	keys := make([]string, n)
	for i := range keys {
		keys[i] = fmt.Sprintf("%s:%d", prefix, i)
	}
	return keys
}

// Every call carries at most routing.MaxCallKeys keys, whatever it does: an
// acquire of a big batch, its release, an Extend, a forced release, and a
// watchdog round that merges several big locks on each master.
func TestEveryCallIsCapped(t *testing.T) {
	const lease = time.Second
	c, f, renewed := newCountingRenewals(t, lease)
	var locks []*Lock
	for i := range 4 {
		l, err := c.Lock(t.Context(), keysNamed(fmt.Sprintf("big%d", i), 2000))
		require.NoError(t, err)
		locks = append(locks, l)
	}
	require.Eventually(t, func() bool { return renewed.Load() >= 8 }, 10*time.Second, time.Millisecond, "renewed twice")
	require.NoError(t, locks[0].Extend(t.Context(), time.Minute))
	_, err := c.ForceUnlock(t.Context(), keysNamed("big1", 2000)...)
	require.NoError(t, err)
	for _, l := range locks[2:] {
		require.NoError(t, l.Unlock(t.Context()))
	}

	for _, name := range []string{"acquire", "release", "extend", "force"} {
		sizes := f.CallKeys(name)
		require.NotEmpty(t, sizes, "no %s call", name)
		total, largest := 0, 0
		for _, n := range sizes {
			total += n
			largest = max(largest, n)
		}
		assert.LessOrEqual(t, largest, routing.MaxCallKeys, "a %s call carries %d keys", name, largest)
		assert.Greater(t, total, routing.MaxCallKeys, "%s calls carried a big lock", name)
	}
}

// A release whose reply was lost is sent again, within the same Unlock
// (io.ErrUnexpectedEOF, which the routing retries) or by a later Unlock,
// once the first one's context ended before the reply. When the first run
// had handed a key to a waiter that took it meanwhile, the retry finds it
// held by another owner: that is the first run's work, not a loss, and the
// Unlock that retries succeeds.
func TestUnlockRetriedAfterItHandedAKeyOn(t *testing.T) {
	for _, tc := range []struct {
		name string
		lost error // what the first release met once it ran
	}{
		{"the reply lost, sent again by the Unlock", io.ErrUnexpectedEOF},
		{"the caller gave up on the reply, a later Unlock", context.DeadlineExceeded},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, f := newFaked(t)
			l, err := c.TryLock(t.Context(), basket, WithTTL(time.Minute))
			require.NoError(t, err)
			key := bySlot(basket)[2]
			var runs atomic.Int64
			f.With(func() {
				f.Fault = func(name string, cl *routing.Call) (bool, error) {
					if name == "release" && slicesContains(cl.Args, key) && runs.Add(1) == 1 {
						return true, tc.lost // it ran
					}
					return false, nil
				}
				f.After = func(name string, cl *routing.Call) {
					if name == "release" && slicesContains(cl.Args, key) && runs.Load() == 1 {
						// The waiter it was handed to takes it.
						f.Put(key, "waiter", "h:waiter", 2000, time.Minute)
					}
				}
			})
			if err := l.Unlock(t.Context()); err != nil {
				require.ErrorIs(t, err, tc.lost, "the first Unlock did not hear back")
				require.NoError(t, l.Unlock(t.Context()), "the key the first one handed on is no loss")
			}
			assert.EqualValues(t, 2, runs.Load(), "the release was sent again")
			assert.Equal(t, ownedBy("waiter", key), f.Held())
		})
	}
}

// A lock handed out with just over half its lease left (a slow acquire) is
// renewed at once, rather than at the watchdog's next round, which could
// come after the lock counts as lost. The renewals are slow too, and the
// lock is handed out right after a round of an earlier lock.
func TestLockHandedOutWithHalfItsLeaseIsRenewedAtOnce(t *testing.T) {
	const lease = 3 * time.Second
	c, f, renewed := newCountingRenewals(t, lease)
	first, err := c.Lock(t.Context(), []string{"first"})
	require.NoError(t, err)
	// The earlier lock is renewed every lease/3 from now. The slow acquire
	// starts so as to end just after its second renewal began, with 1.6s of
	// the 3s lease left: the lock counts as lost 1.1s later, and a round
	// takes 0.3s.
	began := time.Now()
	f.With(func() {
		f.Delays = map[string]time.Duration{"acquire": 1400 * time.Millisecond, "extend": 300 * time.Millisecond}
	})
	time.Sleep(650*time.Millisecond - time.Since(began)) // the moment the slow acquire starts is the fault
	l, err := c.Lock(t.Context(), basket)
	require.NoError(t, err)
	left := time.Until(l.ValidUntil())
	require.Less(t, left, 2*lease/3, "the test needs a lock with about half its lease left")
	before := renewed.Load()
	select {
	case <-l.Context().Done():
		t.Fatalf("lost with %v of %v left at hand-out: %v", left, lease, l.Err())
	case <-time.After(lease):
	}
	assert.Greater(t, renewed.Load(), before)
	require.NoError(t, l.Unlock(t.Context()))
	require.NoError(t, first.Unlock(t.Context()))
}

// ForceUnlock through a Client ends that Client's own locks on the keys it
// released at once, renewed or not; others are left alone.
func TestForceUnlockEndsOwnLocksAtOnce(t *testing.T) {
	c, _ := newFaked(t)
	renewed, err := c.Lock(t.Context(), basket[:2])
	require.NoError(t, err)
	fixed, err := c.Lock(t.Context(), basket[2:4], WithTTL(time.Hour))
	require.NoError(t, err)
	other, err := c.Lock(t.Context(), basket[4:])
	require.NoError(t, err)
	_, err = c.ForceUnlock(t.Context(), basket[1], basket[3])
	require.NoError(t, err)
	for _, l := range []*Lock{renewed, fixed} {
		select {
		case <-l.Context().Done():
			assert.ErrorIs(t, l.Err(), ErrLockLost)
			assert.ErrorContains(t, l.Err(), "force-unlocked")
		default:
			t.Fatal("a lock whose key was force-unlocked by its own Client is still held")
		}
		assert.ErrorIs(t, l.Unlock(t.Context()), ErrNotHeld)
	}
	assert.NoError(t, other.Err())
	require.NoError(t, other.Unlock(t.Context()))
}

// An acquire whose reply was lost after it ran, then found elsewhere until
// the call gives up: the last reply says nothing was changed, but the first
// run took keys. They are released, and the hold marked cancelled in each of
// their slots, so that nothing is left held.
func TestAcquireFoundElsewhereAfterALostReplyRollsBack(t *testing.T) {
	c, f := newFaked(t)
	key := bySlot(basket)[3]
	var sent atomic.Int64
	f.With(func() {
		f.Fault = func(name string, cl *routing.Call) (bool, error) {
			if name == "acquire" && slicesContains(cl.Args, key) && sent.Add(1) == 1 {
				return true, io.ErrUnexpectedEOF // it ran; its reply was lost
			}
			return false, nil
		}
		f.Elsewhere = func(name string, cl *routing.Call) bool {
			return name == "acquire" && slicesContains(cl.Args, key) && sent.Load() > 1
		}
	})
	ctx, cancel := context.WithTimeout(t.Context(), 200*time.Millisecond)
	defer cancel()
	_, err := c.TryLock(ctx, basket)
	require.ErrorIs(t, err, context.DeadlineExceeded)
	assert.ErrorContains(t, err, "being migrated or has moved")
	f.With(func() { f.Elsewhere = nil })
	require.Eventually(t, func() bool { return len(f.Held()) == 0 }, time.Second, time.Millisecond, "the keys the lost run took are released")
	assert.NotEmpty(t, f.CancelMarks(), "and the hold is marked cancelled")
}

// An observer that panics inside a call (at the lock's acquisition, its
// conflict, its place in a queue, its hand-off) panics through the call,
// which leaves nothing behind: no lock held or renewed, no gate, no key and
// no place in a queue in Redis; the keys can be taken at once, and Close
// returns.
func TestObserverPanicLeavesNothing(t *testing.T) {
	for _, kind := range []string{EventAcquired, EventConflict, EventQueued, EventHandedOff} {
		t.Run(kind, func(t *testing.T) {
			rdb := wiretest.ServerClient(t)
			var panicking atomic.Bool
			c, err := New(rdb, WithObserver(func(e Event) {
				if e.Kind == kind && panicking.Load() {
					panic("observer")
				}
			}))
			require.NoError(t, err)
			holder, err := New(rdb)
			require.NoError(t, err)
			t.Cleanup(func() { _ = holder.Close() })
			ctx := t.Context()

			var held *Lock
			if kind != EventAcquired {
				held, err = holder.Lock(ctx, basket[2:3])
				require.NoError(t, err)
			}
			panicking.Store(true)
			recovered := make(chan any, 1)
			go func() {
				defer func() { recovered <- recover() }()
				_, _ = c.Lock(ctx, basket)
			}()
			if kind == EventHandedOff {
				require.Eventually(t, func() bool {
					locks, err := holder.Inspect(ctx, basket[2])
					return err == nil && locks[0].Waiting == 1
				}, 5*time.Second, time.Millisecond)
				require.NoError(t, held.Unlock(ctx))
				held = nil
			}
			assert.Equal(t, "observer", <-recovered)
			require.Eventually(t, func() bool {
				locks, err := holder.Inspect(ctx, basket...)
				if err != nil {
					return false
				}
				for _, l := range locks {
					if l.Waiting > 0 || l.Holds > 0 && (held == nil || l.Key != basket[2]) {
						return false
					}
				}
				return true
			}, 5*time.Second, time.Millisecond, "nothing of the call is left in Redis")
			stats := c.Stats()
			assert.Zero(t, stats.Held, "no lock is renewed")
			assert.Zero(t, stats.Gated, "no gate is left")
			assert.Zero(t, stats.Waiting)
			if held != nil {
				require.NoError(t, held.Unlock(ctx))
			}
			l, err := holder.TryLock(ctx, basket)
			require.NoError(t, err, "every key can be taken again")
			require.NoError(t, l.Unlock(ctx))
			closed := make(chan error, 1)
			go func() { closed <- c.Close() }()
			select {
			case err := <-closed:
				assert.NoError(t, err)
			case <-time.After(10 * time.Second):
				t.Fatal("Close hangs after the panic")
			}
		})
	}
}

// An Unlock that failed on one master released the keys of the others; a
// key of those that another owner took since is no loss of this lock: the
// next Unlock sends only what did not go through, and succeeds.
func TestUnlockRetriedSendsOnlyWhatFailed(t *testing.T) {
	c, f := newFaked(t)
	l, err := c.TryLock(t.Context(), basket, WithTTL(time.Minute))
	require.NoError(t, err)
	order := bySlot(basket)
	failing, other := order[0], order[len(order)-1]
	master, err := wiretest.FakeMaster(t.Context(), failing)
	require.NoError(t, err)
	otherMaster, err := wiretest.FakeMaster(t.Context(), other)
	require.NoError(t, err)
	require.NotEqual(t, master, otherMaster)
	var down atomic.Bool
	down.Store(true)
	f.With(func() {
		f.Fault = func(name string, cl *routing.Call) (bool, error) {
			if name == "release" && slicesContains(cl.Args, failing) && down.Load() {
				return false, fmt.Errorf("dial tcp: %w", io.ErrUnexpectedEOF) // it did not run
			}
			return false, nil
		}
	})
	short, cancel := context.WithTimeout(t.Context(), 200*time.Millisecond)
	defer cancel()
	require.Error(t, l.Unlock(short))
	f.With(func() {
		// Another owner takes a key the failed Unlock released.
		f.Put(other, "next", "h:next", 2000, time.Minute)
	})
	down.Store(false)
	sent := len(f.Log())
	require.NoError(t, l.Unlock(t.Context()), "no false ErrNotHeld for a key released before")
	again := f.Log()[sent:]
	require.NotEmpty(t, again)
	for _, call := range again {
		m, err := wiretest.FakeMaster(t.Context(), strings.TrimPrefix(call, "release "))
		require.NoError(t, err)
		assert.Equal(t, master, m, "only what failed is sent again: %v", again)
	}
	assert.Equal(t, ownedBy("next", other), f.Held())
}

// A renewal whose reply lands after the lock ended (an Unlock or Close ran
// meanwhile) changes nothing: the loss timer Lock.end stopped stays stopped,
// also when it fired as it was stopped, so nothing of the lock runs after
// Close.
func TestRenewalLandingAfterTheEndChangesNothing(t *testing.T) {
	c, _ := newFaked(t)
	l, err := c.Lock(t.Context(), basket)
	require.NoError(t, err)
	require.NotNil(t, l.expiry)
	require.NoError(t, l.Unlock(t.Context()))
	assert.False(t, l.renewed(time.Now().Add(time.Hour), true), "an ended lock is not renewed")
	assert.False(t, l.expiry.Stop(), "the loss timer stays stopped")
	l.expire()
	assert.False(t, l.expiry.Stop(), "a timer that fired as it was stopped does not start again")
}

// Two Closes at once (a signal handler's and a deferred one) both return
// only once the Client's locks are released.
func TestConcurrentClosesWaitForTheReleases(t *testing.T) {
	c, f := newFaked(t)
	_, err := c.Lock(t.Context(), basket)
	require.NoError(t, err)
	f.With(func() { f.Delays = map[string]time.Duration{"release": 200 * time.Millisecond} })
	var closes sync.WaitGroup
	for range 2 {
		closes.Go(func() {
			assert.NoError(t, c.Close())
			assert.Empty(t, f.Held(), "Close returned with keys held")
		})
	}
	closes.Wait()
}

// Close does not end as lost a lock whose Unlock is releasing it: that
// Unlock returns nil, and no EventLost is told, whichever comes first.
func TestUnlockDuringCloseIsNoLoss(t *testing.T) {
	var lost atomic.Int64
	c, f := newFaked(t, WithObserver(func(e Event) {
		if e.Kind == EventLost {
			lost.Add(1)
		}
	}))
	l, err := c.Lock(t.Context(), basket)
	require.NoError(t, err)
	closed := make(chan error, 1)
	f.With(func() {
		f.After = func(name string, _ *routing.Call) {
			if name != "release" {
				return
			}
			f.After = nil
			go func() { closed <- c.Close() }()
			assert.Eventually(t, func() bool {
				c.heldMu.Lock()
				defer c.heldMu.Unlock()
				return c.heldClosed
			}, 5*time.Second, time.Millisecond, "Close began")
			assert.Never(t, func() bool { return l.Err() != nil }, 200*time.Millisecond, time.Millisecond,
				"Close does not end a lock whose release is running")
		}
	})
	assert.NoError(t, l.Unlock(t.Context()), "the Unlock's release went through")
	assert.NoError(t, <-closed)
	assert.Empty(t, f.Held())
	assert.Zero(t, lost.Load(), "a released lock is not told lost")
}
