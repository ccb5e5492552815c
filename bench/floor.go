package bench

import (
	"context"
	"crypto/rand"
	_ "embed"
	"encoding/hex"
	"errors"
	"fmt"
	"sync"

	"github.com/redis/go-redis/v9"

	"github.com/batchlock/batchlock/hashtag"
)

// Floor is the least a lock in Redis must do, the reference the other
// libraries are measured against, in one of three kinds:
//
//   - the floor (NewFloor), the least any lock with per-key leases must do:
//     one script call per master that writes every key with SET key v PX
//     ttl, then one that deletes them;
//   - the fenced floor (NewFencedFloor), the least a lock whose fencing
//     tokens move with their slot must do: the same calls, where the lock's
//     also counts, for each slot of the batch, the slot's tokens with one
//     INCRBY of a counter kept in that slot (FenceKey), and writes each key
//     with its token;
//   - the lock floor (NewLockFloor), the least a real lock must do: per slot
//     one INCR of its counter, the token of the slot's keys; each key set
//     only if free (SET NX PX) to its token and the lock's owner, what the
//     call set deleted again when a key is held; and a release that reads
//     each key and deletes it only where the owner matches.
//
// The masters are called in parallel. The floor and the fenced floor
// neither check nor wait for anything; the lock floor refuses a held key
// (and then holds nothing), and never waits.
type Floor struct {
	name   string
	fenced bool
	owned  bool // the lock floor
	rdb    *redis.ClusterClient
}

var (
	//go:embed floor/lock.lua
	floorLockSource string
	//go:embed floor/fenced_lock.lua
	fencedFloorLockSource string
	//go:embed floor/unlock.lua
	floorUnlockSource string
	//go:embed floor/owned_lock.lua
	lockFloorLockSource string
	//go:embed floor/owned_unlock.lua
	lockFloorUnlockSource string

	floorLock       = redis.NewScript(floorLockSource)
	fencedFloorLock = redis.NewScript(fencedFloorLockSource)
	floorUnlock     = redis.NewScript(floorUnlockSource)
	lockFloorLock   = redis.NewScript(lockFloorLockSource)
	lockFloorUnlock = redis.NewScript(lockFloorUnlockSource)
)

// NewFloor returns the floor on rdb.
func NewFloor(rdb *redis.ClusterClient) *Floor { return newFloor(rdb, NameFloor, false) }

// NewFencedFloor returns the fenced floor on rdb.
func NewFencedFloor(rdb *redis.ClusterClient) *Floor {
	return newFloor(rdb, NameFencedFloor, true)
}

// NewLockFloor returns the lock floor on rdb.
func NewLockFloor(rdb *redis.ClusterClient) *Floor {
	f := newFloor(rdb, NameLockFloor, true)
	f.owned = true
	return f
}

func newFloor(rdb *redis.ClusterClient, name string, fenced bool) *Floor {
	return &Floor{name: name, fenced: fenced, rdb: rdb}
}

// FenceKey is the fenced floor's token counter of slot, named as
// batchlock's are: in the slot it counts for, so that it moves with it.
func FenceKey(slot int) string { return "bench:fence:{" + hashtag.ForSlot(slot) + "}" }

func (f *Floor) Name() string       { return f.name }
func (f *Floor) Commands() []string { return scriptCommands }

func (f *Floor) Lock(ctx context.Context, keys []string) (Held, error) {
	return f.lock(ctx, keys)
}

func (f *Floor) lock(ctx context.Context, keys []string) (floorHeld, error) {
	masters, err := f.byMaster(ctx, keys)
	if err != nil {
		return floorHeld{}, err
	}
	s := floorLock
	switch {
	case f.owned:
		s = lockFloorLock
	case f.fenced:
		s = fencedFloorLock
	}
	h := floorHeld{f: f, masters: masters}
	if f.owned {
		h.owner = randomOwner()
	}
	calls := make([]*floorCall, len(masters))
	for i, groups := range masters {
		calls[i] = lockCall(groups, f.fenced, h.owner)
	}
	sendCalls(ctx, f.rdb, s, calls)
	if !f.owned {
		if err := callErrors(f.name, calls, keyCounts(masters)); err != nil {
			return floorHeld{}, err
		}
		return h, nil
	}
	h.tokens = make(map[string]int64, len(keys))
	var errs []error
	for i, c := range calls {
		tokens, err := c.Reply.Int64Slice()
		switch {
		case err != nil:
			errs = append(errs, fmt.Errorf("%s: slot %d: %w", f.name, c.Slot, err))
		case len(tokens) > 0 && tokens[0] < 0:
			errs = append(errs, fmt.Errorf("%s: slot %d: %w", f.name, c.Slot, errHeld))
		case len(tokens) != keyCounts(masters[i : i+1])[0]:
			errs = append(errs, fmt.Errorf("%s: slot %d: %d tokens for %d keys", f.name, c.Slot, len(tokens), keyCounts(masters[i : i+1])[0]))
		default:
			n := 0
			for _, g := range masters[i] {
				for _, k := range g.Keys {
					h.tokens[k] = tokens[n]
					n++
				}
			}
		}
	}
	if len(errs) > 0 {
		// What the other masters' calls took goes back: all or nothing.
		return floorHeld{}, errors.Join(append(errs, h.Unlock(context.WithoutCancel(ctx)))...)
	}
	return h, nil
}

