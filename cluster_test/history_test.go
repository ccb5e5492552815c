package cluster_test

import (
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/anishathalye/porcupine"
)

// A second judge, from the field: the soak's history of each key checked by
// porcupine, a linearizability checker, against two models, and a third
// for counted keys (history_units_test.go).
//
//   - A reentrant fenced mutex: an acquire that returned is a step from free
//     to held by its owner with a token larger than any before; another
//     hold of the same owner keeps the token, a reader joining readers
//     shares theirs (also readers the history does not show: see
//     stepMutex); a release, from when the holder stopped counting on the
//     key (its section's end) to when the key was released in Redis (its
//     unlock's return, or its lease), frees the key once no hold is left. Only
//     calls that returned a lock are in the history: a call that failed
//     leaves nothing held (the soak checks that apart), so it is no step.
//     A failover that lost the slot's master drops the holds taken without
//     WithReplicas, and takes the largest token back to the largest one
//     taken with it: the documented limit, excused as the soak's own judge
//     excuses it.
//   - A fenced register, for histories that record their writes (the soak
//     does not: its own judge checks their refusals, and recording each of
//     its writes slowed its workers past its timing checks): a write (or a
//     read) of the storage is accepted
//     when its token is no smaller than the largest written, and refused
//     otherwise; a refusal while its writer still counted on the key is
//     not allowed, unless a failover came first and one of the two locks
//     was taken without WithReplicas.
//
// Each key is checked alone, and groups of a few keys together
// (unsplit), so that a batch's all-or-nothing is checked too.

// Kinds of history operations.
const (
	opAcquire  = "acquire"
	opRelease  = "release"
	opFailover = "failover"
	opWrite    = "write"
	opRead     = "read"
)

// historyOp is one operation of the history, on one key or a few.
type historyOp struct {
	Kind     string   `json:"kind"`
	Lock     int      `json:"lock,omitempty"` // acquire, release: which lock (its section)
	Owner    string   `json:"owner,omitempty"`
	Keys     []string `json:"keys"`
	Tokens   []int64  `json:"tokens,omitempty"` // acquire: by key; write, read: Tokens[0]
	Shared   []bool   `json:"shared,omitempty"` // acquire: by key
	Replicas bool     `json:"replicas,omitempty"`
	Believed bool     `json:"believed,omitempty"` // write, read: within the holder's validity
	Accepted bool     `json:"accepted,omitempty"` // write, read
	Units    []int64  `json:"units,omitempty"`    // units: by key
	Delta    int64    `json:"delta,omitempty"`    // restock
	Known    bool     `json:"known,omitempty"`    // consume, restock: it returned nil
	Call     int64    `json:"call"`               // nanoseconds since the history began
	Return   int64    `json:"return"`
	Client   int      `json:"client"` // the worker (for the visualization)
}

// history is what a soak records for the checker.
type history struct {
	Seed  uint64    `json:"seed"`
	Began time.Time `json:"began"`
	// Capacity is the capacity of every counted key when the history
	// began (see history_units_test.go).
	Capacity int64       `json:"capacity,omitempty"`
	Ops      []historyOp `json:"ops"`
}

func (h *history) at(t time.Time) int64 { return t.Sub(h.Began).Nanoseconds() }

// keyState is the mutex model's state of one key.
type keyState struct {
	holds    []hold
	shared   bool
	token    int64 // the holders' token
	max      int64 // the largest token handed out
	maxAcked int64 // the largest taken WithReplicas
}

type hold struct {
	lock     int
	owner    string
	replicas bool
}

// mutexState is the state of a few keys, in the order of the partition's
// keys.
type mutexState struct {
	keys []string
	by   []keyState
}

func (m mutexState) String() string {
	var b strings.Builder
	for i, k := range m.keys {
		st := m.by[i]
		fmt.Fprintf(&b, "%s: token %d, max %d (acked %d), shared %v, holds", k, st.token, st.max, st.maxAcked, st.shared)
		for _, h := range st.holds {
			fmt.Fprintf(&b, " %d/%s/%v", h.lock, h.owner, h.replicas)
		}
		b.WriteString("; ")
	}
	return b.String()
}

func (m mutexState) clone() mutexState {
	out := mutexState{keys: m.keys, by: slices.Clone(m.by)}
	for i := range out.by {
		out.by[i].holds = slices.Clone(out.by[i].holds)
	}
	return out
}

