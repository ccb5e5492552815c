package cluster_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/batchlock/batchlock/batchlock"
)

// waiterEnv, when set, makes the test binary a waiter process (see
// runWaiter) instead of running tests: a waiter that can be killed while it
// is queued, as a crashed process would be.
const waiterEnv = "BATCHLOCK_TEST_WAITER"

// waiterSpec is what a waiter process locks, and for how long.
type waiterSpec struct {
	Addrs  []string      `json:"addrs"`
	Prefix string        `json:"prefix"`
	Keys   []string      `json:"keys"`
	Shared bool          `json:"shared"`
	TTL    time.Duration `json:"ttl"`
}

// runWaiter waits for spec's keys until it is killed; it never unlocks.
func runWaiter(encoded string) int {
	var spec waiterSpec
	if err := json.Unmarshal([]byte(encoded), &spec); err != nil {
		fmt.Fprintln(os.Stderr, "waiter:", err)
		return 2
	}
	c, err := batchlock.New(redis.NewClusterClient(batchlock.ClusterOptions(spec.Addrs...)), batchlock.WithPrefix(spec.Prefix), batchlock.WithPollInterval(time.Minute))
	if err != nil {
		fmt.Fprintln(os.Stderr, "waiter:", err)
		return 2
	}
	keys, lockOpts := spec.Keys, []batchlock.LockOption{batchlock.WithTTL(spec.TTL)}
	if spec.Shared {
		keys, lockOpts = nil, append(lockOpts, batchlock.WithShared(spec.Keys...))
	}
	if _, err := c.Lock(context.Background(), keys, lockOpts...); err != nil {
		fmt.Fprintln(os.Stderr, "waiter:", err)
		return 1
	}
	select {} // holding, until killed
}

// startWaiter starts a waiter process for spec: this test binary, run as
// runWaiter.
func startWaiter(spec waiterSpec) (*exec.Cmd, error) {
	encoded, err := json.Marshal(spec)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), waiterEnv+"="+string(encoded))
	cmd.Stderr = os.Stderr
	return cmd, cmd.Start()
}

// killQueuedWaiter starts a waiter process for key, waits until it is the
// queue's n-th waiter, and kills it (SIGKILL): its place stays in the queue,
// with nobody to renew it or take a key handed to it.
func killQueuedWaiter(t *testing.T, c *batchlock.Client, prefix, key string, shared bool, n int) {
	t.Helper()
	cmd, err := startWaiter(waiterSpec{Addrs: sharedCluster(t).Addrs(), Prefix: prefix, Keys: []string{key}, Shared: shared, TTL: time.Minute})
	require.NoError(t, err)
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	waitQueued(t.Context(), t, c, key, n)
	require.NoError(t, cmd.Process.Kill())
	_ = cmd.Wait()
}

// A waiter killed while queued holds the queue up for a few seconds at
// most: the release grants it the key, its grant lapses (nobody renews it),
// and the next waiter gets the key with a newer token, long before the
// holder's lease would have ended.
func TestWaiterKilledWhileQueued(t *testing.T) {
	c, prefix := newLocker(t, newClient(t))
	ctx := ctxTimeout(t, 30*time.Second)
	key := spread(1, "killed-waiter")
	holder, err := c.Lock(ctx, key, batchlock.WithTTL(time.Minute))
	require.NoError(t, err)
	killQueuedWaiter(t, c, prefix, key[0], false, 1)

	waiter := peerOf(t, newClient(t), prefix)
	got := make(chan *batchlock.Lock, 1)
	go func() {
		l, err := waiter.Lock(ctx, key)
		assert.NoError(t, err)
		got <- l
	}()
	waitQueued(ctx, t, c, key[0], 2)
	holderToken := holder.Token(key[0]) // 0 once released
	require.NoError(t, holder.Unlock(ctx))
	h := holderOf(t, c, key[0])
	require.Len(t, h.Holders, 1, "granted to the dead waiter, which nobody renews")
	assert.NotEqual(t, holder.Owner(), h.Holders[0])
	assert.Equal(t, 1, h.Holds)

	l := <-got // within ctx, well before holder's minute-long lease
	require.NotNil(t, l)
	assert.Greater(t, l.Token(key[0]), holderToken)
	assert.Equal(t, []string{l.Owner()}, holderOf(t, c, key[0]).Holders)
	require.NoError(t, l.Unlock(ctx))
	assert.Empty(t, lockKeysUnder(t, newClient(t), prefix))
}

// A key granted to readers that are gone (a reader killed while queued) is
// joined by new readers, which share the token the grant gave the shared
// ownership, newer than the last writer's; the dead reader's grant lapses
// on its own, the key then free.
func TestReaderJoiningAKeyHandedToADeadReader(t *testing.T) {
	c, prefix := newLocker(t, newClient(t))
	ctx := ctxTimeout(t, 30*time.Second)
	key := spread(1, "dead-reader")
	writer, err := c.Lock(ctx, key)
	require.NoError(t, err)
	killQueuedWaiter(t, c, prefix, key[0], true, 1)
	writerToken := writer.Token(key[0]) // 0 once released
	require.NoError(t, writer.Unlock(ctx))
	h := holderOf(t, c, key[0])
	require.True(t, h.Shared, "granted to the dead reader")
	require.Len(t, h.Holders, 1, "the dead reader")

	readers := make([]*batchlock.Lock, 2)
	for i := range readers {
		readers[i], err = c.TryLock(ctx, nil, batchlock.WithShared(key...))
		require.NoError(t, err)
	}
	token := readers[0].Token(key[0])
	assert.Greater(t, token, writerToken, "a newer token than the writer's")
	assert.Equal(t, token, readers[1].Token(key[0]), "one shared ownership, one token")
	assert.Equal(t, token, holderOf(t, c, key[0]).Token)
	for _, l := range readers {
		require.NoError(t, l.Unlock(ctx))
	}
	// The key may outlive the grant (readers leave without reading the
	// others, the key keeping its expiry): held by nobody, it is free.
	require.Eventually(t, func() bool { return len(holderOf(t, c, key[0]).Holders) == 0 },
		10*time.Second, 20*time.Millisecond, "the dead reader's grant lapses")
	after, err := c.TryLock(ctx, key)
	require.NoError(t, err, "free once the grant lapsed")
	assert.Greater(t, after.Token(key[0]), token)
	require.NoError(t, after.Unlock(ctx))
	assert.Empty(t, lockKeysUnder(t, newClient(t), prefix))
}
