package cluster_test

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/batchlock/batchlock/batchlock"
	"github.com/batchlock/batchlock/localcluster"
)

// aclCommands is the least a user needs for batchlock through a go-redis
// cluster client: what the client sends on its own (authentication, the
// slot map, pub/sub health checks), what batchlock sends, and every command
// its scripts call, which Redis checks against the user's ACL too.
//
// HELLO needs no permission: go-redis sends it with AUTH, which any user may.
// CLIENT SETINFO is off in ClientOptions (DisableIdentity); a client that
// leaves it on also needs +client|setinfo.
var aclCommands = []string{
	// go-redis: the slot map, and the health check of an idle pub/sub
	// connection
	"+cluster|slots", "+ping",
	// go-redis: the commands' routing, read once before it routes a script
	// through the cluster client (SetCapacity, AddCapacity); refused, it
	// asks again on every such call
	"+command",
	// batchlock: scripts by digest, by source after NOSCRIPT (a restarted or
	// promoted master), WithReplicas, and waiting for releases
	"+evalsha", "+eval", "+wait", "+ssubscribe", "+sunsubscribe",
	// ClusterOptions' OnConnect: connections kept from client eviction
	"+client|no-evict",
	// called inside acquire.lua, release.lua, extend.lua and force.lua
	"+time", "+exists", "+get", "+set", "+setrange", "+del", "+pttl", "+pexpiretime", "+incrby", "+spublish",
	// the admin API's Held scans
	"+scan",
}

