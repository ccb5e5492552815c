package orders

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
)

// Stock is a catalogue of SKUs and their stock in Redis, under a key prefix
// of its own (such as "demo:<run>:") so that runs do not meet.
type Stock struct {
	rdb        redis.UniversalClient
	masters    masters
	mastersErr error // rdb is of a kind masters does not take
	prefix     string
	skus       []string
	initial    int64

	replicas       int
	replicaTimeout time.Duration
	// concurrent: orders write a SKU at once (holds of units): each write
	// is recorded per order, not per SKU's last writer.
	concurrent bool
}

// WriteConcurrently has the orders write a SKU at once, as holds of units
// let them (Counted): a line written again after a lost reply is known by
// its order, not by being the SKU's last write.
func (s *Stock) WriteConcurrently() { s.concurrent = true }

// NewStock describes the stock of skus under prefix, initial units each. It
// touches nothing in Redis until Setup.
func NewStock(rdb redis.UniversalClient, prefix string, skus []string, initial int64) *Stock {
	m, err := mastersOf(rdb)
	if err != nil {
		err = fmt.Errorf("orders: %w", err)
	}
	return &Stock{rdb: rdb, masters: m, mastersErr: err, prefix: prefix, skus: skus, initial: initial}
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

// PromoKeys returns the keys of an order's promotions under the stock's
// prefix (see PromoKeys).
func (s *Stock) PromoKeys(o Order) []string { return PromoKeys(s.prefix, o) }

// PromoKeys returns the keys of an order's promotions under prefix: keys it
// reads but never writes, so a processor may lock them shared. Nothing is
// stored under them: the workload's promotions stand for data read under a
// lock.
func PromoKeys(prefix string, o Order) []string {
	keys := make([]string, len(o.Promos))
	for i, p := range o.Promos {
		keys[i] = prefix + "promo:" + p
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

// readAll fetches the stock of every line of every order, in one pipeline:
// one round trip per master. It returns per order its lines' levels, or
// the error of a line.
func (s *Stock) readAll(ctx context.Context, orders []Order) ([][]level, []error) {
	pipe := s.rdb.Pipeline()
	cmds := make([][]*redis.SliceCmd, len(orders))
	for i, o := range orders {
		cmds[i] = make([]*redis.SliceCmd, len(o.Lines))
		for j, l := range o.Lines {
			cmds[i][j] = pipe.HMGet(ctx, s.Key(l.SKU), "units", "fence")
		}
	}
	_, _ = pipe.Exec(ctx)
	levels := make([][]level, len(orders))
	errs := make([]error, len(orders))
	for i, o := range orders {
		levels[i] = make([]level, len(o.Lines))
		for j, cmd := range cmds[i] {
			vals, err := ints(cmd)
			if err != nil {
				errs[i] = fmt.Errorf("reading stock of %s: %w", o.Lines[j].SKU, err)
				break
			}
			levels[i][j] = level{units: vals[0], fence: vals[1]}
		}
	}
	return levels, errs
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

// apply writes, per order i of pending, its lines pending[i]: one script per
// line, one pipeline per master for all of them, WAIT at its end when
// replicas must acknowledge; one attempt (FulfilAll decides on retries).
// tokens[i][j] is order i's line j's fencing token (0: none). It returns,
// per order and pending line, nil or the error of its write; a refused token
// wraps ErrFenced, too few replica acknowledgements ErrNotReplicated.
func (s *Stock) apply(ctx context.Context, orders []Order, pending map[int][]int, tokens [][]int64) map[int][]error {
	out := make(map[int][]error, len(pending))
	if s.mastersErr != nil {
		for i, lines := range pending {
			out[i] = make([]error, len(lines))
			for j := range lines {
				out[i][j] = s.mastersErr
			}
		}
		return out
	}
	writes := make(map[int][]*write, len(pending))
	var all []*write
	for i, lines := range pending {
		o := orders[i]
		for _, j := range lines {
			l := o.Lines[j]
			w := &write{key: s.Key(l.SKU), args: []any{l.Qty, o.ID, tokens[i][j], s.concurrent}}
			writes[i] = append(writes[i], w)
			all = append(all, w)
		}
	}
	s.send(ctx, all)
	failed := false
	for i, lines := range pending {
		out[i] = make([]error, len(lines))
		for n, w := range writes[i] {
			sku := orders[i].Lines[lines[n]].SKU
			err := w.reply.Err()
			switch {
			case redis.HasErrorPrefix(err, errFenced):
				err = fmt.Errorf("%w: %s: %w", ErrFenced, sku, err)
			case err == nil && s.replicas > 0 && w.acks < int64(s.replicas):
				err = fmt.Errorf("%w: %s: %d of %d", ErrNotReplicated, sku, max(w.acks, 0), s.replicas)
			case err != nil:
				failed = true
			}
			out[i][n] = err
		}
	}
	if failed && s.masters.reload != nil {
		// A MOVED or a refused connection: a failover may be under way.
		// Let the next attempt find the new masters.
		s.masters.reload(ctx)
	}
	return out
}
