package cluster_test

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/moby/moby/client"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/testcontainers/testcontainers-go"

	"github.com/batchlock/batchlock/localcluster"
)

// These tests prove the harness itself on the active backend, so that a
// failing lock test can be trusted to be about the locks.

// nodeByID looks a node up in a fresh topology.
func nodeByID(ctx context.Context, t *testing.T, c *localcluster.Cluster, id string) localcluster.Node {
	t.Helper()
	nodes, err := c.Nodes(ctx)
	require.NoError(t, err)
	i := slices.IndexFunc(nodes, func(n localcluster.Node) bool { return n.ID == id })
	require.GreaterOrEqual(t, i, 0, "node %s missing from %v", id, nodes)
	return nodes[i]
}

func nodeAt(ctx context.Context, t *testing.T, c *localcluster.Cluster, addr string) localcluster.Node {
	t.Helper()
	nodes, err := c.Nodes(ctx)
	require.NoError(t, err)
	i := slices.IndexFunc(nodes, func(n localcluster.Node) bool { return n.Addr == addr })
	require.GreaterOrEqual(t, i, 0, "node %s missing from %v", addr, nodes)
	return nodes[i]
}

// infoField reads one field of INFO section on the node at addr.
func infoField(ctx context.Context, c *localcluster.Cluster, addr, section, field string) (string, error) {
	v, err := c.Do(ctx, addr, "INFO", section)
	if err != nil {
		return "", err
	}
	for line := range strings.Lines(fmt.Sprint(v)) {
		if val, ok := strings.CutPrefix(strings.TrimSpace(line), field+":"); ok {
			return val, nil
		}
	}
	return "", fmt.Errorf("no %s in INFO %s of %s", field, section, addr)
}

// waitReplicated waits until the replica has applied everything the master
// had written when called, so a forced failover loses nothing.
func waitReplicated(ctx context.Context, t *testing.T, c *localcluster.Cluster, master, replica string) {
	t.Helper()
	want, err := infoField(ctx, c, master, "replication", "master_repl_offset")
	require.NoError(t, err)
	w, err := strconv.ParseInt(want, 10, 64)
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		got, err := infoField(ctx, c, replica, "replication", "slave_repl_offset")
		g, perr := strconv.ParseInt(got, 10, 64)
		return err == nil && perr == nil && g >= w
	}, 10*time.Second, 20*time.Millisecond, "replica %s did not catch up with %s", replica, master)
}

func dialable(addr string) bool {
	conn, err := net.DialTimeout("tcp", addr, 200*time.Millisecond)
	if err == nil {
		_ = conn.Close()
	}
	return err == nil
}

func writeKeys(ctx context.Context, t *testing.T, rdb *redis.ClusterClient, tag string, n int) []string {
	t.Helper()
	keys := make([]string, n)
	for i := range keys {
		keys[i] = fmt.Sprintf("{%s}:%d", tag, i)
		require.NoError(t, rdb.Set(ctx, keys[i], "v"+strconv.Itoa(i), 0).Err())
	}
	return keys
}

func requireKeys(ctx context.Context, t *testing.T, rdb *redis.ClusterClient, keys []string) {
	t.Helper()
	for i, k := range keys {
		v, err := rdb.Get(ctx, k).Result()
		require.NoError(t, err, "reading %s", k)
		require.Equal(t, "v"+strconv.Itoa(i), v, "value of %s", k)
	}
}

