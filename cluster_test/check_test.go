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
)

// A healthy cluster passes every check on every master.
func TestCheckPassesOnAHealthyCluster(t *testing.T) {
	ctx := ctxTimeout(t, 30*time.Second)
	c, _ := newLocker(t, newClient(t), batchlock.WithReplicas(1, time.Second))
	require.NoError(t, c.Check(ctx))
	results := c.Preflight(ctx)
	masters, err := sharedCluster(t).Masters(ctx)
	require.NoError(t, err)
	perMaster := map[string]int{}
	for _, r := range results {
		assert.NoError(t, r.Err, "%s on %s", r.Check, r.Node)
		perMaster[r.Node]++
	}
	for _, m := range masters {
		assert.Equal(t, 6, perMaster[m.Addr], "the checks of master %s", m.Addr)
	}
	assert.Equal(t, 2, perMaster[""], "the clocks and the client settings")

	// In the order documented, the same on every run: the masters by
	// address, each with its checks in one order, then the clocks, then
	// the client.
	perNode := []string{batchlock.CheckVersion, batchlock.CheckScripts, batchlock.CheckPubSub,
		batchlock.CheckEviction, batchlock.CheckState, batchlock.CheckReplicas}
	var want []batchlock.CheckResult
	for _, addr := range slices.Sorted(maps.Keys(perMaster)) {
		if addr == "" {
			continue
		}
		for _, check := range perNode {
			want = append(want, batchlock.CheckResult{Check: check, Node: addr})
		}
	}
	want = append(want, batchlock.CheckResult{Check: batchlock.CheckClocks}, batchlock.CheckResult{Check: batchlock.CheckClientOpts})
	for range 3 {
		assert.Equal(t, want, c.Preflight(ctx))
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

// batchlock check prints one line per check and exits 0 on a healthy
// cluster, 1 when a master cannot give the replicas asked for.
func TestCommandCheck(t *testing.T) {
	bin := buildCommand(t)
	addrs := strings.Join(sharedCluster(t).Addrs(), ",")
	code, out, errOut := command(t, bin, "check", "--addrs", addrs, "--replicas", "1")
	require.Equal(t, 0, code, errOut)
	assert.Contains(t, out, "ok    "+batchlock.CheckEviction)
	assert.Contains(t, out, "ok    "+batchlock.CheckClientOpts)
	assert.NotContains(t, out, "FAIL")
	assert.Regexp(t, `(?m)^all \d+ checks passed$`, out, "a summary line")
	code, out, _ = command(t, bin, "check", "--addrs", addrs, "--replicas", "2")
	assert.Equal(t, 1, code)
	assert.Contains(t, out, "FAIL  "+batchlock.CheckReplicas)
}
