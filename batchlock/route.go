package batchlock

import (
	"context"
	"errors"
	"fmt"

	"github.com/batchlock/batchlock/internal/routing"
)

// route runs b through the Client's one routing loop, and says what its
// parts met in the library's words. A single-node client whose server is a
// cluster node is bad input, said at once, not a slot on the move to wait
// for.
func (c *Client) route(ctx context.Context, b routing.Batch) []routing.Result {
	results := c.runner.Route(ctx, b)
	for i := range results {
		if e, ok := results[i].Err.(*routing.Error); ok {
			results[i].Err = described(e)
		}
		if errors.Is(results[i].Err, routing.ErrClusterNode) {
			results[i].Err = fmt.Errorf("%w: %w", ErrInvalid, inner(results[i].Err))
		}
	}
	return results
}
