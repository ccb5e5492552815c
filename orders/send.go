package orders

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// write is one apply script call on one SKU's hash and, once sent, its
// outcome.
type write struct {
	key  string
	args []any

	reply *redis.Cmd // the reply or error of the call
	acks  int64      // replicas that acknowledged it, when asked; -1 when unknown
}

// masters finds the master that serves a key, through go-redis's public API
// only: the cluster client's map of slots, or the one node of a single-node
// client.
type masters struct {
	of     func(ctx context.Context, key string) (*redis.Client, error)
	reload func(ctx context.Context) // reloads the map of slots; nil for one node
}

// mastersOf takes a *redis.ClusterClient or a *redis.Client, and refuses
// other clients with an error naming their type: the writes of one master
// and their WAIT must share one connection, which only these two expose.
func mastersOf(rdb redis.UniversalClient) (masters, error) {
	switch r := rdb.(type) {
	case *redis.ClusterClient:
		return masters{
			of:     r.MasterForKey,
			reload: func(ctx context.Context) { r.ReloadState(ctx) },
		}, nil
	case *redis.Client:
		return masters{of: func(context.Context, string) (*redis.Client, error) { return r, nil }}, nil
	}
	return masters{}, fmt.Errorf("unsupported redis client %T: use a *redis.ClusterClient or a *redis.Client", rdb)
}

// send makes one attempt at every write, setting its reply and acks: the
// writes of each master in one pipeline on that master's own client, masters
// in parallel, so that it costs one round trip per master touched (two for a
// master that did not know the script). Sending to the masters' own clients
// keeps go-redis's cluster redirections out of it: Fulfil is the one retry
// layer.
func (s *Stock) send(ctx context.Context, writes []*write) {
	nodes := make(map[string]*redis.Client)
	byNode := make(map[string][]*write)
	for _, w := range writes {
		node, err := s.masters.of(ctx, w.key)
		if err != nil {
			w.reply = redis.NewCmd(ctx)
			w.reply.SetErr(fmt.Errorf("no master known for %s: %w", w.key, err))
			w.acks = -1
			continue
		}
		addr := node.Options().Addr
		nodes[addr] = node
		byNode[addr] = append(byNode[addr], w)
	}
	var wg sync.WaitGroup
	for addr, writes := range byNode {
		wg.Go(func() { s.sendTo(ctx, nodes[addr], writes) })
	}
	wg.Wait()
}

// sendTo sends writes to one master by the script's digest, then by its
// source the ones the master did not know the digest of (a restarted or
// freshly promoted master). WAIT counts the replicas that received the writes
// made on its own connection, so it shares the scripts' pipeline.
func (s *Stock) sendTo(ctx context.Context, node *redis.Client, writes []*write) {
	if read := node.Options().ReadTimeout; s.replicas > 0 && read > 0 {
		// WAIT may take its whole timeout to answer: the read must not
		// give up first, or the write would be retried instead of refused.
		// (A client without read deadlines, ReadTimeout <= 0, waits anyway.)
		node = node.WithTimeout(read + s.replicaTimeout)
	}
	s.exec(ctx, node, writes, false)
	var unknown []*write
	for _, w := range writes {
		if redis.HasErrorPrefix(w.reply.Err(), "NOSCRIPT") {
			unknown = append(unknown, w)
		}
	}
	if len(unknown) > 0 {
		s.exec(ctx, node, unknown, true)
	}
}

// exec sends writes in one pipeline: by digest (EVALSHA), or by source
// (EVAL), and WAIT at its end when replicas must acknowledge.
func (s *Stock) exec(ctx context.Context, node *redis.Client, writes []*write, bySource bool) {
	pipe := node.Pipeline()
	for _, w := range writes {
		keys := []string{w.key}
		if bySource {
			w.reply = applyScript.Eval(ctx, pipe, keys, w.args...)
		} else {
			w.reply = applyScript.EvalSha(ctx, pipe, keys, w.args...)
		}
	}
	var wait *redis.Cmd
	if s.replicas > 0 {
		// In milliseconds, rounded up: a timeout below 1ms is not 0,
		// which WAIT takes for no timeout at all.
		ms := int64((s.replicaTimeout + time.Millisecond - 1) / time.Millisecond)
		wait = pipe.Do(ctx, "WAIT", s.replicas, ms)
	}
	_, _ = pipe.Exec(ctx)
	acks := int64(-1)
	if wait != nil {
		if n, err := wait.Int64(); err == nil {
			acks = n
		}
	}
	for _, w := range writes {
		w.acks = acks
	}
}