func TestHarnessTopologyReady(t *testing.T) {
	c := sharedCluster(t)
	ctx := ctxTimeout(t, time.Minute)
	t.Logf("backend %s, nodes %v", c.Backend(), c.Addrs())
	require.NoError(t, c.WaitReady(ctx))

	masters, err := c.Masters(ctx)
	require.NoError(t, err)
	require.Len(t, masters, 3)
	served := 0
	for i, m := range masters {
		for _, r := range m.Slots {
			served += r[1] - r[0] + 1
		}
		if i > 0 {
			assert.Greater(t, m.Slots[0][0], masters[i-1].Slots[0][0], "masters sorted by first slot")
		}
		r, err := c.ReplicaOf(ctx, m.Addr)
		require.NoError(t, err)
		assert.False(t, r.Master)
		assert.Equal(t, m.ID, r.MasterID)
		assert.True(t, r.Connected)
		link, err := infoField(ctx, c, r.Addr, "replication", "master_link_status")
		require.NoError(t, err)
		assert.Equal(t, "up", link, "replica %s of %s", r.Addr, m.Addr)
		slaves, err := infoField(ctx, c, m.Addr, "replication", "connected_slaves")
		require.NoError(t, err)
		assert.Equal(t, "1", slaves, "replicas connected to %s", m.Addr)
	}
	assert.Equal(t, localcluster.SlotCount, served)

	nodes, err := c.Nodes(ctx)
	require.NoError(t, err)
	require.Len(t, nodes, 6)
	var addrs []string
	for _, n := range nodes {
		addrs = append(addrs, n.Addr)
		assert.True(t, n.Connected, "%s answers", n.Addr)
		assert.False(t, n.Failing(), "%s flagged %v", n.Addr, n.Flags)
		assert.True(t, strings.HasPrefix(n.Addr, "127.0.0.1:"), "loopback only: %s", n.Addr)
	}
	assert.ElementsMatch(t, c.Addrs(), addrs)

	for _, addr := range c.Addrs() {
		st, err := c.Do(ctx, addr, "CLUSTER", "INFO")
		require.NoError(t, err)
		assert.Contains(t, st, "cluster_state:ok")
		// DEBUG is refused unless the node enables it.
		_, err = c.Do(ctx, addr, "DEBUG", "SLEEP", "0")
		assert.NoError(t, err, "DEBUG on %s", addr)
	}

	rdb := newClient(t)
	seen := map[string]bool{}
	for i := range 100 {
		key := fmt.Sprintf("harness:spread:%d", i)
		require.NoError(t, rdb.Set(ctx, key, i, time.Minute).Err())
		node, err := rdb.MasterForKey(ctx, key)
		require.NoError(t, err)
		seen[node.Options().Addr] = true
	}
	var masterAddrs []string
	for _, m := range masters {
		masterAddrs = append(masterAddrs, m.Addr)
	}
	assert.ElementsMatch(t, masterAddrs, keysOf(seen), "100 keys land on every master")
}

func keysOf(m map[string]bool) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}

func TestHarnessFailoverMovesMaster(t *testing.T) {
	c := newCluster(t)
	ctx := ctxTimeout(t, 2*time.Minute)
	addrs := c.Addrs()
	for i := range 3 {
		r, err := c.ReplicaOf(ctx, addrs[i])
		require.NoError(t, err)
		assert.Equal(t, addrs[i+3], r.Addr, "node %d replicates node %d", i+3, i)
	}

	rdb := c.Client()
	defer rdb.Close()
	slot, err := rdb.ClusterKeySlot(ctx, "{failover}").Result()
	require.NoError(t, err)
	old, err := c.MasterOfSlot(ctx, int(slot))
	require.NoError(t, err)
	replica, err := c.ReplicaOf(ctx, old.Addr)
	require.NoError(t, err)
	keys := writeKeys(ctx, t, rdb, "failover", 50)
	waitReplicated(ctx, t, c, old.Addr, replica.Addr)

	promoted, err := c.Failover(ctx, old.Addr)
	require.NoError(t, err)
	assert.Equal(t, replica.Addr, promoted)
	now, err := c.MasterOfSlot(ctx, int(slot))
	require.NoError(t, err)
	assert.Equal(t, replica.Addr, now.Addr)
	assert.Equal(t, old.Slots, now.Slots, "the new master serves all the old master's slots")
	demoted := nodeByID(ctx, t, c, old.ID)
	assert.False(t, demoted.Master, "old master demoted")
	assert.Equal(t, now.ID, demoted.MasterID, "old master replicates the new one")

	// The client made before the failover follows it.
	requireKeys(ctx, t, rdb, keys)
	require.NoError(t, rdb.Set(ctx, "{failover}:after", "x", 0).Err())

	back, err := c.Failover(ctx, replica.Addr)
	require.NoError(t, err)
	assert.Equal(t, old.Addr, back)
	require.NoError(t, c.WaitReady(ctx))
	requireKeys(ctx, t, rdb, keys)
}

