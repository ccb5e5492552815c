package bench

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// OrderConfig shapes the contention workload: workers place orders of a
// basket of distinct SKUs, one unit each, against stock kept in Redis.
type OrderConfig struct {
	SKUs                 int // distinct SKUs, spread over every master
	MinBasket, MaxBasket int
	Workers              int
	Stock                int64 // initial units of every SKU
	Rounds               int   // turns each library gets, alternating
	Slice                time.Duration
}

// DefaultOrders: baskets of 2–10 of 500 SKUs, 32 workers; every library
// gets three 4-second turns.
var DefaultOrders = OrderConfig{SKUs: 500, MinBasket: 2, MaxBasket: 10, Workers: 32, Stock: 1_000_000, Rounds: 3, Slice: 4 * time.Second}

// OrderResult is what one library achieved over all its turns.
type OrderResult struct {
	Library string
	Orders  int64 // placed
	GaveUp  int64 // lock not obtained within the library's own retry limits
	Elapsed time.Duration
	// Oversold counts units of SKUs whose stock does not match the orders
	// placed: sold twice, or updates lost to a second holder. Must be 0.
	Oversold int64
}

// PerSecond is the throughput of placed orders.
func (r OrderResult) PerSecond() float64 { return float64(r.Orders) / r.Elapsed.Seconds() }

// shop is one library's copy of the workload: its own lock keys and stock.
type shop struct {
	l     Locker
	rdb   redis.UniversalClient
	locks []string // lock key of SKU i
	stock []string // stock key of SKU i
	sold  []atomic.Int64
	res   OrderResult
}

// RunOrders runs the order workload for every library in turns (the order
// rotating every round), then checks that no unit was oversold.
func RunOrders(ctx context.Context, rdb redis.UniversalClient, lockers []Locker, cfg OrderConfig) ([]OrderResult, error) {
	shops := make([]*shop, len(lockers))
	for i, l := range lockers {
		s := &shop{l: l, rdb: rdb, sold: make([]atomic.Int64, cfg.SKUs), res: OrderResult{Library: l.Name()}}
		s.locks = Keys("bench:sku:"+l.Name(), cfg.SKUs)
		s.stock = Keys("bench:stock:"+l.Name(), cfg.SKUs)
		if err := s.fill(ctx, cfg.Stock); err != nil {
			return nil, err
		}
		shops[i] = s
	}
	for round := range cfg.Rounds {
		for j := range shops {
			if err := shops[(j+round)%len(shops)].turn(ctx, cfg); err != nil {
				return nil, err
			}
		}
	}
	out := make([]OrderResult, len(shops))
	for i, s := range shops {
		if err := s.audit(ctx, cfg.Stock); err != nil {
			return nil, err
		}
		out[i] = s.res
	}
	return out, nil
}

func (s *shop) fill(ctx context.Context, stock int64) error {
	pipe := s.rdb.Pipeline()
	for _, k := range s.stock {
		pipe.Set(ctx, k, stock, 0)
	}
	_, err := pipe.Exec(ctx)
	return err
}

// turn lets cfg.Workers workers place orders for cfg.Slice. An order under
// way when the slice ends is finished and counted, and so is its time.
func (s *shop) turn(ctx context.Context, cfg OrderConfig) error {
	tctx, cancel := context.WithTimeout(ctx, cfg.Slice)
	defer cancel()
	start := time.Now()
	errs := make([]error, cfg.Workers)
	var wg sync.WaitGroup
	for w := range cfg.Workers {
		wg.Go(func() { errs[w] = s.work(tctx, ctx, cfg) })
	}
	wg.Wait()
	s.res.Elapsed += time.Since(start)
	return errors.Join(errs...)
}

// work places orders until turnCtx ends; ctx bounds the order under way.
func (s *shop) work(turnCtx, ctx context.Context, cfg OrderConfig) error {
	for turnCtx.Err() == nil {
		basket := s.basket(cfg)
		keys := make([]string, len(basket))
		for i, sku := range basket {
			keys[i] = s.locks[sku]
		}
		h, err := s.l.Lock(turnCtx, keys)
		if err != nil {
			if turnCtx.Err() == nil {
				s.gaveUp()
			}
			continue
		}
		err = s.place(ctx, basket)
		if uerr := h.Unlock(ctx); err == nil {
			err = uerr
		}
		if err != nil {
			return fmt.Errorf("%s: order: %w", s.l.Name(), err)
		}
	}
	return nil
}

func (s *shop) gaveUp() { atomic.AddInt64(&s.res.GaveUp, 1) }

// basket draws distinct SKUs, sorted.
func (s *shop) basket(cfg OrderConfig) []int {
	n := cfg.MinBasket + rand.N(cfg.MaxBasket-cfg.MinBasket+1)
	basket := make([]int, 0, n)
	for len(basket) < n {
		if sku := rand.N(cfg.SKUs); !slices.Contains(basket, sku) {
			basket = append(basket, sku)
		}
	}
	slices.Sort(basket)
	return basket
}

// place reads the stock of the basket, and when every SKU has a unit left,
// writes each one less. Read and write are separate on purpose: only the
// lock keeps two orders from selling the same unit.
func (s *shop) place(ctx context.Context, basket []int) error {
	pipe := s.rdb.Pipeline()
	gets := make([]*redis.StringCmd, len(basket))
	for i, sku := range basket {
		gets[i] = pipe.Get(ctx, s.stock[sku])
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return err
	}
	left := make([]int64, len(basket))
	for i, g := range gets {
		n, err := g.Int64()
		if err != nil {
			return err
		}
		if n < 1 {
			return nil // out of stock: the order is refused
		}
		left[i] = n - 1
	}
	pipe = s.rdb.Pipeline()
	for i, sku := range basket {
		pipe.Set(ctx, s.stock[sku], left[i], 0)
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return err
	}
	for _, sku := range basket {
		s.sold[sku].Add(1)
	}
	atomic.AddInt64(&s.res.Orders, 1)
	return nil
}

// audit compares every SKU's stock with the units the orders took.
func (s *shop) audit(ctx context.Context, stock int64) error {
	pipe := s.rdb.Pipeline()
	gets := make([]*redis.StringCmd, len(s.stock))
	for i, k := range s.stock {
		gets[i] = pipe.Get(ctx, k)
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return err
	}
	for i, g := range gets {
		left, err := strconv.ParseInt(g.Val(), 10, 64)
		if err != nil {
			return fmt.Errorf("%s: stock of SKU %d: %w", s.l.Name(), i, err)
		}
		sold := s.sold[i].Load()
		if diff := sold - (stock - left); diff != 0 || left < 0 {
			s.res.Oversold += max(diff, -diff, -left)
		}
	}
	return nil
}
