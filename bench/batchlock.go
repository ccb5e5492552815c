package bench

import (
	"context"

	"github.com/batchlock/batchlock/batchlock"
)

// Batchlock takes the whole batch with one Lock call: with a fixed TTL, as
// the peers have, so that no watchdog work is measured, or renewed by the
// watchdog, as Do and a plain Lock are, for the workloads where a waiter is
// granted keys (contention, hand-off): a renewed lock counts on a granted
// key without a call, a WithTTL lock takes it up with one.
type Batchlock struct {
	name string
	c    *batchlock.Client
	opts []batchlock.LockOption
}

// NewBatchlock wraps c under a name for the report; its locks have a fixed
// TTL.
func NewBatchlock(name string, c *batchlock.Client) *Batchlock {
	return &Batchlock{name: name, c: c, opts: []batchlock.LockOption{batchlock.WithTTL(TTL)}}
}

// NewRenewedBatchlock wraps c under a name for the report; its locks are
// renewed by the watchdog, with c's lease (WithLease(TTL) in the suite).
func NewRenewedBatchlock(name string, c *batchlock.Client) *Batchlock {
	return &Batchlock{name: name, c: c}
}

func (b *Batchlock) Name() string       { return b.name }
func (b *Batchlock) Commands() []string { return scriptCommands }

func (b *Batchlock) Lock(ctx context.Context, keys []string) (Held, error) {
	return b.c.Lock(ctx, keys, b.opts...)
}

// LockShared takes keys exclusively and shared shared, in one Lock call.
func (b *Batchlock) LockShared(ctx context.Context, keys, shared []string) (Held, error) {
	return b.c.Lock(ctx, keys, append(b.opts, batchlock.WithShared(shared...))...)
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