func TestHarnessTakeoverWhileMasterFrozen(t *testing.T) {
	c := newCluster(t)
	ctx := ctxTimeout(t, 2*time.Minute)
	masters, err := c.Masters(ctx)
	require.NoError(t, err)
	victim := masters[1]
	replica, err := c.ReplicaOf(ctx, victim.Addr)
	require.NoError(t, err)

	require.NoError(t, c.Freeze(ctx, victim.Addr))
	promoted, err := c.Failover(ctx, victim.Addr, localcluster.Takeover())
	require.NoError(t, err)
	assert.Equal(t, replica.Addr, promoted)
	now, err := c.MasterOfSlot(ctx, victim.Slots[0][0])
	require.NoError(t, err)
	assert.Equal(t, replica.Addr, now.Addr)

	require.NoError(t, c.Thaw(ctx, victim.Addr))
	require.NoError(t, c.WaitReady(ctx))
	back := nodeByID(ctx, t, c, victim.ID)
	assert.False(t, back.Master, "thawed old master rejoins as a replica")
	assert.Equal(t, replica.ID, back.MasterID)
}

func TestHarnessFrozenMasterDetected(t *testing.T) {
	c := newCluster(t)
	ctx := ctxTimeout(t, 2*time.Minute)
	masters, err := c.Masters(ctx)
	require.NoError(t, err)
	victim := masters[0]
	replica, err := c.ReplicaOf(ctx, victim.Addr)
	require.NoError(t, err)

	require.NoError(t, c.Freeze(ctx, victim.Addr))
	dctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	_, err = c.Do(dctx, victim.Addr, "PING")
	cancel()
	require.Error(t, err, "a frozen node answers nothing")

	require.Eventually(t, func() bool {
		n := nodeByID(ctx, t, c, victim.ID)
		return !n.Connected && n.Failing()
	}, 20*time.Second, 50*time.Millisecond, "other nodes flag the frozen master")
	// With replica-validity-factor 0 its replica takes over by itself.
	require.Eventually(t, func() bool {
		m, err := c.MasterOfSlot(ctx, victim.Slots[0][0])
		return err == nil && m.Addr == replica.Addr
	}, 30*time.Second, 50*time.Millisecond, "the replica of the frozen master takes over")

	require.NoError(t, c.Thaw(ctx, victim.Addr))
	require.NoError(t, c.WaitReady(ctx))
	back := nodeByID(ctx, t, c, victim.ID)
	assert.True(t, back.Connected)
	assert.False(t, back.Failing(), "flags %v", back.Flags)
	assert.False(t, back.Master)
	assert.Equal(t, replica.ID, back.MasterID)
}

func TestHarnessKillRestartRejoins(t *testing.T) {
	c := newCluster(t)
	ctx := ctxTimeout(t, 2*time.Minute)
	rdb := c.Client()
	defer rdb.Close()
	slot, err := rdb.ClusterKeySlot(ctx, "{kill}").Result()
	require.NoError(t, err)
	master, err := c.MasterOfSlot(ctx, int(slot))
	require.NoError(t, err)

	// A replica: killed, it is flagged; restarted, it comes back as itself
	// and catches up on what was written meanwhile.
	before, err := c.ReplicaOf(ctx, master.Addr)
	require.NoError(t, err)
	require.NoError(t, c.Kill(ctx, before.Addr))
	assert.False(t, dialable(before.Addr), "killed node still listens")
	require.Eventually(t, func() bool {
		n := nodeByID(ctx, t, c, before.ID)
		return !n.Connected && n.Failing()
	}, 20*time.Second, 50*time.Millisecond, "other nodes flag the killed replica")
	keys := writeKeys(ctx, t, rdb, "kill", 20)

	require.NoError(t, c.Restart(ctx, before.Addr))
	require.NoError(t, c.WaitReady(ctx))
	after := nodeByID(ctx, t, c, before.ID)
	assert.Equal(t, before.Addr, after.Addr, "same port")
	assert.Equal(t, master.ID, after.MasterID, "same master, from nodes.conf")
	assert.True(t, after.Connected)
	waitReplicated(ctx, t, c, master.Addr, after.Addr)

	// The master: its replica takes over, and once restarted it rejoins as
	// a replica of its former replica, with the data.
	require.NoError(t, c.Kill(ctx, master.Addr))
	require.Eventually(t, func() bool {
		m, err := c.MasterOfSlot(ctx, int(slot))
		return err == nil && m.Addr == after.Addr
	}, 30*time.Second, 50*time.Millisecond, "the replica of the killed master takes over")
	require.NoError(t, c.Restart(ctx, master.Addr))
	require.NoError(t, c.WaitReady(ctx))
	back := nodeByID(ctx, t, c, master.ID)
	assert.False(t, back.Master)
	assert.Equal(t, after.ID, back.MasterID)
	requireKeys(ctx, t, rdb, keys)
}

