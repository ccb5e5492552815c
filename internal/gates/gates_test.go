package gates

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// ask is one call at a key's gate: its owner, whether it asks shared, and
// whether it may wait.
type ask struct {
	owner  string
	shared bool
	wait   bool
}

func TestGateRules(t *testing.T) {
	for _, tc := range []struct {
		name string
		held []ask    // passed first, in order
		next ask      // then asks
		want Verdict  // what it is told at once
		q    int      // calls queued at the gate after it asked
		who  []string // the gate's holders after it asked
	}{
		{name: "a free gate lets anyone in", next: ask{owner: "a"}, want: Pass, who: []string{"a"}},
		{name: "an owner's locks pass together", held: []ask{{owner: "a"}}, next: ask{owner: "a"}, want: Pass, who: []string{"a"}},
		{name: "an owner holding exclusively passes shared too", held: []ask{{owner: "a"}}, next: ask{owner: "a", shared: true}, want: Pass, who: []string{"a"}},
		{name: "another owner is refused when it may not wait", held: []ask{{owner: "a"}}, next: ask{owner: "b"}, want: Wait, who: []string{"a"}},
		{name: "another owner queues when it may wait", held: []ask{{owner: "a"}}, next: ask{owner: "b", wait: true}, want: Wait, q: 1, who: []string{"a"}},
		{name: "readers share", held: []ask{{owner: "a", shared: true}}, next: ask{owner: "b", shared: true}, want: Pass, who: []string{"a", "b"}},
		{name: "a writer waits for readers", held: []ask{{owner: "a", shared: true}}, next: ask{owner: "b", wait: true}, want: Wait, q: 1, who: []string{"a"}},
		{name: "a reader waits for a writer", held: []ask{{owner: "a"}}, next: ask{owner: "b", shared: true, wait: true}, want: Wait, q: 1, who: []string{"a"}},
		{name: "a reader asking exclusively is told to upgrade, not queued", held: []ask{{owner: "a", shared: true}}, next: ask{owner: "a", wait: true}, want: Upgrade, who: []string{"a"}},
		{name: "a later reader does not overtake a waiting writer", held: []ask{{owner: "a", shared: true}, {owner: "w", wait: true}},
			next: ask{owner: "b", shared: true, wait: true}, want: Wait, q: 2, who: []string{"a"}},
		{name: "a reader's owner passes again past a waiting writer", held: []ask{{owner: "a", shared: true}, {owner: "w", wait: true}},
			next: ask{owner: "a", shared: true}, want: Pass, q: 1, who: []string{"a"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := New()
			var waiters []*Waiter
			for _, h := range append(tc.held, tc.next) {
				v, w := g.Ask("k", h.owner, h.shared, h.wait)
				if w != nil {
					waiters = append(waiters, w)
				}
				if h == tc.next {
					assert.Equal(t, tc.want, v)
				}
			}
			assert.Equal(t, tc.q, g.Queued("k"))
			assert.Equal(t, tc.who, g.Holders("k"))
			for _, w := range waiters {
				w.Abandon()
			}
		})
	}
}

// Waiters go in in arrival order as holders leave: a writer, then the run
// of readers behind it together, then the next writer.
func TestGateLetsWaitersInInOrder(t *testing.T) {
	g := New()
	require.Equal(t, Pass, verdictOf(g.Ask("k", "a", false, false)))
	_, w1 := g.Ask("k", "w1", false, true)
	_, r1 := g.Ask("k", "r1", true, true)
	_, r2 := g.Ask("k", "r2", true, true)
	_, w2 := g.Ask("k", "w2", false, true)
	require.Equal(t, 4, g.Queued("k"))

	g.Leave("k", "a", false)
	requireGranted(t, w1, Pass)
	requireWaiting(t, r1, r2, w2)
	assert.Equal(t, []string{"w1"}, g.Holders("k"))

	g.Leave("k", "w1", false)
	requireGranted(t, r1, Pass)
	requireGranted(t, r2, Pass)
	requireWaiting(t, w2)
	assert.Equal(t, []string{"r1", "r2"}, g.Holders("k"))

	g.Leave("k", "r1", true)
	requireWaiting(t, w2)
	g.Leave("k", "r2", true)
	requireGranted(t, w2, Pass)
	g.Leave("k", "w2", false)
	assert.Zero(t, g.Count(), "a gate nobody holds or waits for is forgotten")
}

