package batchlock

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/redis/go-redis/v9"

	"github.com/batchlock/batchlock/hashtag"
	"github.com/batchlock/batchlock/internal/routing"
)

// deployment is the Redis a Client locks on: a cluster, or a single node (a
// Sentinel failover client too). It is the one place that tells the two
// apart; the rest of the package asks it.
type deployment struct {
	cluster *redis.ClusterClient // nil on a single node
	node    *redis.Client        // nil on a cluster
}

// newDeployment accepts a cluster client or a single node's client, and
// refuses anything else by its type (a *redis.Ring spreads keys by its own
// hashing, with no atomicity across them).
func newDeployment(rdb redis.UniversalClient) (deployment, error) {
	switch r := rdb.(type) {
	case *redis.ClusterClient:
		if r == nil {
			break
		}
		if o := r.Options(); len(o.Addrs) == 0 && o.ClusterSlots == nil {
			return deployment{}, invalid("cluster client has no address: give ClusterOptions (or redis.ClusterOptions.Addrs) at least one node")
		}
		return deployment{cluster: r}, nil
	case *redis.Client:
		if r != nil {
			return deployment{node: r}, nil
		}
	case nil:
	default:
		return deployment{}, invalid("unsupported redis client %T: use a *redis.ClusterClient or a *redis.Client", rdb)
	}
	return deployment{}, invalid("nil redis client")
}

func (d deployment) isCluster() bool { return d.cluster != nil }

// slots is how many slots keys fall in: a cluster's, or one on a single
// node, which takes a whole batch as one slot's worth of calls.
func (d deployment) slots() int {
	if d.isCluster() {
		return hashtag.SlotCount
	}
	return 1
}

// slot is the slot of a lock key (see slots).
func (d deployment) slot(key string) int {
	if d.isCluster() {
		return hashtag.Slot(key)
	}
	return 0
}

// runner is the script pipeline of the deployment, retrying for at most
// retryWindow.
func (d deployment) runner() *routing.Runner {
	var r *routing.Runner
	if d.isCluster() {
		r = routing.NewCluster(d.cluster)
	} else {
		r = routing.NewNode(d.node)
	}
	r.Window = retryWindow
	return r
}

// forEachMaster calls fn with the client of every master, at once.
func (d deployment) forEachMaster(ctx context.Context, fn func(context.Context, *redis.Client) error) error {
	if d.isCluster() {
		return d.cluster.ForEachMaster(ctx, fn)
	}
	return fn(ctx, d.node)
}

// masterOf returns the client of the master that serves key's slot.
func (d deployment) masterOf(ctx context.Context, key string) (*redis.Client, error) {
	if d.isCluster() {
		return d.cluster.MasterForKey(ctx, key)
	}
	return d.node, nil
}

// pubSub returns a pub/sub client not yet connected: its first subscription
// connects it to the master of that channel's slot, and so does every
// reconnect.
func (d deployment) pubSub() *redis.PubSub {
	if d.isCluster() {
		return d.cluster.SSubscribe(context.Background())
	}
	return d.node.SSubscribe(context.Background())
}

// reloadSlots asks for the cluster's map of slots to be read again, after a
// sign that it changed; it returns at once.
func (d deployment) reloadSlots() {
	if d.isCluster() {
		d.cluster.ReloadState(context.Background())
	}
}

// settings are the go-redis settings batchlock relies on: node retries, and
// calls that end with their context.
func (d deployment) settings() (maxRetries int, contextTimeouts bool) {
	if d.isCluster() {
		return d.cluster.Options().MaxRetries, d.cluster.Options().ContextTimeoutEnabled
	}
	return d.node.Options().MaxRetries, d.node.Options().ContextTimeoutEnabled
}

// oneCluster checks that the cluster client's seeds (ClusterOptions.Addrs)
// are nodes of one cluster: each seed that answers lists, in CLUSTER NODES,
// every other that answers. A client whose seeds span two clusters reads
// its map of slots from either, by chance, at each reload, and locks a key
// on one cluster while another Client holds it on the other. A seed that
// does not answer says nothing.
func (d deployment) oneCluster(ctx context.Context) error {
	if !d.isCluster() {
		return nil
	}
	opt := d.cluster.Options()
	type seed struct {
		addr, id string
		listed   map[string]bool // the node IDs its CLUSTER NODES lists
	}
	var seeds []seed
	for _, addr := range slices.Compact(slices.Sorted(slices.Values(opt.Addrs))) {
		node := redis.NewClient(routing.NodeOptions(opt, addr))
		nodes, err := node.ClusterNodes(ctx).Result()
		_ = node.Close()
		if err != nil {
			continue
		}
		s := seed{addr: addr, listed: map[string]bool{}}
		for line := range strings.Lines(nodes) {
			f := strings.Fields(line)
			if len(f) < 3 {
				continue
			}
			s.listed[f[0]] = true
			if strings.Contains(f[2], "myself") {
				s.id = f[0]
			}
		}
		seeds = append(seeds, s)
	}
	for _, a := range seeds {
		for _, b := range seeds {
			if !a.listed[b.id] {
				return fmt.Errorf("seeds %s and %s are nodes of two clusters (%s's CLUSTER NODES does not list %s): a client with both maps its slots to either by chance", a.addr, b.addr, a.addr, b.id)
			}
		}
	}
	return nil
}
