package localcluster_test

import (
	"context"
	"fmt"
	"maps"
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

// These tests prove the harness on a cluster of their own, on the backend
// the environment picks (BATCHLOCK_BACKEND, else docker, else process), so
// that a failing test of the suite (cluster_test) can be trusted to be about
// the locks. make test-docker and test-process run them (TestHarness*);
// make test-unit leaves them out.

// startCluster starts a cluster of the test's own (with opts), closed at the
// end of the test.
func startCluster(t *testing.T, opts ...localcluster.Option) *localcluster.Cluster {
	t.Helper()
	ownBackend(t)
	c, err := localcluster.Start(t.Context(), append([]localcluster.Option{localcluster.WithLogf(t.Logf)}, opts...)...)
	if err != nil {
		noBackend(t, err)
	}
	t.Cleanup(func() { assert.NoError(t, c.Close(), "closing the test's cluster") })
	return c
}

// ownBackend has the test's Start launch nodes of its own even where
// BATCHLOCK_CLUSTER_ADDRS names a running cluster: the harness's faults,
// and Close, are what is tested, and an external cluster has neither.
func ownBackend(t *testing.T) {
	t.Setenv(localcluster.EnvClusterAddrs, "")
}

// noBackend skips the test, or fails it under CI, where a harness test must
// never pass unrun.
func noBackend(t *testing.T, err error) {
	t.Helper()
	if os.Getenv("CI") == "true" {
		t.Fatalf("no backend for a cluster (CI=true, so this fails): %v", err)
	}
	t.Skipf("SKIPPED, no backend for a cluster: %v", err)
}

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
	c := startCluster(t)
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
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

	rdb := c.Client()
	defer rdb.Close()
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
	assert.ElementsMatch(t, masterAddrs, slices.Collect(maps.Keys(seen)), "100 keys land on every master")
}

func TestHarnessFailoverMovesMaster(t *testing.T) {
	c := startCluster(t)
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
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
	require.NoError(t, c.WaitReplicated(ctx, old.Addr, replica.Addr))

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

	// Back, gracefully: the write just made is not lost.
	back, err := c.Failover(ctx, replica.Addr, localcluster.Graceful())
	require.NoError(t, err)
	assert.Equal(t, old.Addr, back)
	require.NoError(t, c.WaitReady(ctx))
	requireKeys(ctx, t, rdb, keys)
	after, err := rdb.Get(ctx, "{failover}:after").Result()
	require.NoError(t, err)
	assert.Equal(t, "x", after)
}

// A frozen master's replica takes over; thawed, the old master rejoins as
// its replica, also when the replica was restarted empty while the master
// was frozen: there Redis 8.0's old master can spin in its replicaof loop,
// and WaitReady restarts it (see Cluster.WaitReady).
func TestHarnessTakeoverWhileMasterFrozen(t *testing.T) {
	for _, tc := range []struct {
		name             string
		replicaRestarted bool
	}{
		{name: "replica up"},
		{name: "replica restarted empty", replicaRestarted: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := startCluster(t)
			ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
			defer cancel()
			masters, err := c.Masters(ctx)
			require.NoError(t, err)
			victim := masters[1]
			replica, err := c.ReplicaOf(ctx, victim.Addr)
			require.NoError(t, err)

			if tc.replicaRestarted {
				require.NoError(t, c.Kill(ctx, replica.Addr))
			}
			require.NoError(t, c.Freeze(ctx, victim.Addr))
			if tc.replicaRestarted {
				require.NoError(t, c.Restart(ctx, replica.Addr))
			}
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
		})
	}
}