// An owner's holds are counted: the gate is free once each has left.
func TestGateCountsAnOwnersHolds(t *testing.T) {
	g := New()
	g.Ask("k", "a", false, false)
	g.Ask("k", "a", false, false)
	_, w := g.Ask("k", "b", false, true)
	g.Leave("k", "a", false)
	requireWaiting(t, w)
	g.Leave("k", "a", false)
	requireGranted(t, w, Pass)
	g.Leave("k", "b", false)
	assert.Zero(t, g.Count())
}

// A reader queued behind a waiting writer that gives up goes in; a waiter
// granted before it abandons gives the gate back.
func TestGateAbandon(t *testing.T) {
	g := New()
	g.Ask("k", "a", true, false)
	_, writer := g.Ask("k", "w", false, true)
	_, reader := g.Ask("k", "r", true, true)
	requireWaiting(t, reader)
	writer.Abandon()
	requireGranted(t, reader, Pass)
	assert.Equal(t, []string{"a", "r"}, g.Holders("k"))

	_, late := g.Ask("k", "w", false, true)
	g.Leave("k", "a", true)
	g.Leave("k", "r", true)
	requireGranted(t, late, Pass)
	late.Abandon()
	assert.Zero(t, g.Count(), "the gate granted to a waiter that gave up is given back")
}

// A reader that asks exclusively at the head of the queue, behind its own
// owner's read, is answered Upgrade and the waiter behind it goes on.
func TestGateUpgradeAtTheHead(t *testing.T) {
	g := New()
	g.Ask("k", "w", false, false)
	_, read := g.Ask("k", "o", true, true)
	_, write := g.Ask("k", "o", false, true)
	_, after := g.Ask("k", "c", false, true)
	g.Leave("k", "w", false)
	requireGranted(t, read, Pass)
	requireGranted(t, write, Upgrade)
	requireWaiting(t, after)
	g.Leave("k", "o", true)
	requireGranted(t, after, Pass)
	g.Leave("k", "c", false)
	assert.Zero(t, g.Count())
}

// Enter waits until the gate lets it in, or its context ends: then it holds
// nothing and has left the queue.
func TestGateEnter(t *testing.T) {
	g := New()
	g.Ask("k", "a", false, false)
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Millisecond)
	defer cancel()
	waited := false
	assert.Equal(t, Wait, g.Enter(ctx, "k", "b", false, true, func(string) { waited = true }))
	assert.True(t, waited, "told before it waits")
	assert.Zero(t, g.Queued("k"), "left the queue when its context ended")

	entered := make(chan Verdict, 1)
	go func() { entered <- g.Enter(t.Context(), "k", "b", false, true, func(string) {}) }()
	require.Eventually(t, func() bool { return g.Queued("k") == 1 }, 5*time.Second, time.Millisecond)
	g.Leave("k", "a", false)
	assert.Equal(t, Pass, <-entered)
	assert.Equal(t, []string{"b"}, g.Holders("k"))
}

// A panic in the function told of the wait takes the waiter out of the
// queue before it goes on.
func TestGateNotifyPanics(t *testing.T) {
	g := New()
	g.Ask("k", "a", false, false)
	func() {
		defer func() { assert.Equal(t, "observer", recover()) }()
		g.Enter(t.Context(), "k", "b", false, true, func(string) { panic("observer") })
	}()
	assert.Zero(t, g.Queued("k"))
	g.Leave("k", "a", false)
	assert.Zero(t, g.Count())
}

func verdictOf(v Verdict, _ *Waiter) Verdict { return v }

func requireGranted(t *testing.T, w *Waiter, want Verdict) {
	t.Helper()
	select {
	case <-w.Granted():
		require.Equal(t, want, w.Verdict())
	default:
		t.Fatalf("%q still waits", w.owner)
	}
}

func requireWaiting(t *testing.T, ws ...*Waiter) {
	t.Helper()
	for _, w := range ws {
		select {
		case <-w.Granted():
			t.Fatalf("%q was let in", w.owner)
		default:
		}
	}
}
