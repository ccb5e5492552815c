package routing

import (
	"context"
	"fmt"
	"sync"

	"github.com/redis/go-redis/v9"

	"github.com/batchlock/batchlock/internal/lease"
)

// masters sends each call to the master of its route key's slot, as the
// cluster client's map of slots has it, or to the node a redirection named.
type masters struct {
	rdb   *redis.ClusterClient
	nodes nodes
}

func (m *masters) Send(ctx context.Context, s *redis.Script, calls []*Call, ack Ack) {
	nodes := make(map[string]*redis.Client)
	byNode := make(map[string][]*Call)
	for _, c := range calls {
		node, err := m.node(ctx, c)
		if err != nil {
			c.Reply = redis.NewCmd(ctx)
			c.Reply.SetErr(fmt.Errorf("%w: %w", errUnrouted, err))
			c.Acks = -1
			continue
		}
		addr := node.Options().Addr
		nodes[addr] = node
		byNode[addr] = append(byNode[addr], c)
	}
	if len(byNode) == 1 {
		// One master: no goroutine.
		for addr, calls := range byNode {
			sendTo(ctx, nodes[addr], s, calls, ack)
		}
		return
	}
	var wg sync.WaitGroup
	for addr, calls := range byNode {
		wg.Go(func() { sendTo(ctx, nodes[addr], s, calls, ack) })
	}
	wg.Wait()
}

// node is the client of the node c goes to.
func (m *masters) node(ctx context.Context, c *Call) (*redis.Client, error) {
	if c.Addr == "" {
		return m.rdb.MasterForKey(ctx, c.route())
	}
	return m.nodes.at(ctx, c.Addr)
}

// single sends every call to one node.
type single struct{ rdb *redis.Client }

func (n single) Send(ctx context.Context, s *redis.Script, calls []*Call, ack Ack) {
	sendTo(ctx, n.rdb, s, calls, ack)
}

// sendTo sends calls to one master by digest, and resends by source the ones
// it did not know the digest of (a restarted or freshly promoted master).
// WAIT counts the replicas that received the writes made on its own
// connection, so it shares the scripts' pipeline.
func sendTo(ctx context.Context, node *redis.Client, s *redis.Script, calls []*Call, ack Ack) {
	if read := node.Options().ReadTimeout; ack.Replicas > 0 && read > 0 {
		// WAIT may take its whole timeout to answer: the read must not
		// give up first, or the call would be retried instead of refused.
		// (A client without read deadlines, ReadTimeout <= 0, waits anyway.)
		node = node.WithTimeout(read + ack.Timeout)
	}
	exec := func(calls []*Call, bySource bool) {
		pipe := node.Pipeline()
		for _, c := range calls {
			if c.Asking {
				pipe.Do(ctx, "ASKING")
			}
			if bySource {
				c.Reply = s.Eval(ctx, pipe, c.Keys, c.Args...)
			} else {
				c.Reply = pipe.EvalSha(ctx, s.Hash(), c.Keys, c.Args...)
			}
		}
		var wait *redis.Cmd
		if ack.Replicas > 0 {
			wait = pipe.Do(ctx, "WAIT", ack.Replicas, lease.Millis(ack.Timeout))
		}
		_, _ = pipe.Exec(ctx)
		acks := int64(-1)
		if wait != nil {
			if n, err := wait.Int64(); err == nil {
				acks = n
			}
		}
		for _, c := range calls {
			c.Acks = acks
		}
	}
	exec(calls, false)
	var unknown []*Call
	for _, c := range calls {
		if redis.HasErrorPrefix(c.Reply.Err(), "NOSCRIPT") {
			unknown = append(unknown, c)
		}
	}
	if len(unknown) > 0 {
		exec(unknown, true)
	}
}