func TestHarnessMigrateSlot(t *testing.T) {
	c := newCluster(t)
	ctx := ctxTimeout(t, 2*time.Minute)
	rdb := c.Client()
	defer rdb.Close()
	s, err := rdb.ClusterKeySlot(ctx, "{migrate}").Result()
	require.NoError(t, err)
	slot := int(s)
	src, err := c.MasterOfSlot(ctx, slot)
	require.NoError(t, err)
	masters, err := c.Masters(ctx)
	require.NoError(t, err)
	dst := masters[(slices.IndexFunc(masters, func(n localcluster.Node) bool { return n.ID == src.ID })+1)%len(masters)]
	keys := writeKeys(ctx, t, rdb, "migrate", 250) // more than one MIGRATE batch

	require.NoError(t, c.MigrateSlot(ctx, slot, dst.Addr))
	now, err := c.MasterOfSlot(ctx, slot)
	require.NoError(t, err)
	assert.Equal(t, dst.Addr, now.Addr)
	n, err := c.Do(ctx, dst.Addr, "CLUSTER", "COUNTKEYSINSLOT", slot)
	require.NoError(t, err)
	assert.EqualValues(t, 250, n, "keys moved to the new owner")
	n, err = c.Do(ctx, src.Addr, "CLUSTER", "COUNTKEYSINSLOT", slot)
	require.NoError(t, err)
	assert.EqualValues(t, 0, n, "no key left behind")
	assert.False(t, nodeAt(ctx, t, c, src.Addr).ServesSlot(slot))
	requireKeys(ctx, t, rdb, keys)
	require.NoError(t, c.WaitReady(ctx))
}

func TestHarnessExternalBackend(t *testing.T) {
	shared := sharedCluster(t)
	ctx := ctxTimeout(t, time.Minute)
	t.Setenv(localcluster.EnvClusterAddrs, shared.Addrs()[1])
	ext, err := localcluster.Start(ctx)
	require.NoError(t, err)
	assert.Equal(t, localcluster.External, ext.Backend())
	assert.ElementsMatch(t, shared.Addrs(), ext.Addrs(), "discovers every node from one seed")
	addr := ext.Addrs()[0]
	assert.ErrorIs(t, ext.Freeze(ctx, addr), localcluster.ErrUnsupported)
	assert.ErrorIs(t, ext.Thaw(ctx, addr), localcluster.ErrUnsupported)
	assert.ErrorIs(t, ext.Kill(ctx, addr), localcluster.ErrUnsupported)
	assert.ErrorIs(t, ext.Restart(ctx, addr), localcluster.ErrUnsupported)
	masters, err := ext.Masters(ctx)
	require.NoError(t, err)
	assert.Len(t, masters, 3)
	require.NoError(t, ext.Close())
	require.NoError(t, shared.WaitReady(ctx), "closing an external cluster leaves it running")
}

