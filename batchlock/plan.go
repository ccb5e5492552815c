package batchlock

import (
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
	// modes has a letter per key, "s" for a key taken shared and "x" for
	// one taken exclusively; nil when every key is exclusive.
	modes    []byte
	fenceKey string
}

// shared reports whether g's key i is taken shared.
func (g group) shared(i int) bool { return g.modes != nil && g.modes[i] == 's' }

// plan validates keys, taken exclusively, and shared ones (WithShared), and
// turns them into groups. Keys may repeat; a key given both ways is taken
// exclusively. It returns the keys without the prefix, deduplicated, in the
// groups' order (see Lock.sortedKeys).
func (c *Client) plan(keys, shared []string) ([]string, []group, error) {
	if len(keys)+len(shared) == 0 {
		return nil, nil, invalid("no keys")
	}
	lockKeys := make([]string, 0, len(keys)+len(shared))
	for i, k := range keys {
		if err := c.checkKey(k, "key", i); err != nil {
			return nil, nil, err
		}
		lockKeys = append(lockKeys, c.names.LockKey(k))
	}
	var exclusive map[string]bool // only needed with shared keys
	if len(shared) > 0 {
		exclusive = make(map[string]bool, len(keys))
		for _, k := range lockKeys {
			exclusive[k] = true
		}
	}
	for i, k := range shared {
		if err := c.checkKey(k, "shared key", i); err != nil {
			return nil, nil, err
		}
		lockKeys = append(lockKeys, c.names.LockKey(k))
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
			if len(shared) > 0 {
				g.modes = make([]byte, len(g.keys))
				for i, k := range g.keys {
					g.modes[i] = modeOf(exclusive[k])
				}
			}
			groups = append(groups, g)
		}
		for _, k := range s.Keys {
			userKeys = append(userKeys, c.names.UserKey(k))
		}
	}
	return userKeys, groups, nil
}

// checkKey refuses a key that cannot be a lock key; what and i name it.
func (c *Client) checkKey(k, what string, i int) error {
	if k == "" {
		return invalid("%s %d must not be empty", what, i)
	}
	if wire.Reserved(k) {
		return invalid("%s %q: names starting with %q or %q are reserved", what, k, wire.FenceName, wire.CancelName)
	}
	return nil
}

// modeOf is a key's letter in group.modes.
func modeOf(exclusive bool) byte {
	if exclusive {
		return 'x'
	}
	return 's'
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