// errHeld says that the lock floor found a key held.
var errHeld = errors.New("a key is held")

// randomOwner is a fresh owner of the lock floor.
func randomOwner() string {
	b := make([]byte, 8)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// lockCall is the lock's call to one master, of the keys of groups: ARGV
// is the lease, then every key; fenced, the lease, then for each slot its
// counter, its number of keys and its keys; owned (owner not empty), the
// lease, the owner, then as fenced.
func lockCall(groups []hashtag.Group, fenced bool, owner string) *floorCall {
	n := 1
	if owner != "" {
		n++
	}
	for _, g := range groups {
		n += len(g.Keys)
		if fenced {
			n += 2
		}
	}
	args := make([]any, 1, n)
	args[0] = TTL.Milliseconds()
	if owner != "" {
		args = append(args, owner)
	}
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
	owner   string           // the lock floor's
	tokens  map[string]int64 // the lock floor's, by key
}

func (h floorHeld) Unlock(ctx context.Context) error {
	counts := keyCounts(h.masters)
	calls := make([]*floorCall, len(h.masters))
	for i, groups := range h.masters {
		args := make([]any, 0, counts[i]+1)
		if h.owner != "" {
			args = append(args, h.owner)
		}
		for _, g := range groups {
			for _, k := range g.Keys {
				args = append(args, k)
			}
		}
		calls[i] = masterCall(groups, args)
	}
	if h.owner == "" {
		sendCalls(ctx, h.f.rdb, floorUnlock, calls)
		return callErrors(h.f.name, calls, counts)
	}
	sendCalls(ctx, h.f.rdb, lockFloorUnlock, calls)
	var errs []error
	for _, c := range calls {
		if err := c.Reply.Err(); err != nil {
			errs = append(errs, fmt.Errorf("%s: slot %d: %w", h.f.name, c.Slot, err))
		}
	}
	return errors.Join(errs...)
}

// masterCall is a call with args, routed by the first key of groups.
func masterCall(groups []hashtag.Group, args []any) *floorCall {
	return &floorCall{Slot: groups[0].Slot, Key: groups[0].Keys[0], Args: args}
}

// floorCall is one script call of a floor: to the master of Key, which it
// declares (KEYS[1], to route it), with Args; Reply once sent.
type floorCall struct {
	Slot  int
	Key   string
	Args  []any
	Reply *redis.Cmd
}

// sendCalls sends every call once, the calls of each master in one
// pipeline (by digest, again by source where a master does not know the
// script), the masters at once: one round trip per master, as batchlock's
// calls go.
func sendCalls(ctx context.Context, rdb *redis.ClusterClient, s *redis.Script, calls []*floorCall) {
	byNode := map[*redis.Client][]*floorCall{}
	for _, c := range calls {
		node, err := rdb.MasterForKey(ctx, c.Key)
		if err != nil {
			c.Reply = redis.NewCmd(ctx)
			c.Reply.SetErr(err)
			continue
		}
		byNode[node] = append(byNode[node], c)
	}
	var wg sync.WaitGroup
	for node, calls := range byNode {
		wg.Go(func() {
			exec := func(calls []*floorCall, bySource bool) {
				pipe := node.Pipeline()
				for _, c := range calls {
					if bySource {
						c.Reply = s.Eval(ctx, pipe, []string{c.Key}, c.Args...)
					} else {
						c.Reply = s.EvalSha(ctx, pipe, []string{c.Key}, c.Args...)
					}
				}
				_, _ = pipe.Exec(ctx)
			}
			exec(calls, false)
			var unknown []*floorCall
			for _, c := range calls {
				if redis.HasErrorPrefix(c.Reply.Err(), "NOSCRIPT") {
					unknown = append(unknown, c)
				}
			}
			if len(unknown) > 0 {
				exec(unknown, true)
			}
		})
	}
	wg.Wait()
}

// byMaster groups keys by master and, within a master, by slot (bySlot).
func (f *Floor) byMaster(ctx context.Context, keys []string) ([][]hashtag.Group, error) {
	var masters [][]hashtag.Group
	index := newMasterIndex(f.rdb)
	for _, g := range bySlot(keys) {
		i, err := index.of(ctx, g)
		if err != nil {
			return nil, err
		}
		if i == len(masters) {
			masters = append(masters, nil)
		}
		masters[i] = append(masters[i], g)
	}
	return masters, nil
}

// masterIndex numbers the masters in the order their slots first come.
type masterIndex struct {
	rdb    *redis.ClusterClient
	byAddr map[string]int
	bySlot map[int]int
}

func newMasterIndex(rdb *redis.ClusterClient) *masterIndex {
	return &masterIndex{rdb: rdb, byAddr: map[string]int{}, bySlot: map[int]int{}}
}

// of is the number of g's master: the count of masters met before when it
// is new.
func (x *masterIndex) of(ctx context.Context, g hashtag.Group) (int, error) {
	if i, ok := x.bySlot[g.Slot]; ok {
		return i, nil
	}
	node, err := x.rdb.MasterForKey(ctx, g.Keys[0])
	if err != nil {
		return 0, err
	}
	addr := node.Options().Addr
	i, ok := x.byAddr[addr]
	if !ok {
		i = len(x.byAddr)
		x.byAddr[addr] = i
	}
	x.bySlot[g.Slot] = i
	return i, nil
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
func callErrors(name string, calls []*floorCall, keys []int) error {
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
