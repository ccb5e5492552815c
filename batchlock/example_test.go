package batchlock_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"os/signal"
	"syscall"
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

// A flash sale: many orders hold units of one hot SKU at once, all or
// nothing with the rest of their basket, and sell them as they let go.
func ExampleWithUnits() {
	rdb := redis.NewClusterClient(batchlock.ClusterOptions("127.0.0.1:7000"))
	defer rdb.Close()
	locks, err := batchlock.New(rdb)
	if err != nil {
		log.Fatal(err)
	}
	defer locks.Close()

	ctx := context.Background()
	if err := locks.SetCapacity(ctx, "sku:hot", 500); err != nil { // the stock on hand
		log.Fatal(err)
	}
	l, err := locks.Lock(ctx, []string{"order:7"}, batchlock.WithUnits(map[string]int64{"sku:hot": 2, "sku:9": 1}),
		batchlock.WithWait(5*time.Second))
	if err != nil {
		log.Fatal(err) // ErrInvalid: sku:9 has no capacity set
	}
	// Write the sale to the store of record, fenced by l.Token("sku:hot"),
	// then sell the units: the capacities go down by 2 and 1.
	if err := l.Consume(ctx); err != nil {
		log.Fatal(err)
	}
}

// A Lock reports its loss through its Context and Err.
func ExampleLock_Context() {
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
	case <-l.Context().Done():
		log.Printf("lock lost: %v", l.Err())
	case <-time.After(time.Minute): // the work
	}
}

// Inside Do, LockFromContext gives the lock, whose fencing tokens go with
// each write: a Redis script refuses a write whose token is older than the
// newest that wrote the SKU, so a holder paused past its lease cannot undo
// the next owner's work.
func ExampleLockFromContext() {
	rdb := redis.NewClusterClient(batchlock.ClusterOptions("127.0.0.1:7000", "127.0.0.1:7001", "127.0.0.1:7002"))
	defer rdb.Close()
	locks, err := batchlock.New(rdb)
	if err != nil {
		log.Fatal(err)
	}
	defer locks.Close()

	ctx := context.Background()
	skus := []string{"sku:1", "sku:2", "sku:3"}
	err = locks.Do(ctx, skus, func(ctx context.Context) error {
		l, _ := batchlock.LockFromContext(ctx) // the Lock that Do holds
		for _, sku := range skus {
			if err := take.Run(ctx, rdb, []string{"stock:" + sku}, l.Token(sku), 1).Err(); err != nil {
				return fmt.Errorf("taking %s: %w", sku, err) // STALE, or ctx ended: lock lost
			}
		}
		return nil
	})
	if err != nil {
		log.Print(err)
	}
}

// take decrements a SKU's units, unless a newer token already wrote the SKU.
// Tokens start at 1: a 0 is the token of a key the lock does not hold.
var take = redis.NewScript(`
local token = tonumber(ARGV[1])
if token < 1 then return redis.error_reply('NOTOKEN not a key of the lock') end
if token < tonumber(redis.call('HGET', KEYS[1], 'fence') or '0') then return redis.error_reply('STALE token') end
redis.call('HSET', KEYS[1], 'fence', token)
return redis.call('HINCRBY', KEYS[1], 'units', -tonumber(ARGV[2]))`)

// WithWait bounds the wait for the keys, not the hold: once held, the lock
// lasts as long as the work.
func ExampleWithWait() {
	rdb := redis.NewClusterClient(batchlock.ClusterOptions("127.0.0.1:7000"))
	defer rdb.Close()
	locks, err := batchlock.New(rdb)
	if err != nil {
		log.Fatal(err)
	}
	defer locks.Close()

	ctx := context.Background()
	skus := []string{"sku:1", "sku:2"}
	work := func(ctx context.Context) error { return decrementStock(ctx, rdb, skus) }
	err = locks.Do(ctx, skus, work, batchlock.WithWait(5*time.Second))
	if conflict, ok := errors.AsType[*batchlock.ConflictError](err); ok {
		log.Printf("busy: %v held by %v", conflict.Keys, conflict.Holders)
	}
}

