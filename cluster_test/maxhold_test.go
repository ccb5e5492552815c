package cluster_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/batchlock/batchlock/batchlock"
)

// A lock held for its longest hold (WithMaxHold) ends whatever renews it:
// its context ends with a cause wrapping ErrLockLost that says so, its
// keys are released and handed to a waiter queued for them (with a newer
// token), and Unlock reports ErrNotHeld with that cause. As a Lock option,
// as the Client's default, with the watchdog and with a TTL longer than the
// cap.
func TestMaxHoldEndsTheLock(t *testing.T) {
	const capped = 700 * time.Millisecond
	for _, tc := range []struct {
		name       string
		clientOpts []batchlock.Option
		lockOpts   []batchlock.LockOption
	}{
		{"renewed by the watchdog", []batchlock.Option{batchlock.WithLease(300 * time.Millisecond)}, []batchlock.LockOption{batchlock.WithMaxHold(capped)}},
		{"WithTTL longer than the cap", nil, []batchlock.LockOption{batchlock.WithTTL(time.Minute), batchlock.WithMaxHold(capped)}},
		{"the Client's default", []batchlock.Option{batchlock.WithMaxHold(capped), batchlock.WithLease(300 * time.Millisecond)}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rdb := newClient(t)
			c, prefix := newLocker(t, rdb, tc.clientOpts...)
			waiterClient := peerOf(t, rdb, prefix, batchlock.WithPollInterval(time.Minute))
			ctx := ctxTimeout(t, 30*time.Second)
			keys := spread(6, "max-hold")
			l, err := c.Lock(ctx, keys, tc.lockOpts...)
			require.NoError(t, err)
			granted := time.Now()
			token := l.Token(keys[2]) // 0 once the cap ends the lock

			waiter := make(chan *batchlock.Lock, 1)
			go func() {
				w, err := waiterClient.Lock(ctx, keys[2:4])
				assert.NoError(t, err)
				waiter <- w
			}()
			select {
			case <-l.Done():
			case <-time.After(10 * time.Second):
				t.Fatal("the lock was not ended at its longest hold")
			}
			assert.GreaterOrEqual(t, time.Since(granted), capped, "not before its longest hold")
			assert.ErrorIs(t, l.Err(), batchlock.ErrLockLost)
			assert.ErrorIs(t, l.Err(), batchlock.ErrMaxHold)
			assert.ErrorContains(t, l.Err(), "held for its longest hold")
			assert.ErrorContains(t, context.Cause(l.Context()), "held for its longest hold")

			w := <-waiter // polling once a minute: only a hand-off gives it the keys in time
			require.NotNil(t, w)
			assert.Greater(t, w.Token(keys[2]), token, "the next owner's token is newer")
			require.NoError(t, w.Unlock(ctx))
			err = l.Unlock(ctx)
			require.ErrorIs(t, err, batchlock.ErrNotHeld)
			assert.ErrorContains(t, err, "held for its longest hold")
			require.Eventually(t, func() bool { return len(lockKeysUnder(t, rdb, prefix)) == 0 }, 5*time.Second, 10*time.Millisecond,
				"every key is released at the cap, not at the end of its lease")
		})
	}
}

// A cap that is not positive is bad input, refused before anything is sent.
func TestMaxHoldMustBePositive(t *testing.T) {
	rdb := newClient(t)
	for _, d := range []time.Duration{0, -time.Second} {
		_, err := batchlock.New(rdb, batchlock.WithMaxHold(d))
		assert.ErrorIs(t, err, batchlock.ErrInvalid, "New with %v", d)
		c, prefix := newLocker(t, rdb)
		_, err = c.TryLock(t.Context(), spread(3, "max-hold-bad"), batchlock.WithMaxHold(d))
		assert.ErrorIs(t, err, batchlock.ErrInvalid, "TryLock with %v", d)
		assert.Empty(t, lockKeysUnder(t, rdb, prefix))
	}
}
