package routing

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/batchlock/batchlock/internal/backoff"
)

// slotMove models, for Route, a cluster with one slot on the move: "src"
// serves the slot and has the keys not moved yet, "dst" imports it and has
// the moved ones; "old" is where a stale map of slots sends calls. A call's
// arguments are keys; a node that serves a key processes it, one that does
// not reports it back (the script's "elsewhere"); a declared key that a node
// does not have is redirected, as Redis does before running a script.
type slotMove struct {
	mu        sync.Mutex
	moved     map[string]bool // on dst
	processed map[string][]string
	refreshed bool
}

func (f *slotMove) Send(ctx context.Context, _ *redis.Script, calls []*Call, _ Ack) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, c := range calls {
		c.Reply = redis.NewCmd(ctx)
		node := c.Addr
		if node == "" {
			node = "old"
			if f.refreshed {
				node = "src"
			}
		}
		if len(c.Keys) > 0 {
			declared := c.Keys[0]
			switch {
			case node == "old":
				c.Reply.SetErr(redisError("MOVED 7 src"))
				continue
			case node == "src" && f.moved[declared]:
				c.Reply.SetErr(redisError("ASK 7 dst"))
				continue
			case node == "dst" && !c.Asking:
				c.Reply.SetErr(redisError("MOVED 7 src"))
				continue
			}
		}
		var away []any
		for _, a := range c.Args {
			key := a.(string)
			here := node == "src" && !f.moved[key] || node == "dst" && c.Asking
			if !here {
				away = append(away, key)
				continue
			}
			f.processed[node] = append(f.processed[node], key)
		}
		c.Reply.SetVal(away)
	}
}

func TestRouteFollowsKeysWhereTheyAre(t *testing.T) {
	f := &slotMove{moved: map[string]bool{"k1": true}, processed: map[string][]string{}}
	r := NewWith(f, func(context.Context, string) (string, error) { return "one master", nil },
		func(context.Context) { f.mu.Lock(); f.refreshed = true; f.mu.Unlock() })
	keys := []string{"k1", "k2", "k3"}
	parts := make([]Part, len(keys))
	for i, k := range keys {
		parts[i] = Part{Slot: 7, Route: k, Keys: 1}
	}
	results := r.Route(t.Context(), Batch{
		Step: "test", Parts: parts, Follow: true,
		Args: func(at []int) []any {
			out := make([]any, len(at))
			for n, i := range at {
				out[n] = keys[i]
			}
			return out
		},
		Read: func(c *Call, at []int) ([]int, error) {
			vals, _ := c.Reply.Slice()
			var again []int
			for _, v := range vals {
				again = append(again, slices.Index(keys, v.(string)))
			}
			return again, nil
		},
	})
	for i, res := range results {
		assert.NoError(t, res.Err, keys[i])
	}
	// Found elsewhere by the stale master, each key is asked about on its
	// own: the moved one is followed to the importing master, the others
	// stay on the source, where they are.
	assert.Equal(t, []string{"k1"}, f.processed["dst"], "only the moved key goes to the importing master")
	assert.ElementsMatch(t, []string{"k2", "k3"}, f.processed["src"])
}

// Every call carries at most MaxCallKeys keys; parts of one master go
// together, in order when the batch is Ordered.
func TestRouteCapsCalls(t *testing.T) {
	var sizes []int
	sender := senderFunc(func(ctx context.Context, calls []*Call) {
		for _, c := range calls {
			sizes = append(sizes, len(c.Args))
			c.Reply = redis.NewCmd(ctx)
			c.Reply.SetVal([]any{})
		}
	})
	r := NewWith(sender, func(_ context.Context, key string) (string, error) { return key[:1], nil }, nil)
	var parts []Part
	for i := range 2500 {
		parts = append(parts, Part{Slot: i, Route: fmt.Sprintf("%c%d", 'a'+i%2, i), Keys: 1})
	}
	for _, ordered := range []bool{false, true} {
		sizes = nil
		results := r.Route(t.Context(), Batch{Step: "test", Parts: parts, Ordered: ordered,
			Args: func(at []int) []any { return make([]any, len(at)) },
			Read: func(*Call, []int) ([]int, error) { return nil, nil }})
		require.Len(t, results, len(parts))
		total := 0
		for _, n := range sizes {
			assert.LessOrEqual(t, n, MaxCallKeys)
			total += n
		}
		assert.Equal(t, len(parts), total)
		if !ordered {
			assert.Len(t, sizes, 4, "two masters, two calls each")
		} else {
			assert.Len(t, sizes, len(parts), "alternating masters: a call per run of one part")
		}
	}
}

