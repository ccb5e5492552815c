// Package backoff is the jittered exponential pause shared by batchlock's
// retries, Redlock's attempts and the orders workload's retries.
package backoff

import (
	"context"
	"math/rand/v2"
	"time"
)

// Jittered returns the pause before retry number attempt (from 0): base
// doubled per attempt up to max, then drawn at random from its upper half,
// so that clients that failed together do not retry together.
func Jittered(attempt int, base, max time.Duration) time.Duration {
	d := base << min(attempt, 20)
	if d <= 0 || d > max {
		d = max
	}
	return d/2 + rand.N(d/2+1)
}

// Sleep waits d, or until ctx is done, and then returns its cause.
func Sleep(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return context.Cause(ctx)
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return context.Cause(ctx)
	}
}
