package bench

import (
	"context"

	"github.com/batchlock/batchlock/batchlock"
)

// Batchlock takes the whole batch with one Lock call and a fixed TTL, as
// the peers have, so that no watchdog work is measured.
type Batchlock struct {
	name string
	c    *batchlock.Client
}

// NewBatchlock wraps c under a name for the report.
func NewBatchlock(name string, c *batchlock.Client) *Batchlock {
	return &Batchlock{name: name, c: c}
}

func (b *Batchlock) Name() string       { return b.name }
func (b *Batchlock) Commands() []string { return []string{"evalsha", "eval"} }

func (b *Batchlock) Lock(ctx context.Context, keys []string) (Held, error) {
	return b.c.Lock(ctx, keys, batchlock.WithTTL(TTL))
}

// LockShared takes keys exclusively and shared shared, in one Lock call.
func (b *Batchlock) LockShared(ctx context.Context, keys, shared []string) (Held, error) {
	return b.c.Lock(ctx, keys, batchlock.WithTTL(TTL), batchlock.WithShared(shared...))
}
