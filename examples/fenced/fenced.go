// Package fenced is the fenced stock write of the examples that keep their
// stock in Redis: one script, so that the examples cannot drift apart on
// what a stale or missing token does.
package fenced

import (
	"context"
	_ "embed"
	"fmt"

	"github.com/redis/go-redis/v9"
)

var (
	//go:embed take.lua
	takeSource string

	// Take decrements one SKU's units, unless a holder with a newer
	// fencing token has already written the SKU (take.lua).
	Take = redis.NewScript(takeSource)
)

// LoadTake makes Take known to every master, so that it can be pipelined:
// in a pipeline, EVALSHA cannot fall back to EVAL.
func LoadTake(ctx context.Context, rdb *redis.ClusterClient) error {
	if err := rdb.ForEachMaster(ctx, func(ctx context.Context, node *redis.Client) error {
		return Take.Load(ctx, node).Err()
	}); err != nil {
		return fmt.Errorf("loading the take script: %w", err)
	}
	return nil
}
