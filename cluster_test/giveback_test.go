package cluster_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/batchlock/batchlock/batchlock"
)

// rollbackBound is batchlock's documented bound on the releases a failed
// call leaves running in the background.
const rollbackBound = 5 * time.Second

// A waiting Lock([a, b]), a held by another owner on one master and b later
// in the global order on another: the first attempt takes b out of order and
// must give it back. When the call ends right then (its context cancelled
// by an observer of the conflict, or its Client closed), the give-back still
// goes out, in the background like any rollback: b is free within the
// rollback bound, not at the end of its 30s lease.
func TestGiveBackOfACallThatEndsAtItsConflict(t *testing.T) {
	cl := sharedCluster(t)
	rdb := newClient(t)
	for _, tc := range []struct {
		name  string
		close bool // end the call by closing its Client, not its context
	}{
		{"context cancelled", false},
		{"client closed", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := ctxTimeout(t, time.Minute)
			prefix := testPrefix(t)
			// Masters are sorted by their slots: a comes before b.
			masters, err := cl.Masters(ctx)
			require.NoError(t, err)
			a := keysOn(t, masters[0], prefix, "giveback-a", 1)
			b := keysOn(t, masters[1], prefix, "giveback-b", 1)
			keys := append(a, b...)

			holder, err := batchlock.New(rdb, batchlock.WithPrefix(prefix))
			require.NoError(t, err)
			defer holder.Close()
			held, err := holder.TryLock(ctx, a)
			require.NoError(t, err)

			callCtx, cancel := context.WithCancel(ctx)
			defer cancel()
			var waiter *batchlock.Client
			var once sync.Once
			closed := make(chan error, 1)
			waiter, err = batchlock.New(rdb, batchlock.WithPrefix(prefix), batchlock.WithObserver(func(e batchlock.Event) {
				if e.Kind != batchlock.EventConflict {
					return
				}
				once.Do(func() {
					if tc.close {
						go func() { closed <- waiter.Close() }()
						// Close has begun once calls are refused; it ends
						// the call in flight right after.
						require.Eventually(t, func() bool {
							probe, err := waiter.TryLock(ctx, []string{"giveback-probe"})
							if err == nil {
								_ = probe.Unlock(ctx)
							}
							return errors.Is(err, batchlock.ErrClosed)
						}, 5*time.Second, time.Millisecond)
					} else {
						cancel()
					}
				})
			}))
			require.NoError(t, err)
			defer waiter.Close()

			_, err = waiter.Lock(callCtx, keys)
			require.Error(t, err)
			if tc.close {
				assert.ErrorIs(t, err, batchlock.ErrClosed)
				require.NoError(t, <-closed)
				// Close waits for the rollbacks of failed calls.
				assert.Empty(t, heldKeys(t, holder, b...)[0].Holders, "%s is held after Close returned", b[0])
			} else {
				assert.ErrorIs(t, err, context.Canceled)
			}
			require.Eventually(t, func() bool {
				return len(heldKeys(t, holder, b...)[0].Holders) == 0
			}, rollbackBound+time.Second, 10*time.Millisecond, "%s, taken out of order, is still held", b[0])

			other, err := holder.TryLock(ctx, b)
			require.NoError(t, err, "another owner takes the key given back")
			require.NoError(t, other.Unlock(ctx))
			require.NoError(t, held.Unlock(ctx))
			assert.Empty(t, lockKeysUnder(t, rdb, prefix))
		})
	}
}
