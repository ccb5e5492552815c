package localcluster

import (
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

const sampleNodes = `m1 127.0.0.1:20001@30001 myself,master - 0 0 1 connected 0-5460 [93->-m2]
m2 127.0.0.1:20002@30002,host-b master - 0 1700000000000 2 connected 5461-10922 [93-<-m1]
m3 127.0.0.1:20003@30003 master,fail? - 1700000000000 1700000000000 3 disconnected 10923-12000 12002 12001 12003-16383
r1 127.0.0.1:20004@30004 slave m1 0 1700000000000 1 connected
r2 127.0.0.1:20005@30005 slave,fail m2 0 1700000000000 2 disconnected
h1 :0@0 handshake,noaddr - 0 0 0 disconnected
`

func TestParseClusterNodes(t *testing.T) {
	es, err := parseClusterNodes(sampleNodes)
	require.NoError(t, err)
	require.Len(t, es, 6)

	assert.True(t, es[0].myself)
	assert.Equal(t, Node{ID: "m1", Addr: "127.0.0.1:20001", Master: true, Slots: [][2]int{{0, 5460}}, Connected: true, Flags: []string{"master"}}, es[0].Node,
		"a migrating slot is still served by its owner and is not listed twice")
	assert.Equal(t, "127.0.0.1:20002", es[1].Addr, "bus port and hostname dropped")
	assert.Equal(t, [][2]int{{5461, 10922}}, es[1].Slots)
	assert.Equal(t, [][2]int{{10923, 12000}, {12001, 12001}, {12002, 12002}, {12003, 16383}}, es[2].Slots, "single slots, sorted")
	assert.True(t, es[2].Failing())
	assert.False(t, es[2].Connected)
	assert.Equal(t, "m1", es[3].MasterID)
	assert.False(t, es[3].Master)
	assert.True(t, es[4].HasFlag("fail"))
	assert.True(t, es[5].HasFlag("handshake"))
	assert.Equal(t, ":0", es[5].Addr)

	_, err = parseClusterNodes("m1 127.0.0.1:1@2 master - 0 0 1 connected x-y\n")
	assert.Error(t, err)
	_, err = parseClusterNodes("too short\n")
	assert.Error(t, err)
}

func TestParseInfo(t *testing.T) {
	m := parseInfo("# Replication\r\nrole:slave\r\nmaster_host:127.0.0.1\r\nmaster_link_status:up\r\n")
	assert.Equal(t, map[string]string{"role": "slave", "master_host": "127.0.0.1", "master_link_status": "up"}, m)
}

func TestSlotRangesLikeRedisCli(t *testing.T) {
	assert.Equal(t, [][2]int{{0, 5460}, {5461, 10922}, {10923, 16383}}, slotRanges(3))
	assert.Equal(t, [][2]int{{0, 16383}}, slotRanges(1))
	for n := 1; n <= 10; n++ {
		rs := slotRanges(n)
		require.Len(t, rs, n)
		assert.Equal(t, 0, rs[0][0])
		assert.Equal(t, SlotCount-1, rs[n-1][1])
		for i := 1; i < n; i++ {
			assert.Equal(t, rs[i-1][1]+1, rs[i][0], "contiguous for %d masters", n)
		}
	}
}

// fakeCluster describes a healthy six-node cluster: m1..m3 masters, r1..r3
// their replicas, ports 20001..20006.
type fakeCluster struct {
	addr     map[string]string
	slots    map[string]string
	master   map[string]string // replica -> master
	flags    map[string]string // extra flags, as seen by others
	state    string
	linkUp   map[string]bool
	unlisted map[string]bool // replicas their master does not list yet
	replies  map[string]bool // answering nodes
	shards   map[string]int  // CLUSTER SHARDS by node ID; nil: not asked
}

func newFakeCluster() *fakeCluster {
	f := &fakeCluster{
		addr:     map[string]string{},
		slots:    map[string]string{"m1": "0-5460", "m2": "5461-10922", "m3": "10923-16383"},
		master:   map[string]string{"r1": "m1", "r2": "m2", "r3": "m3"},
		flags:    map[string]string{},
		state:    "ok",
		linkUp:   map[string]bool{"r1": true, "r2": true, "r3": true},
		unlisted: map[string]bool{},
		replies:  map[string]bool{},
	}
	for i, id := range f.ids() {
		f.addr[id] = fmt.Sprintf("127.0.0.1:%d", 20001+i)
		f.replies[id] = true
	}
	return f
}

func (f *fakeCluster) ids() []string {
	ids := []string{"m1", "m2", "m3", "r1", "r2", "r3"}
	if _, ok := f.addr["s1"]; ok {
		ids = append(ids, "s1", "s2", "s3")
	}
	return ids
}

// withSecondReplicas adds s1..s3, second replicas of m1..m3 on ports
// 20007..20009, as WithReplicasPerMaster(2) builds.
func (f *fakeCluster) withSecondReplicas() *fakeCluster {
	for i, id := range []string{"s1", "s2", "s3"} {
		f.addr[id] = fmt.Sprintf("127.0.0.1:%d", 20007+i)
		f.master[id] = fmt.Sprintf("m%d", i+1)
		f.linkUp[id] = true
		f.replies[id] = true
	}
	return f
}

func (f *fakeCluster) view(self string) view {
	var b strings.Builder
	for _, id := range f.ids() {
		role, master := "master", "-"
		if m, ok := f.master[id]; ok {
			role, master = "slave", m
		}
		flags := role
		if id == self {
			flags = "myself," + role
		} else if f.flags[id] != "" {
			flags += "," + f.flags[id]
		}
		fmt.Fprintf(&b, "%s %s@1 %s %s 0 0 1 connected %s\n", id, f.addr[id], flags, master, f.slots[id])
	}
	es, err := parseClusterNodes(b.String())
	if err != nil {
		panic(err)
	}
	repl := map[string]string{"role": "master"}
	n := 0
	for _, r := range f.ids() {
		if f.master[r] == self && f.linkUp[r] && !f.unlisted[r] {
			host, port, _ := strings.Cut(f.addr[r], ":")
			repl[fmt.Sprintf("slave%d", n)] = fmt.Sprintf("ip=%s,port=%s,state=online,offset=1,lag=0", host, port)
			n++
		}
	}
	repl["connected_slaves"] = fmt.Sprint(n)
	if m, ok := f.master[self]; ok {
		host, port, _ := strings.Cut(f.addr[m], ":")
		link := "down"
		if f.linkUp[self] {
			link = "up"
		}
		repl = map[string]string{"role": "slave", "master_host": host, "master_port": port, "master_link_status": link}
	}
	return view{addr: f.addr[self], info: map[string]string{"cluster_state": f.state}, entries: es, repl: repl, shardOf: f.shards}
}

func (f *fakeCluster) snapshot() snapshot {
	var s snapshot
	for _, id := range f.ids() {
		if f.replies[id] {
			s.views = append(s.views, f.view(id))
		} else {
			s.unreachable = append(s.unreachable, f.addr[id])
		}
	}
	return s
}

var strict = readiness{all: true, nodes: 6, replicas: true}

func TestReadinessHealthy(t *testing.T) {
	assert.NoError(t, strict.check(newFakeCluster().snapshot()))
	f := newFakeCluster()
	f.shards = map[string]int{"m1": 0, "m2": 1, "m3": 2, "r1": 0, "r2": 1, "r3": 2}
	assert.NoError(t, strict.check(f.snapshot()), "every replica in its master's shard")
}

func TestReadinessFailures(t *testing.T) {
	tests := map[string]struct {
		change func(f *fakeCluster)
		want   string
	}{
		"state":       {func(f *fakeCluster) { f.state = "fail" }, "cluster_state"},
		"silent node": {func(f *fakeCluster) { f.replies["r2"] = false }, "not answering"},
		"flagged":     {func(f *fakeCluster) { f.flags["m2"] = "fail?" }, "fail?"},
		"handshake":   {func(f *fakeCluster) { f.flags["r3"] = "handshake" }, "handshake"},
		"uncovered":   {func(f *fakeCluster) { f.slots["m3"] = "10923-16382" }, "slot 16383 not served"},
		"overlap":     {func(f *fakeCluster) { f.slots["m3"] = "10922-16383" }, "slot 10922 served by"},
		"link down":   {func(f *fakeCluster) { f.linkUp["r1"] = false }, "link"},
		"no replica": {func(f *fakeCluster) {
			f.master["r3"] = "m1"
		}, "no linked replica"},
		"not online on the master": {func(f *fakeCluster) { f.unlisted["r2"] = true }, "replica 127.0.0.1:20005 not online"},
		"replica in a shard of its own": {func(f *fakeCluster) {
			f.shards = map[string]int{"m1": 0, "m2": 1, "m3": 2, "r1": 0, "r2": 3, "r3": 2}
		}, "replica 127.0.0.1:20005 not yet in the shard of its master"},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			f := newFakeCluster()
			tt.change(f)
			err := strict.check(f.snapshot())
			require.Error(t, err)
			assert.Contains(t, err.Error(), tt.want)
		})
	}
}