// Every feature works for a user limited to the prefix's keys and channels
// and to the commands above; a key outside the prefix is refused by Redis.
func TestACLUserLimitedToPrefix(t *testing.T) {
	cl := newCluster(t)
	ctx := ctxTimeout(t, time.Minute)
	prefix := testPrefix(t)
	const user, pass = "orders", "s3cret-orders"
	setUser := append([]any{"ACL", "SETUSER", user, "reset", "on", ">" + pass, "~" + prefix + "*", "&" + prefix + "*", "-@all"},
		anySlice(aclCommands)...)
	for _, addr := range cl.Addrs() {
		_, err := cl.Do(ctx, addr, setUser...)
		require.NoError(t, err, "ACL SETUSER on %s", addr)
		_, err = cl.Do(ctx, addr, "ACL", "LOG", "RESET")
		require.NoError(t, err)
	}

	admin := cl.Client()
	t.Cleanup(func() { _ = admin.Close() })
	opts := cl.ClientOptions()
	opts.Username, opts.Password = user, pass
	rdb := redis.NewClusterClient(opts)
	t.Cleanup(func() { _ = rdb.Close() })
	var renewals atomic.Int64
	c, err := batchlock.New(rdb, batchlock.WithPrefix(prefix), batchlock.WithLease(900*time.Millisecond),
		batchlock.WithObserver(func(e batchlock.Event) {
			if e.Kind == batchlock.EventRenewed {
				renewals.Add(1)
			}
		}))
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })
	keys := spread(30, "acl") // over every master

	// TryLock, Extend, and the watchdog's renewal.
	l, err := c.TryLock(ctx, keys)
	require.NoError(t, err)
	for _, k := range keys {
		assert.Positive(t, l.Token(k))
	}
	require.NoError(t, l.Extend(ctx, 5*time.Second))
	held, err := c.Held(ctx, "*")
	require.NoError(t, err, "the admin API lists the held keys")
	assert.Len(t, held, len(keys))
	assert.Greater(t, admin.PTTL(ctx, prefix+keys[0]).Val(), 2*time.Second, "Extend pushed the lease past the client's 900ms")
	require.Eventually(t, func() bool { return renewals.Load() > 0 }, 5*time.Second, 10*time.Millisecond, "the watchdog renews the lock")
	require.NoError(t, l.Err())

	// A waiting Lock subscribes to the holder's release and takes over.
	waiter, err := batchlock.New(rdb, batchlock.WithPrefix(prefix))
	require.NoError(t, err)
	t.Cleanup(func() { _ = waiter.Close() })
	got := make(chan error, 1)
	go func() {
		wl, err := waiter.Lock(ctx, keys[:3])
		if err == nil {
			err = wl.Unlock(ctx)
		}
		got <- err
	}()
	require.Eventually(t, func() bool {
		for _, addr := range cl.Addrs() {
			if v, err := cl.Do(ctx, addr, "PUBSUB", "SHARDCHANNELS", prefix+"*"); err == nil && len(v.([]any)) > 0 {
				return true
			}
		}
		return false
	}, 10*time.Second, 10*time.Millisecond, "the waiter listens for the release with SSUBSCRIBE")
	require.NoError(t, l.Unlock(ctx))
	require.NoError(t, <-got, "the waiter gets the keys once they are released")

	// Do, with replica acknowledgement.
	ran := false
	require.NoError(t, c.Do(ctx, keys, func(context.Context) error {
		ran = true
		return nil
	}, batchlock.WithReplicas(1, 500*time.Millisecond)))
	assert.True(t, ran)
	assert.Empty(t, lockKeysUnder(t, admin, prefix), "everything released")

	// Counted holds: a capacity set and changed, units held by two owners
	// of one key, one hold consumed, the other let go.
	stock := keys[0]
	require.NoError(t, c.SetCapacity(ctx, stock, 5))
	capacity, err := c.AddCapacity(ctx, stock, 2)
	require.NoError(t, err)
	assert.Equal(t, int64(7), capacity)
	sold, err := c.TryLock(ctx, keys[1:2], batchlock.WithUnits(map[string]int64{stock: 3}))
	require.NoError(t, err)
	kept, err := waiter.TryLock(ctx, nil, batchlock.WithUnits(map[string]int64{stock: 4}))
	require.NoError(t, err, "a second owner's units fit beside the first's")
	require.NoError(t, sold.Consume(ctx))
	require.NoError(t, kept.Unlock(ctx))
	inspected, err := c.Inspect(ctx, stock)
	require.NoError(t, err)
	assert.Equal(t, int64(4), inspected[0].Capacity, "the consumed units left the capacity")
	assert.Empty(t, lockKeysUnder(t, admin, prefix), "every hold let go")

	// A call cut short by a frozen master rolls back what it may have taken,
	// cancelling its acquire of unknown outcome (SADD in release.lua).
	masters, err := cl.Masters(ctx)
	require.NoError(t, err)
	frozen := masters[0].Addr
	require.NoError(t, cl.Freeze(ctx, frozen))
	t.Cleanup(func() { _ = cl.Thaw(context.Background(), frozen) })
	// Back before cluster-node-timeout, so no failover interferes.
	thawed := make(chan error, 1)
	time.AfterFunc(600*time.Millisecond, func() { thawed <- cl.Thaw(context.Background(), frozen) })
	short, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	_, err = c.TryLock(short, keys)
	cancel()
	require.Error(t, err)
	require.NoError(t, <-thawed)
	require.Eventually(t, func() bool { return len(lockKeysUnder(t, admin, prefix)) == 0 }, 10*time.Second, 20*time.Millisecond,
		"the cut-short call leaves nothing held")

	// Outside its prefix the same user is refused by Redis itself.
	outside, err := batchlock.New(rdb, batchlock.WithPrefix("outside:"))
	require.NoError(t, err)
	t.Cleanup(func() { _ = outside.Close() })
	_, err = outside.TryLock(ctx, keys[:1])
	require.Error(t, err)
	assert.Empty(t, lockKeysUnder(t, admin, "outside:"))

	// Nothing else was refused: not a command go-redis sends on its own
	// and ignores the failure of, nor one batchlock needs.
	outsideRefused := 0
	for _, addr := range cl.Addrs() {
		for _, e := range aclLog(ctx, t, cl, addr) {
			if e["reason"] == "key" && strings.HasPrefix(e["object"], "outside:") {
				outsideRefused++
				continue
			}
			t.Errorf("%s refused %s %q of %s (context %s)", addr, e["reason"], e["object"], e["username"], e["context"])
		}
	}
	assert.Positive(t, outsideRefused, "the ACL refuses keys outside the prefix")
}

func anySlice(ss []string) []any {
	out := make([]any, len(ss))
	for i, s := range ss {
		out[i] = s
	}
	return out
}

// aclLog reads ACL LOG of one node as one map per entry.
func aclLog(ctx context.Context, t *testing.T, cl *localcluster.Cluster, addr string) []map[string]string {
	t.Helper()
	v, err := cl.Do(ctx, addr, "ACL", "LOG")
	require.NoError(t, err)
	entries, _ := v.([]any)
	out := make([]map[string]string, 0, len(entries))
	for _, e := range entries {
		fields, _ := e.([]any)
		m := map[string]string{}
		for i := 0; i+1 < len(fields); i += 2 {
			m[fmt.Sprint(fields[i])] = fmt.Sprint(fields[i+1])
		}
		out = append(out, m)
	}
	return out
}
