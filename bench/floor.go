package bench

import (
	"context"
	_ "embed"
	"errors"
	"fmt"

	"github.com/redis/go-redis/v9"

	"github.com/batchlock/batchlock/hashtag"
	"github.com/batchlock/batchlock/internal/script"
)

// Floor is the least any lock with per-key leases in Redis must do, the
// reference the other libraries are measured against: one script call per
// master that writes every key with SET key v PX ttl, then one that deletes
// them, the masters in parallel. It checks nothing and waits for nothing.
type Floor struct {
	rdb    *redis.ClusterClient
	runner *script.Runner
}

var (
	//go:embed floor/lock.lua
	floorLockSource string
	//go:embed floor/unlock.lua
	floorUnlockSource string

	floorLock   = redis.NewScript(floorLockSource)
	floorUnlock = redis.NewScript(floorUnlockSource)
)

// NewFloor returns the floor on rdb.
func NewFloor(rdb *redis.ClusterClient) (*Floor, error) {
	runner, err := script.New(rdb)
	if err != nil {
		return nil, err
	}
	return &Floor{rdb: rdb, runner: runner}, nil
}

func (f *Floor) Name() string       { return NameFloor }
func (f *Floor) Commands() []string { return []string{"evalsha", "eval"} }

func (f *Floor) Lock(ctx context.Context, keys []string) (Held, error) {
	calls, err := f.perMaster(ctx, keys, TTL.Milliseconds())
	if err != nil {
		return nil, err
	}
	f.runner.Send(ctx, floorLock, calls, script.Ack{})
	if err := firstError(calls); err != nil {
		return nil, err
	}
	return floorHeld{f: f, keys: keys}, nil
}

type floorHeld struct {
	f    *Floor
	keys []string
}

func (h floorHeld) Unlock(ctx context.Context) error {
	calls, err := h.f.perMaster(ctx, h.keys)
	if err != nil {
		return err
	}
	h.f.runner.Send(ctx, floorUnlock, calls, script.Ack{})
	return firstError(calls)
}

// perMaster makes one call per master of keys, with args before the keys.
func (f *Floor) perMaster(ctx context.Context, keys []string, args ...any) ([]*script.Call, error) {
	byMaster := map[string]*script.Call{}
	var calls []*script.Call
	for _, k := range keys {
		node, err := f.rdb.MasterForKey(ctx, k)
		if err != nil {
			return nil, err
		}
		c := byMaster[node.Options().Addr]
		if c == nil {
			c = &script.Call{Slot: hashtag.Slot(k), Keys: []string{k}, Args: append([]any(nil), args...)}
			byMaster[node.Options().Addr] = c
			calls = append(calls, c)
		}
		c.Args = append(c.Args, k)
	}
	return calls, nil
}

func firstError(calls []*script.Call) error {
	var errs []error
	for _, c := range calls {
		if err := c.Reply.Err(); err != nil {
			errs = append(errs, fmt.Errorf("floor: slot %d: %w", c.Slot, err))
		}
	}
	return errors.Join(errs...)
}
