package cluster_test

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/batchlock/batchlock/batchlock"
)

// fencedWrite is the downstream store of the docs' advice: it takes a write
// only when its token is at least the largest one the record has seen, and
// remembers the largest. Equal tokens pass so that reentrant holds of one
// ownership can all write.
var fencedWrite = redis.NewScript(`
local seen = tonumber(redis.call('HGET', KEYS[1], 'token') or '0')
local token = tonumber(ARGV[1])
if token < seen then
  return 0
end
redis.call('HSET', KEYS[1], 'token', token, 'value', ARGV[2])
return 1
`)

// A holder that stops looking (a GC pause, a stalled VM) outlives its lease;
// another client takes the keys. Its late write must not win: the new holder's
// larger token makes the store refuse it.
func TestFencingRejectsPausedHolder(t *testing.T) {
	rdb := newClient(t)
	staleClient, prefix := newLocker(t, rdb)
	freshClient, err := batchlock.New(rdb, batchlock.WithPrefix(prefix))
	require.NoError(t, err)
	t.Cleanup(func() { _ = freshClient.Close() })
	ctx := ctxTimeout(t, 30*time.Second)
	keys := spread(6, "fence") // over every master
	// Outside the prefix: the store is not batchlock's.
	record := func(k string) string { return "store:" + prefix + k }
	t.Cleanup(func() {
		for _, k := range keys {
			_ = rdb.Del(context.Background(), record(k)).Err()
		}
	})
	write := func(k string, token int64, value string) int64 {
		n, err := fencedWrite.Run(ctx, rdb, []string{record(k)}, token, value).Int64()
		require.NoError(t, err)
		return n
	}

	stale, err := staleClient.Lock(ctx, keys, batchlock.WithTTL(300*time.Millisecond))
	require.NoError(t, err)
	// Read while held, as a holder does before it pauses: once the lock
	// ended, Token says 0.
	staleTokens := map[string]int64{}
	for _, k := range keys {
		staleTokens[k] = stale.Token(k)
		require.EqualValues(t, 1, write(k, staleTokens[k], "stale holder, in time"), "a holder in time writes")
	}

	// The pause: the holder does nothing until its lease is over in Redis.
	require.Eventually(t, func() bool {
		for _, k := range keys {
			owner, err := rdb.HGet(ctx, prefix+k, "owner").Result()
			if err == nil && owner == stale.Owner() {
				return false
			}
		}
		return true
	}, 10*time.Second, 10*time.Millisecond, "the paused holder's lease runs out")

	fresh, err := freshClient.Lock(ctx, keys)
	require.NoError(t, err)
	t.Cleanup(func() { _ = fresh.Unlock(context.Background()) })
	for _, k := range keys {
		require.Greater(t, fresh.Token(k), staleTokens[k], "a new ownership of %s outranks the old one", k)
		require.EqualValues(t, 1, write(k, fresh.Token(k), "new holder"))
	}

	// The paused holder resumes and writes as if it still held the keys.
	for _, k := range keys {
		assert.EqualValues(t, 0, write(k, staleTokens[k], "stale holder, late"), "the stale write to %s is refused", k)
		v, err := rdb.HGet(ctx, record(k), "value").Result()
		require.NoError(t, err)
		assert.Equal(t, "new holder", v, "the new holder's value of %s stands", k)
	}

	// Had it looked, it would have known; and its unlock cannot free the
	// new holder's keys.
	select {
	case <-stale.Context().Done():
	case <-ctx.Done():
		t.Fatal("the stale lock was never reported done")
	}
	assert.ErrorIs(t, stale.Err(), batchlock.ErrLockLost)
	assert.ErrorIs(t, stale.Unlock(ctx), batchlock.ErrNotHeld)
	assert.Len(t, lockKeysUnder(t, rdb, prefix), len(keys), "the new holder still holds every key")
	require.NoError(t, fresh.Err())
	require.NoError(t, fresh.Unlock(ctx))
}

// A lock that ended (unlocked, lost, run out) gives 0 for every key: a
// fenced write made after the end, with a token read then, is refused by
// every store that refuses a token below 1, even when nobody took the key
// since (the old token would still pass its fence).
func TestTokenIsZeroOnceTheLockEnds(t *testing.T) {
	rdb := newClient(t)
	c, _ := newLocker(t, rdb)
	ctx := ctxTimeout(t, 30*time.Second)
	for _, tc := range []struct {
		name string
		opts []batchlock.LockOption
		end  func(l *batchlock.Lock, keys []string)
	}{
		{"unlocked", nil, func(l *batchlock.Lock, _ []string) { require.NoError(t, l.Unlock(ctx)) }},
		{"lost", nil, func(l *batchlock.Lock, keys []string) {
			_, err := c.ForceUnlock(ctx, keys[0]) // through its own Client: lost at once
			require.NoError(t, err)
		}},
		{"lease ran out", []batchlock.LockOption{batchlock.WithTTL(200 * time.Millisecond)}, func(l *batchlock.Lock, _ []string) {
			<-l.Context().Done()
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			keys := spread(6, "token-end-"+tc.name)
			l, err := c.Lock(ctx, keys, tc.opts...)
			require.NoError(t, err)
			for _, k := range keys {
				require.Positive(t, l.Token(k), "%s while held", k)
			}
			tc.end(l, keys)
			require.Error(t, l.Err(), "the lock ended")
			for _, k := range keys {
				assert.Zero(t, l.Token(k), "%s once the lock ended", k)
			}
		})
	}
}
