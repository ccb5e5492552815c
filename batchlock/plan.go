package batchlock

import (
	"maps"
	"slices"
	"sort"

	"github.com/batchlock/batchlock/hashtag"
	"github.com/batchlock/batchlock/internal/wire"
)

// group is one unit of acquisition: lock keys of one slot, taken by one script
// call. Every client takes groups in the same global order (slot, then key),
// which is what makes waiting deadlock-free.
type group struct {
	slot int
	keys []string // lock keys, sorted
	// modes has a letter per key (wire.ModeExclusive, ModeShared or
	// ModeCounted); nil when every key is exclusive.
	modes    []byte
	fenceKey string
}

// shared reports whether g's key i passes its gate shared: taken shared,
// or in units, which Redis settles among the owners.
func (g group) shared(i int) bool { return g.modes != nil && g.modes[i] != wire.ModeExclusive }

// counted reports whether g's key i is taken in units.
func (g group) counted(i int) bool { return g.modes != nil && g.modes[i] == wire.ModeCounted }

// plan validates keys, taken exclusively, shared ones (WithShared) and
// counted ones (WithUnits), and turns them into groups. Keys may repeat; a
// key given exclusively too is taken exclusively, one given shared and in
// units in units. It returns the keys without the prefix, deduplicated, in
// the groups' order (see Lock.sortedKeys), and the units of each lock key
// taken in units.
func (c *Client) plan(keys, shared []string, units map[string]int64) ([]string, []group, map[string]int64, error) {
	if len(keys)+len(shared)+len(units) == 0 {
		return nil, nil, nil, invalid("no keys")
	}
	lockKeys := make([]string, 0, len(keys)+len(shared)+len(units))
	for i, k := range keys {
		if err := c.checkKey(k, "key", i); err != nil {
			return nil, nil, nil, err
		}
		lockKeys = append(lockKeys, c.names.LockKey(k))
	}
	mixed := len(shared)+len(units) > 0
	var exclusive map[string]bool // only needed with shared or counted keys
	if mixed {
		exclusive = make(map[string]bool, len(keys))
		for _, k := range lockKeys {
			exclusive[k] = true
		}
	}
	for i, k := range shared {
		if err := c.checkKey(k, "shared key", i); err != nil {
			return nil, nil, nil, err
		}
		lockKeys = append(lockKeys, c.names.LockKey(k))
	}
	var counted map[string]int64 // by lock key
	for _, k := range slices.Sorted(maps.Keys(units)) {
		if err := c.checkKey(k, "counted key", len(counted)); err != nil {
			return nil, nil, nil, err
		}
		lk := c.names.LockKey(k)
		lockKeys = append(lockKeys, lk)
		if !exclusive[lk] {
			if counted == nil {
				counted = make(map[string]int64, len(units))
			}
			counted[lk] = units[k]
		}
	}

	var slots []hashtag.Group
	if c.deployment.isCluster() {
		slots = hashtag.GroupBySlot(lockKeys)
	} else {
		// A single node takes the whole batch in one slot's worth of calls.
		sort.Strings(lockKeys)
		slots = []hashtag.Group{{Slot: 0, Keys: slices.Compact(lockKeys)}}
	}

	var groups []group
	var userKeys []string
	for _, s := range slots {
		fence := c.fenceKey(s.Slot)
		for start := 0; start < len(s.Keys); start += maxGroupKeys {
			end := min(start+maxGroupKeys, len(s.Keys))
			g := group{slot: s.Slot, keys: s.Keys[start:end], fenceKey: fence}
			if mixed {
				g.modes = make([]byte, len(g.keys))
				for i, k := range g.keys {
					g.modes[i] = modeOf(exclusive[k], counted[k] > 0)
				}
			}
			groups = append(groups, g)
		}
		for _, k := range s.Keys {
			userKeys = append(userKeys, c.names.UserKey(k))
		}
	}
	return userKeys, groups, counted, nil
}

// checkKey refuses a key that cannot be a lock key; what and i name it.
func (c *Client) checkKey(k, what string, i int) error {
	if k == "" {
		return invalid("%s %d must not be empty", what, i)
	}
	if wire.Reserved(k) {
		return invalid("%s %q: names starting with %q, %q or %q are reserved", what, k, wire.FenceName, wire.CancelName, wire.UnitsName)
	}
	return nil
}

// modeOf is a key's letter in group.modes.
func modeOf(exclusive, counted bool) byte {
	switch {
	case exclusive:
		return wire.ModeExclusive
	case counted:
		return wire.ModeCounted
	}
	return wire.ModeShared
}

// capacityKey is the capacity key of a counted lock key.
func (c *Client) capacityKey(lockKey string) string {
	return c.names.Capacity(c.deployment.slot(lockKey), c.names.UserKey(lockKey))
}

// fenceKey is the fencing counter of slot, made once per slot and kept: a
// batch names one per slot it touches.
func (c *Client) fenceKey(slot int) string {
	if name := c.fences[slot].Load(); name != nil {
		return *name
	}
	name := c.names.Fence(slot)
	c.fences[slot].Store(&name)
	return name
}
