package orders

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// Stock is a catalogue of SKUs and their stock in Redis, under a key prefix
// of its own (such as "demo:<run>:") so that runs do not meet.
type Stock struct {
	rdb     redis.UniversalClient
	prefix  string
	skus    []string
	initial int64

	replicas       int
	replicaTimeout time.Duration
}

// NewStock describes the stock of skus under prefix, initial units each. It
// touches nothing in Redis until Setup.
func NewStock(rdb redis.UniversalClient, prefix string, skus []string, initial int64) *Stock {
	return &Stock{rdb: rdb, prefix: prefix, skus: skus, initial: initial}
}

// RequireReplicas makes every write count as applied only once n replicas
// of its master acknowledged it within timeout (WAIT), so that a failover
// cannot lose it. Default: no acknowledgement.
func (s *Stock) RequireReplicas(n int, timeout time.Duration) {
	s.replicas, s.replicaTimeout = n, timeout
}

// Key returns the key of sku's stock hash.
func (s *Stock) Key(sku string) string { return s.prefix + "stock:" + sku }

// Keys returns the stock keys of an order's lines, in line order: the keys
// to lock for the order.
func (s *Stock) Keys(o Order) []string {
	keys := make([]string, len(o.Lines))
	for i, l := range o.Lines {
		keys[i] = s.Key(l.SKU)
	}
	return keys
}

// Setup writes every SKU's stock afresh: initial units, nothing sold.
func (s *Stock) Setup(ctx context.Context) error {
	pipe := s.rdb.Pipeline()
	for _, sku := range s.skus {
		key := s.Key(sku)
		pipe.Del(ctx, key)
		pipe.HSet(ctx, key, "initial", s.initial, "units", s.initial, "sold", 0, "fence", 0)
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return fmt.Errorf("orders: setting up %d SKUs under %q: %w", len(s.skus), s.prefix, err)
	}
	return nil
}

// Cleanup deletes every SKU's stock.
func (s *Stock) Cleanup(ctx context.Context) error {
	pipe := s.rdb.Pipeline()
	for _, sku := range s.skus {
		pipe.Del(ctx, s.Key(sku))
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return fmt.Errorf("orders: deleting %d SKUs under %q: %w", len(s.skus), s.prefix, err)
	}
	return nil
}

// SKUState is one SKU's stock as Redis holds it.
type SKUState struct {
	SKU       string
	Initial   int64
	Remaining int64
	Sold      int64
}

// States reads every SKU's stock, in catalogue order.
func (s *Stock) States(ctx context.Context) ([]SKUState, error) {
	pipe := s.rdb.Pipeline()
	cmds := make([]*redis.SliceCmd, len(s.skus))
	for i, sku := range s.skus {
		cmds[i] = pipe.HMGet(ctx, s.Key(sku), "initial", "units", "sold")
	}
	_, _ = pipe.Exec(ctx)
	states := make([]SKUState, len(s.skus))
	for i, cmd := range cmds {
		vals, err := ints(cmd)
		if err != nil {
			return nil, fmt.Errorf("orders: reading stock of %s: %w", s.skus[i], err)
		}
		states[i] = SKUState{SKU: s.skus[i], Initial: vals[0], Remaining: vals[1], Sold: vals[2]}
	}
	return states, nil
}

// level is what the read phase of an order sees of one line's SKU.
type level struct {
	units int64
	fence int64 // largest fencing token that wrote the SKU
}

// read fetches the stock of every line of o, in one pipeline: one round
// trip per master.
func (s *Stock) read(ctx context.Context, o Order) ([]level, error) {
	pipe := s.rdb.Pipeline()
	cmds := make([]*redis.SliceCmd, len(o.Lines))
	for i, l := range o.Lines {
		cmds[i] = pipe.HMGet(ctx, s.Key(l.SKU), "units", "fence")
	}
	_, _ = pipe.Exec(ctx)
	levels := make([]level, len(o.Lines))
	for i, cmd := range cmds {
		vals, err := ints(cmd)
		if err != nil {
			return nil, fmt.Errorf("reading stock of %s: %w", o.Lines[i].SKU, err)
		}
		levels[i] = level{units: vals[0], fence: vals[1]}
	}
	return levels, nil
}

// ints converts an HMGET reply of integer fields.
func ints(cmd *redis.SliceCmd) ([]int64, error) {
	vals, err := cmd.Result()
	if err != nil {
		return nil, err
	}
	out := make([]int64, len(vals))
	for i, v := range vals {
		str, ok := v.(string)
		if !ok {
			return nil, fmt.Errorf("%s: no such SKU (was the stock set up?)", cmd.Args()[1])
		}
		if out[i], err = strconv.ParseInt(str, 10, 64); err != nil {
			return nil, fmt.Errorf("%s: %w", cmd.Args()[1], err)
		}
	}
	return out, nil
}

//go:embed apply.lua
var applySource string

var applyScript = redis.NewScript(applySource)

// errFenced is the prefix of the apply script's refusal of a stale token.
const errFenced = "FENCED"

var (
	// ErrFenced means a SKU refused a write because its fencing token was
	// older than one that had already written it: the writer's lock had
	// been lost to another holder.
	ErrFenced = errors.New("orders: refused a stale fencing token")
	// ErrNotReplicated means a write was applied on its master but fewer
	// replicas than required acknowledged it in time: a failover could
	// still lose it.
	ErrNotReplicated = errors.New("orders: write not acknowledged by enough replicas")
)