func (m mutexState) index(key string) int { return slices.Index(m.keys, key) }

// stepMutex is the fenced mutex's step.
func stepMutex(state mutexState, op historyOp) (bool, mutexState) {
	next := state.clone()
	for i, key := range op.Keys {
		k := next.index(key)
		if k < 0 {
			continue
		}
		st := &next.by[k]
		switch op.Kind {
		case opAcquire:
			tok, shared := op.Tokens[i], op.Shared[i]
			switch {
			case len(st.holds) == 0:
				// A reader may find readers the history does not show
				// still holding the key: a call that failed, whose
				// rollback goes on in the background, or the soak's
				// waiter processes. It joins them, with their token.
				joined := shared && st.shared && tok == st.max
				if tok <= st.max && !joined {
					return false, state // a new owner gets a newer token
				}
				st.shared = shared
			case !slices.ContainsFunc(st.holds, func(h hold) bool { return h.owner != op.Owner }):
				if tok != st.token {
					return false, state // its owner's holds share a token
				}
			case st.shared && shared:
				if tok != st.token {
					return false, state // readers share a token
				}
			default:
				return false, state // held by another owner
			}
			st.holds = append(st.holds, hold{lock: op.Lock, owner: op.Owner, replicas: op.Replicas})
			st.token, st.max = tok, max(st.max, tok)
			if op.Replicas {
				st.maxAcked = max(st.maxAcked, tok)
			}
		case opRelease:
			st.holds = slices.DeleteFunc(st.holds, func(h hold) bool { return h.lock == op.Lock })
		case opFailover:
			st.holds = slices.DeleteFunc(st.holds, func(h hold) bool { return !h.replicas })
			st.max = max(st.maxAcked, st.tokenHeld())
		}
	}
	return true, next
}

// tokenHeld is the token of the holds left, 0 when there are none.
func (st keyState) tokenHeld() int64 {
	if len(st.holds) == 0 {
		return 0
	}
	return st.token
}

// mutexModel checks the lock operations of keys, taken together.
func mutexModel(keys []string) porcupine.Model {
	return porcupine.Model{
		Init: func() any {
			return mutexState{keys: keys, by: make([]keyState, len(keys))}
		},
		Step: func(state, input, _ any) (bool, any) {
			return stepMutex(state.(mutexState), input.(historyOp))
		},
		Equal: func(a, b any) bool { return a.(mutexState).String() == b.(mutexState).String() },
		DescribeOperation: func(input, _ any) string {
			op := input.(historyOp)
			return fmt.Sprintf("%s lock %d of %s %v tokens %v shared %v replicas %v", op.Kind, op.Lock, op.Owner, op.Keys, op.Tokens, op.Shared, op.Replicas)
		},
		DescribeState: func(state any) string { return state.(mutexState).String() },
	}
}

// registerState is the fenced register's state of one key.
type registerState struct {
	max        int64
	byReplicas bool // the write of max was made under a lock taken WithReplicas
	failedOver bool // a failover lost the key's master since the history began
}

// registerModel checks the storage's operations on one key.
var registerModel = porcupine.Model{
	Init: func() any { return registerState{} },
	Step: func(state, input, _ any) (bool, any) {
		st, op := state.(registerState), input.(historyOp)
		if op.Kind == opFailover {
			st.failedOver = true
			return true, st
		}
		tok := op.Tokens[0]
		if op.Accepted != (tok >= st.max) {
			return false, state
		}
		if !op.Accepted && op.Believed && !(st.failedOver && (!op.Replicas || !st.byReplicas)) {
			return false, state // refused within its validity
		}
		if op.Accepted && op.Kind == opWrite {
			st.max, st.byReplicas = tok, op.Replicas
		}
		return true, st
	},
	DescribeOperation: func(input, _ any) string {
		op := input.(historyOp)
		if op.Kind == opFailover {
			return "failover"
		}
		return fmt.Sprintf("%s token %d believed %v replicas %v accepted %v", op.Kind, op.Tokens[0], op.Believed, op.Replicas, op.Accepted)
	},
	DescribeState: func(state any) string { return fmt.Sprintf("%+v", state.(registerState)) },
}

// verdict is the checker's finding over a history.
type verdict struct {
	keys, groups int        // partitions checked
	illegal      []string   // "mutex sku:1", "register sku:1", "mutex {order-3}:line:0+…"
	illegalKeys  [][]string // the keys of each partition of illegal
	unknown      int        // partitions the checker could not decide in time
	files        []string   // visualizations written of illegal partitions
}