func TestHarnessFrozenMasterDetected(t *testing.T) {
	c := startCluster(t)
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	masters, err := c.Masters(ctx)
	require.NoError(t, err)
	victim := masters[0]
	replica, err := c.ReplicaOf(ctx, victim.Addr)
	require.NoError(t, err)

	require.NoError(t, c.Freeze(ctx, victim.Addr))
	dctx, dcancel := context.WithTimeout(ctx, 300*time.Millisecond)
	_, err = c.Do(dctx, victim.Addr, "PING")
	dcancel()
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
	c := startCluster(t)
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
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
	require.NoError(t, c.WaitReplicated(ctx, master.Addr, after.Addr))

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
	c := startCluster(t)
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
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
	own := startCluster(t)
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	t.Setenv(localcluster.EnvClusterAddrs, own.Addrs()[1])
	ext, err := localcluster.Start(ctx)
	require.NoError(t, err)
	assert.Equal(t, localcluster.External, ext.Backend())
	assert.ElementsMatch(t, own.Addrs(), ext.Addrs(), "discovers every node from one seed")
	addr := ext.Addrs()[0]
	assert.ErrorIs(t, ext.Freeze(ctx, addr), localcluster.ErrUnsupported)
	assert.ErrorIs(t, ext.Thaw(ctx, addr), localcluster.ErrUnsupported)
	assert.ErrorIs(t, ext.Kill(ctx, addr), localcluster.ErrUnsupported)
	assert.ErrorIs(t, ext.Restart(ctx, addr), localcluster.ErrUnsupported)
	masters, err := ext.Masters(ctx)
	require.NoError(t, err)
	assert.Len(t, masters, 3)
	require.NoError(t, ext.Close())
	require.NoError(t, own.WaitReady(ctx), "closing an external cluster leaves it running")
}

func TestHarnessCloseLeavesNothing(t *testing.T) {
	ownBackend(t)
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	c, err := localcluster.Start(ctx)
	if err != nil {
		noBackend(t, err)
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
		assertNoContainers(ctx, t, c)
	}
}

