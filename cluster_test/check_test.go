package cluster_test

import (
	"context"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/batchlock/batchlock/batchlock"
	"github.com/batchlock/batchlock/hashtag"
)

// A healthy cluster passes every check on every master; the test cluster
// runs without the append-only file, which the durability check warns of
// without failing Check.
func TestCheckPassesOnAHealthyCluster(t *testing.T) {
	ctx := ctxTimeout(t, 30*time.Second)
	c, _ := newLocker(t, newClient(t), batchlock.WithReplicas(1, time.Second))
	require.NoError(t, c.Check(ctx))
	results, err := c.Preflight(ctx)
	require.NoError(t, err)
	masters, err := sharedCluster(t).Masters(ctx)
	require.NoError(t, err)
	perMaster := map[string]int{}
	for _, r := range results {
		if r.Check == "server version" {
			assert.Regexp(t, wantServer(t), r.Found, "the server and version of %s", r.Node)
		}
		if r.Check == "fence durability" {
			assert.True(t, r.Warning, "a warning, not a failure")
			assert.ErrorContains(t, r.Err, "appendonly no", "on %s", r.Node)
		} else {
			assert.NoError(t, r.Err, "%s on %s", r.Check, r.Node)
			assert.False(t, r.Warning)
		}
		perMaster[r.Node]++
	}
	for _, m := range masters {
		assert.Equal(t, 8, perMaster[m.Addr], "the checks of master %s", m.Addr)
	}
	assert.Equal(t, 3, perMaster[""], "the clocks, the seeds and the client settings")

	// In the order documented, the same on every run: the masters by
	// address, each with its checks in one order, then the clocks, then
	// the client.
	perNode := []string{"server version", "cross-slot scripts", "sharded pub/sub", "maxmemory-policy",
		"client eviction", "cluster state", "replicas online", "fence durability"}
	var want []string
	for _, addr := range slices.Sorted(maps.Keys(perMaster)) {
		if addr == "" {
			continue
		}
		for _, check := range perNode {
			want = append(want, addr+" "+check)
		}
	}
	want = append(want, " clocks", " one cluster", " client settings")
	for range 3 {
		var got []string
		results, err := c.Preflight(ctx)
		require.NoError(t, err)
		for _, r := range results {
			got = append(got, r.Node+" "+r.Check)
		}
		assert.Equal(t, want, got)
	}
}

// A cluster client whose seeds are nodes of two clusters maps its slots to
// either by chance: Check fails, naming the two seeds; seeds of one cluster,
// one of them down, pass.
func TestCheckRefusesSeedsOfTwoClusters(t *testing.T) {
	ctx := ctxTimeout(t, time.Minute)
	ours, theirs := sharedCluster(t).Addrs(), newCluster(t).Addrs()
	for _, tc := range []struct {
		name  string
		seeds []string
		want  string // in the error; "" for none
	}{
		{name: "one cluster", seeds: ours[:3]},
		{name: "one cluster, a seed down", seeds: append([]string{"127.0.0.1:1"}, ours[:2]...)},
		{name: "two clusters", seeds: []string{ours[0], theirs[0]}, want: "are nodes of two clusters"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			opts := sharedCluster(t).ClientOptions()
			opts.Addrs = tc.seeds
			rdb := redis.NewClusterClient(opts)
			t.Cleanup(func() { _ = rdb.Close() })
			c, _ := newLocker(t, rdb)
			var seeds error
			results, err := c.Preflight(ctx)
			require.NoError(t, err)
			err = c.Check(ctx)
			for _, r := range results {
				if r.Check == "one cluster" {
					seeds = r.Err
				}
			}
			if tc.want == "" {
				assert.NoError(t, seeds)
				return
			}
			assert.ErrorContains(t, seeds, tc.want)
			assert.ErrorContains(t, err, tc.want)
			assert.ErrorContains(t, err, theirs[0], "the error names the other cluster's seed")
		})
	}
}