// apply writes the lines of o given by idx: one script per line, in one
// pipeline (one per master when replicas must acknowledge). tokens[i] is
// line i's fencing token (0: none). It returns, per given line, nil or the
// error of its write; a refused token wraps ErrFenced, too few replica
// acknowledgements ErrNotReplicated.
func (s *Stock) apply(ctx context.Context, o Order, idx []int, tokens []int64) []error {
	calls := make([]*applyCall, len(idx))
	for j, i := range idx {
		l := o.Lines[i]
		calls[j] = &applyCall{key: s.Key(l.SKU), args: []any{l.Qty, o.ID, tokens[i]}}
	}
	if s.replicas > 0 {
		s.applyPerMaster(ctx, calls)
	} else {
		send(ctx, s.rdb, calls, false, nil)
		sendBySource(ctx, s.rdb, calls, nil)
	}
	errs := make([]error, len(idx))
	for j, cl := range calls {
		err := cl.cmd.Err()
		switch {
		case redis.HasErrorPrefix(err, errFenced):
			err = fmt.Errorf("%w: %s: %w", ErrFenced, o.Lines[idx[j]].SKU, err)
		case err == nil && s.replicas > 0 && cl.acks < int64(s.replicas):
			err = fmt.Errorf("%w: %s: %d of %d", ErrNotReplicated, o.Lines[idx[j]].SKU, max(cl.acks, 0), s.replicas)
		}
		errs[j] = err
	}
	return errs
}

// applyCall is one line's write.
type applyCall struct {
	key  string
	args []any
	cmd  *redis.Cmd
	acks int64 // replicas that acknowledged it, -1 when unknown
}

// send evaluates the apply script for calls in one pipeline of p; with
// wait (WAIT's arguments), WAIT follows on the same connection, and each
// call records its acknowledgements.
func send(ctx context.Context, p redis.UniversalClient, calls []*applyCall, bySource bool, wait []any) {
	if len(calls) == 0 {
		return
	}
	pipe := p.Pipeline()
	for _, cl := range calls {
		if bySource {
			cl.cmd = applyScript.Eval(ctx, pipe, []string{cl.key}, cl.args...)
		} else {
			cl.cmd = applyScript.EvalSha(ctx, pipe, []string{cl.key}, cl.args...)
		}
	}
	var waitCmd *redis.Cmd
	if wait != nil {
		waitCmd = pipe.Do(ctx, append([]any{"WAIT"}, wait...)...)
	}
	_, _ = pipe.Exec(ctx)
	if waitCmd != nil {
		acks, err := waitCmd.Int64()
		if err != nil {
			acks = -1
		}
		for _, cl := range calls {
			cl.acks = acks
		}
	}
}

// sendBySource sends again, by source, the calls a master did not know the
// script of (a promoted replica: scripts are not replicated). Those did not
// run.
func sendBySource(ctx context.Context, p redis.UniversalClient, calls []*applyCall, wait []any) {
	var unknown []*applyCall
	for _, cl := range calls {
		if redis.HasErrorPrefix(cl.cmd.Err(), "NOSCRIPT") {
			unknown = append(unknown, cl)
		}
	}
	send(ctx, p, unknown, true, wait)
}

// applyPerMaster sends each master's calls in one pipeline followed by
// WAIT: WAIT counts the replicas that received the writes of its own
// connection, so it must share the scripts'. A line then counts as applied
// only once a replica has it, and a failover cannot lose it.
func (s *Stock) applyPerMaster(ctx context.Context, calls []*applyCall) {
	wait := []any{s.replicas, s.replicaTimeout.Milliseconds()}
	byNode := make(map[*redis.Client][]*applyCall)
	for _, cl := range calls {
		node, err := s.master(ctx, cl.key)
		if err != nil {
			cl.cmd = redis.NewCmd(ctx)
			cl.cmd.SetErr(err)
			cl.acks = -1
			continue
		}
		byNode[node] = append(byNode[node], cl)
	}
	var wg sync.WaitGroup
	for node, calls := range byNode {
		wg.Go(func() {
			send(ctx, node, calls, false, wait)
			sendBySource(ctx, node, calls, wait)
		})
	}
	wg.Wait()
	for _, cl := range calls {
		if cl.cmd.Err() != nil && s.cluster() != nil {
			// A MOVED or a refused connection: a failover is under way.
			// Let the next attempt find the new masters.
			s.cluster().ReloadState(ctx)
			return
		}
	}
}

// master returns the client of the master serving key.
func (s *Stock) master(ctx context.Context, key string) (*redis.Client, error) {
	if c := s.cluster(); c != nil {
		return c.MasterForKey(ctx, key)
	}
	if c, ok := s.rdb.(*redis.Client); ok {
		return c, nil
	}
	return nil, fmt.Errorf("orders: replica acknowledgement needs a *redis.ClusterClient or a *redis.Client, not %T", s.rdb)
}

func (s *Stock) cluster() *redis.ClusterClient {
	c, _ := s.rdb.(*redis.ClusterClient)
	return c
}
