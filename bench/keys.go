package bench

import (
	"fmt"
	"slices"
)

// Keys returns n distinct keys under prefix, sorted. They carry no hash tag,
// so they spread over the slots, and so over every master, as SKUs do.
func Keys(prefix string, n int) []string {
	keys := make([]string, n)
	for i := range keys {
		keys[i] = fmt.Sprintf("%s:%05d", prefix, i)
	}
	slices.Sort(keys)
	return keys
}
