package batchlock

import (
	"context"
	"fmt"

	"github.com/batchlock/batchlock/internal/lease"
	"github.com/batchlock/batchlock/internal/wire"
)

// The capacity of counted keys (see WithUnits): the units that may be held
// of a key at once, the stock on hand, set and changed by the caller. It
// lives in a key of its own in the key's slot, which outlives the holds.

// SetCapacity makes key's capacity units: a restock or a correction. It is
// refused with ErrOverCapacity, changing nothing, when more units are held of
// key than that. Sent twice it sets the same capacity.
func (c *Client) SetCapacity(ctx context.Context, key string, units int64) error {
	if units < 0 {
		return invalid("capacity of %q: %d must be >= 0", key, units)
	}
	_, err := c.changeCapacity(ctx, key, "set", units)
	return err
}

// AddCapacity adds delta to key's capacity (a key with none has 0), taking
// away when delta is negative, and returns the capacity after. It is
// refused with ErrOverCapacity, changing nothing, when the capacity would fall
// below the units held of key. The library sends one call's change once,
// however often it sends the call; a call that fails may still have made
// it: read the capacity with Inspect before calling again.
func (c *Client) AddCapacity(ctx context.Context, key string, delta int64) (int64, error) {
	return c.changeCapacity(ctx, key, "add", delta)
}

// changeCapacity runs capacity.lua's op with units on key, and returns the
// capacity after.
func (c *Client) changeCapacity(ctx context.Context, key, op string, units int64) (int64, error) {
	if err := checkContext(ctx); err != nil {
		return 0, err
	}
	if err := c.checkKey(key, "key", 0); err != nil {
		return 0, err
	}
	ctx, end, err := c.begin(ctx)
	if err != nil {
		return 0, err
	}
	defer end()
	lockKey := c.names.LockKey(key)
	// The cluster client sends the call again after a read timeout: the
	// change's mark, which its resends share, makes it once.
	mark := c.names.ChangeMark(c.deployment.slot(lockKey), wire.RandomID(8))
	reply, err := wire.CapacityScript.Run(ctx, c.rdb, []string{c.capacityKey(lockKey), lockKey, mark}, op, units,
		lease.Millis(wire.ChangeMarkLife)).Int64Slice()
	if err != nil {
		return 0, fmt.Errorf("batchlock: capacity of %q: %w", key, err)
	}
	if len(reply) != 3 {
		return 0, fmt.Errorf("batchlock: capacity of %q: unexpected reply %v", key, reply)
	}
	if reply[0] == 0 {
		change := fmt.Sprintf("setting it to %d", units)
		if op == "add" {
			change = fmt.Sprintf("adding %d to its %d", units, reply[1])
		}
		return reply[1], fmt.Errorf("%w: %q: %s, with %d units held", ErrOverCapacity, key, change, reply[2])
	}
	return reply[1], nil
}
