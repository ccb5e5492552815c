// Command pgorderprocessor is a small batch order processor whose stock is
// in PostgreSQL, locked with batchlock on Redis Cluster: a starting point to
// copy, built on package pgorders. Each order locks its basket (with its own
// deadline, before BEGIN), then runs one transaction in the lock's context
// whose every stock write carries the key's fencing token, and commits only
// while the lock holds.
//
//	go -C examples run ./pgorderprocessor --addrs 127.0.0.1:7000,127.0.0.1:7001,127.0.0.1:7002
//
// or with BATCHLOCK_CLUSTER_ADDRS set instead of --addrs. --database names
// an empty PostgreSQL database (default $DATABASE_URL); without one it starts
// a throwaway server and removes it at the end.
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

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"
	"golang.org/x/sync/errgroup"

	"github.com/batchlock/batchlock/batchlock"
	"github.com/batchlock/batchlock/examples/pgorders"
	"github.com/batchlock/batchlock/examples/pgserver"
	"github.com/batchlock/batchlock/orders"
)

// Orders 1001, 1002 and 1004 want 12 apples of 8: one of them, depending
// on which come first, is rejected whole.
var list = []orders.Order{
	{ID: "1001", Lines: []orders.Line{{SKU: "apple", Qty: 3}, {SKU: "pear", Qty: 1}, {SKU: "plum", Qty: 2}}},
	{ID: "1002", Lines: []orders.Line{{SKU: "apple", Qty: 4}, {SKU: "fig", Qty: 1}}},
	{ID: "1003", Lines: []orders.Line{{SKU: "pear", Qty: 2}, {SKU: "plum", Qty: 2}, {SKU: "fig", Qty: 2}, {SKU: "kiwi", Qty: 1}}},
	{ID: "1004", Lines: []orders.Line{{SKU: "apple", Qty: 5}}},
	{ID: "1005", Lines: []orders.Line{{SKU: "kiwi", Qty: 2}, {SKU: "fig", Qty: 1}}},
}

var skus = []string{"apple", "pear", "plum", "fig", "kiwi"}

const unitsPerSKU = 8

func main() {
	addrs := flag.String("addrs", os.Getenv("BATCHLOCK_CLUSTER_ADDRS"), "cluster seeds, comma-separated")
	database := flag.String("database", os.Getenv("DATABASE_URL"), "URL of an empty PostgreSQL database (default: a throwaway server)")
	flag.Parse()
	if *addrs == "" {
		log.Fatal("pass --addrs host:port,... or set BATCHLOCK_CLUSTER_ADDRS")
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := run(ctx, strings.Split(*addrs, ","), *database); err != nil {
		log.Print(err)
		cancel()
		os.Exit(1)
	}
}

func run(ctx context.Context, addrs []string, database string) error {
	// Settings that let calls end with their context and recover fast
	// after a failover (see the README).
	rdb := redis.NewClusterClient(batchlock.ClusterOptions(addrs...))
	defer rdb.Close()
	locks, err := batchlock.New(rdb)
	if err != nil {
		return err
	}
	defer locks.Close()

	if database == "" {
		server, err := pgserver.Start(ctx)
		if err != nil {
			return err
		}
		defer server.Close()
		database = server.URL()
	}
	db, err := pgxpool.New(ctx, database)
	if err != nil {
		return err
	}
	defer db.Close()
	store := pgorders.NewStore(db, "example:pgorderprocessor:")
	if err := store.Setup(ctx, skus, unitsPerSKU); err != nil {
		return err
	}

	// Each order: lock the basket (waiting at most LockWait, before any
	// transaction begins), then one transaction in the lock's context.
	p := &pgorders.Processor{Locker: locks, Store: store, LockWait: 5 * time.Second}
	res := orders.Result{SoldBySKU: map[string]int64{}}
	accepted := make([]bool, len(list))
	var g errgroup.Group
	for i, o := range list {
		g.Go(func() error {
			out, err := p.Process(ctx, o)
			switch {
			case err != nil:
				return fmt.Errorf("order %s: %w", o.ID, err)
			case out.Accepted:
				accepted[i] = true
				fmt.Printf("order %s accepted\n", o.ID)
			default:
				fmt.Printf("order %s rejected: short of stock\n", o.ID)
			}
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return err
	}
	for i, o := range list {
		if accepted[i] {
			res.Accepted++
			for _, l := range o.Lines {
				res.SoldBySKU[l.SKU] += l.Qty
			}
		}
	}

	// The database, read back: nothing oversold, every accepted order
	// whole, no row written by a stale token.
	audit, err := store.Audit(ctx, res)
	if err != nil {
		return err
	}
	fmt.Printf("%d units of %d sold, %d left\n", audit.Sold, audit.Initial, audit.Remaining)
	if !audit.Passed() {
		return errors.New("audit failed: " + fmt.Sprint(audit.Problems))
	}
	fmt.Println("audit passed")
	return nil
}
