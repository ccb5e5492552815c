// Command batchprocessor is a batch order processor on Redis Cluster: a
// starting point to copy when orders come in batches and the processor
// runs as replicas. Its batchlock.Processor takes the orders as they come,
// in arrival order, and each tick locks every basket that is free with one
// TryEach (one round trip per master, whatever the number of orders); the
// processor reads the stock of the tick's orders in one pipeline, writes it
// in one more, and lets go with the tick's Done. A busy basket waits, first
// among the younger ones, until a key that refused it may be free. The
// locks of every SKU share one hash tag ({shop}), so that replicas meet in
// one script call per tick; the stock keys stay spread over the masters.
// On SIGTERM it stops taking ticks, finishes the one under way, and hands
// back the orders it did not take.
//
//	make cluster-up   # the README's dev cluster, on 127.0.0.1:7000-7005
//	go -C examples run ./batchprocessor --addrs 127.0.0.1:7000,127.0.0.1:7001,127.0.0.1:7002
//
// or with BATCHLOCK_CLUSTER_ADDRS set instead of --addrs. It writes keys
// under example:batchprocessor: and deletes them at the end.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log"
	"math/rand/v2"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/batchlock/batchlock/batchlock"
	"github.com/batchlock/batchlock/examples/fenced"
)

const (
	keyPrefix = "example:batchprocessor:stock:"
	tickSize  = 64 // orders per tick
)

// order is a customer order: units wanted per SKU.
type order struct {
	id    string
	lines map[string]int64
}

func main() {
	addrs := flag.String("addrs", os.Getenv("BATCHLOCK_CLUSTER_ADDRS"), "cluster seeds, comma-separated")
	flag.Parse()
	if *addrs == "" {
		log.Fatal("pass --addrs host:port,... or set BATCHLOCK_CLUSTER_ADDRS")
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	rdb := redis.NewClusterClient(batchlock.ClusterOptions(strings.Split(*addrs, ",")...))
	defer rdb.Close()
	sum, err := run(ctx, rdb, queue(500, 40))
	if err != nil {
		log.Print(err)
		cancel()
		os.Exit(1)
	}
	fmt.Println(sum)
}

// summary is what a run did.
type summary struct {
	ticks, accepted, rejected, refusals int
	// ordered is the units of the orders accepted; sold and left what the
	// stock says, over every SKU; below counts SKUs below zero (oversold).
	ordered, sold, left int64
	below               int
}

func (s summary) String() string {
	return fmt.Sprintf("%d ticks: %d orders accepted (%d units), %d rejected (out of stock); %d baskets refused for a tick; stock: %d units sold, %d left, %d SKUs oversold",
		s.ticks, s.accepted, s.ordered, s.rejected, s.refusals, s.sold, s.left, s.below)
}

// queue is n orders over skus SKUs, a few of them in most baskets.
func queue(n, skus int) []order {
	rng := rand.New(rand.NewPCG(1, 2))
	out := make([]order, n)
	for i := range out {
		lines := map[string]int64{}
		for range 1 + rng.IntN(6) {
			lines[fmt.Sprintf("sku-%02d", rng.IntN(skus))] = 1 + rng.Int64N(3)
		}
		out[i] = order{id: fmt.Sprintf("%04d", i), lines: lines}
	}
	return out
}

func run(ctx context.Context, rdb *redis.ClusterClient, incoming []order) (summary, error) {
	// One batchlock Client per process: it runs the watchdog that renews
	// leases, and the pub/sub connections that wake waiters.
	locks, err := batchlock.New(rdb)
	if err != nil {
		return summary{}, err
	}
	defer locks.Close()
	skus := skusOf(incoming)
	if err := setUp(ctx, rdb, skus); err != nil {
		return summary{}, err
	}
	defer cleanUp(rdb, skus)

	p, err := batchlock.NewProcessor[order](locks, tickSize)
	if err != nil {
		return summary{}, err
	}
	for _, o := range incoming { // as the queue delivers them
		if err := p.Add(o, batchlock.Basket{Keys: lockKeysOf(o)}); err != nil {
			log.Printf("order %s refused: %v", o.id, err) // a bad basket, alone
		}
	}
	finished := make(chan struct{})
	defer close(finished)
	go func() {
		select {
		case <-ctx.Done(): // SIGTERM: stop taking ticks, hand the rest back
			left, _ := p.Close(context.Background())
			log.Printf("%d orders handed back to the queue", len(left))
		case <-finished:
		}
	}()

	var sum summary
	for done := 0; done < len(incoming); {
		tick, err := p.Next(ctx)
		if err != nil {
			return sum, err // closed, or ctx ended
		}
		results, err := fulfil(ctx, rdb, tick)
		// Let go of every lock of the tick, with one call per master, also
		// when the work failed.
		if uerr := tick.Done(context.WithoutCancel(ctx)); uerr != nil && err == nil {
			err = uerr
		}
		if err != nil {
			return sum, err
		}
		sum.ticks++
		for n, b := range tick.Baskets {
			count(&sum, b.Item, results[n])
		}
		done += len(tick.Baskets)
	}
	st := locks.Stats() // its one Processor's
	sum.refusals = int(st.RefusedByEarlier + st.RefusedByClient + st.RefusedInRedis)
	if _, err := p.Close(ctx); err != nil {
		return sum, err
	}
	return sum, report(ctx, rdb, skus, &sum)
}

func count(sum *summary, o order, accepted bool) {
	if !accepted {
		sum.rejected++
		return
	}
	sum.accepted++
	for _, units := range o.lines {
		sum.ordered += units
	}
}

// fulfil checks the stock of the tick's orders in one pipeline, and takes
// the units of those in stock in one more, each write carrying its key's
// fencing token. It returns, per order of the tick, whether it was accepted.
func fulfil(ctx context.Context, rdb *redis.ClusterClient, tick *batchlock.Tick[order]) ([]bool, error) {
	pipe := rdb.Pipeline()
	units := make([]map[string]*redis.StringCmd, len(tick.Baskets))
	for n, b := range tick.Baskets {
		units[n] = map[string]*redis.StringCmd{}
		for sku := range b.Item.lines {
			units[n][sku] = pipe.HGet(ctx, keyPrefix+sku, "units")
		}
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return nil, fmt.Errorf("reading stock: %w", err)
	}
	accepted := make([]bool, len(tick.Baskets))
	pipe = rdb.Pipeline()
	for n, b := range tick.Baskets {
		inStock := true
		for sku, want := range b.Item.lines {
			have, err := units[n][sku].Int64()
			if err != nil {
				return nil, fmt.Errorf("reading stock of %s: %w", sku, err)
			}
			inStock = inStock && have >= want
		}
		if !inStock {
			continue
		}
		accepted[n] = true
		for sku, want := range b.Item.lines {
			fenced.Take.EvalSha(ctx, pipe, []string{keyPrefix + sku}, b.Lock.Token(lockKey(sku)), want)
		}
	}
	// The writes go to several masters and are not atomic together: a
	// production processor makes them idempotent (remember the order id
	// per SKU) so that it can retry them after a failover.
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return nil, fmt.Errorf("taking stock: %w", err)
	}
	return accepted, nil
}