// The errors of Do, tested in an order that retries only what a retry can
// cure (retryable).
func ExampleClient_Do_errors() {
	rdb := redis.NewClusterClient(batchlock.ClusterOptions("127.0.0.1:7000"))
	defer rdb.Close()
	locks, err := batchlock.New(rdb)
	if err != nil {
		log.Fatal(err)
	}
	defer locks.Close()

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	skus := []string{"sku:1", "sku:2"}
	work := func(ctx context.Context) error { return decrementStock(ctx, rdb, skus) }
	for attempt := 1; ; attempt++ {
		err := locks.Do(ctx, skus, work, batchlock.WithWait(5*time.Second))
		if !retryable(ctx, err) || attempt == 4 {
			if err != nil {
				log.Print(err)
			}
			return
		}
		time.Sleep(time.Duration(attempt) * 100 * time.Millisecond)
	}
}

// retryable says whether a retry can cure err, an error of Do. ErrInvalid
// found in Redis, ErrOverCapacity and ErrNoReplicas also match
// ErrNotObtained, and a WithWait that runs out matches
// context.DeadlineExceeded: the order of the cases matters.
func retryable(ctx context.Context, err error) bool {
	switch {
	case err == nil:
		return false
	case errors.Is(err, batchlock.ErrInvalid):
		// A bug in the call: bad keys or options, an owner that holds a key shared
		// asking for it exclusively, units of a key with no capacity.
		return false
	case errors.Is(err, batchlock.ErrOverCapacity):
		return false // sold out: more units than the key has; reject the order
	case errors.Is(err, batchlock.ErrClosed), ctx.Err() != nil:
		return false // the Client is closed, or the caller gave up
	case errors.Is(err, batchlock.ErrNoReplicas):
		return true // too few replicas acknowledged in time: retry later, and alert
	case errors.Is(err, batchlock.ErrNotObtained):
		// Busy: keys held past WithWait (*ConflictError), or the lease ran out
		// while the keys were taken. fn did not run: retry later, with backoff.
		return true
	case errors.Is(err, batchlock.ErrLockLost):
		// fn ran and the lock was lost meanwhile (or held for WithMaxHold):
		// fenced writes after the loss were refused. Redo or repair the order.
		return false
	default:
		// fn's own error, possibly joined with an Unlock that failed (the keys
		// then go at the end of their lease): fn's error says what to do.
		return false
	}
}

// A batch order processor, run as replicas: orders go in as they arrive, and
// each tick locks the oldest baskets that are free, with one call per master.
// Keys of one hash tag make the replicas meet in one script call per tick.
func ExampleProcessor() {
	rdb := redis.NewClusterClient(batchlock.ClusterOptions("127.0.0.1:7000", "127.0.0.1:7001", "127.0.0.1:7002"))
	defer rdb.Close()
	locks, err := batchlock.New(rdb)
	if err != nil {
		log.Fatal(err)
	}
	defer locks.Close()

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM)
	defer stop()
	p, err := batchlock.NewProcessor[order](locks, 0) // one per replica: ticks of up to 256 baskets
	if err != nil {
		log.Fatal(err)
	}
	go func() {
		for o := range incoming() { // keys like "{warehouse-7}sku-42": one slot for the replicas
			if err := p.Add(o, batchlock.Basket{Keys: o.skus}); err != nil {
				log.Print(err) // ErrInvalid: this basket alone is bad
			}
		}
	}()
	go func() { // SIGTERM: the tick under way finishes, the rest goes back to the queue
		<-ctx.Done()
		left, _ := p.Close(context.Background())
		requeue(left)
	}()
	for {
		tick, err := p.Next(ctx)
		if err != nil {
			return // closed, or ctx ended
		}
		for _, b := range tick.Baskets {
			fulfil(b.Item, b.Lock) // each write fenced by b.Lock.Token(sku)
		}
		for _, f := range tick.Failed {
			log.Printf("order %d: %v", f.Item.id, f.Err) // units sold out, or none set
		}
		_ = tick.Done(context.WithoutCancel(ctx)) // one release per master for the tick
	}
}

type order struct {
	id   int
	skus []string
}

func incoming() <-chan order        { return make(chan order) }
func requeue([]order)               {}
func fulfil(order, *batchlock.Lock) {}

func decrementStock(ctx context.Context, rdb *redis.ClusterClient, skus []string) error {
	for _, sku := range skus {
		if err := rdb.Decr(ctx, "stock:"+sku).Err(); err != nil {
			return err
		}
	}
	return nil
}
