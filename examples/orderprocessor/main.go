// Command orderprocessor is a small batch order processor on Redis Cluster:
// a starting point to copy. Each order locks every SKU of its basket at
// once with batchlock, checks the stock of every line, and takes the units
// of every line or of none. Orders run concurrently; those that share SKUs
// wait for each other, and stock is never oversold.
//
//	go -C examples run ./orderprocessor --addrs 127.0.0.1:7000,127.0.0.1:7001,127.0.0.1:7002
//
// or with BATCHLOCK_CLUSTER_ADDRS set instead of --addrs. It writes keys
// under example:orderprocessor: and deletes them at the end.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log"
	"os"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
	"golang.org/x/sync/errgroup"

	"github.com/batchlock/batchlock/batchlock"
	"github.com/batchlock/batchlock/examples/fenced"
)

const keyPrefix = "example:orderprocessor:stock:"

// order is a customer order: units wanted per SKU.
type order struct {
	id    string
	lines map[string]int64
}

// Orders 1001, 1002 and 1004 want 12 apples of 8: one of them, depending
// on which come first, is rejected whole.
var orders = []order{
	{"1001", map[string]int64{"apple": 3, "pear": 1, "plum": 2}},
	{"1002", map[string]int64{"apple": 4, "fig": 1}},
	{"1003", map[string]int64{"pear": 2, "plum": 2, "fig": 2, "kiwi": 1}},
	{"1004", map[string]int64{"apple": 5}},
	{"1005", map[string]int64{"kiwi": 2, "fig": 1}},
}

var initialStock = map[string]int64{"apple": 8, "pear": 5, "plum": 4, "fig": 4, "kiwi": 3}

var errOutOfStock = errors.New("out of stock")

func main() {
	addrs := flag.String("addrs", os.Getenv("BATCHLOCK_CLUSTER_ADDRS"), "cluster seeds, comma-separated")
	flag.Parse()
	if *addrs == "" {
		log.Fatal("pass --addrs host:port,... or set BATCHLOCK_CLUSTER_ADDRS")
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := run(ctx, strings.Split(*addrs, ",")); err != nil {
		log.Print(err)
		cancel()
		os.Exit(1)
	}
}

func run(ctx context.Context, addrs []string) error {
	// Settings that let calls end with their context and recover within a
	// second or two when a master fails over (go-redis defaults take much
	// longer).
	rdb := redis.NewClusterClient(batchlock.ClusterOptions(addrs...))
	defer rdb.Close()

	// One batchlock Client per process: it runs the watchdog that renews
	// leases, and the pub/sub connections that wake waiters.
	locks, err := batchlock.New(rdb)
	if err != nil {
		return err
	}
	defer locks.Close()

	if err := setUp(ctx, rdb); err != nil {
		return err
	}
	defer cleanUp(rdb)

	var g errgroup.Group
	for _, o := range orders {
		g.Go(func() error {
			err := process(ctx, locks, rdb, o)
			switch {
			case errors.Is(err, errOutOfStock):
				fmt.Printf("order %s rejected: %v\n", o.id, err)
			case err != nil:
				return fmt.Errorf("order %s: %w", o.id, err)
			default:
				fmt.Printf("order %s accepted\n", o.id)
			}
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return err
	}
	return report(ctx, rdb)
}

// process takes one order: all its lines, or none.
func process(ctx context.Context, locks *batchlock.Client, rdb *redis.ClusterClient, o order) error {
	keys := make([]string, 0, len(o.lines))
	for sku := range o.lines {
		keys = append(keys, keyPrefix+sku)
	}

	// Do locks every key at once (one round trip per master, whatever the
	// number of keys), waits while other orders hold some of them, and
	// always unlocks. Its owner is fresh, made by batchlock for this call,
	// and rides on ctx: code called inside Do may lock the same keys again
	// without deadlocking with itself. An owner of our own, such as
	// WithOwner("order-"+o.id), would be wrong here: two processes that
	// handle one order at once (a redelivery) would both hold its keys,
	// since locks of one owner are reentrant. A shared owner is right only
	// for holders that are one holder, such as calls inside one Do.
	return locks.Do(ctx, keys, func(ctx context.Context) error {
		// The lock Do holds rides on ctx: its fencing tokens are what the
		// writes below carry.
		l, _ := batchlock.LockFromContext(ctx)

		// Read every line's stock in one pipeline: one round trip per master.
		pipe := rdb.Pipeline()
		units := make(map[string]*redis.StringCmd, len(keys))
		for sku := range o.lines {
			units[sku] = pipe.HGet(ctx, keyPrefix+sku, "units")
		}
		if _, err := pipe.Exec(ctx); err != nil {
			return fmt.Errorf("reading stock: %w", err)
		}
		for sku, want := range o.lines {
			have, err := units[sku].Int64()
			if err != nil {
				return fmt.Errorf("reading stock of %s: %w", sku, err)
			}
			if have < want {
				return fmt.Errorf("%w: %d %s wanted, %d left", errOutOfStock, want, sku, have)
			}
		}

		// Every line is in stock, and no other order can change that while
		// we hold the lock: take the units, each write carrying its key's
		// fencing token. If the lock is lost meanwhile, ctx is cancelled.
		// The writes go to several masters and are not atomic together: a
		// production processor makes them idempotent (remember the order
		// id per SKU) so that it can retry them after a failover.
		pipe = rdb.Pipeline()
		for sku, want := range o.lines {
			key := keyPrefix + sku
			fenced.Take.EvalSha(ctx, pipe, []string{key}, l.Token(key), want)
		}
		if _, err := pipe.Exec(ctx); err != nil {
			return fmt.Errorf("taking stock: %w", err)
		}
		return nil
	})
}

func setUp(ctx context.Context, rdb *redis.ClusterClient) error {
	if err := fenced.LoadTake(ctx, rdb); err != nil {
		return err
	}
	pipe := rdb.Pipeline()
	for sku, n := range initialStock {
		pipe.HSet(ctx, keyPrefix+sku, "units", n, "fence", 0)
	}
	_, err := pipe.Exec(ctx)
	return err
}

func report(ctx context.Context, rdb *redis.ClusterClient) error {
	for sku, n := range initialStock {
		left, err := rdb.HGet(ctx, keyPrefix+sku, "units").Int64()
		if err != nil {
			return err
		}
		fmt.Printf("%-6s %d of %d left\n", sku, left, n)
	}
	return nil
}

func cleanUp(rdb *redis.ClusterClient) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for sku := range initialStock {
		rdb.Del(ctx, keyPrefix+sku)
	}
}
