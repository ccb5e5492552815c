package bench

import (
	"context"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/batchlock/batchlock/orders"
)

// OrderConfig shapes the contention workload, the order workload of package
// orders: workers process orders whose baskets hold 1 to MaxBasket distinct
// SKUs, one unit each, against stock kept in Redis.
type OrderConfig struct {
	SKUs      int // distinct SKUs, spread over every master
	MaxBasket int
	Workers   int
	Stock     int64 // initial units of every SKU
	Rounds    int   // turns each library gets, alternating
	Slice     time.Duration
}

// DefaultOrders: baskets of up to 10 of 500 SKUs, 32 workers; every library
// gets three 4-second turns.
var DefaultOrders = OrderConfig{SKUs: 500, MaxBasket: 10, Workers: 32, Stock: 1_000_000, Rounds: 3, Slice: 4 * time.Second}

// OrderResult is what one library achieved over all its turns.
type OrderResult struct {
	Library string
	Orders  int64 // processed: accepted or rejected for want of stock
	GaveUp  int64 // lock not obtained within the library's own retry limits
	Elapsed time.Duration
	// Oversold counts units sold beyond a SKU's stock, or written by two
	// holders at once, as the orders audit finds them. Must be 0.
	Oversold int64
}

// PerSecond is the throughput of processed orders.
func (r OrderResult) PerSecond() float64 { return float64(r.Orders) / r.Elapsed.Seconds() }

// peerProcessor processes an order under a lock of a Locker: the basket's
// lock keys (named apart from the stock keys, which a single-key library
// would otherwise overwrite), then orders' own read, check and write.
type peerProcessor struct {
	l     Locker
	stock *orders.Stock
}

func (p *peerProcessor) Process(ctx context.Context, o orders.Order) (orders.Outcome, error) {
	keys := p.stock.Keys(o)
	for i, k := range keys {
		keys[i] = "lock:" + k
	}
	asked := time.Now()
	h, err := p.l.Lock(ctx, keys)
	if err != nil {
		return orders.Outcome{}, err
	}
	wait := time.Since(asked)
	out, err := p.stock.Fulfil(ctx, o, nil, 0, true)
	out.LockWait, out.Locked = wait, true
	if uerr := h.Unlock(context.WithoutCancel(ctx)); err == nil && uerr != nil && !out.Written {
		err = uerr
	}
	return out, err
}

// RunOrders runs the order workload for every library in turns (the order
// rotating every round), each on stock of its own, then audits every
// library's stock against the orders it accepted.
func RunOrders(ctx context.Context, rdb redis.UniversalClient, lockers []Locker, cfg OrderConfig) ([]OrderResult, error) {
	procs := make([]*peerProcessor, len(lockers))
	results := make([]OrderResult, len(lockers))
	sold := make([]map[string]int64, len(lockers))
	for i, l := range lockers {
		stock := orders.NewStock(rdb, "bench:"+l.Name()+":", orders.Catalogue(cfg.SKUs), cfg.Stock)
		if err := stock.Setup(ctx); err != nil {
			return nil, err
		}
		procs[i] = &peerProcessor{l: l, stock: stock}
		results[i].Library = l.Name()
		sold[i] = map[string]int64{}
	}
	for round := range cfg.Rounds {
		// Enough orders for any turn: a turn ends by time.
		list, err := orders.Generate(orders.GenConfig{SKUs: cfg.SKUs, Orders: 200_000, MaxBasket: cfg.MaxBasket, MaxQty: 1, Seed: uint64(round)})
		if err != nil {
			return nil, err
		}
		// Ids unique across rounds: a write is applied once per order id.
		for i := range list {
			list[i].ID = fmt.Sprintf("r%d-%s", round, list[i].ID)
		}
		for j := range procs {
			i := (j + round) % len(procs)
			stop := make(chan struct{})
			t := time.AfterFunc(cfg.Slice, func() { close(stop) })
			res := orders.Run(ctx, procs[i], list, orders.RunConfig{Workers: cfg.Workers, Attempts: 1, OrderTimeout: time.Minute, Stop: stop})
			t.Stop()
			if res.Unknown > 0 {
				return nil, fmt.Errorf("%s: %d orders failed half-written: %v", lockers[i].Name(), res.Unknown, res.FirstErrors)
			}
			results[i].Orders += int64(res.Accepted + res.Rejected)
			results[i].GaveUp += int64(res.Errors)
			results[i].Elapsed += res.Elapsed
			for sku, n := range res.SoldBySKU {
				sold[i][sku] += n
			}
		}
	}
	for i, p := range procs {
		audit, err := p.stock.Audit(ctx, sold[i])
		if err != nil {
			return nil, err
		}
		results[i].Oversold = audit.OversoldUnits
		if !audit.OnlyOversell() {
			return nil, fmt.Errorf("%s: the audit found %v", lockers[i].Name(), audit.Problems)
		}
		if err := p.stock.Cleanup(ctx); err != nil {
			return nil, err
		}
	}
	return results, nil
}
