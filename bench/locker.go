// Package bench measures batchlock against the Redis lock libraries Go
// programs use today, redsync and redislock, on a Redis Cluster: latency of
// locking many keys, hand-off between a holder and a waiter, throughput of
// an order workload under contention, and cost in Redis.
package bench

import (
	"context"
	"errors"
	"slices"
	"sync"
	"time"

	"golang.org/x/sync/errgroup"
)

// TTL is the lease every library gets, long enough to outlive any sample.
const TTL = 10 * time.Second

// scriptCommands are the commands a script call is, as INFO commandstats
// names them: a Runner sends EVALSHA, and EVAL where a node lacks the
// script.
var scriptCommands = []string{"evalsha", "eval"}

// sendsScripts says whether l sends script calls itself.
func sendsScripts(l Locker) bool {
	return slices.ContainsFunc(l.Commands(), func(c string) bool { return slices.Contains(scriptCommands, c) })
}

// Locker locks a batch of keys, waiting while they are held, the way one
// library is used. Keys come sorted.
type Locker interface {
	Name() string
	Lock(ctx context.Context, keys []string) (Held, error)
	// Commands are the commands the library sends itself, as INFO
	// commandstats names them; those its scripts call are counted there too
	// and must not count twice.
	Commands() []string
}

// SharedLocker is a Locker that also takes keys shared, in the same call as
// the exclusive ones.
type SharedLocker interface {
	Locker
	LockShared(ctx context.Context, keys, shared []string) (Held, error)
}

// Held is a batch of keys locked by a Locker.
type Held interface {
	Unlock(ctx context.Context) error
}

// LockUnlock locks keys and unlocks them at once: the unit of the latency
// workload.
func LockUnlock(ctx context.Context, l Locker, keys []string) error {
	h, err := l.Lock(ctx, keys)
	if err != nil {
		return err
	}
	return h.Unlock(ctx)
}

// keyLock is a single-key library: it takes one key, waiting as the
// library does, and returns the function that releases it.
type keyLock func(ctx context.Context, key string) (unlock func(context.Context) error, err error)

// perKey uses a single-key library for a batch, one lock per key, either one
// key after the other in sorted order, or one goroutine per key (keys still
// started in sorted order). Both are what users of such libraries write.
type perKey struct {
	name     string
	lock     keyLock
	parallel bool
	commands []string
}

func (p *perKey) Name() string       { return p.name }
func (p *perKey) Commands() []string { return p.commands }

func (p *perKey) Lock(ctx context.Context, keys []string) (Held, error) {
	h := &perKeyHeld{parallel: p.parallel, unlocks: make([]func(context.Context) error, len(keys))}
	var err error
	if p.parallel {
		g, gctx := errgroup.WithContext(ctx)
		for i, k := range keys {
			g.Go(func() error {
				var e error
				h.unlocks[i], e = p.lock(gctx, k)
				return e
			})
		}
		err = g.Wait()
	} else {
		for i, k := range keys {
			if h.unlocks[i], err = p.lock(ctx, k); err != nil {
				break
			}
		}
	}
	if err != nil {
		// Give back what was taken, even when ctx is what failed.
		ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), TTL)
		defer cancel()
		return nil, errors.Join(err, h.Unlock(ctx))
	}
	return h, nil
}

type perKeyHeld struct {
	parallel bool
	unlocks  []func(context.Context) error // nil where the key was not taken
}

func (h *perKeyHeld) Unlock(ctx context.Context) error {
	errs := make([]error, len(h.unlocks))
	if h.parallel {
		var wg sync.WaitGroup
		for i, u := range h.unlocks {
			if u != nil {
				wg.Go(func() { errs[i] = u(ctx) })
			}
		}
		wg.Wait()
	} else {
		for i, u := range h.unlocks {
			if u != nil {
				errs[i] = u(ctx)
			}
		}
	}
	return errors.Join(errs...)
}

// OneSlot makes every key of a batch share one hash tag ({one-slot}), so
// that the whole batch is in one slot: for batchlock, one script call per
// 512 keys instead of one per slot, and one fencing counter; for the fenced
// floor, one INCRBY. The report's measure of what the per-slot work costs.
type OneSlot struct{ Locker }

// OneSlotTag is the hash tag OneSlot puts before every key, that of the
// space OneSlotSpace (orders.Batched.Space).
const (
	OneSlotSpace = "one-slot"
	OneSlotTag   = "{" + OneSlotSpace + "}"
)

func (o OneSlot) Name() string { return o.Locker.Name() + OneSlotSuffix }

func (o OneSlot) Lock(ctx context.Context, keys []string) (Held, error) {
	tagged := make([]string, len(keys))
	for i, k := range keys {
		tagged[i] = OneSlotTag + k
	}
	return o.Locker.Lock(ctx, tagged)
}