// assertNoContainers checks that no container of c is left.
func assertNoContainers(ctx context.Context, t *testing.T, c *localcluster.Cluster) {
	t.Helper()
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
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	s, err := localcluster.StartSingles(ctx, 3)
	if err != nil {
		noBackend(t, err)
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
	dctx, dcancel := context.WithTimeout(ctx, 300*time.Millisecond)
	_, err = s.Do(dctx, addrs[0], "PING")
	dcancel()
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

// masterForTag returns the master serving the slot of {tag}.
func masterForTag(ctx context.Context, t *testing.T, c *localcluster.Cluster, rdb *redis.ClusterClient, tag string) (int, localcluster.Node) {
	t.Helper()
	s, err := rdb.ClusterKeySlot(ctx, "{"+tag+"}").Result()
	require.NoError(t, err)
	m, err := c.MasterOfSlot(ctx, int(s))
	require.NoError(t, err)
	return int(s), m
}

// twoReplicas returns the replicas of master, which must have two.
func twoReplicas(ctx context.Context, t *testing.T, c *localcluster.Cluster, master string) (first, second localcluster.Node) {
	t.Helper()
	rs, err := c.ReplicasOf(ctx, master)
	require.NoError(t, err)
	require.Len(t, rs, 2, "replicas of %s", master)
	return rs[0], rs[1]
}

// direct returns a client of the node at addr with one connection, so
// that WAIT runs on the connection that wrote.
func direct(t *testing.T, addr string) *redis.Client {
	t.Helper()
	cl := redis.NewClient(&redis.Options{Addr: addr, PoolSize: 1, MaxRetries: -1, ReadTimeout: 15 * time.Second, DisableIdentity: true})
	t.Cleanup(func() { _ = cl.Close() })
	return cl
}

// writeAndWait sets key on the master at addr and returns what WAIT 1
// and WAIT 2 then say, on the same connection.
func writeAndWait(ctx context.Context, cl *redis.Client, key string) (wait1, wait2 int64, err error) {
	var w1, w2 *redis.Cmd
	_, err = cl.Pipelined(ctx, func(p redis.Pipeliner) error {
		p.Set(ctx, key, "v", 0)
		w1 = p.Do(ctx, "WAIT", 1, 10000)
		w2 = p.Do(ctx, "WAIT", 2, 300)
		return nil
	})
	if err != nil {
		return 0, 0, err
	}
	if wait1, err = w1.Int64(); err != nil {
		return 0, 0, err
	}
	wait2, err = w2.Int64()
	return wait1, wait2, err
}

// readOnReplica reads key on the replica at addr (READONLY, then GET on
// the same connection).
func readOnReplica(ctx context.Context, t *testing.T, addr, key string) (string, error) {
	t.Helper()
	cl := direct(t, addr)
	conn := cl.Conn()
	defer conn.Close()
	require.NoError(t, conn.ReadOnly(ctx).Err())
	return conn.Get(ctx, key).Result()
}

// A cluster of more masters than three shares the slots evenly among them
// and pairs each with its replica as three masters are.
func TestHarnessMoreMasters(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 4*time.Minute)
	defer cancel()
	const m = 4
	c := startCluster(t, localcluster.WithMasters(m))
	addrs := c.Addrs()
	require.Len(t, addrs, 2*m)
	masters, err := c.Masters(ctx)
	require.NoError(t, err)
	require.Len(t, masters, m)
	for i, master := range masters {
		assert.Equal(t, addrs[i], master.Addr, "masters first, in slot order")
		require.Len(t, master.Slots, 1)
		assert.Equal(t, [2]int{i * localcluster.SlotCount / m, (i+1)*localcluster.SlotCount/m - 1}, master.Slots[0])
		r, err := c.ReplicaOf(ctx, master.Addr)
		require.NoError(t, err)
		assert.Equal(t, addrs[m+i], r.Addr, "node %d replicates node %d", m+i, i)
	}
	rdb := c.Client()
	defer rdb.Close()
	requireKeys(ctx, t, rdb, writeKeys(ctx, t, rdb, "more", 50))
}

func TestHarnessTwoReplicasPerMaster(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 8*time.Minute)
	defer cancel()
	_, err := localcluster.Start(ctx, localcluster.WithReplicasPerMaster(0))
	require.ErrorContains(t, err, "at least one replica per master")

	c := startCluster(t, localcluster.WithReplicasPerMaster(2))
	rdb := c.Client()
	defer rdb.Close()
	addrs := c.Addrs()

	t.Run("topology", func(t *testing.T) {
		require.Len(t, addrs, 9)
		nodes, err := c.Nodes(ctx)
		require.NoError(t, err)
		require.Len(t, nodes, 9)
		masters, err := c.Masters(ctx)
		require.NoError(t, err)
		require.Len(t, masters, 3)
		for i := range 3 {
			assert.Equal(t, addrs[i], masters[i].Addr, "masters first, in slot order")
			rs, err := c.ReplicasOf(ctx, addrs[i])
			require.NoError(t, err)
			want := []string{addrs[3+i], addrs[6+i]}
			slices.Sort(want)
			var got []string
			for _, r := range rs {
				got = append(got, r.Addr)
				assert.Equal(t, masters[i].ID, r.MasterID)
				assert.True(t, r.Connected)
				link, err := infoField(ctx, c, r.Addr, "replication", "master_link_status")
				require.NoError(t, err)
				assert.Equal(t, "up", link, "replica %s of %s", r.Addr, addrs[i])
			}
			assert.Equal(t, want, got, "nodes %d and %d replicate node %d, sorted by address", 3+i, 6+i, i)
			slaves, err := infoField(ctx, c, addrs[i], "replication", "connected_slaves")
			require.NoError(t, err)
			assert.Equal(t, "2", slaves, "replicas connected to %s", addrs[i])
			first, err := c.ReplicaOf(ctx, addrs[i])
			require.NoError(t, err)
			assert.Equal(t, want[0], first.Addr, "ReplicaOf: the first of ReplicasOf")
		}
		require.NoError(t, c.WaitReady(ctx))
	})

	t.Run("pause replication", func(t *testing.T) {
		slot, m := masterForTag(ctx, t, c, rdb, "pause")
		a, b := twoReplicas(ctx, t, c, m.Addr)
		require.NoError(t, c.PauseReplication(ctx, b.Addr))
		require.NoError(t, c.PauseReplication(ctx, b.Addr), "pausing twice does nothing")
		link, err := infoField(ctx, c, b.Addr, "replication", "master_link_status")
		require.NoError(t, err)
		assert.Equal(t, "down", link)
		slaves, err := infoField(ctx, c, m.Addr, "replication", "connected_slaves")
		require.NoError(t, err)
		assert.Equal(t, "1", slaves, "the master no longer lists the paused replica")
		assert.Equal(t, m.ID, nodeAt(ctx, t, c, b.Addr).MasterID, "still its master's replica for the cluster")

		w1, w2, err := writeAndWait(ctx, direct(t, m.Addr), "{pause}:k")
		require.NoError(t, err)
		assert.EqualValues(t, 1, w1, "the other replica acknowledges")
		assert.EqualValues(t, 1, w2, "the paused one does not")
		v, err := readOnReplica(ctx, t, a.Addr, "{pause}:k")
		require.NoError(t, err)
		assert.Equal(t, "v", v)
		_, err = readOnReplica(ctx, t, b.Addr, "{pause}:k")
		assert.ErrorIs(t, err, redis.Nil, "the paused replica did not receive the write")
		wctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		assert.Error(t, c.WaitReady(wctx), "not ready while a replica is paused")
		cancel()

		// The replica that acknowledged takes over: the write survives, and
		// the paused one follows it in the cluster's view, unlinked.
		promoted, err := c.Failover(ctx, m.Addr, localcluster.Promote(a.Addr))
		require.NoError(t, err)
		assert.Equal(t, a.Addr, promoted)
		assert.Equal(t, a.ID, nodeAt(ctx, t, c, b.Addr).MasterID)

		require.NoError(t, c.ResumeReplication(ctx, b.Addr))
		require.NoError(t, c.ResumeReplication(ctx, b.Addr), "resuming twice does nothing")
		require.NoError(t, c.WaitReplicated(ctx, a.Addr, b.Addr))
		v, err = readOnReplica(ctx, t, b.Addr, "{pause}:k")
		require.NoError(t, err)
		assert.Equal(t, "v", v, "caught up once resumed")
		require.NoError(t, c.WaitReady(ctx))
		now, err := c.MasterOfSlot(ctx, slot)
		require.NoError(t, err)
		assert.Equal(t, a.Addr, now.Addr)
		v, err = rdb.Get(ctx, "{pause}:k").Result()
		require.NoError(t, err)
		assert.Equal(t, "v", v)
	})

	t.Run("promote the second replica", func(t *testing.T) {
		slot, m := masterForTag(ctx, t, c, rdb, "promote")
		first, second := twoReplicas(ctx, t, c, m.Addr)
		keys := writeKeys(ctx, t, rdb, "promote", 20)
		require.NoError(t, c.WaitReplicated(ctx, m.Addr, first.Addr))
		require.NoError(t, c.WaitReplicated(ctx, m.Addr, second.Addr))

		other := slices.IndexFunc(addrs, func(a string) bool { return a != m.Addr && a != first.Addr && a != second.Addr })
		_, err := c.Failover(ctx, m.Addr, localcluster.Promote(addrs[other]))
		assert.ErrorContains(t, err, "is not a replica of")

		promoted, err := c.Failover(ctx, m.Addr, localcluster.Promote(second.Addr), localcluster.Takeover())
		require.NoError(t, err)
		assert.Equal(t, second.Addr, promoted)
		now, err := c.MasterOfSlot(ctx, slot)
		require.NoError(t, err)
		assert.Equal(t, second.Addr, now.Addr, "exactly the chosen replica")
		assert.Equal(t, m.Slots, now.Slots)
		follower := nodeByID(ctx, t, c, first.ID)
		assert.False(t, follower.Master, "the other replica was not promoted")
		assert.Equal(t, second.ID, follower.MasterID, "the other replica follows the new master")
		port, err := infoField(ctx, c, first.Addr, "replication", "master_port")
		require.NoError(t, err)
		assert.Equal(t, second.Addr, "127.0.0.1:"+port)
		assert.Equal(t, second.ID, nodeByID(ctx, t, c, m.ID).MasterID, "the old master replicates the new one")

		require.NoError(t, c.WaitReady(ctx))
		rs, err := c.ReplicasOf(ctx, second.Addr)
		require.NoError(t, err)
		var got []string
		for _, r := range rs {
			got = append(got, r.Addr)
		}
		assert.ElementsMatch(t, []string{first.Addr, m.Addr}, got)
		slaves, err := infoField(ctx, c, second.Addr, "replication", "connected_slaves")
		require.NoError(t, err)
		assert.Equal(t, "2", slaves)
		requireKeys(ctx, t, rdb, keys)
	})

	t.Run("lagging replica promoted", func(t *testing.T) {
		slot, m := masterForTag(ctx, t, c, rdb, "lag")
		a, b := twoReplicas(ctx, t, c, m.Addr)
		require.NoError(t, rdb.Set(ctx, "{lag}:kept", "v", 0).Err())
		require.NoError(t, c.WaitReplicated(ctx, m.Addr, a.Addr))
		require.NoError(t, c.WaitReplicated(ctx, m.Addr, b.Addr))

		var w1, w2 int64
		err := c.PromoteLagging(ctx, m.Addr, b.Addr, func(ctx context.Context) error {
			var err error
			w1, w2, err = writeAndWait(ctx, direct(t, m.Addr), "{lag}:lost")
			if err != nil {
				return err
			}
			v, err := readOnReplica(ctx, t, a.Addr, "{lag}:lost")
			assert.NoError(t, err)
			assert.Equal(t, "v", v, "the acknowledging replica has the write")
			_, err = readOnReplica(ctx, t, b.Addr, "{lag}:lost")
			assert.ErrorIs(t, err, redis.Nil, "the lagging replica does not")
			return nil
		})
		require.NoError(t, err)
		assert.EqualValues(t, 1, w1, "WAIT 1: one replica acknowledged the write")
		assert.EqualValues(t, 1, w2, "WAIT 2: only one")

		now, err := c.MasterOfSlot(ctx, slot)
		require.NoError(t, err)
		assert.Equal(t, b.Addr, now.Addr, "the lagging replica is the master")
		_, err = c.Do(ctx, b.Addr, "GET", "{lag}:lost")
		assert.ErrorIs(t, err, redis.Nil, "the acknowledged write is lost on the new master")
		v, err := c.Do(ctx, b.Addr, "GET", "{lag}:kept")
		require.NoError(t, err)
		assert.Equal(t, "v", v, "what it had received is kept")

		require.NoError(t, c.WaitReady(ctx))
		assert.Equal(t, b.ID, nodeByID(ctx, t, c, m.ID).MasterID, "the old master rejoined as a replica")
		assert.Equal(t, b.ID, nodeByID(ctx, t, c, a.ID).MasterID, "the other replica follows")
		_, err = rdb.Get(ctx, "{lag}:lost").Result()
		assert.ErrorIs(t, err, redis.Nil, "lost for clients")
		_, err = readOnReplica(ctx, t, a.Addr, "{lag}:lost")
		assert.ErrorIs(t, err, redis.Nil, "lost on the replica that had acknowledged it, after its resync")
		user, err := c.Do(ctx, b.Addr, "CONFIG", "GET", "masteruser")
		require.NoError(t, err)
		assert.Equal(t, []any{"masteruser", ""}, user, "replication credentials restored")
	})

	t.Run("frozen master, one of two replicas takes over", func(t *testing.T) {
		slot, m := masterForTag(ctx, t, c, rdb, "freeze2")
		first, second := twoReplicas(ctx, t, c, m.Addr)
		require.NoError(t, c.Freeze(ctx, m.Addr))
		var winner, loser localcluster.Node
		require.Eventually(t, func() bool {
			now, err := c.MasterOfSlot(ctx, slot)
			switch {
			case err != nil:
				return false
			case now.Addr == first.Addr:
				winner, loser = first, second
			case now.Addr == second.Addr:
				winner, loser = second, first
			default:
				return false
			}
			return true
		}, 30*time.Second, 50*time.Millisecond, "a replica of the frozen master takes over")
		require.Eventually(t, func() bool {
			return nodeByID(ctx, t, c, loser.ID).MasterID == winner.ID
		}, 30*time.Second, 50*time.Millisecond, "the other replica follows the new master")
		require.NoError(t, c.Thaw(ctx, m.Addr))
		require.NoError(t, c.WaitReady(ctx))
		assert.Equal(t, winner.ID, nodeByID(ctx, t, c, m.ID).MasterID)
	})

	t.Run("kill and restart a replica", func(t *testing.T) {
		_, m := masterForTag(ctx, t, c, rdb, "kill2")
		r, _ := twoReplicas(ctx, t, c, m.Addr)
		require.NoError(t, c.Kill(ctx, r.Addr))
		keys := writeKeys(ctx, t, rdb, "kill2", 10)
		require.NoError(t, c.Restart(ctx, r.Addr))
		require.NoError(t, c.WaitReady(ctx))
		assert.Equal(t, m.ID, nodeByID(ctx, t, c, r.ID).MasterID)
		require.NoError(t, c.WaitReplicated(ctx, m.Addr, r.Addr))
		requireKeys(ctx, t, rdb, keys)
	})

	t.Run("close leaves nothing", func(t *testing.T) {
		require.NoError(t, c.Freeze(ctx, addrs[7]))
		require.NoError(t, c.Close())
		for _, addr := range addrs {
			assert.False(t, dialable(addr), "%s still listens", addr)
		}
		assert.Empty(t, redisProcessesOn(t, addrs), "redis-server processes left")
		if c.Backend() == localcluster.Docker {
			assertNoContainers(ctx, t, c)
		}
	})
}