func TestReadinessTwoReplicasPerMaster(t *testing.T) {
	nine := readiness{all: true, nodes: 9, replicas: true}
	require.NoError(t, nine.check(newFakeCluster().withSecondReplicas().snapshot()))

	f := newFakeCluster().withSecondReplicas()
	f.unlisted["s2"] = true // its link says up, its master does not count it yet
	err := nine.check(f.snapshot())
	require.Error(t, err)
	assert.Contains(t, err.Error(), "127.0.0.1:20002: replica 127.0.0.1:20008 not online")

	f = newFakeCluster().withSecondReplicas()
	f.linkUp["s3"] = false // r3 is linked, s3 is not: not ready
	err = nine.check(f.snapshot())
	require.Error(t, err)
	assert.Contains(t, err.Error(), "127.0.0.1:20009: replication link")

	f = newFakeCluster().withSecondReplicas()
	assert.ErrorContains(t, strict.check(f.snapshot()), "knows 9 nodes, want 6")
}

func TestReadinessLenientExemptsPausedReplicas(t *testing.T) {
	f := newFakeCluster()
	f.linkUp["r2"] = false // paused by PauseReplication
	lenient := readiness{nodes: 6, replicas: true}
	assert.ErrorContains(t, lenient.check(f.snapshot()), "127.0.0.1:20005: replication link")
	lenient.exempt = map[string]bool{"127.0.0.1:20005": true}
	assert.NoError(t, lenient.check(f.snapshot()))
	strictExempt := strict
	strictExempt.exempt = lenient.exempt
	assert.Error(t, strictExempt.check(f.snapshot()), "WaitReady waits for a paused replica")
}

