package cluster_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/batchlock/batchlock/batchlock"
	"github.com/batchlock/batchlock/localcluster"

	"strconv"

	"github.com/batchlock/batchlock/hashtag"
)

// testPrefix returns a prefix no other test uses, so tests can share a cluster.
func testPrefix(t testing.TB) string {
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	name := strings.NewReplacer("/", ".", "{", "(", "}", ")").Replace(t.Name())
	return fmt.Sprintf("t:%s:%s:", name, hex.EncodeToString(b))
}

// newLocker returns a batchlock Client on rdb with a fresh prefix, closed at
// the end of the test.
func newLocker(t testing.TB, rdb redis.UniversalClient, opts ...batchlock.Option) (*batchlock.Client, string) {
	t.Helper()
	prefix := testPrefix(t)
	return peerOf(t, rdb, prefix, opts...), prefix
}

// peerOf returns another Client on rdb with prefix, as a second process
// would have one: its calls meet the first Client's locks in Redis, where
// locks of one Client meet at its in-process gates first. Tests of Redis's
// queue and hand-off put their waiters on peers.
func peerOf(t testing.TB, rdb redis.UniversalClient, prefix string, opts ...batchlock.Option) *batchlock.Client {
	t.Helper()
	c, err := batchlock.New(rdb, append([]batchlock.Option{batchlock.WithPrefix(prefix)}, opts...)...)
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// spread returns n keys whose slots spread over the whole key space.
func spread(n int, tag string) []string {
	keys := make([]string, n)
	for i := range keys {
		keys[i] = fmt.Sprintf("sku:%s:%d", tag, i)
	}
	return keys
}

// lockKeysUnder lists every key under prefix on every master, without the
// fencing counters, cancellation sets and capacities, which are meant to
// stay.
func lockKeysUnder(t testing.TB, rdb redis.UniversalClient, prefix string) []string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var mu sync.Mutex
	var found []string
	scan := func(ctx context.Context, node *redis.Client) error {
		iter := node.Scan(ctx, 0, prefix+"*", 1000).Iterator()
		for iter.Next(ctx) {
			k := iter.Val()
			rest := k[len(prefix):]
			if strings.HasPrefix(rest, "fence:{") || strings.HasPrefix(rest, "cancel:{") || strings.HasPrefix(rest, "units:{") {
				continue
			}
			mu.Lock()
			found = append(found, k)
			mu.Unlock()
		}
		return iter.Err()
	}
	switch r := rdb.(type) {
	case *redis.ClusterClient:
		require.NoError(t, r.ForEachMaster(ctx, scan))
	case *redis.Client:
		require.NoError(t, scan(ctx, r))
	}
	return found
}

// allKeysUnder counts every key under prefix, internal ones included.
func allKeysUnder(t testing.TB, rdb *redis.ClusterClient, prefix string) int {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var mu sync.Mutex
	n := 0
	require.NoError(t, rdb.ForEachMaster(ctx, func(ctx context.Context, node *redis.Client) error {
		keys, err := node.Keys(ctx, prefix+"*").Result()
		mu.Lock()
		n += len(keys)
		mu.Unlock()
		return err
	}))
	return n
}

// ctxTimeout returns the test's context, bounded by d. Like t.Context, it is
// done once the test's function returns: clean-ups use a context of their
// own.
func ctxTimeout(t testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), d)
	t.Cleanup(cancel)
	return ctx
}

// serverLeaseMargin is how long past a fixed lease's end, counted from its
// call's return, a poll may take to see that Redis ended it: the millisecond
// the lease is rounded up to, and a poll of a few masters on a loaded machine.
const serverLeaseMargin = 100 * time.Millisecond

