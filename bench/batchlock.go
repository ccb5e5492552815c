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
func (b *Batchlock) Commands() []string { return scriptCommands }

func (b *Batchlock) Lock(ctx context.Context, keys []string) (Held, error) {
	return b.c.Lock(ctx, keys, batchlock.WithTTL(TTL))
}

// LockShared takes keys exclusively and shared shared, in one Lock call.
func (b *Batchlock) LockShared(ctx context.Context, keys, shared []string) (Held, error) {
	return b.c.Lock(ctx, keys, batchlock.WithTTL(TTL), batchlock.WithShared(shared...))
}

// ScriptsSent counts the script calls batchlock Clients sent, by kind, as
// Client.Stats counts them: every attempt, one call per master (per 1024
// keys) each.
type ScriptsSent struct{ Acquires, Releases, Extends uint64 }

func (s ScriptsSent) plus(o ScriptsSent) ScriptsSent {
	return ScriptsSent{s.Acquires + o.Acquires, s.Releases + o.Releases, s.Extends + o.Extends}
}

func (s ScriptsSent) minus(o ScriptsSent) ScriptsSent {
	return ScriptsSent{s.Acquires - o.Acquires, s.Releases - o.Releases, s.Extends - o.Extends}
}

// scriptSender is a Locker whose library counts the script calls it
// sends.
type scriptSender interface{ ScriptsSent() ScriptsSent }

// ScriptsSent is what the Client sent so far.
func (b *Batchlock) ScriptsSent() ScriptsSent {
	s := b.c.Stats()
	return ScriptsSent{Acquires: s.Acquires, Releases: s.Releases, Extends: s.Extends}
}