type senderFunc func(ctx context.Context, calls []*Call)

func (f senderFunc) Send(ctx context.Context, _ *redis.Script, calls []*Call, _ Ack) { f(ctx, calls) }

// With Settled, each master's parts are settled as soon as that master has
// answered, while a slow master still holds its own; every part is settled
// once, and Route returns when all are.
func TestRouteSettlesMastersApart(t *testing.T) {
	slow := make(chan struct{})
	sender := senderFunc(func(ctx context.Context, calls []*Call) {
		for _, c := range calls {
			if c.Route[0] == 'b' {
				<-slow
			}
			c.Reply = redis.NewCmd(ctx)
			c.Reply.SetVal([]any{})
		}
	})
	r := NewWith(sender, func(_ context.Context, key string) (string, error) { return key[:1], nil }, nil)
	parts := []Part{{Slot: 1, Route: "a1", Keys: 1}, {Slot: 2, Route: "b2", Keys: 1}, {Slot: 3, Route: "a3", Keys: 1}}
	var mu sync.Mutex
	settled := map[int]int{}
	fastDone := make(chan []int, 1)
	returned := make(chan []Result)
	go func() {
		returned <- r.Route(t.Context(), Batch{
			Step: "test", Parts: parts,
			Args: func(at []int) []any { return []any{len(at)} },
			Read: func(*Call, []int) ([]int, error) { return nil, nil },
			Settled: func(at []int, results []Result) {
				mu.Lock()
				defer mu.Unlock()
				for _, j := range at {
					settled[j]++
					assert.NoError(t, results[j].Err)
				}
				if parts[at[0]].Route[0] == 'a' {
					fastDone <- slices.Clone(at)
				}
			},
		})
	}()
	select {
	case at := <-fastDone:
		assert.ElementsMatch(t, []int{0, 2}, at, "the fast master's parts, settled while the slow one holds its own")
	case <-time.After(5 * time.Second):
		t.Fatal("the fast master's parts were not settled while the slow one was still answering")
	}
	close(slow)
	results := <-returned
	assert.Len(t, results, 3)
	assert.Equal(t, map[int]int{0: 1, 1: 1, 2: 1}, settled, "every part settled once")
}

// A Read that finds its reply wrong describes it through the call, in the
// words of the batch's step.
func TestReadDescribesWithTheStep(t *testing.T) {
	sender := senderFunc(func(ctx context.Context, calls []*Call) {
		for _, c := range calls {
			c.Reply = redis.NewCmd(ctx)
			c.Reply.SetVal("nonsense")
		}
	})
	r := NewWith(sender, func(context.Context, string) (string, error) { return "m", nil }, nil)
	results := r.Route(t.Context(), Batch{
		Step: "test", Parts: []Part{{Slot: 7, Route: "k", Keys: 1}},
		Args: func([]int) []any { return nil },
		Read: func(c *Call, _ []int) ([]int, error) {
			return nil, c.Describe(t.Context(), errors.New("unexpected reply nonsense"))
		},
	})
	require.Len(t, results, 1)
	assert.EqualError(t, results[0].Err, "test: slot 7: unexpected reply nonsense")
}

// movedAway models a slot that moved from "old" to "new" while the map of
// slots, not reloaded yet, still names "old": old answers a declared key
// with MOVED and reports undeclared ones elsewhere, as the scripts do.
// down makes new refuse connections.
type movedAway struct {
	mapped string
	down   bool
	sent   []string // where each call went
}

func (f *movedAway) Send(ctx context.Context, _ *redis.Script, calls []*Call, _ Ack) {
	for _, c := range calls {
		c.Reply = redis.NewCmd(ctx)
		node := cmp.Or(c.Addr, f.mapped)
		f.sent = append(f.sent, node)
		switch {
		case node == "new" && f.down:
			c.Reply.SetErr(&net.OpError{Op: "dial", Err: errors.New("connection refused")})
		case node == "new":
			c.Reply.SetVal([]any{})
		case len(c.Keys) > 0:
			c.Reply.SetErr(redisError("MOVED 7 new"))
		default:
			c.Reply.SetVal(c.Args) // every key elsewhere
		}
	}
}

