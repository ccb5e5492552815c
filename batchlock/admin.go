package batchlock

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/batchlock/batchlock/internal/routing"
	"github.com/batchlock/batchlock/internal/wire"
)

// The admin API: what operators and tools see of the locks in Redis. The
// command's inspect and unlock --force are built on it.

// HeldKey is one key held, as Held finds it.
type HeldKey struct {
	Key string // without the prefix
	// Shared says the key is held shared (WithShared): by every owner in
	// Holders.
	Shared bool
	// Counted says the key is held in units (WithUnits): by every owner
	// in Holders, Units of it each.
	Counted bool
	// Holders are the owners with a live hold on the key, sorted: one for a
	// key held exclusively, any number for a key held shared or counted.
	Holders []string
	// Units are the units each holder holds of a counted key, Capacity
	// the key's capacity (see Client.SetCapacity), read for every key by
	// Held and Inspect: 0 when it has none, and Free the units of it no
	// live hold holds.
	Units    map[string]int64
	Capacity int64
	Free     int64
	Holds    int // holds whose lease has not ended
	// Waiting counts the calls queued for the key whose place has not
	// lapsed; a release hands the key to the first of them.
	Waiting int
	Lease   time.Duration // what is left of the key's lease
	Token   int64         // the fencing token of the ownership
	Master  string        // the address of the master that serves the key (Held only)
	Err     error         // why ForceUnlock could not release the key (ForceUnlock only)
}

// Held lists the keys held under the Client's prefix whose name (without the
// prefix) matches pattern, a glob as SCAN MATCH takes it ("*" for all),
// sorted by key, on every master. It scans: a key taken or released while it
// runs may or may not be listed. The fencing counters and cancel marks are
// left out. It reads, and changes nothing.
func (c *Client) Held(ctx context.Context, pattern string) ([]HeldKey, error) {
	if err := checkContext(ctx); err != nil {
		return nil, err
	}
	if pattern == "" {
		return nil, invalid("pattern must not be empty: use \"*\" for every key")
	}
	ctx, end, err := c.begin(ctx)
	if err != nil {
		return nil, err
	}
	defer end()
	var mu sync.Mutex
	found := []HeldKey{}
	scan := func(ctx context.Context, node *redis.Client) error {
		keys, err := c.heldOn(ctx, node, pattern)
		mu.Lock()
		found = append(found, keys...)
		mu.Unlock()
		return err
	}
	if err := c.deployment.forEachMaster(ctx, scan); err != nil {
		return nil, fmt.Errorf("batchlock: listing held keys: %w", inner(err))
	}
	slices.SortFunc(found, func(a, b HeldKey) int { return strings.Compare(a.Key, b.Key) })
	return found, nil
}

// scanBatch is the SCAN COUNT hint, and the number of keys read per
// pipeline.
const scanBatch = 1000

// heldOn lists the held keys of one master.
func (c *Client) heldOn(ctx context.Context, node *redis.Client, pattern string) ([]HeldKey, error) {
	var out []HeldKey
	var batch []string
	flush := func() error {
		keys, err := c.readHeld(ctx, node, batch)
		out = append(out, keys...)
		batch = batch[:0]
		return err
	}
	iter := node.ScanType(ctx, 0, c.names.Pattern(pattern), scanBatch, "string").Iterator()
	for iter.Next(ctx) {
		// The fencing counters and the cancel marks are strings too.
		if wire.Reserved(c.names.UserKey(iter.Val())) {
			continue
		}
		if batch = append(batch, iter.Val()); len(batch) == scanBatch {
			if err := flush(); err != nil {
				return out, err
			}
		}
	}
	if err := iter.Err(); err != nil {
		return out, fmt.Errorf("scanning %s: %w", node.Options().Addr, err)
	}
	return out, flush()
}

// readHeld reads lock keys of one master in one pipeline. Keys released
// since the scan are left out.
func (c *Client) readHeld(ctx context.Context, node *redis.Client, keys []string) ([]HeldKey, error) {
	if len(keys) == 0 {
		return nil, nil
	}
	read, err := c.readLocks(ctx, node, keys)
	if err != nil {
		return nil, fmt.Errorf("reading held keys on %s: %w", node.Options().Addr, err)
	}
	var out []HeldKey
	for _, h := range read {
		if len(h.Holders) > 0 {
			h.Master = node.Options().Addr
			out = append(out, h)
		}
	}
	return out, nil
}

// Inspect reads keys (without the prefix) and returns, in the order given,
// who holds each: a HeldKey with no Holders for a key not held. Unlike
// Held it scans nothing: one pipeline, one round trip per master. It reads,
// and changes nothing.
func (c *Client) Inspect(ctx context.Context, keys ...string) ([]HeldKey, error) {
	if err := checkContext(ctx); err != nil {
		return nil, err
	}
	lockKeys := make([]string, len(keys))
	for i, k := range keys {
		if err := c.checkKey(k, "key", i); err != nil {
			return nil, err
		}
		lockKeys[i] = c.names.LockKey(k)
	}
	ctx, end, err := c.begin(ctx)
	if err != nil {
		return nil, err
	}
	defer end()
	out, err := c.readLocks(ctx, c.rdb, lockKeys)
	if err != nil {
		// A master that died answers nothing that would make go-redis
		// read the map of slots again.
		c.deployment.reloadSlots()
		return nil, fmt.Errorf("batchlock: inspecting %d keys: %w", len(keys), inner(err))
	}
	return out, nil
}

