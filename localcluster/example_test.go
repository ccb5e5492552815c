package localcluster_test

import (
	"context"
	"fmt"
	"log"
	"time"

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