// A MOVED reply is remembered for its slot: later calls go to the master it
// named while the map of slots still names the old one, and by the map
// again once it names another, or once the named master fails.
func TestRouteRemembersMovedSlots(t *testing.T) {
	for _, tc := range []struct {
		name   string
		mapped string // the map's master once the first Route learned the move
		down   bool
		want   []string // where the second Route's first calls went
		kept   map[int]movedTo
	}{
		{name: "map still stale", mapped: "old", want: []string{"new"}, kept: map[int]movedTo{7: {addr: "new", stale: "old"}}},
		{name: "map caught up", mapped: "new", want: []string{"new"}, kept: map[int]movedTo{}},
		{name: "slot moved on", mapped: "third", want: []string{"third", "third", "new"}, kept: map[int]movedTo{7: {addr: "new", stale: "third"}}},
		{name: "named master fails", mapped: "old", down: true, want: []string{"new", "old", "old"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := &movedAway{mapped: "old"}
			r := NewWith(f, func(context.Context, string) (string, error) { return f.mapped, nil }, nil)
			route := func() []Result {
				return r.Route(t.Context(), Batch{Step: "test", Parts: []Part{{Slot: 7, Route: "k", Keys: 1}},
					Args: func([]int) []any { return []any{"k"} },
					Read: func(c *Call, at []int) ([]int, error) {
						if vals, _ := c.Reply.Slice(); len(vals) > 0 {
							return at, nil
						}
						return nil, nil
					}})
			}
			require.NoError(t, route()[0].Err)
			require.Equal(t, []string{"old", "old", "new"}, f.sent, "found elsewhere, then MOVED, then served")

			f.sent, f.mapped, f.down = nil, tc.mapped, tc.down
			r.Window = 50 * time.Millisecond
			res := route()
			require.GreaterOrEqual(t, len(f.sent), len(tc.want))
			assert.Equal(t, tc.want, f.sent[:len(tc.want)])
			if tc.down {
				assert.Error(t, res[0].Err, "new stays down")
				for i := 1; i < len(f.sent); i++ {
					assert.False(t, f.sent[i-1] == "new" && f.sent[i] == "new", "a failed call to where MOVED pointed goes by the map next: %v", f.sent)
				}
				return
			}
			require.NoError(t, res[0].Err)
			assert.Equal(t, tc.kept, r.moved.to)
		})
	}
}

// Rounds that only go where a reply pointed are sent without a pause; two
// nodes that bounce a slot between them get a pause every maxPointed+1
// rounds.
func TestRoutePausesOnlyWhenNotPointed(t *testing.T) {
	var pauses int
	sleep = func(context.Context, time.Duration) bool { pauses++; return true }
	t.Cleanup(func() {
		sleep = func(ctx context.Context, d time.Duration) bool { return backoff.Sleep(ctx, d) == nil }
	})
	batch := Batch{Step: "test", Parts: []Part{{Slot: 7, Route: "k", Keys: 1}}, Args: func([]int) []any { return []any{"k"} },
		Read: func(c *Call, at []int) ([]int, error) {
			if vals, _ := c.Reply.Slice(); len(vals) > 0 {
				return at, nil
			}
			return nil, nil
		}}

	f := &movedAway{mapped: "old"}
	r := NewWith(f, func(context.Context, string) (string, error) { return f.mapped, nil }, nil)
	require.NoError(t, r.Route(t.Context(), batch)[0].Err)
	assert.Len(t, f.sent, 3)
	assert.Zero(t, pauses, "found elsewhere, MOVED, then served: no pause")

	rounds := 0
	bounce := senderFunc(func(ctx context.Context, calls []*Call) {
		for _, c := range calls {
			rounds++
			c.Reply = redis.NewCmd(ctx)
			switch {
			case len(c.Keys) == 0:
				c.Reply.SetVal(c.Args)
			case c.Addr == "a":
				c.Reply.SetErr(redisError("MOVED 7 b"))
			default:
				c.Reply.SetErr(redisError("MOVED 7 a"))
			}
		}
	})
	r = NewWith(bounce, func(context.Context, string) (string, error) { return "a", nil }, nil)
	r.Window = time.Hour
	ctx, cancel := context.WithCancel(t.Context())
	sleep = func(context.Context, time.Duration) bool {
		if pauses++; pauses == 5 {
			cancel()
		}
		return true
	}
	pauses = 0
	assert.Error(t, r.Route(ctx, batch)[0].Err)
	assert.Equal(t, 5, pauses)
	assert.LessOrEqual(t, rounds, 5*(maxPointed+1)+1, "a pause at least every %d rounds", maxPointed+1)
}