// Each problem staged is reported, naming its node and its setting; the
// others still pass.
func TestCheckReportsEachProblem(t *testing.T) {
	ctx := ctxTimeout(t, 2*time.Minute)
	cl := newCluster(t)
	masters, err := cl.Masters(ctx)
	require.NoError(t, err)

	t.Run("an evicting policy on one master", func(t *testing.T) {
		for _, policy := range []string{"volatile-lru", "allkeys-lru"} {
			_, err := cl.Do(ctx, masters[0].Addr, "CONFIG", "SET", "maxmemory-policy", policy)
			require.NoError(t, err)
			c, _ := newLocker(t, cl.Client())
			err = c.Check(ctx)
			require.Error(t, err)
			assert.Contains(t, err.Error(), masters[0].Addr+": maxmemory-policy")
			assert.Contains(t, err.Error(), policy)
			assert.NotContains(t, err.Error(), masters[1].Addr, "the other masters pass")
		}
		_, err := cl.Do(ctx, masters[0].Addr, "CONFIG", "SET", "maxmemory-policy", "noeviction")
		require.NoError(t, err)
	})
	t.Run("a client with retries and no context timeouts", func(t *testing.T) {
		opts := cl.ClientOptions()
		opts.MaxRetries, opts.ContextTimeoutEnabled = 3, false
		rdb := redis.NewClusterClient(opts)
		t.Cleanup(func() { _ = rdb.Close() })
		c, _ := newLocker(t, rdb)
		err := c.Check(ctx)
		require.Error(t, err)
		assert.Contains(t, err.Error(), "client settings: MaxRetries 3")
		assert.Contains(t, err.Error(), "ContextTimeoutEnabled is off")
		assert.NotContains(t, err.Error(), "maxmemory-policy")
	})
	t.Run("client eviction on one master", func(t *testing.T) {
		_, err := cl.Do(ctx, masters[0].Addr, "CONFIG", "SET", "maxmemory-clients", "1073741824")
		require.NoError(t, err)
		t.Cleanup(func() { _, _ = cl.Do(context.Background(), masters[0].Addr, "CONFIG", "SET", "maxmemory-clients", "0") })
		kept, _ := newLocker(t, cl.Client())
		assert.Empty(t, warnings(ctx, kept, "client eviction"), "ClusterOptions keeps connections from eviction")

		opts := cl.ClientOptions()
		opts.OnConnect = nil
		rdb := redis.NewClusterClient(opts)
		t.Cleanup(func() { _ = rdb.Close() })
		evictable, _ := newLocker(t, rdb)
		err = evictable.Check(ctx)
		require.NoError(t, err, "a warning does not fail Check")
		assert.Equal(t, []string{masters[0].Addr + ": maxmemory-clients 1073741824 may evict the connections waiters listen on: start from ClusterOptions, whose OnConnect keeps them (CLIENT NO-EVICT on)"},
			warnings(ctx, evictable, "client eviction"))
	})
	t.Run("appendonly on one master", func(t *testing.T) {
		c, _ := newLocker(t, cl.Client())
		assert.Len(t, warnings(ctx, c, "fence durability"), len(masters))
		_, err := cl.Do(ctx, masters[0].Addr, "CONFIG", "SET", "appendonly", "yes")
		require.NoError(t, err)
		t.Cleanup(func() { _, _ = cl.Do(context.Background(), masters[0].Addr, "CONFIG", "SET", "appendonly", "no") })
		got := warnings(ctx, c, "fence durability")
		assert.Len(t, got, len(masters)-1)
		for _, w := range got {
			assert.NotContains(t, w, masters[0].Addr)
		}
	})
	t.Run("a replica down", func(t *testing.T) {
		replica, err := cl.ReplicaOf(ctx, masters[1].Addr)
		require.NoError(t, err)
		require.NoError(t, cl.Kill(ctx, replica.Addr))
		t.Cleanup(func() { _ = cl.Restart(context.Background(), replica.Addr) })
		c, _ := newLocker(t, cl.Client(), batchlock.WithReplicas(1, time.Second))
		require.Eventually(t, func() bool {
			err := c.Check(ctx)
			return err != nil && strings.Contains(err.Error(), masters[1].Addr+": replicas online: 0 online")
		}, 20*time.Second, 50*time.Millisecond, "the master reports its replica gone")
	})
}