// readLocks reads lock keys and their capacities in one pipeline of p, with
// the server's time to tell live holds, and returns what each holds: no
// Holders for a key not held.
func (c *Client) readLocks(ctx context.Context, p redis.Cmdable, lockKeys []string) ([]HeldKey, error) {
	pipe := p.Pipeline()
	now := pipe.Time(ctx)
	values := make([]*redis.StringCmd, len(lockKeys))
	leases := make([]*redis.DurationCmd, len(lockKeys))
	capacities := make([]*redis.StringCmd, len(lockKeys))
	for i, k := range lockKeys {
		values[i] = pipe.Get(ctx, k)
		leases[i] = pipe.PTTL(ctx, k)
		capacities[i] = pipe.Get(ctx, c.capacityKey(k))
	}
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return nil, err
	}
	out := make([]HeldKey, len(lockKeys))
	for i, k := range lockKeys {
		out[i].Key = c.names.UserKey(k)
		if s, ok := wire.ParseLock(values[i].Val(), now.Val()); ok {
			out[i] = heldKey(out[i].Key, s)
			out[i].Lease = max(leases[i].Val(), 0)
		}
		// A capacity that is not a number reads as none.
		out[i].Capacity, _ = capacities[i].Int64()
		out[i].Free = out[i].Capacity
		for _, n := range out[i].Units {
			out[i].Free -= n
		}
	}
	return out, nil
}

// heldKey is what the value s of key says: its holders, holds, waiters and
// token.
func heldKey(key string, s wire.LockState) HeldKey {
	return HeldKey{Key: key, Shared: s.Shared, Counted: s.Counted, Holders: s.Holders, Units: s.Units, Holds: s.Holds,
		Waiting: s.Waiting, Token: s.Token}
}

// ForceUnlock releases keys whoever holds them, and wakes their waiters: an
// operator's tool for a holder known to be dead. A holder still alive loses
// its lock within a renewal period (lease/3; a lock of this Client at once),
// its tokens stale from then on. It reports, key by key in the order given,
// what each held when released (Lease, Master, Capacity, Free not filled
// in): Key alone, Token 0, when it was not held; Err set when it could not
// be released, also returned. Bad keys are ErrInvalid, before anything is sent.
func (c *Client) ForceUnlock(ctx context.Context, keys ...string) ([]HeldKey, error) {
	if err := checkContext(ctx); err != nil {
		return nil, err
	}
	if len(keys) == 0 {
		return nil, invalid("no keys")
	}
	lockKeys := make([]string, len(keys))
	out := make([]HeldKey, len(keys))
	for i, k := range keys {
		if err := c.checkKey(k, "key", i); err != nil {
			return nil, err
		}
		lockKeys[i] = c.names.LockKey(k)
		out[i].Key = k
	}
	ctx, end, err := c.begin(ctx)
	if err != nil {
		return nil, err
	}
	defer end()
	parts := make([]routing.Part, len(lockKeys))
	for i, k := range lockKeys {
		parts[i] = routing.Part{Slot: c.deployment.slot(k), Route: k, Keys: 1}
	}
	released := map[string]bool{} // the holds of the keys released
	results := c.route(ctx, routing.Batch{
		Step:   "force unlock",
		Sent:   &c.sent.forces,
		Script: wire.ForceScript,
		Parts:  parts,
		Follow: true,
		Args: func(at []int) []any {
			args := make([]any, len(at))
			for n, i := range at {
				args[n] = lockKeys[i]
			}
			return args
		},
		Read: func(cl *routing.Call, at []int) ([]int, error) {
			r, err := wire.DecodeForce(cl.Reply.Val(), len(at))
			if err != nil {
				return nil, cl.Describe(ctx, err)
			}
			var away []int
			for _, k := range r.Elsewhere {
				away = append(away, partsNamed(parts, at, []string{k})...)
			}
			for n, i := range at {
				v := r.Values[n]
				if s, ok := wire.ParseLock(v, r.Now); ok {
					out[i] = heldKey(keys[i], s)
					for _, h := range wire.HoldsIn(v) {
						released[h] = true
					}
				}
			}
			return away, nil
		},
	})
	for i, r := range results {
		out[i].Err = r.Err
	}
	// This Client's own locks among those released end at once (those
	// whose holds were in the keys, not later ones handed the keys since);
	// another Client's find out at their next renewal.
	for _, l := range c.holding(released) {
		l.end(endLetGo, fmt.Errorf("%w: force-unlocked", ErrLockLost))
	}
	return out, firstError(results)
}

func firstError(results []routing.Result) error {
	for _, r := range results {
		if r.Err != nil {
			return r.Err
		}
	}
	return nil
}