func TestHarnessCloseLeavesNothing(t *testing.T) {
	if os.Getenv(localcluster.EnvClusterAddrs) != "" {
		t.Skip("needs a cluster of its own")
	}
	ctx := ctxTimeout(t, 3*time.Minute)
	c, err := localcluster.Start(ctx)
	if err != nil {
		unavailable(t, err)
	}
	addrs := c.Addrs()
	// Close must cope with nodes in every state.
	require.NoError(t, c.Freeze(ctx, addrs[1]))
	require.NoError(t, c.Kill(ctx, addrs[2]))

	require.NoError(t, c.Close())
	require.NoError(t, c.Close(), "Close is idempotent")
	_, err = c.Nodes(ctx)
	assert.Error(t, err, "a closed cluster refuses calls")

	for _, addr := range addrs {
		assert.False(t, dialable(addr), "%s still listens", addr)
	}
	assert.Empty(t, redisProcessesOn(t, addrs), "redis-server processes left")
	switch c.Backend() {
	case localcluster.Process:
		_, err := os.Stat(filepath.Join(os.TempDir(), "batchlock-localcluster-"+c.ID()))
		assert.ErrorIs(t, err, os.ErrNotExist, "temporary directory left")
	case localcluster.Docker:
		cli, err := testcontainers.NewDockerClientWithOpts(ctx)
		require.NoError(t, err)
		defer cli.Close()
		res, err := cli.ContainerList(ctx, client.ContainerListOptions{
			All:     true,
			Filters: make(client.Filters).Add("label", localcluster.LabelID+"="+c.ID()),
		})
		require.NoError(t, err)
		assert.Empty(t, res.Items, "containers left")
	}
}

// redisProcessesOn lists processes whose command line names one of addrs:
// redis-server shows its address in its title, in a container or not.
func redisProcessesOn(t *testing.T, addrs []string) []string {
	t.Helper()
	dirs, err := filepath.Glob("/proc/[0-9]*/cmdline")
	require.NoError(t, err)
	var found []string
	for _, f := range dirs {
		b, err := os.ReadFile(f)
		if err != nil {
			continue // gone meanwhile
		}
		cmd := strings.ReplaceAll(string(b), "\x00", " ")
		if !strings.Contains(cmd, "redis-server") {
			continue
		}
		for _, a := range addrs {
			if strings.Contains(cmd, a+" ") || strings.HasSuffix(strings.TrimSpace(cmd), a) {
				found = append(found, f+": "+cmd)
			}
		}
	}
	return found
}

func TestHarnessSingles(t *testing.T) {
	ctx := ctxTimeout(t, 3*time.Minute)
	s, err := localcluster.StartSingles(ctx, 3)
	if err != nil {
		unavailable(t, err)
	}
	defer s.Close()
	addrs := s.Addrs()
	require.Len(t, addrs, 3)
	for i, addr := range addrs {
		_, err := s.Do(ctx, addr, "SET", "k", i)
		require.NoError(t, err)
		info, err := s.Do(ctx, addr, "INFO", "cluster")
		require.NoError(t, err)
		assert.Contains(t, info, "cluster_enabled:0", "independent nodes, not a cluster")
	}
	for i, addr := range addrs {
		v, err := s.Do(ctx, addr, "GET", "k")
		require.NoError(t, err)
		assert.Equal(t, strconv.Itoa(i), v, "each node keeps its own data")
	}

	require.NoError(t, s.Freeze(ctx, addrs[0]))
	dctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	_, err = s.Do(dctx, addrs[0], "PING")
	cancel()
	assert.Error(t, err, "a frozen node answers nothing")
	require.NoError(t, s.Thaw(ctx, addrs[0]))
	_, err = s.Do(ctx, addrs[0], "PING")
	assert.NoError(t, err)

	require.NoError(t, s.Kill(ctx, addrs[1]))
	assert.False(t, dialable(addrs[1]))
	require.NoError(t, s.Restart(ctx, addrs[1]))
	_, err = s.Do(ctx, addrs[1], "GET", "k")
	assert.ErrorIs(t, err, redis.Nil, "no persistence: a restarted node is empty")

	require.NoError(t, s.Close())
	require.NoError(t, s.Close())
	for _, addr := range addrs {
		assert.False(t, dialable(addr), "%s still listens", addr)
	}
	assert.Empty(t, redisProcessesOn(t, addrs))
}
