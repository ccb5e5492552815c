package redlock

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestStale(t *testing.T) {
	for _, tc := range []struct {
		name           string
		tokens, latest []int64
		want           bool
	}{
		{"older on the shared deployment", []int64{7, 3, 0}, []int64{0, 4, 1}, true},
		{"newer on every shared deployment", []int64{8, 4, 0}, []int64{7, 3, 9}, false},
		{"the same ownership (reentrant) is not stale", []int64{7, 3, 5}, []int64{7, 3, 5}, false},
		{"a large token elsewhere does not outrank", []int64{100, 3, 0}, []int64{0, 4, 5}, true},
		{"nothing shared: no evidence", []int64{1, 0, 0}, []int64{0, 2, 2}, false},
		{"any smaller shared token is enough", []int64{5, 9, 1}, []int64{4, 10, 1}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			assert.Equal(t, tc.want, Stale(tc.tokens, tc.latest))
		})
	}
}
