package wiretest

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/batchlock/batchlock/internal/routing"
	"github.com/batchlock/batchlock/internal/wire"
)

// The in-memory fake the unit tests run on agrees with the scripts on what
// it models (exclusive keys, no queue, "try" calls): a seeded run of
// acquires, releases and extensions by three owners, two holds each, over
// four keys of one slot, gives the same outcome from both at every step
// (granted or refused, and which keys conflict; which keys a release or an
// extension finds without the hold). Tokens are not compared: the fake
// counts one per key, the script one per key asked for.
func TestScriptFakeAgrees(t *testing.T) {
	rdb := ServerClient(t)
	ctx := t.Context()
	fake := NewFake()
	keys := []string{"k1{a}", "k2{a}", "k3{a}", "k4{a}"}
	type holdOf struct{ owner, hold string }
	holds := []holdOf{{"o1", "h:1"}, {"o1", "h:2"}, {"o2", "h:3"}, {"o2", "h:4"}, {"o3", "h:5"}, {"o3", "h:6"}}
	rng := rand.New(rand.NewPCG(1, 2))
	const lease = int64(60000)
	for step := range 400 {
		h := holds[rng.IntN(len(holds))]
		var picked []string
		for _, k := range keys {
			if rng.IntN(2) == 0 {
				picked = append(picked, k)
			}
		}
		if len(picked) == 0 {
			picked = keys[:1]
		}
		var name string
		var run *redis.Script
		args := []any{}
		switch op := rng.IntN(3); op {
		case 0:
			name, run = "acquire", wire.AcquireScript
			args = append(args, h.owner, h.hold, lease, "try", "cancel:{a}:"+h.hold, int64(2000), "fence:{a}", len(picked))
		case 1:
			name, run = "release", wire.ReleaseScript
			args = append(args, h.owner, h.hold, lease, 0, len(picked), 0)
		case 2:
			name, run = "extend", wire.ExtendScript
			args = append(args, h.hold, lease, len(picked))
		}
		for _, k := range picked {
			args = append(args, k)
		}
		real, err := run.Run(ctx, rdb, nil, args...).Result()
		require.NoError(t, err, "step %d: %s %v", step, name, args)
		modelled := fake.run(name, &routing.Call{Args: args})
		what := fmt.Sprintf("step %d: %s %v: real %v, fake %v", step, name, args, real, modelled)
		if name == "acquire" {
			r, err := wire.DecodeAcquire(real.([]any))
			require.NoError(t, err, what)
			m, err := wire.DecodeAcquire(modelled)
			require.NoError(t, err, what)
			require.Equal(t, r.Status, m.Status, what)
			require.Equal(t, r.Conflicts, m.Conflicts, what)
			continue
		}
		r, err := wire.DecodeKeyLists(real, 1)
		require.NoError(t, err, what)
		m, err := wire.DecodeKeyLists(modelled, 1)
		require.NoError(t, err, what)
		require.Equal(t, lostKeys(r), lostKeys(m), what)
	}
}

// lostKeys is the keys a release or an extension found without the hold.
func lostKeys(lists []wire.KeyLists) []string {
	if len(lists) == 0 || len(lists[0].Lost) == 0 {
		return nil
	}
	return lists[0].Lost
}

func TestMain(m *testing.M) { Main(m) }
