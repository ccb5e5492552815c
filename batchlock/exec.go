package batchlock

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/batchlock/batchlock/internal/backoff"
	"github.com/batchlock/batchlock/internal/lease"
)

const (
	// retryWindow bounds the retries of one script round whose context has
	// no deadline: long enough to ride out a failover (a few seconds of
	// CLUSTERDOWN, MOVED and refused connections), short enough that a slot
	// left in migration or a master that stays down fails the call.
	retryWindow = 10 * time.Second
	retryBase   = 5 * time.Millisecond
	retryMax    = 500 * time.Millisecond
)

// call is one script evaluation: one group's keys and arguments, and once run,
// its reply.
type call struct {
	slot int
	keys []string // keys[0] routes the call
	args []any
	cmd  *redis.Cmd
	acks int64 // replicas that acknowledged, when asked for; -1 if unknown
	ran  bool  // some attempt may have run the script
}

// errUnrouted marks a call that was not sent because no master could be
// found for its slot (the cluster's map is being reloaded).
var errUnrouted = errors.New("no master known for the slot")

// run evaluates script once per call: the calls of each master go in one
// pipeline on that master's own connection, masters in parallel, so a round
// costs one round trip per master touched. With ack.n > 0 each pipeline ends
// with WAIT, and each call records how many replicas acknowledged it.
//
// run is batchlock's only retry layer: calls that failed in a way that leaves
// them not run, or run but safe to repeat (every script here is idempotent),
// are sent again with jittered backoff while ctx lasts, and for at most
// retryWindow. Sending to the masters' own clients keeps go-redis's cluster
// redirections out of it. Each call's cmd holds its final reply or error.
func (c *Client) run(ctx context.Context, script *redis.Script, calls []*call, ack replicaAck) {
	began := time.Now()
	pending := calls
	for attempt := 0; ; attempt++ {
		c.send(ctx, script, pending, ack)
		var again []*call
		for _, cl := range pending {
			err := cl.cmd.Err()
			cl.ran = cl.ran || !refused(err)
			if retryable(err) {
				again = append(again, cl)
			}
		}
		left := retryWindow - time.Since(began)
		if len(again) == 0 || left <= 0 || ctx.Err() != nil {
			return
		}
		if c.cluster {
			c.rdb.(*redis.ClusterClient).ReloadState(ctx)
		}
		if backoff.Sleep(ctx, min(backoff.Jittered(attempt, retryBase, retryMax), left)) != nil {
			return
		}
		pending = again
	}
}

// send makes one attempt at every call, one pipeline per master.
func (c *Client) send(ctx context.Context, script *redis.Script, calls []*call, ack replicaAck) {
	nodes := make(map[string]*redis.Client)
	byNode := make(map[string][]*call)
	for _, cl := range calls {
		node, addr, err := c.nodeFor(ctx, cl.keys[0])
		if err != nil {
			cl.cmd = redis.NewCmd(ctx)
			cl.cmd.SetErr(fmt.Errorf("%w: %w", errUnrouted, err))
			cl.acks = -1
			continue
		}
		nodes[addr] = node
		byNode[addr] = append(byNode[addr], cl)
	}
	var wg sync.WaitGroup
	for addr, calls := range byNode {
		wg.Go(func() { sendTo(ctx, nodes[addr], script, calls, ack) })
	}
	wg.Wait()
}

// sendTo sends calls to one master by digest, and resends by source the ones
// it did not know the digest of (a restarted or freshly promoted master).
// WAIT counts the replicas that received the writes made on its own
// connection, so it shares the scripts' pipeline.
func sendTo(ctx context.Context, node *redis.Client, script *redis.Script, calls []*call, ack replicaAck) {
	if ack.n > 0 {
		// WAIT may take its whole timeout to answer: the read must not
		// give up first, or the call would be retried instead of refused.
		node = node.WithTimeout(node.Options().ReadTimeout + ack.timeout)
	}
	exec := func(calls []*call, bySource bool) {
		pipe := node.Pipeline()
		for _, cl := range calls {
			if bySource {
				cl.cmd = script.Eval(ctx, pipe, cl.keys, cl.args...)
			} else {
				cl.cmd = pipe.EvalSha(ctx, script.Hash(), cl.keys, cl.args...)
			}
		}
		var wait *redis.Cmd
		if ack.n > 0 {
			wait = pipe.Do(ctx, "WAIT", ack.n, lease.Millis(ack.timeout))
		}
		_, _ = pipe.Exec(ctx)
		acks := int64(-1)
		if wait != nil {
			if n, err := wait.Int64(); err == nil {
				acks = n
			}
		}
		for _, cl := range calls {
			cl.acks = acks
		}
	}
	exec(calls, false)
	var unknown []*call
	for _, cl := range calls {
		if redis.HasErrorPrefix(cl.cmd.Err(), "NOSCRIPT") {
			unknown = append(unknown, cl)
		}
	}
	if len(unknown) > 0 {
		exec(unknown, true)
	}
}

// retryable reports errors after which a script call has not run, or may have
// run but is safe to repeat, and may succeed when tried again.
func retryable(err error) bool {
	switch {
	case err == nil, errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return false
	case errors.Is(err, errUnrouted), errors.Is(err, redis.ErrPoolTimeout),
		redis.IsTryAgainError(err), redis.IsClusterDownError(err), redis.IsLoadingError(err),
		redis.IsReadOnlyError(err), redis.IsMasterDownError(err),
		// A script flushed between the digest and the source: send again.
		redis.HasErrorPrefix(err, "NOSCRIPT"):
		return true
	}
	if _, moved := redis.IsMovedError(err); moved {
		return true
	}
	if _, ask := redis.IsAskError(err); ask {
		return true
	}
	var netErr net.Error
	return errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.As(err, &netErr)
}

// refused reports errors with which a server refused a call without running
// it, and calls that were never sent.
func refused(err error) bool {
	if err == nil {
		return false
	}
	var opErr *net.OpError
	if errors.As(err, &opErr) && opErr.Op == "dial" {
		return true
	}
	_, moved := redis.IsMovedError(err)
	_, ask := redis.IsAskError(err)
	return moved || ask || errors.Is(err, errUnrouted) || errors.Is(err, redis.ErrPoolTimeout) ||
		redis.IsTryAgainError(err) || redis.IsClusterDownError(err) || redis.IsLoadingError(err) ||
		redis.IsReadOnlyError(err) || redis.IsMasterDownError(err) || redis.HasErrorPrefix(err, "NOSCRIPT")
}

// callError describes the failure of a call of the named step: the slot, what
// the error means there, and the context's cause when it ended the call.
func callError(ctx context.Context, step string, cl *call, err error) error {
	what := ""
	if _, ask := redis.IsAskError(err); ask || redis.IsTryAgainError(err) {
		what = " is being migrated"
	} else if _, moved := redis.IsMovedError(err); moved {
		what = " moved"
	}
	if cause := context.Cause(ctx); cause != nil && !errors.Is(err, cause) {
		return fmt.Errorf("batchlock: %s: slot %d%s: %w: %w", step, cl.slot, what, cause, err)
	}
	return fmt.Errorf("batchlock: %s: slot %d%s: %w", step, cl.slot, what, err)
}
