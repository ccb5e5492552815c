package batchlock

import (
	"context"
	"fmt"
	"slices"
	"sync"

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
// are nodes of one cluster: the nodes serving slots that each seed lists
// (CLUSTER SLOTS, by node ID, which the ACL of docs/operators.md allows)
// meet those every other lists. A client whose seeds span two clusters
// reads its map of slots from either, by chance, at each reload, and locks
// a key on one while another Client holds it on the other. A seed that does
// not answer, or serves no slot's cluster yet, says nothing.
func (d deployment) oneCluster(ctx context.Context) error {
	opt := d.cluster.Options()
	seeds := slices.Compact(slices.Sorted(slices.Values(opt.Addrs)))
	listed := make([]map[string]bool, len(seeds)) // by seed, the node IDs
	var wg sync.WaitGroup
	for i, addr := range seeds {
		wg.Go(func() {
			node := redis.NewClient(routing.NodeOptions(opt, addr))
			defer node.Close()
			//lint:ignore SA1019 CLUSTER SLOTS is what the cluster client reads its map from, and what the documented ACL allows (CLUSTER SHARDS it does not).
			slots, err := node.ClusterSlots(ctx).Result()
			if err != nil || len(slots) == 0 {
				return
			}
			listed[i] = map[string]bool{}
			for _, s := range slots {
				for _, n := range s.Nodes {
					listed[i][n.ID] = true
				}
			}
		})
	}
	wg.Wait()
	for i := range seeds {
		for j := i + 1; j < len(seeds); j++ {
			if listed[i] != nil && listed[j] != nil && !meet(listed[i], listed[j]) {
				return fmt.Errorf("seeds %s and %s are nodes of two clusters (no node serves slots in both): a client with both maps its slots to either by chance", seeds[i], seeds[j])
			}
		}
	}
	return nil
}

// meet says whether sets a and b share a member.
func meet(a, b map[string]bool) bool {
	for k := range a {
		if b[k] {
			return true
		}
	}
	return false
}
