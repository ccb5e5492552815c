package batchlock

import (
	"context"
	"errors"
	"fmt"

	"github.com/batchlock/batchlock/internal/errprefix"
	"github.com/batchlock/batchlock/internal/script"
)

// route runs b through the Client's one routing loop. A single-node client
// whose server is a cluster node is bad input, said at once, not a slot on
// the move to wait for.
func (c *Client) route(ctx context.Context, b script.Batch) []script.Result {
	results := c.runner.Route(ctx, b)
	for i := range results {
		if errors.Is(results[i].Err, script.ErrClusterNode) {
			results[i].Err = fmt.Errorf("%w: %w", ErrInvalid, errprefix.Inner(results[i].Err))
		}
	}
	return results
}
