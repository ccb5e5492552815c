package batchlock

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/batchlock/batchlock/internal/wire/wiretest"
)

// An error through the public API says "batchlock:" once, at its start,
// however many of the package's errors it wraps, and still matches each
// sentinel it wraps.
func TestErrorsSayBatchlockOnce(t *testing.T) {
	for _, tc := range []struct {
		name string
		errs func(t *testing.T, c *Client, f *wiretest.Fake) []error
		is   []error
		// server runs the case on a redis-server, whose scripts know
		// shared keys, rather than on the fake.
		server bool
	}{
		{"held for its longest hold, then unlocked", func(t *testing.T, c *Client, _ *wiretest.Fake) []error {
			l, err := c.Lock(t.Context(), []string{"a"}, WithMaxHold(5*time.Millisecond))
			require.NoError(t, err)
			<-l.Done()
			return []error{l.Err(), l.Unlock(t.Context())}
		}, []error{ErrLockLost, ErrMaxHold}, false},
		{"released by Close", func(t *testing.T, c *Client, _ *wiretest.Fake) []error {
			l, err := c.Lock(t.Context(), []string{"a"})
			require.NoError(t, err)
			require.NoError(t, c.Close())
			return []error{l.Err(), l.Unlock(t.Context())}
		}, []error{ErrLockLost, ErrClosed}, false},
		{"force-unlocked", func(t *testing.T, c *Client, _ *wiretest.Fake) []error {
			l, err := c.Lock(t.Context(), []string{"a"})
			require.NoError(t, err)
			_, err = c.ForceUnlock(t.Context(), "a")
			require.NoError(t, err)
			return []error{l.Err(), l.Unlock(t.Context())}
		}, []error{ErrLockLost}, false},
		{"a wait that ran out", func(t *testing.T, c *Client, f *wiretest.Fake) []error {
			f.Hold("other", time.Minute, "batchlock:a")
			_, err := c.Lock(t.Context(), []string{"a"}, WithWait(20*time.Millisecond))
			return []error{err}
		}, []error{ErrNotObtained, context.DeadlineExceeded}, false},
		{"a wait at the gates that Close ended", func(t *testing.T, c *Client, _ *wiretest.Fake) []error {
			_, err := c.Lock(t.Context(), []string{"a"}, WithOwner("first"))
			require.NoError(t, err)
			done := make(chan error)
			go func() {
				_, err := c.Lock(t.Context(), []string{"a"}, WithOwner("second"))
				done <- err
			}()
			require.Eventually(t, func() bool { return c.Stats().Waiting > 0 }, 5*time.Second, time.Millisecond)
			require.NoError(t, c.Close())
			return []error{<-done}
		}, []error{ErrNotObtained, ErrClosed}, false},
		{"an upgrade, refused in Redis and at the gates", func(t *testing.T, c *Client, _ *wiretest.Fake) []error {
			_, err := c.TryLock(t.Context(), nil, WithOwner("r1"), WithShared("a"))
			require.NoError(t, err)
			_, inRedis := c.TryLock(t.Context(), []string{"a"}, WithOwner("r1"))
			_, err = c.TryLock(t.Context(), nil, WithOwner("r2"), WithShared("a"))
			require.NoError(t, err)
			_, atGates := c.TryLock(t.Context(), []string{"a"}, WithOwner("r1"))
			return []error{inRedis, atGates}
		}, []error{ErrNotObtained, ErrInvalid}, true},
		{"a context done before the call", func(t *testing.T, c *Client, _ *wiretest.Fake) []error {
			ctx, cancel := context.WithCancel(t.Context())
			cancel()
			_, lockErr := c.Lock(ctx, []string{"a"})
			_, tryErr := c.TryLock(ctx, []string{"a"})
			_, eachErr := c.TryEach(ctx, [][]string{{"a"}})
			return []error{lockErr, tryErr, eachErr, c.Do(ctx, []string{"a"}, func(context.Context) error { return nil })}
		}, []error{context.Canceled}, false},
		{"unacknowledged", func(t *testing.T, c *Client, f *wiretest.Fake) []error {
			f.With(func() { f.Acks = 0 })
			_, err := c.TryLock(t.Context(), []string{"a"}, WithReplicas(1, time.Millisecond))
			return []error{err}
		}, []error{ErrNotObtained, ErrNoReplicas}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, f := newFaked(t)
			if tc.server {
				var err error
				c, err = New(wiretest.ServerClient(t))
				require.NoError(t, err)
				t.Cleanup(func() { _ = c.Close() })
			}
			for _, err := range tc.errs(t, c, f) {
				require.Error(t, err)
				assert.Equal(t, 1, strings.Count(err.Error(), prefix), err.Error())
				assert.True(t, strings.HasPrefix(err.Error(), prefix), err.Error())
				for _, want := range tc.is {
					assert.ErrorIs(t, err, want)
				}
			}
		})
	}
}

// A conflict's message names the first keys and, where known, who holds
// them, as an operator reads it in a log.
func TestConflictMessageNamesTheHolders(t *testing.T) {
	for _, tc := range []struct {
		name    string
		keys    []string
		holders map[string][]string
		want    string
	}{
		{"one holder", []string{"sku:7"}, map[string][]string{"sku:7": {"web-3:4711:9f2c"}},
			`batchlock: not obtained: held by another owner: "sku:7" (by web-3:4711:9f2c)`},
		{"holder unknown (handed to a waiter)", []string{"sku:7", "sku:8"}, map[string][]string{"sku:8": {"b"}},
			`batchlock: not obtained: held by another owner: "sku:7", "sku:8" (by b)`},
		{"many readers", []string{"promo"}, map[string][]string{"promo": {"a", "b", "c", "d", "e"}},
			`batchlock: not obtained: held by another owner: "promo" (by a, b, c and 2 more)`},
		{"many keys", []string{"1", "2", "3", "4", "5", "6", "7"}, nil,
			`batchlock: not obtained: held by another owner: "1", "2", "3", "4", "5" and 2 more`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			assert.Equal(t, tc.want, (&ConflictError{Keys: tc.keys, Holders: tc.holders}).Error())
		})
	}
}

// inner writes an error of the library inside another one's message
// without its prefix, and keeps it visible to errors.Is.
func TestInnerSaysThePrefixOnce(t *testing.T) {
	closed, callers := ErrClosed, errors.New("saving the order")
	for _, tc := range []struct {
		name string
		err  error
		want string
	}{
		{"two of ours", fmt.Errorf("%w: %w", ErrLockLost, inner(closed)), "batchlock: lock lost: client closed"},
		{"a step around ours", fmt.Errorf("batchlock: unlock: %w", inner(fmt.Errorf("%w: %w", ErrLockLost, inner(closed)))), "batchlock: unlock: lock lost: client closed"},
		{"not ours", fmt.Errorf("%w: %w", ErrLockLost, inner(callers)), "batchlock: lock lost: saving the order"},
		{"the prefix later in the text", fmt.Errorf("%w: %w", ErrLockLost, inner(errors.New(`key "batchlock: a"`))), `batchlock: lock lost: key "batchlock: a"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			assert.Equal(t, tc.want, tc.err.Error())
		})
	}
	err := fmt.Errorf("%w: %w", ErrLockLost, inner(closed))
	assert.ErrorIs(t, err, ErrLockLost)
	assert.ErrorIs(t, err, closed, "what inner wraps stays visible")
	assert.NoError(t, inner(nil))
}
