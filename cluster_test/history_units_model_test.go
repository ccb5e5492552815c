package cluster_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

// The counted model: holds beyond the capacity are caught, and so is a
// token that does not grow; a sale, a restock and an outcome unknown move
// the capacity as they may; a failover leaves only the tokens checked.
func TestHistoryUnitsModel(t *testing.T) {
	take := func(lock int, units, tok int64, at int64) historyOp {
		return historyOp{Kind: opUnits, Lock: lock, Keys: []string{"u"}, Units: []int64{units}, Tokens: []int64{tok}, Call: at, Return: at + 1}
	}
	release := func(lock int, at int64) historyOp {
		return historyOp{Kind: opRelease, Lock: lock, Keys: []string{"u"}, Call: at, Return: at + 1}
	}
	consume := func(lock int, known bool, at, until int64) historyOp {
		return historyOp{Kind: opConsume, Lock: lock, Keys: []string{"u"}, Known: known, Call: at, Return: until}
	}
	restock := func(delta int64, known bool, at, until int64) historyOp {
		return historyOp{Kind: opRestock, Keys: []string{"u"}, Delta: delta, Known: known, Call: at, Return: until}
	}
	failover := historyOp{Kind: opFailover, Keys: []string{"u"}, Call: 45, Return: 46}
	for _, tc := range []struct {
		name    string
		ops     []historyOp
		illegal bool
	}{
		{"holds that fit the capacity (10)", []historyOp{take(1, 6, 1, 0), take(2, 4, 2, 10)}, false},
		{"holds beyond the capacity", []historyOp{take(1, 6, 1, 0), take(2, 5, 2, 10)}, true},
		{"a token that does not grow", []historyOp{take(1, 1, 2, 0), take(2, 1, 2, 10)}, true},
		{"units released are taken again", []historyOp{take(1, 6, 1, 0), release(1, 10), take(2, 10, 2, 20)}, false},
		{"units sold are not taken again", []historyOp{take(1, 6, 1, 0), consume(1, true, 10, 11), take(2, 6, 2, 20)}, true},
		{"a sale of unknown outcome may have been made", []historyOp{take(1, 6, 1, 0), consume(1, false, 10, 11), take(2, 10, 2, 20)}, false},
		{"or not", []historyOp{take(1, 6, 1, 0), consume(1, false, 10, 11), take(2, 4, 2, 20)}, false},
		{"a restock lets more units in", []historyOp{take(1, 10, 1, 0), restock(6, true, 10, 11), take(2, 6, 2, 20)}, false},
		{"a restock of unknown outcome may let them in, overlapping them", []historyOp{take(1, 10, 1, 0), restock(6, false, 10, 100), take(2, 6, 2, 20)}, false},
		{"but not more than it adds", []historyOp{take(1, 10, 1, 0), restock(6, false, 10, 100), take(2, 7, 2, 20)}, true},
		{"a sale of a hold not held", []historyOp{take(1, 1, 1, 0), consume(2, true, 10, 11)}, true},
		{"after a failover, the capacity unknown", []historyOp{take(1, 10, 1, 0), failover, take(2, 10, 2, 50)}, false},
		{"after a failover, a token still grows past those taken WithReplicas",
			[]historyOp{{Kind: opUnits, Lock: 1, Keys: []string{"u"}, Units: []int64{1}, Tokens: []int64{5}, Replicas: true, Call: 0, Return: 1},
				failover, take(2, 1, 5, 50)}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := &history{Capacity: 10, Ops: tc.ops}
			v := h.check(nil, "")
			assert.Equal(t, tc.illegal, len(v.illegal) > 0, "%v", v.illegal)
			assert.Equal(t, 1, v.keys, "the counted key checked")
		})
	}
}