// openSlotMarkers returns the [slot->-id] and [slot-<-id] markers of slot
// that any node shows in CLUSTER NODES.
func openSlotMarkers(ctx context.Context, t *testing.T, c *localcluster.Cluster, slot int) []string {
	t.Helper()
	var found []string
	for _, addr := range c.Addrs() {
		v, err := c.Do(ctx, addr, "CLUSTER", "NODES")
		require.NoError(t, err)
		for _, f := range strings.Fields(fmt.Sprint(v)) {
			if strings.HasPrefix(f, "["+strconv.Itoa(slot)+"-") {
				found = append(found, addr+": "+f)
			}
		}
	}
	return found
}

func countKeys(ctx context.Context, t *testing.T, c *localcluster.Cluster, addr string, slot int) int64 {
	t.Helper()
	n, err := c.Do(ctx, addr, "CLUSTER", "COUNTKEYSINSLOT", slot)
	require.NoError(t, err)
	return n.(int64)
}

// migrateCalls reads how many MIGRATE commands the node at addr has run.
func migrateCalls(ctx context.Context, t *testing.T, c *localcluster.Cluster, addr string) int {
	t.Helper()
	v, err := infoField(ctx, c, addr, "commandstats", "cmdstat_migrate")
	if err != nil {
		return 0 // none yet
	}
	calls, _, _ := strings.Cut(strings.TrimPrefix(v, "calls="), ",")
	n, err := strconv.Atoi(calls)
	require.NoError(t, err, "cmdstat_migrate:%s", v)
	return n
}

