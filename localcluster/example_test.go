package localcluster_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/batchlock/batchlock/localcluster"
)

// A test that fails a master over while a client keeps working. Not run
// here (no Output comment): it needs Docker or redis-server.
func Example() {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c, err := localcluster.Start(ctx)
	if err != nil {
		log.Fatal(err) // in a test: t.Skip unless CI
	}
	defer c.Close()

	rdb := c.Client()
	defer rdb.Close()
	if err := rdb.Set(ctx, "{sku}:42", "7", 0).Err(); err != nil {
		log.Fatal(err)
	}
	slot, _ := rdb.ClusterKeySlot(ctx, "{sku}:42").Result()
	master, err := c.MasterOfSlot(ctx, int(slot))
	if err != nil {
		log.Fatal(err)
	}
	promoted, err := c.Failover(ctx, master.Addr)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("slot", slot, "moved from", master.Addr, "to", promoted)
	// The client follows the MOVED redirection within its retries. (The
	// first write may be lost: replication is asynchronous and a forced
	// failover does not wait for it.)
	if err := rdb.Set(ctx, "{sku}:42", "8", 0).Err(); err != nil {
		log.Fatal(err)
	}
}

// A test that loses a write WAIT counted as acknowledged: with two
// replicas per master, one acknowledges and the other, which never
// receives the write, takes over. Not run here: it needs a backend.
func ExampleCluster_PromoteLagging() {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c, err := localcluster.Start(ctx, localcluster.WithReplicasPerMaster(2))
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()

	rdb := c.Client()
	defer rdb.Close()
	slot, _ := rdb.ClusterKeySlot(ctx, "{sku}:42").Result()
	master, err := c.MasterOfSlot(ctx, int(slot))
	if err != nil {
		log.Fatal(err)
	}
	replicas, err := c.ReplicasOf(ctx, master.Addr)
	if err != nil {
		log.Fatal(err)
	}
	lagging := replicas[1].Addr
	node := redis.NewClient(&redis.Options{Addr: master.Addr, PoolSize: 1})
	defer node.Close()
	var acked *redis.Cmd
	err = c.PromoteLagging(ctx, master.Addr, lagging, func(ctx context.Context) error {
		// WAIT counts the replicas that acknowledged this connection's
		// writes: one pipeline on a one-connection client.
		_, err := node.Pipelined(ctx, func(p redis.Pipeliner) error {
			p.Set(ctx, "{sku}:42", "sold", 0)
			acked = p.Do(ctx, "WAIT", 1, 1000)
			return nil
		})
		return err
	})
	if err != nil {
		log.Fatal(err)
	}
	err = rdb.Get(ctx, "{sku}:42").Err()
	fmt.Println("acknowledged by", acked.Val(), "replica, lost:", errors.Is(err, redis.Nil))
}