// batchlock check prints one line per check, under its node (the masters
// by address, then the clocks, the seeds, the client), and exits 0 on a healthy
// cluster, 1 when a master cannot give the replicas asked for.
func TestCommandCheck(t *testing.T) {
	bin := buildCommand(t)
	addrs := strings.Join(sharedCluster(t).Addrs(), ",")
	code, out, errOut := command(t, bin, "check", "--addrs", addrs, "--replicas", "1")
	require.Equal(t, 0, code, errOut)
	var groups []string
	for line := range strings.Lines(out) {
		if !strings.HasPrefix(line, " ") && !strings.HasPrefix(line, "all ") {
			groups = append(groups, strings.TrimSpace(line))
		}
	}
	require.Len(t, groups, 6, "three masters, the clocks, the seeds and the client, each once: %q", out)
	assert.True(t, slices.IsSorted(groups[:3]), "masters by address: %q", groups)
	assert.Equal(t, []string{"masters", "seeds (--addrs)", "this command's client"}, groups[3:])
	assert.Contains(t, out, "ok    one cluster")
	assert.Contains(t, out, "ok    maxmemory-policy")
	assert.Contains(t, out, "ok    client settings")
	assert.Contains(t, out, "WARN  fence durability")
	assert.NotContains(t, out, "FAIL")
	assert.Regexp(t, `(?m)^all \d+ checks passed, \d+ warnings$`, out, "a summary line")
	code, out, _ = command(t, bin, "check", "--addrs", addrs, "--replicas", "2")
	assert.Equal(t, 1, code)
	assert.Contains(t, out, "FAIL  replicas online")
}

// warnings are the warnings of check in c's Preflight, as "node: message".
func warnings(ctx context.Context, c *batchlock.Client, check string) []string {
	var out []string
	results, _ := c.Preflight(ctx)
	for _, r := range results {
		if r.Check == check && r.Warning {
			out = append(out, r.Node+": "+r.Err.Error())
		}
	}
	return out
}

// The connection a waiter listens on for its hand-off is kept from client
// eviction (ClusterOptions' OnConnect), so that a server with
// maxmemory-clients set cannot silently drop its wake-up.
func TestListenersKeptFromClientEviction(t *testing.T) {
	ctx := ctxTimeout(t, 30*time.Second)
	c, prefix := newLocker(t, newClient(t))
	waiter := peerOf(t, newClient(t), prefix)
	key := spread(1, "no-evict")
	l, err := c.Lock(ctx, key)
	require.NoError(t, err)
	got := make(chan error, 1)
	go func() {
		wl, err := waiter.Lock(ctx, key)
		if err == nil {
			err = wl.Unlock(ctx)
		}
		got <- err
	}()
	cl := sharedCluster(t)
	master, err := cl.MasterOfSlot(ctx, hashtag.Slot(prefix+key[0]))
	require.NoError(t, err)
	var listeners []string
	require.Eventually(t, func() bool {
		listeners = nil
		v, err := cl.Do(ctx, master.Addr, "CLIENT", "LIST")
		require.NoError(t, err)
		for line := range strings.SplitSeq(v.(string), "\n") {
			if strings.Contains(line, " ssub=") && !strings.Contains(line, " ssub=0 ") {
				listeners = append(listeners, line)
			}
		}
		return len(listeners) > 0
	}, 10*time.Second, 5*time.Millisecond, "the waiter listens")
	for _, line := range listeners {
		_, flags, _ := strings.Cut(line, " flags=")
		flags, _, _ = strings.Cut(flags, " ")
		assert.Contains(t, flags, "e", "kept from eviction: %s", line)
	}
	require.NoError(t, l.Unlock(ctx))
	require.NoError(t, <-got)
}
