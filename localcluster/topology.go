package localcluster

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// SlotCount is the number of hash slots of a Redis Cluster.
const SlotCount = 16384

// Node is one node as the cluster sees it.
type Node struct {
	ID       string
	Addr     string // "127.0.0.1:port"
	Master   bool
	MasterID string   // a replica's master; "" for a master
	Slots    [][2]int // inclusive slot ranges a master serves, ascending
	// Connected reports that the node itself answered during this call.
	Connected bool
	// Flags are the CLUSTER NODES flags but "myself": "master" or "slave",
	// and "fail?" or "fail" when any answering node suspects it.
	Flags []string
}

// HasFlag reports whether the node carries flag f.
func (n Node) HasFlag(f string) bool { return slices.Contains(n.Flags, f) }

// Failing reports whether some node flags n as failing (fail? or fail).
func (n Node) Failing() bool { return n.HasFlag("fail") || n.HasFlag("fail?") }

// ServesSlot reports whether slot is in n.Slots.
func (n Node) ServesSlot(slot int) bool {
	for _, r := range n.Slots {
		if slot >= r[0] && slot <= r[1] {
			return true
		}
	}
	return false
}

// entry is one line of CLUSTER NODES as one node sees it.
type entry struct {
	Node
	myself bool
}

// role is what all nodes must agree on about a node once the cluster has
// settled: flags and link states may differ for a while, this may not.
func (e entry) role() string {
	return fmt.Sprint(e.ID, e.Addr, e.Master, e.MasterID, e.Slots)
}

// parseClusterNodes reads the reply of CLUSTER NODES.
func parseClusterNodes(s string) ([]entry, error) {
	var out []entry
	for line := range strings.Lines(s) {
		f := strings.Fields(line)
		if len(f) == 0 {
			continue
		}
		if len(f) < 8 {
			return nil, fmt.Errorf("localcluster: bad CLUSTER NODES line %q", line)
		}
		addr, _, _ := strings.Cut(f[1], "@")
		addr, _, _ = strings.Cut(addr, ",")
		e := entry{Node: Node{ID: f[0], Addr: addr}}
		for flag := range strings.SplitSeq(f[2], ",") {
			switch flag {
			case "myself":
				e.myself = true
			case "master":
				e.Master = true
				e.Flags = append(e.Flags, flag)
			case "noflags":
			default:
				e.Flags = append(e.Flags, flag)
			}
		}
		if f[3] != "-" {
			e.MasterID = f[3]
		}
		e.Connected = f[7] == "connected"
		for _, tok := range f[8:] {
			if strings.HasPrefix(tok, "[") {
				continue // a slot being imported or migrated: still served by its owner
			}
			lo, hi, isRange := strings.Cut(tok, "-")
			a, err := strconv.Atoi(lo)
			if err != nil {
				return nil, fmt.Errorf("localcluster: bad slot %q in CLUSTER NODES", tok)
			}
			b := a
			if isRange {
				if b, err = strconv.Atoi(hi); err != nil {
					return nil, fmt.Errorf("localcluster: bad slot range %q in CLUSTER NODES", tok)
				}
			}
			e.Slots = append(e.Slots, [2]int{a, b})
		}
		slices.SortFunc(e.Slots, func(x, y [2]int) int { return x[0] - y[0] })
		out = append(out, e)
	}
	return out, nil
}

// parseInfo reads the "key:value" lines of CLUSTER INFO and INFO.
func parseInfo(s string) map[string]string {
	m := map[string]string{}
	for line := range strings.Lines(s) {
		k, v, ok := strings.Cut(strings.TrimSpace(line), ":")
		if ok && !strings.HasPrefix(k, "#") {
			m[k] = v
		}
	}
	return m
}

// view is what one answering node says about the cluster.
type view struct {
	addr    string
	info    map[string]string // CLUSTER INFO
	entries []entry
	repl    map[string]string // INFO replication
	// shardOf is the shard (CLUSTER SHARDS) of each node ID, on servers
	// whose nodes keep a shard ID (see Server.keepsShardIDs); nil on others.
	shardOf map[string]int
}

func (v view) self() (entry, bool) {
	for _, e := range v.entries {
		if e.myself {
			return e, true
		}
	}
	return entry{}, false
}

// snapshot is what every node said at about the same time.
type snapshot struct {
	views       []view   // answering nodes, in the order asked
	unreachable []string // nodes that did not answer
}

// observeTimeout bounds one node's answer: a frozen node must not stall
// a poll, yet a busy two-core machine must not make a live node look dead.
const observeTimeout = time.Second

