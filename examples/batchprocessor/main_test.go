package main

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/batchlock/batchlock/batchlock"
	"github.com/batchlock/batchlock/examples/fenced"
	"github.com/batchlock/batchlock/localcluster"
)

// The processor on a real six-node cluster (the backend the environment
// picks; without one the test skips, and under CI=true fails): every order
// ends, the stock sold is exactly what the accepted orders took, none is
// oversold, and busy baskets were refused and taken later.
func TestBatchProcessor(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	cl, err := localcluster.Start(ctx)
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("no cluster (CI=true, so this fails): %v", err)
		}
		t.Skipf("SKIPPED, no cluster: %v", err)
	}
	t.Cleanup(func() { assert.NoError(t, cl.Close()) })
	rdb := cl.Client()
	t.Cleanup(func() { _ = rdb.Close() })

	orders := queue(300, 20)
	sum, err := run(ctx, rdb, orders)
	require.NoError(t, err)
	assert.Equal(t, len(orders), sum.accepted+sum.rejected, "every order ended: %v", sum)
	assert.Positive(t, sum.rejected, "the stock ran out: %v", sum)
	assert.Positive(t, sum.refusals, "orders met busy baskets: %v", sum)
	assert.Equal(t, sum.ordered, sum.sold, "the stock sold is what the accepted orders took: %v", sum)
	assert.Zero(t, sum.below, "nothing oversold: %v", sum)

	// A write fenced with the token of a key the lock does not hold (the
	// stock key's name mistyped) is refused rather than let through.
	c, err := batchlock.New(rdb)
	require.NoError(t, err)
	defer c.Close()
	sku := keyPrefix + "sku-00"
	l, err := c.Lock(ctx, []string{sku})
	require.NoError(t, err)
	require.NoError(t, rdb.HSet(ctx, sku, "units", 5, "fence", 0).Err())
	t.Cleanup(func() { _ = rdb.Del(context.WithoutCancel(ctx), sku).Err() })
	err = fenced.Take.Run(ctx, rdb, []string{sku}, l.Token("sku-00"), 1).Err()
	assert.ErrorContains(t, err, "NOTOKEN", "a token of 0 is no token")
	after, err := rdb.HGet(ctx, sku, "units").Int64()
	require.NoError(t, err)
	assert.EqualValues(t, 5, after, "nothing written")
	require.NoError(t, fenced.Take.Run(ctx, rdb, []string{sku}, l.Token(sku), 1).Err(), "the lock's own token passes")
	require.NoError(t, l.Unlock(ctx))
}
