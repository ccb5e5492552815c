package batchlock

import (
	"context"
	"errors"
	"io"
	"net"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/batchlock/batchlock/internal/backoff"
)

const (
	// retryAttempts and the backoff below ride out a failover (a few seconds
	// of CLUSTERDOWN, MOVED and refused connections) within the caller's
	// context.
	retryAttempts = 20
	retryBase     = 5 * time.Millisecond
	retryMax      = 500 * time.Millisecond
)

// call is one script evaluation: one group's keys and arguments, and once run,
// its reply.
type call struct {
	keys []string
	args []any
	cmd  *redis.Cmd
	acks int64 // replicas that acknowledged, when asked for; -1 if unknown
}

// run evaluates script once per call. All calls go in one pipeline, which a
// cluster client splits per master and sends to the masters in parallel: one
// round trip per master touched. With ack.n > 0, each master's pipeline ends
// with WAIT, and each call records how many replicas acknowledged it. Calls
// that fail in a way that leaves them not run or safe to repeat (every script
// here is idempotent) are retried with backoff within ctx. Each call's cmd
// holds its final reply or error.
func (c *Client) run(ctx context.Context, script *redis.Script, calls []*call, ack replicaAck) {
	pending := calls
	for attempt := 0; ; attempt++ {
		if ack.n > 0 {
			c.execPerMaster(ctx, script, pending, ack)
		} else {
			c.exec(ctx, script, pending)
		}
		var again []*call
		for _, cl := range pending {
			if retryable(cl.cmd.Err()) {
				again = append(again, cl)
			}
		}
		if len(again) == 0 || attempt+1 >= retryAttempts || ctx.Err() != nil {
			return
		}
		if c.cluster {
			c.rdb.(*redis.ClusterClient).ReloadState(ctx)
		}
		if backoff.Sleep(ctx, backoff.Jittered(attempt, retryBase, retryMax)) != nil {
			return
		}
		pending = again
	}
}

// exec sends the calls by digest, and resends by source the ones a server
// did not know the digest of (a restarted or freshly promoted master).
func (c *Client) exec(ctx context.Context, script *redis.Script, calls []*call) {
	pipe := c.rdb.Pipeline()
	for _, cl := range calls {
		cl.cmd = pipe.EvalSha(ctx, script.Hash(), cl.keys, cl.args...)
	}
	_, _ = pipe.Exec(ctx)

	var unknown []*call
	for _, cl := range calls {
		if redis.HasErrorPrefix(cl.cmd.Err(), "NOSCRIPT") {
			unknown = append(unknown, cl)
		}
	}
	if len(unknown) == 0 {
		return
	}
	pipe = c.rdb.Pipeline()
	for _, cl := range unknown {
		cl.cmd = script.Eval(ctx, pipe, cl.keys, cl.args...)
	}
	_, _ = pipe.Exec(ctx)
}

// execPerMaster sends each master's calls in one pipeline on one of its
// connections, followed by WAIT: WAIT counts the replicas that received the
// writes made on its own connection, so it must share the scripts'.
func (c *Client) execPerMaster(ctx context.Context, script *redis.Script, calls []*call, ack replicaAck) {
	nodes := make(map[string]*redis.Client)
	byNode := make(map[string][]*call)
	for _, cl := range calls {
		node, addr, err := c.nodeFor(ctx, cl.keys[0])
		if err != nil {
			cl.cmd = redis.NewCmd(ctx)
			cl.cmd.SetErr(err)
			cl.acks = -1
			continue
		}
		nodes[addr] = node
		byNode[addr] = append(byNode[addr], cl)
	}
	var wg sync.WaitGroup
	for addr, calls := range byNode {
		wg.Add(1)
		go func() {
			defer wg.Done()
			execWithWait(ctx, nodes[addr], script, calls, ack)
		}()
	}
	wg.Wait()
}

func execWithWait(ctx context.Context, node *redis.Client, script *redis.Script, calls []*call, ack replicaAck) {
	// WAIT may take its whole timeout to answer: the read must not give up
	// first, or the call would be retried instead of refused.
	node = node.WithTimeout(node.Options().ReadTimeout + ack.timeout)
	send := func(calls []*call, bySource bool) {
		pipe := node.Pipeline()
		for _, cl := range calls {
			if bySource {
				cl.cmd = script.Eval(ctx, pipe, cl.keys, cl.args...)
			} else {
				cl.cmd = pipe.EvalSha(ctx, script.Hash(), cl.keys, cl.args...)
			}
		}
		wait := pipe.Do(ctx, "WAIT", ack.n, ack.timeout.Milliseconds())
		_, _ = pipe.Exec(ctx)
		acks, err := wait.Int64()
		if err != nil {
			acks = -1
		}
		for _, cl := range calls {
			cl.acks = acks
		}
	}
	send(calls, false)
	var unknown []*call
	for _, cl := range calls {
		if redis.HasErrorPrefix(cl.cmd.Err(), "NOSCRIPT") {
			unknown = append(unknown, cl)
		}
	}
	if len(unknown) > 0 {
		send(unknown, true)
	}
}

// retryable reports errors after which a script call has not run, or may have
// run but is safe to repeat, and may succeed when tried again.
func retryable(err error) bool {
	if err == nil || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return false
	}
	for _, prefix := range []string{"MOVED", "ASK", "TRYAGAIN", "CLUSTERDOWN", "LOADING", "MASTERDOWN", "READONLY", "NOSCRIPT"} {
		if redis.HasErrorPrefix(err, prefix) {
			return true
		}
	}
	var netErr net.Error
	return errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.As(err, &netErr) ||
		strings.Contains(err.Error(), "connection pool timeout")
}
