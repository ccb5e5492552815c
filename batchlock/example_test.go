package batchlock_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/batchlock/batchlock/batchlock"
)

// An order locks its whole basket in one call: every SKU, on every shard.
func ExampleClient_Do() {
	// Settings under which calls end with their context and recover fast.
	rdb := redis.NewClusterClient(batchlock.ClusterOptions("127.0.0.1:7000", "127.0.0.1:7001", "127.0.0.1:7002"))
	defer rdb.Close()
	locks, err := batchlock.New(rdb)
	if err != nil {
		log.Fatal(err)
	}
	defer locks.Close()

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	basket := []string{"sku:1001", "sku:2002", "sku:3003"}
	err = locks.Do(ctx, basket, func(ctx context.Context) error {
		// ctx is cancelled if the lock is lost: stop writing then.
		return decrementStock(ctx, rdb, basket)
	})
	if errors.Is(err, batchlock.ErrNotObtained) {
		fmt.Println("basket busy, try later")
	}
}

// TryLock makes one attempt and says which keys were held by someone else.
func ExampleClient_TryLock() {
	rdb := redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{"127.0.0.1:7000"}})
	defer rdb.Close()
	locks, err := batchlock.New(rdb, batchlock.WithPrefix("shop:lock:"))
	if err != nil {
		log.Fatal(err)
	}
	defer locks.Close()

	ctx := context.Background()
	l, err := locks.TryLock(ctx, []string{"sku:1", "sku:2"}, batchlock.WithTTL(30*time.Second))
	var conflict *batchlock.ConflictError
	switch {
	case errors.As(err, &conflict):
		fmt.Println("held by others:", conflict.Keys)
		return
	case err != nil:
		log.Fatal(err)
	}
	defer l.Unlock(ctx)
	// Pass the fencing token to storage that rejects stale writers.
	fmt.Println("token of sku:1:", l.Token("sku:1"))
}

// A Lock reports its loss through Done and Err.
func ExampleLock_Done() {
	rdb := redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{"127.0.0.1:7000"}})
	defer rdb.Close()
	locks, err := batchlock.New(rdb, batchlock.WithLease(10*time.Second))
	if err != nil {
		log.Fatal(err)
	}
	defer locks.Close()

	ctx := context.Background()
	l, err := locks.Lock(ctx, []string{"batch:42"})
	if err != nil {
		log.Fatal(err)
	}
	defer l.Unlock(ctx)
	select {
	case <-l.Done():
		log.Printf("lock lost: %v", l.Err())
	case <-time.After(time.Minute): // the work
	}
}

func decrementStock(ctx context.Context, rdb *redis.ClusterClient, skus []string) error {
	for _, sku := range skus {
		if err := rdb.Decr(ctx, "stock:"+sku).Err(); err != nil {
			return err
		}
	}
	return nil
}