// eventuallyPastServerLease polls cond until it holds, failing if it does not
// once Redis must have ended a fixed lease of ttl whose call returned at
// taken. A holder's Done fires as its lease ends counted from before its
// call was sent; Redis counts it from when the script ran, a few
// milliseconds later, and keeps the hold until then.
// It fails on the first poll that started past that moment and found cond
// false, however long the test took to get here.
func eventuallyPastServerLease(t testing.TB, taken time.Time, ttl time.Duration, cond func() bool, msg string) {
	t.Helper()
	deadline := taken.Add(ttl + serverLeaseMargin)
	for {
		started := time.Now()
		if cond() {
			return
		}
		if !started.Before(deadline) {
			require.Fail(t, msg, "still so %v after the lease's end as Redis counts it", started.Sub(taken.Add(ttl)))
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// holderOf says who holds key (without the prefix), through the admin API.
func holderOf(t testing.TB, c *batchlock.Client, key string) batchlock.HeldKey {
	t.Helper()
	return heldKeys(t, c, key)[0]
}

// heldKeys says who holds each of keys (without the prefix), through the
// admin API.
func heldKeys(t testing.TB, c *batchlock.Client, keys ...string) []batchlock.HeldKey {
	t.Helper()
	held, err := c.Inspect(ctxTimeout(t, 10*time.Second), keys...)
	require.NoError(t, err)
	return held
}

// migrationEnds returns the master of slot and another one to move it to.
func migrationEnds(ctx context.Context, t *testing.T, cl *localcluster.Cluster, slot int) (src, dst localcluster.Node) {
	t.Helper()
	src, err := cl.MasterOfSlot(ctx, slot)
	require.NoError(t, err)
	masters, err := cl.Masters(ctx)
	require.NoError(t, err)
	dst = masters[0]
	if dst.ID == src.ID {
		dst = masters[1]
	}
	return src, dst
}

// halfMigrate leaves slot MIGRATING on its master and IMPORTING on another
// one, its keys not moved, and returns the function that makes it stable
// again (also run at the end of the test).
func halfMigrate(ctx context.Context, t *testing.T, cl *localcluster.Cluster, slot int) (stable func()) {
	t.Helper()
	src, dst := migrationEnds(ctx, t, cl, slot)
	_, err := cl.Do(ctx, dst.Addr, "CLUSTER", "SETSLOT", slot, "IMPORTING", src.ID)
	require.NoError(t, err)
	_, err = cl.Do(ctx, src.Addr, "CLUSTER", "SETSLOT", slot, "MIGRATING", dst.ID)
	require.NoError(t, err)
	stable = func() {
		for _, n := range []localcluster.Node{src, dst} {
			_, err := cl.Do(context.Background(), n.Addr, "CLUSTER", "SETSLOT", slot, "STABLE")
			assert.NoError(t, err)
		}
	}
	t.Cleanup(stable)
	return stable
}

// commander sends a command to one node: a Cluster or Singles.
type commander interface {
	Do(ctx context.Context, addr string, args ...any) (any, error)
}

// sleepNode makes the node at addr run DEBUG SLEEP for d and returns once the
// node is seen busy; the channel yields the command's error when it answers
// again.
func sleepNode(t *testing.T, cl commander, addr string, d time.Duration) <-chan error {
	t.Helper()
	done := make(chan error, 1)
	// A connection of its own, whose reads wait for the sleep to end.
	node := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1, ReadTimeout: d + 10*time.Second, DisableIdentity: true})
	go func() {
		defer node.Close()
		ctx, cancel := context.WithTimeout(t.Context(), d+10*time.Second)
		defer cancel()
		done <- node.Do(ctx, "DEBUG", "SLEEP", strconv.FormatFloat(d.Seconds(), 'f', 3, 64)).Err()
	}()
	require.Eventually(t, func() bool {
		ctx, cancel := context.WithTimeout(t.Context(), 50*time.Millisecond)
		defer cancel()
		_, err := cl.Do(ctx, addr, "PING")
		return err != nil
	}, 5*time.Second, time.Millisecond, "%s did not start sleeping", addr)
	return done
}

// retryWindow is batchlock's documented bound on retrying a call whose
// context has no deadline.
const retryWindow = 10 * time.Second

// keysOn returns n keys whose lock keys (prefix + key) the master serves.
func keysOn(t testing.TB, master localcluster.Node, prefix, tag string, n int) []string {
	t.Helper()
	var keys []string
	for _, k := range spread(50*n, tag) {
		if master.ServesSlot(hashtag.Slot(prefix + k)) {
			keys = append(keys, k)
			if len(keys) == n {
				return keys
			}
		}
	}
	t.Fatalf("no %d keys on %s", n, master.Addr)
	return nil
}

// keysOnMasters returns n keys on each of the first count masters, and the
// masters.
func keysOnMasters(t *testing.T, cl *localcluster.Cluster, prefix, tag string, count, n int) ([]string, []localcluster.Node) {
	t.Helper()
	masters, err := cl.Masters(ctxTimeout(t, 10*time.Second))
	require.NoError(t, err)
	var keys []string
	for i := range count {
		keys = append(keys, keysOn(t, masters[i], prefix, fmt.Sprintf("%s%d", tag, i), n)...)
	}
	return keys, masters
}

// keysInOneSlotOn returns n keys that share a hash tag served by master.
func keysInOneSlotOn(t *testing.T, master localcluster.Node, name string, n int) []string {
	t.Helper()
	for i := range 10000 {
		tag := fmt.Sprintf("%s-%d", name, i)
		if master.ServesSlot(hashtag.Slot(tag)) {
			keys := make([]string, n)
			for j := range keys {
				keys[j] = fmt.Sprintf("{%s}:%d", tag, j)
			}
			return keys
		}
	}
	t.Fatalf("no tag on %s", master.Addr)
	return nil
}
