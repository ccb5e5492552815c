package batchlock

import (
	"slices"
	"sort"

	"github.com/batchlock/batchlock/hashtag"
)

// group is one unit of acquisition: lock keys of one slot, taken by one script
// call. Every client takes groups in the same global order (slot, then key),
// which is what makes waiting deadlock-free.
type group struct {
	slot     int
	keys     []string // lock keys, sorted
	fenceKey string
	// cancelKeys + hold is the cancel mark of one hold in the slot.
	cancelKeys string
}

// cancelKey returns the key that marks hold cancelled in g's slot.
func (g group) cancelKey(hold string) string { return g.cancelKeys + hold }

// plan validates keys and turns them into groups. keys may repeat.
func (c *Client) plan(keys []string) ([]string, []group, error) {
	if len(keys) == 0 {
		return nil, nil, invalid("no keys")
	}
	lockKeys := make([]string, len(keys))
	for i, k := range keys {
		if k == "" {
			return nil, nil, invalid("key %d is empty", i)
		}
		if reserved(k) {
			return nil, nil, invalid("key %q: names starting with %q or %q are reserved", k, fenceName, cancelName)
		}
		lockKeys[i] = c.cfg.prefix + k
	}

	var slots []hashtag.Group
	if c.cluster {
		slots = hashtag.GroupBySlot(lockKeys)
	} else {
		// A single node takes the whole batch in one slot's worth of calls.
		sort.Strings(lockKeys)
		slots = []hashtag.Group{{Slot: 0, Keys: slices.Compact(lockKeys)}}
	}

	var groups []group
	var userKeys []string
	for _, s := range slots {
		fence, cancel := c.fenceKey(s.Slot), c.cancelKeys(s.Slot)
		for start := 0; start < len(s.Keys); start += maxGroupKeys {
			end := min(start+maxGroupKeys, len(s.Keys))
			groups = append(groups, group{slot: s.Slot, keys: s.Keys[start:end], fenceKey: fence, cancelKeys: cancel})
		}
		for _, k := range s.Keys {
			userKeys = append(userKeys, k[len(c.cfg.prefix):])
		}
	}
	sort.Strings(userKeys)
	return userKeys, groups, nil
}

// split cuts l.groups[i] after its first n keys into two groups of the same
// slot: a waiting call holds the first, and waits at the first key of the
// second. l is not yet shared with the watchdog.
func (l *Lock) split(i, n int) {
	g := l.groups[i]
	head, tail := g, g
	head.keys, tail.keys = g.keys[:n:n], g.keys[n:]
	l.groups = slices.Insert(l.groups, i+1, tail)
	l.groups[i] = head
}