// lockKey is the lock of a SKU: every lock in one slot, by its hash tag.
func lockKey(sku string) string { return "{shop}" + keyPrefix + sku }

func lockKeysOf(o order) []string {
	keys := make([]string, 0, len(o.lines))
	for sku := range o.lines {
		keys = append(keys, lockKey(sku))
	}
	return keys
}

func skusOf(orders []order) []string {
	seen := map[string]bool{}
	var out []string
	for _, o := range orders {
		for sku := range o.lines {
			if !seen[sku] {
				seen[sku] = true
				out = append(out, sku)
			}
		}
	}
	return out
}

// initialUnits is every SKU's stock at the start: less than the orders
// want, so that some are rejected.
const initialUnits = 40

func setUp(ctx context.Context, rdb *redis.ClusterClient, skus []string) error {
	if err := fenced.LoadTake(ctx, rdb); err != nil {
		return err
	}
	pipe := rdb.Pipeline()
	for _, sku := range skus {
		pipe.HSet(ctx, keyPrefix+sku, "units", initialUnits, "fence", 0)
	}
	_, err := pipe.Exec(ctx)
	return err
}

// report adds up the units sold and left.
func report(ctx context.Context, rdb *redis.ClusterClient, skus []string, sum *summary) error {
	for _, sku := range skus {
		left, err := rdb.HGet(ctx, keyPrefix+sku, "units").Int64()
		if err != nil {
			return err
		}
		sum.left += left
		sum.sold += initialUnits - left
		if left < 0 {
			sum.below++
		}
	}
	return nil
}

func cleanUp(rdb *redis.ClusterClient, skus []string) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for _, sku := range skus {
		rdb.Del(ctx, keyPrefix+sku)
	}
}