func TestListedReplicas(t *testing.T) {
	got := listedReplicas(parseInfo("# Replication\r\nrole:master\r\nconnected_slaves:2\r\n" +
		"slave0:ip=127.0.0.1,port=20004,state=online,offset=341,lag=1\r\n" +
		"slave1:ip=127.0.0.1,port=20007,state=wait_bgsave,offset=0,lag=0\r\n" +
		"slave_read_repl_offset:341\r\nmaster_repl_offset:341\r\n"))
	assert.Equal(t, map[string]string{"127.0.0.1:20004": "online", "127.0.0.1:20007": "wait_bgsave"}, got)
}

func TestReplicasInSortedByAddress(t *testing.T) {
	ns := []Node{
		{ID: "m", Addr: "127.0.0.1:20001", Master: true, Slots: [][2]int{{0, 16383}}},
		{ID: "b", Addr: "127.0.0.1:20009", MasterID: "m"},
		{ID: "x", Addr: "127.0.0.1:20005", MasterID: "other"},
		{ID: "a", Addr: "127.0.0.1:20004", MasterID: "m"},
	}
	rs, err := replicasIn(ns, "127.0.0.1:20001")
	require.NoError(t, err)
	require.Len(t, rs, 2)
	assert.Equal(t, "127.0.0.1:20004", rs[0].Addr)
	assert.Equal(t, "127.0.0.1:20009", rs[1].Addr)
	_, err = replicasIn(ns, "127.0.0.1:20004")
	assert.ErrorContains(t, err, "not a master")
	_, err = replicasIn(ns, "127.0.0.1:1")
	assert.ErrorContains(t, err, "not in the cluster")
}

func TestReadinessDisagreement(t *testing.T) {
	f := newFakeCluster()
	s := f.snapshot()
	f.slots["m1"], f.slots["m2"] = "0-5459", "5460-10922"
	s.views[5] = f.view("r3") // r3 has not heard of the move yet
	err := strict.check(s)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "disagree")
}

func TestReadinessLenientIgnoresSilentNodes(t *testing.T) {
	f := newFakeCluster()
	// m2 frozen: its replica r2 took over, everyone flags m2 failing.
	f.replies["m2"] = false
	f.slots["r2"], f.slots["m2"] = f.slots["m2"], ""
	delete(f.master, "r2")
	f.master["m2"] = "r2"
	f.flags["m2"] = "fail"
	lenient := readiness{nodes: 6, replicas: true}
	assert.NoError(t, lenient.check(f.snapshot()))
	assert.Error(t, strict.check(f.snapshot()))
}

func TestMergedNodes(t *testing.T) {
	f := newFakeCluster()
	f.replies["m2"] = false
	f.flags["m2"] = "fail?"
	s := f.snapshot()
	// m2 does not answer: it is described as the others see it.
	ns := s.nodes()
	require.Len(t, ns, 6)
	var ids []string
	for _, n := range ns {
		ids = append(ids, n.ID)
	}
	assert.Equal(t, []string{"m1", "m2", "m3", "r1", "r2", "r3"}, ids, "masters by first slot, then by address")
	assert.False(t, ns[1].Connected, "m2 did not answer")
	assert.True(t, ns[1].Failing())
	assert.Equal(t, [][2]int{{5461, 10922}}, ns[1].Slots)
	assert.True(t, ns[0].Connected)
	assert.Equal(t, []string{"master"}, ns[0].Flags, "no myself flag")
	assert.Equal(t, "m1", ns[3].MasterID)
}

func TestMajority(t *testing.T) {
	a := entry{Node: Node{ID: "x", Master: true}}
	b := entry{Node: Node{ID: "x", MasterID: "y"}}
	assert.Equal(t, b, majority([]entry{a, b, b}))
	assert.Equal(t, a, majority([]entry{a, b}), "first on a tie")
}
