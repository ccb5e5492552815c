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

// Floor is the least a lock in Redis must do, the reference the other
// libraries are measured against, in one of two kinds:
//
//   - the floor (NewFloor), the least any lock with per-key leases must do:
//     one script call per master that writes every key with SET key v PX
//     ttl, then one that deletes them;
//   - the fenced floor (NewFencedFloor), the least a lock whose fencing
//     tokens move with their slot must do: the same calls, where the lock's
//     also counts, for each slot of the batch, the slot's tokens with one
//     INCRBY of a counter kept in that slot (FenceKey), and writes each key
//     with its token.
//
// The masters are called in parallel. Neither checks nor waits for anything.
type Floor struct {
	name   string
	fenced bool
	rdb    *redis.ClusterClient
	runner *script.Runner
}

var (
	//go:embed floor/lock.lua
	floorLockSource string
	//go:embed floor/fenced_lock.lua
	fencedFloorLockSource string
	//go:embed floor/unlock.lua
	floorUnlockSource string

	floorLock       = redis.NewScript(floorLockSource)
	fencedFloorLock = redis.NewScript(fencedFloorLockSource)
	floorUnlock     = redis.NewScript(floorUnlockSource)
)

// NewFloor returns the floor on rdb.
func NewFloor(rdb *redis.ClusterClient) *Floor { return newFloor(rdb, NameFloor, false) }

// NewFencedFloor returns the fenced floor on rdb.
func NewFencedFloor(rdb *redis.ClusterClient) *Floor {
	return newFloor(rdb, NameFencedFloor, true)
}

func newFloor(rdb *redis.ClusterClient, name string, fenced bool) *Floor {
	return &Floor{name: name, fenced: fenced, rdb: rdb, runner: script.NewCluster(rdb)}
}

// FenceKey is the fenced floor's token counter of slot, named as
// batchlock's are: in the slot it counts for, so that it moves with it.
func FenceKey(slot int) string { return "bench:fence:{" + hashtag.ForSlot(slot) + "}" }

func (f *Floor) Name() string       { return f.name }
func (f *Floor) Commands() []string { return scriptCommands }

func (f *Floor) Lock(ctx context.Context, keys []string) (Held, error) {
	masters, err := f.byMaster(ctx, keys)
	if err != nil {
		return nil, err
	}
	s := floorLock
	if f.fenced {
		s = fencedFloorLock
	}
	calls := make([]*script.Call, len(masters))
	for i, groups := range masters {
		calls[i] = lockCall(groups, f.fenced)
	}
	f.runner.Send(ctx, s, calls, script.Ack{})
	if err := callErrors(f.name, calls, keyCounts(masters)); err != nil {
		return nil, err
	}
	return floorHeld{f: f, masters: masters}, nil
}

// lockCall is the lock's call to one master, of the keys of groups: ARGV
// is the lease, then every key; fenced, the lease, then for each slot its
// counter, its number of keys and its keys.
func lockCall(groups []hashtag.Group, fenced bool) *script.Call {
	n := 1
	for _, g := range groups {
		n += len(g.Keys)
		if fenced {
			n += 2
		}
	}
	args := make([]any, 1, n)
	args[0] = TTL.Milliseconds()
	for _, g := range groups {
		if fenced {
			args = append(args, FenceKey(g.Slot), len(g.Keys))
		}
		for _, k := range g.Keys {
			args = append(args, k)
		}
	}
	return masterCall(groups, args)
}

type floorHeld struct {
	f       *Floor
	masters [][]hashtag.Group
}

func (h floorHeld) Unlock(ctx context.Context) error {
	counts := keyCounts(h.masters)
	calls := make([]*script.Call, len(h.masters))
	for i, groups := range h.masters {
		args := make([]any, 0, counts[i])
		for _, g := range groups {
			for _, k := range g.Keys {
				args = append(args, k)
			}
		}
		calls[i] = masterCall(groups, args)
	}
	h.f.runner.Send(ctx, floorUnlock, calls, script.Ack{})
	return callErrors(h.f.name, calls, counts)
}

// masterCall is a call with args, routed by the first key of groups.
func masterCall(groups []hashtag.Group, args []any) *script.Call {
	return &script.Call{Slot: groups[0].Slot, Keys: []string{groups[0].Keys[0]}, Args: args}
}

// byMaster groups keys by master and, within a master, by slot (bySlot).
func (f *Floor) byMaster(ctx context.Context, keys []string) ([][]hashtag.Group, error) {
	var masters [][]hashtag.Group
	byAddr := map[string]int{}
	for _, g := range bySlot(keys) {
		node, err := f.rdb.MasterForKey(ctx, g.Keys[0])
		if err != nil {
			return nil, err
		}
		addr := node.Options().Addr
		i, ok := byAddr[addr]
		if !ok {
			i = len(masters)
			byAddr[addr] = i
			masters = append(masters, nil)
		}
		masters[i] = append(masters[i], g)
	}
	return masters, nil
}

// bySlot groups keys by slot, the slots in the order their first keys come
// and the keys of a slot in their order: no sort, the least client work.
func bySlot(keys []string) []hashtag.Group {
	var slots []hashtag.Group
	index := make(map[int]int, min(len(keys), hashtag.SlotCount))
	for _, k := range keys {
		s := hashtag.Slot(k)
		i, ok := index[s]
		if !ok {
			i = len(slots)
			index[s] = i
			slots = append(slots, hashtag.Group{Slot: s})
		}
		slots[i].Keys = append(slots[i].Keys, k)
	}
	return slots
}

// callErrors are the errors of calls, and a reply that is not the number of
// keys of its call (keys written, or deleted: the floors' scripts return
// it), which would say that a script read its arguments wrong.
func callErrors(name string, calls []*script.Call, keys []int) error {
	var errs []error
	for i, c := range calls {
		n, err := c.Reply.Int()
		switch {
		case err != nil:
			errs = append(errs, fmt.Errorf("%s: slot %d: %w", name, c.Slot, err))
		case n != keys[i]:
			errs = append(errs, fmt.Errorf("%s: slot %d: the script did %d keys of %d", name, c.Slot, n, keys[i]))
		}
	}
	return errors.Join(errs...)
}

// keyCounts is the number of keys of each master's call.
func keyCounts(masters [][]hashtag.Group) []int {
	out := make([]int, len(masters))
	for i, groups := range masters {
		for _, g := range groups {
			out[i] += len(g.Keys)
		}
	}
	return out
}