// snapshot asks every node at once. Nodes known to be frozen or killed
// are not asked: they could only stall the call (a frozen node accepts
// connections but never answers) or fill logs with refused dials.
func (c *Cluster) snapshot(ctx context.Context) snapshot {
	c.mu.Lock()
	addrs := make([]string, len(c.members))
	down := make([]bool, len(c.members))
	for i, m := range c.members {
		addrs[i], down[i] = m.addr, m.frozen || m.killed
	}
	c.mu.Unlock()
	views := make([]*view, len(addrs))
	var wg sync.WaitGroup
	for i, addr := range addrs {
		if down[i] {
			continue
		}
		wg.Go(func() {
			if v, err := c.observe(ctx, addr); err == nil {
				views[i] = v
			}
		})
	}
	wg.Wait()
	var s snapshot
	for i, v := range views {
		if v == nil {
			s.unreachable = append(s.unreachable, addrs[i])
		} else {
			s.views = append(s.views, *v)
		}
	}
	return s
}

func (c *Cluster) observe(ctx context.Context, addr string) (*view, error) {
	cl, err := c.node(addr)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, observeTimeout)
	defer cancel()
	var info, nodes, repl *redis.StringCmd
	var shards *redis.ClusterShardsCmd
	if _, err := cl.Pipelined(ctx, func(p redis.Pipeliner) error {
		info = p.ClusterInfo(ctx)
		nodes = p.ClusterNodes(ctx)
		repl = p.Info(ctx, "replication")
		if c.server.keepsShardIDs() {
			shards = p.ClusterShards(ctx)
		}
		return nil
	}); err != nil {
		return nil, err
	}
	entries, err := parseClusterNodes(nodes.Val())
	if err != nil {
		return nil, err
	}
	v := &view{addr: addr, info: parseInfo(info.Val()), entries: entries, repl: parseInfo(repl.Val())}
	if shards != nil {
		v.shardOf = map[string]int{}
		for i, sh := range shards.Val() {
			for _, n := range sh.Nodes {
				v.shardOf[n.ID] = i
			}
		}
	}
	return v, nil
}

// nodes merges the views: a node that answered is described by itself
// (it knows its own role best); one that did not, by what most answering
// nodes say about it.
func (s snapshot) nodes() []Node {
	type seen struct {
		self   *entry
		others []entry
	}
	byID := map[string]*seen{}
	var order []string
	for _, v := range s.views {
		for _, e := range v.entries {
			sn := byID[e.ID]
			if sn == nil {
				sn = &seen{}
				byID[e.ID] = sn
				order = append(order, e.ID)
			}
			if e.myself {
				sn.self = &e
			} else {
				sn.others = append(sn.others, e)
			}
		}
	}
	out := make([]Node, 0, len(order))
	for _, id := range order {
		sn := byID[id]
		var n Node
		if sn.self != nil {
			n = sn.self.Node
			n.Connected = true
		} else {
			n = majority(sn.others).Node
			n.Connected = false
		}
		n.Flags = slices.DeleteFunc(slices.Clone(n.Flags), func(f string) bool { return f == "fail" || f == "fail?" })
		switch {
		case slices.ContainsFunc(sn.others, func(e entry) bool { return e.HasFlag("fail") }):
			n.Flags = append(n.Flags, "fail")
		case slices.ContainsFunc(sn.others, func(e entry) bool { return e.HasFlag("fail?") }):
			n.Flags = append(n.Flags, "fail?")
		}
		out = append(out, n)
	}
	sortNodes(out)
	return out
}

// majority returns the entry whose role most views agree on, the first
// one on a tie.
func majority(es []entry) entry {
	best, bestN := 0, 0
	for i, e := range es {
		n := 0
		for _, o := range es {
			if o.role() == e.role() {
				n++
			}
		}
		if n > bestN {
			best, bestN = i, n
		}
	}
	return es[best]
}

// sortNodes puts masters serving slots first, by first slot, then the
// others by address.
func sortNodes(ns []Node) {
	slices.SortStableFunc(ns, func(a, b Node) int {
		as, bs := a.Master && len(a.Slots) > 0, b.Master && len(b.Slots) > 0
		switch {
		case as && bs:
			return a.Slots[0][0] - b.Slots[0][0]
		case as:
			return -1
		case bs:
			return 1
		}
		return cmp.Compare(a.Addr, b.Addr)
	})
}

// slotRanges splits the slots among n masters the way redis-cli does.
func slotRanges(n int) [][2]int {
	per := float64(SlotCount) / float64(n)
	out := make([][2]int, 0, n)
	first, cursor := 0, 0.0
	for i := range n {
		last := int(cursor + per - 1 + 0.5)
		if last > SlotCount-1 || i == n-1 {
			last = SlotCount - 1
		}
		out = append(out, [2]int{first, last})
		first = last + 1
		cursor += per
	}
	return out
}
