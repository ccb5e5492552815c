package routing

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/batchlock/batchlock/internal/backoff"
)

const (
	// RetryWindow is the default bound on the retries of one Route whose context has no
	// deadline: long enough to ride out a failover (a few seconds of
	// CLUSTERDOWN, MOVED and refused connections), short enough that a slot
	// left in migration or a master that stays down fails the call.
	RetryWindow = 10 * time.Second
	retryBase   = 5 * time.Millisecond
	retryMax    = 500 * time.Millisecond
)

// Sender makes one attempt at every call, setting its Reply and Acks.
type Sender interface {
	Send(ctx context.Context, s *redis.Script, calls []*Call, ack Ack)
}

// Runner runs scripts through a Sender, with retries.
type Runner struct {
	// Window bounds the retries of one Route whose context has no
	// deadline; RetryWindow unless set.
	Window time.Duration
	sender Sender
	master func(ctx context.Context, key string) (string, error)
	reload func(context.Context) // refreshes the cluster's map of slots; nil for one node
	close  func() error          // closes the clients the Runner opened; nil when none
	// single says the Runner was given a single-node client: a slot found
	// elsewhere then means the node is a cluster node (ErrClusterNode).
	single bool
	moved  movedSlots
}

// movedSlots are the masters that MOVED replies named for slots which the
// cluster client's map still places elsewhere: that map is reloaded from
// some node, which may not know of the move yet, and then not again for
// 200 ms, and meanwhile every call would go to the old master first. Calls
// go where MOVED said while the map still names the master it named then;
// an entry goes once the map names any other (it caught up, or the slot
// moved on), or a call sent there finds the slot gone or fails: at most
// one entry a slot.
type movedSlots struct {
	n  atomic.Int32 // entries in to: none, as nearly always, costs no lock
	mu sync.Mutex
	to map[int]movedTo
}

// movedTo is where a MOVED reply sent a slot, and the map's master then.
type movedTo struct{ addr, stale string }

// point records that slot is at addr, where the map names stale.
func (m *movedSlots) point(slot int, addr, stale string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.to == nil {
		m.to = map[int]movedTo{}
	}
	m.to[slot] = movedTo{addr: addr, stale: stale}
	m.n.Store(int32(len(m.to)))
}

// where returns the master a MOVED reply named for slot while the map's
// master is still mapped, the one it named then; else "".
func (m *movedSlots) where(slot int, mapped string) string {
	if m.n.Load() == 0 {
		return ""
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	to, ok := m.to[slot]
	if ok && to.stale != mapped {
		m.drop(slot)
		return ""
	}
	return to.addr
}

// forget drops what a MOVED reply said of slot.
func (m *movedSlots) forget(slot int) {
	if m.n.Load() == 0 {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.drop(slot)
}

// drop deletes slot's entry. Called with m.mu held.
func (m *movedSlots) drop(slot int) {
	delete(m.to, slot)
	m.n.Store(int32(len(m.to)))
}

// NewCluster returns a Runner on a cluster client: each call goes to the
// master of its slot, and redirections are followed.
func NewCluster(r *redis.ClusterClient) *Runner {
	m := &masters{rdb: r, nodes: nodes{rdb: r, shards: r.ForEachShard}}
	return &Runner{
		sender: m,
		close:  m.nodes.close,
		master: func(ctx context.Context, key string) (string, error) {
			node, err := r.MasterForKey(ctx, key)
			if err != nil {
				return "", fmt.Errorf("%w: %w", errUnrouted, err)
			}
			return node.Options().Addr, nil
		},
		reload: func(ctx context.Context) { r.ReloadState(ctx) },
	}
}

// NewNode returns a Runner on the client of a single node.
func NewNode(r *redis.Client) *Runner {
	return &Runner{sender: single{r}, master: oneNode, single: true}
}

func oneNode(context.Context, string) (string, error) { return "", nil }

// NewWith returns a Runner on sender, which tests fake. master says which
// master serves a key (nil: one node); reload may be nil.
func NewWith(sender Sender, master func(ctx context.Context, key string) (string, error), reload func(context.Context)) *Runner {
	if master == nil {
		master = oneNode
	}
	return &Runner{sender: sender, master: master, reload: reload}
}

// Master returns the address of the master that serves key's slot, as the
// cluster client's map of slots has it ("" for one node).
func (r *Runner) Master(ctx context.Context, key string) (string, error) {
	return r.master(ctx, key)
}

// Close closes the node clients the Runner opened itself (to follow a
// redirection to a node the cluster client's map of slots did not list); the
// redis client it was made with stays open.
func (r *Runner) Close() error {
	if r.close == nil {
		return nil
	}
	return r.close()
}

// Refresh asks for the cluster's map of slots to be reloaded, after a call
// failed in a way that suggests it moved; it returns at once.
func (r *Runner) Refresh(ctx context.Context) {
	if r.reload != nil {
		r.reload(ctx)
	}
}

// Send makes one attempt at every call.
func (r *Runner) Send(ctx context.Context, s *redis.Script, calls []*Call, ack Ack) {
	r.sender.Send(ctx, s, calls, ack)
}

func jittered(attempt int) time.Duration { return backoff.Jittered(attempt, retryBase, retryMax) }

// sleep pauses a retry; tests see the pauses asked for.
var sleep = func(ctx context.Context, d time.Duration) bool { return backoff.Sleep(ctx, d) == nil }