// migrationTarget returns the slot of {tag}, its master and the next
// master as a target.
func migrationTarget(ctx context.Context, t *testing.T, c *localcluster.Cluster, rdb *redis.ClusterClient, tag string) (int, localcluster.Node, localcluster.Node) {
	t.Helper()
	slot, src := masterForTag(ctx, t, c, rdb, tag)
	masters, err := c.Masters(ctx)
	require.NoError(t, err)
	dst := masters[(slices.IndexFunc(masters, func(n localcluster.Node) bool { return n.ID == src.ID })+1)%len(masters)]
	return slot, src, dst
}

func TestHarnessMigrationHandle(t *testing.T) {
	c := startCluster(t)
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
	defer cancel()
	rdb := c.Client()
	defer rdb.Close()

	t.Run("half moved, then finished", func(t *testing.T) {
		slot, src, dst := migrationTarget(ctx, t, c, rdb, "half")
		keys := writeKeys(ctx, t, rdb, "half", 20)
		require.NoError(t, rdb.Set(ctx, "{half}:ttl", "t", time.Hour).Err())
		_, err := c.BeginMigration(ctx, slot, src.Addr)
		assert.ErrorContains(t, err, "already serves")

		m, err := c.BeginMigration(ctx, slot, dst.Addr)
		require.NoError(t, err)
		assert.Equal(t, slot, m.Slot())
		assert.Equal(t, src.ID, m.From().ID)
		assert.Equal(t, dst.ID, m.To().ID)
		migrating, importing := "["+strconv.Itoa(slot)+"->-"+dst.ID+"]", "["+strconv.Itoa(slot)+"-<-"+src.ID+"]"
		want := []string{src.Addr + ": " + migrating, dst.Addr + ": " + importing}
		if c.Server() == localcluster.Valkey81 {
			// Valkey's replicas show their master's open slot too, so
			// that one promoted mid-move goes on with it.
			srcReplica, err := c.ReplicaOf(ctx, src.Addr)
			require.NoError(t, err)
			dstReplica, err := c.ReplicaOf(ctx, dst.Addr)
			require.NoError(t, err)
			want = append(want, srcReplica.Addr+": "+migrating, dstReplica.Addr+": "+importing)
		}
		assert.ElementsMatch(t, want, openSlotMarkers(ctx, t, c, slot))
		assert.ErrorContains(t, m.Move(ctx, "{other}:1"), "not in slot")
		require.NoError(t, m.Move(ctx, append(keys[:10:10], "{half}:ttl", "{half}:never-written")...))
		require.NoError(t, m.Move(ctx, "{half}:never-written"), "MIGRATE answers NOKEY: not an error")
		assert.EqualValues(t, 11, countKeys(ctx, t, c, dst.Addr, slot), "exactly the given keys moved")
		assert.EqualValues(t, 10, countKeys(ctx, t, c, src.Addr, slot), "the others stay")

		// The source serves what it has and sends ASK for the rest.
		v, err := c.Do(ctx, src.Addr, "GET", keys[15])
		require.NoError(t, err)
		assert.Equal(t, "v15", v)
		_, err = c.Do(ctx, src.Addr, "GET", keys[3])
		require.Error(t, err)
		assert.Contains(t, err.Error(), fmt.Sprintf("ASK %d %s", slot, dst.Addr))
		// A client that follows ASK reads every key, and writes new ones
		// on the target.
		requireKeys(ctx, t, rdb, keys)
		require.NoError(t, rdb.Set(ctx, "{half}:new", "n", 0).Err())
		assert.EqualValues(t, 12, countKeys(ctx, t, c, dst.Addr, slot))

		require.NoError(t, m.Finish(ctx))
		assert.ErrorContains(t, m.Move(ctx, keys[0]), "already finished")
		assert.ErrorContains(t, m.Abort(ctx), "already finished")
		now, err := c.MasterOfSlot(ctx, slot)
		require.NoError(t, err)
		assert.Equal(t, dst.Addr, now.Addr)
		assert.EqualValues(t, 22, countKeys(ctx, t, c, dst.Addr, slot), "every key on the target")
		assert.EqualValues(t, 0, countKeys(ctx, t, c, src.Addr, slot))
		assert.Empty(t, openSlotMarkers(ctx, t, c, slot))
		pttl, err := rdb.PTTL(ctx, "{half}:ttl").Result()
		require.NoError(t, err)
		assert.Greater(t, pttl, 50*time.Minute, "MIGRATE keeps the TTL")
		requireKeys(ctx, t, rdb, keys)
		require.NoError(t, c.WaitReady(ctx))
	})

	t.Run("abort", func(t *testing.T) {
		slot, src, dst := migrationTarget(ctx, t, c, rdb, "abort")
		keys := writeKeys(ctx, t, rdb, "abort", 20)
		m, err := c.BeginMigration(ctx, slot, dst.Addr)
		require.NoError(t, err)
		require.NoError(t, m.Move(ctx, keys[:7]...))
		require.NoError(t, rdb.Set(ctx, "{abort}:new", "n", 0).Err(), "written on the target, through ASK")
		assert.EqualValues(t, 8, countKeys(ctx, t, c, dst.Addr, slot))

		require.NoError(t, m.Abort(ctx))
		assert.ErrorContains(t, m.Finish(ctx), "already finished or aborted")
		now, err := c.MasterOfSlot(ctx, slot)
		require.NoError(t, err)
		assert.Equal(t, src.Addr, now.Addr, "the source serves the slot again")
		assert.Empty(t, openSlotMarkers(ctx, t, c, slot), "slot stable on every node")
		assert.EqualValues(t, 21, countKeys(ctx, t, c, src.Addr, slot), "every key back on the source")
		assert.EqualValues(t, 0, countKeys(ctx, t, c, dst.Addr, slot))
		v, err := c.Do(ctx, src.Addr, "GET", keys[2])
		require.NoError(t, err, "served by the source itself, no redirection")
		assert.Equal(t, "v2", v)
		requireKeys(ctx, t, rdb, keys)
		v, err = rdb.Get(ctx, "{abort}:new").Result()
		require.NoError(t, err)
		assert.Equal(t, "n", v)
		require.NoError(t, c.WaitReady(ctx))
	})

	t.Run("move all, key by key", func(t *testing.T) {
		slot, src, dst := migrationTarget(ctx, t, c, rdb, "paced")
		keys := writeKeys(ctx, t, rdb, "paced", 10)
		m, err := c.BeginMigration(ctx, slot, dst.Addr)
		require.NoError(t, err)
		before := migrateCalls(ctx, t, c, src.Addr)

		done := make(chan error, 1)
		go func() { done <- m.MoveAll(ctx, 100*time.Millisecond) }()
		var seen []int64
		for moving := true; moving; {
			select {
			case err := <-done:
				require.NoError(t, err)
				moving = false
			case <-time.After(20 * time.Millisecond):
			}
			n := countKeys(ctx, t, c, dst.Addr, slot)
			if len(seen) == 0 || seen[len(seen)-1] != n {
				seen = append(seen, n)
			}
		}
		t.Logf("keys on the target while moving: %v", seen)
		assert.True(t, slices.IsSorted(seen), "keys only go to the target: %v", seen)
		assert.EqualValues(t, 10, seen[len(seen)-1])
		assert.Equal(t, 10, migrateCalls(ctx, t, c, src.Addr)-before, "one MIGRATE per key")
		assert.EqualValues(t, 0, countKeys(ctx, t, c, src.Addr, slot))
		requireKeys(ctx, t, rdb, keys)

		require.NoError(t, m.Finish(ctx))
		assert.Equal(t, 10, migrateCalls(ctx, t, c, src.Addr)-before, "nothing left to move")
		now, err := c.MasterOfSlot(ctx, slot)
		require.NoError(t, err)
		assert.Equal(t, dst.Addr, now.Addr)
		require.NoError(t, c.WaitReady(ctx))
	})
}
