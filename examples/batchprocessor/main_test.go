package main

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

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
}