func (v verdict) String() string {
	return fmt.Sprintf("porcupine: %d keys and %d groups of keys checked: %d not linearizable, %d undecided",
		v.keys, v.groups, len(v.illegal), v.unknown)
}

// checkTimeout bounds the check of one partition.
const checkTimeout = 10 * time.Second

// check runs both models over h, per key, and the mutex model over groups
// of keys unsplit. When dir is not empty it writes a visualization (HTML)
// of each illegal partition there, at most a few.
func (h *history) check(groups [][]string, dir string) verdict {
	var v verdict
	byKey := map[string][]porcupine.Operation{}
	registers := map[string][]porcupine.Operation{}
	counted, units := h.countedKeys(), map[string][]porcupine.Operation{}
	for _, op := range h.Ops {
		for _, key := range op.Keys {
			one := op.onKey(key)
			switch {
			case counted[key]:
				units[key] = append(units[key], one.porcupine())
			case op.Kind == opWrite, op.Kind == opRead:
				registers[key] = append(registers[key], one.porcupine())
			case op.Kind == opFailover:
				registers[key] = append(registers[key], one.porcupine())
				byKey[key] = append(byKey[key], one.porcupine())
			default:
				byKey[key] = append(byKey[key], one.porcupine())
			}
		}
	}
	run := func(model string, keys []string, m porcupine.Model, ops []porcupine.Operation) {
		name := model + " " + strings.Join(keys, "+")
		// The visualization draws a lane per client: number them densely.
		lanes := map[int]int{}
		for i := range ops {
			lane, ok := lanes[ops[i].ClientId]
			if !ok {
				lane = len(lanes)
				lanes[ops[i].ClientId] = lane
			}
			ops[i].ClientId = lane
		}
		res, info := porcupine.CheckOperationsVerbose(m, ops, checkTimeout)
		switch res {
		case porcupine.Illegal:
			v.illegal, v.illegalKeys = append(v.illegal, name), append(v.illegalKeys, keys)
			if dir != "" && len(v.files) < 5 {
				file := filepath.Join(dir, "porcupine-"+strings.NewReplacer("/", "_", " ", "-", "{", "", "}", "", "+", "_").Replace(name)+".html")
				if porcupine.VisualizePath(m, info, file) == nil {
					v.files = append(v.files, file)
				}
			}
		case porcupine.Unknown:
			v.unknown++
		}
	}
	for _, key := range slices.Sorted(maps.Keys(byKey)) {
		v.keys++
		run("mutex", []string{key}, mutexModel([]string{key}), byKey[key])
	}
	for _, key := range slices.Sorted(maps.Keys(registers)) {
		run("register", []string{key}, registerModel, registers[key])
	}
	for _, key := range slices.Sorted(maps.Keys(units)) {
		v.keys++
		run("units", []string{key}, unitsModel(h.Capacity), units[key])
	}
	for _, keys := range groups {
		var ops []porcupine.Operation
		for _, op := range h.Ops {
			if op.Kind != opWrite && op.Kind != opRead && slices.ContainsFunc(op.Keys, func(k string) bool { return slices.Contains(keys, k) }) {
				ops = append(ops, op.porcupine())
			}
		}
		if len(ops) > 0 {
			v.groups++
			run("mutex", keys, mutexModel(keys), ops)
		}
	}
	return v
}

// onKey is op restricted to key.
func (op historyOp) onKey(key string) historyOp {
	i := slices.Index(op.Keys, key)
	out := op
	out.Keys = []string{key}
	switch op.Kind {
	case opAcquire:
		out.Tokens, out.Shared = []int64{op.Tokens[i]}, []bool{op.Shared[i]}
	case opUnits:
		out.Tokens, out.Units = []int64{op.Tokens[i]}, []int64{op.Units[i]}
	}
	return out
}

func (op historyOp) porcupine() porcupine.Operation {
	return porcupine.Operation{ClientId: op.Client, Input: op, Call: op.Call, Return: op.Return}
}

// save writes h to path as JSON, for a replay (TestHistoryReplay).
func (h *history) save(path string) error {
	data, err := json.Marshal(h)
	if err != nil {
		return err
	}
	return os.WriteFile(path, data, 0o644)
}

func loadHistory(path string) (*history, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var h history
	if err := json.Unmarshal(data, &h); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return &h, nil
}
