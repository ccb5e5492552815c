package hashtag

import (
	"cmp"
	"slices"
	"strings"
)

// Group is a set of keys that share one hash slot.
type Group struct {
	Slot int
	Keys []string
}

// GroupBySlot returns the distinct keys of keys grouped by slot: one Group per slot present, in
// ascending slot order, each with its keys in ascending byte order. It returns nil for no keys. It
// does not modify keys. The groups share one backing array, but each group's Keys has its capacity
// cut to its length, so appending to one group never overwrites another.
func GroupBySlot(keys []string) []Group {
	if len(keys) == 0 {
		return nil
	}
	type slotKey struct {
		slot int
		key  string
	}
	sorted := make([]slotKey, len(keys))
	for i, k := range keys {
		sorted[i] = slotKey{Slot(k), k}
	}
	// One sort by (slot, key) both groups and orders, and brings duplicates next to each other.
	slices.SortFunc(sorted, func(a, b slotKey) int {
		if c := cmp.Compare(a.slot, b.slot); c != 0 {
			return c
		}
		return strings.Compare(a.key, b.key)
	})

	nGroups := 1
	for i := 1; i < len(sorted); i++ {
		if sorted[i].slot != sorted[i-1].slot {
			nGroups++
		}
	}
	groups := make([]Group, 0, nGroups)
	// Capacity for every key up front: appends never move the array that earlier groups slice.
	all := make([]string, 0, len(sorted))
	start := 0
	for i, e := range sorted {
		if i > 0 && e.key == sorted[i-1].key {
			continue
		}
		if i > 0 && e.slot != sorted[i-1].slot {
			groups = append(groups, Group{Slot: sorted[i-1].slot, Keys: all[start:len(all):len(all)]})
			start = len(all)
		}
		all = append(all, e.key)
	}
	groups = append(groups, Group{Slot: sorted[len(sorted)-1].slot, Keys: all[start:len(all):len(all)]})
	return groups
}
