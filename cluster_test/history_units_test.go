package cluster_test

import (
	"fmt"
	"slices"
	"strings"

	"github.com/anishathalye/porcupine"
)

// A third model, for counted keys: units of a key, taken by holds whose
// units together never exceed its capacity, each hold with a token larger
// than any before; a release gives the units back, a consume sells them
// (the capacity goes down by them), a restock adds to the capacity. A
// consume or a restock whose outcome the caller does not know may have
// been made or not (the model is nondeterministic there). A failover that
// lost the key's master drops the holds taken without WithReplicas and
// may have undone sales and restocks that no replica had: the capacity is
// unknown from then on, and only the tokens are checked.

// Kinds of history operations on counted keys.
const (
	opUnits   = "units"   // a take of Units of each of Keys
	opConsume = "consume" // a release that sells the units (Known: it returned nil)
	opRestock = "restock" // Delta added to the capacity (Known: it returned nil)
)

// unitsState is the counted model's state of one key.
type unitsState struct {
	capacity int64 // -1: unknown, since a failover
	holds    []unitsHold
	max      int64 // the largest token handed out
	maxAcked int64 // the largest taken WithReplicas
}

type unitsHold struct {
	lock     int
	units    int64
	replicas bool
}

func (st unitsState) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "capacity %d, max %d (acked %d), holds", st.capacity, st.max, st.maxAcked)
	for _, h := range st.holds {
		fmt.Fprintf(&b, " %d/%d/%v", h.lock, h.units, h.replicas)
	}
	return b.String()
}

func (st unitsState) held() int64 {
	var n int64
	for _, h := range st.holds {
		n += h.units
	}
	return n
}

// without is st without lock's hold, and that hold's units (0 when it
// has none).
func (st unitsState) without(lock int) (unitsState, int64, bool) {
	i := slices.IndexFunc(st.holds, func(h unitsHold) bool { return h.lock == lock })
	if i < 0 {
		return st, 0, false
	}
	out := st
	out.holds = slices.Delete(slices.Clone(st.holds), i, i+1)
	return out, st.holds[i].units, true
}

// stepUnits is the counted model's step on one key: the states op may
// lead to from st, none when it cannot happen.
func stepUnits(st unitsState, op historyOp) []unitsState {
	switch op.Kind {
	case opUnits:
		tok, units := op.Tokens[0], op.Units[0]
		if tok <= st.max || st.capacity >= 0 && st.held()+units > st.capacity {
			return nil
		}
		next := st
		next.holds = append(slices.Clone(st.holds), unitsHold{lock: op.Lock, units: units, replicas: op.Replicas})
		next.max = tok
		if op.Replicas {
			next.maxAcked = max(next.maxAcked, tok)
		}
		return []unitsState{next}
	case opRelease:
		next, _, _ := st.without(op.Lock)
		return []unitsState{next}
	case opConsume:
		next, units, had := st.without(op.Lock)
		sold := next
		if next.capacity >= 0 {
			sold.capacity -= units
		}
		switch {
		case op.Known && !had && st.capacity >= 0:
			return nil // sold a hold it did not have
		case op.Known:
			return []unitsState{sold}
		}
		return []unitsState{next, sold}
	case opRestock:
		grown := st
		if st.capacity >= 0 {
			grown.capacity += op.Delta
		}
		if op.Known {
			return []unitsState{grown}
		}
		return []unitsState{st, grown}
	case opFailover:
		next := st
		next.holds = slices.DeleteFunc(slices.Clone(st.holds), func(h unitsHold) bool { return !h.replicas })
		next.capacity = -1
		next.max = st.maxAcked // the holds left were taken WithReplicas
		return []unitsState{next}
	}
	return []unitsState{st}
}

// unitsModel checks the operations of one counted key whose capacity was
// capacity when the history began.
func unitsModel(capacity int64) porcupine.Model {
	m := &porcupine.NondeterministicModel{
		Init: func() []any { return []any{unitsState{capacity: capacity}} },
		Step: func(state, input, _ any) []any {
			var out []any
			for _, st := range stepUnits(state.(unitsState), input.(historyOp)) {
				out = append(out, st)
			}
			return out
		},
		Equal: func(a, b any) bool { return a.(unitsState).String() == b.(unitsState).String() },
		DescribeOperation: func(input, _ any) string {
			op := input.(historyOp)
			return fmt.Sprintf("%s lock %d units %v tokens %v delta %d known %v replicas %v", op.Kind, op.Lock, op.Units, op.Tokens, op.Delta, op.Known, op.Replicas)
		},
		DescribeState: func(state any) string { return state.(unitsState).String() },
	}
	return m.ToModel()
}

// countedKeys are the keys of h taken in units or restocked.
func (h *history) countedKeys() map[string]bool {
	keys := map[string]bool{}
	for _, op := range h.Ops {
		if op.Kind == opUnits || op.Kind == opRestock {
			for _, k := range op.Keys {
				keys[k] = true
			}
		}
	}
	return keys
}
