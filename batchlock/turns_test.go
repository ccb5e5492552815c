package batchlock

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/batchlock/batchlock/internal/wire/wiretest"
)

// turnClients are a processor's Client (with opts) and another's, on one
// server.
func turnClients(t *testing.T, opts ...Option) (proc, other *Client) {
	t.Helper()
	rdb := wiretest.ServerClient(t)
	proc, err := New(rdb, opts...)
	require.NoError(t, err)
	t.Cleanup(func() { _ = proc.Close() })
	other, err = New(rdb)
	require.NoError(t, err)
	t.Cleanup(func() { _ = other.Close() })
	return proc, other
}

// turnCount is how many baskets hold turns in t.
func turnCount(t *Turns) int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.byBasket)
}

// Of the baskets another Client refuses, only the first Baskets take turns
// (a basket named twice, once); a later call refuses a basket whose turn
// waits, and lets a later basket take a key the turn has not reached (it
// waits for it behind that basket, at the gate); a turn's Lock
// that no call asks for within Place is released, and the turns are
// forgotten: nothing held, nothing remembered.
func TestTurnsAreBounded(t *testing.T) {
	proc, other := turnClients(t)
	ctx := t.Context()
	busy, err := other.Lock(ctx, []string{"a", "b", "c"})
	require.NoError(t, err)

	turns := Turns{After: 1, Baskets: 2, Place: 300 * time.Millisecond}
	var why []Refusal
	locks, err := proc.TryEach(ctx, [][]string{{"a", "x"}, {"x", "a"}, {"b"}, {"c"}}, WithTurns(&turns), WithRefusals(&why))
	require.NoError(t, err)
	assert.Equal(t, []bool{false, false, false, false}, taken(locks))
	assert.True(t, why[1].Earlier, "the same basket again is an earlier one's")
	assert.Equal(t, 2, turnCount(&turns), "two turns: {a x} and {b}")
	require.Eventually(t, func() bool {
		held, err := proc.Inspect(ctx, "a", "b", "c")
		require.NoError(t, err)
		return held[0].Waiting == 1 && held[1].Waiting == 1 && held[2].Waiting == 0
	}, 5*time.Second, 5*time.Millisecond, "the turns wait in the queues of a and b, not c")

	why = nil
	locks, err = proc.TryEach(ctx, [][]string{{"x", "a"}, {"x", "y"}}, WithTurns(&turns), WithRefusals(&why))
	require.NoError(t, err)
	assert.Equal(t, []bool{false, true}, taken(locks), "x, after the a the turn waits for, is free for a later basket")
	assert.Equal(t, []Refusal{{Basket: 0, Turn: true}}, why, "the turn waits")
	require.NoError(t, proc.UnlockEach(ctx, locks))

	require.NoError(t, busy.Unlock(ctx))
	require.Eventually(t, func() bool {
		held, err := proc.Inspect(ctx, "a", "b", "x")
		require.NoError(t, err)
		return len(held[0].Holders)+len(held[1].Holders)+len(held[2].Holders) == 3
	}, 5*time.Second, 5*time.Millisecond, "the turns take their baskets")
	require.Eventually(t, func() bool {
		held, err := proc.Inspect(ctx, "a", "b", "x")
		require.NoError(t, err)
		return len(held[0].Holders)+len(held[1].Holders)+len(held[2].Holders) == 0 && turnCount(&turns) == 0
	}, 5*time.Second, 5*time.Millisecond, "released and forgotten once Place passed")
}

// Ready receives once a turn's Lock holds its keys; a call that asks for
// the basket then has it handed out as an ordinary lock of the basket,
// with no call to Redis.
func TestTurnHandedOut(t *testing.T) {
	proc, other := turnClients(t)
	ctx := t.Context()
	busy, err := other.Lock(ctx, []string{"b"})
	require.NoError(t, err)
	turns := Turns{After: 1}
	locks, err := proc.TryEach(ctx, [][]string{{"a", "b"}}, WithTurns(&turns))
	require.NoError(t, err)
	require.Nil(t, locks[0])
	require.Eventually(t, func() bool { return holderIs(t, proc, "b", busy.Owner()) && waitingOn(t, proc, "b") == 1 },
		5*time.Second, 5*time.Millisecond)
	require.NoError(t, busy.Unlock(ctx))
	select {
	case <-turns.Ready():
	case <-time.After(5 * time.Second):
		require.Fail(t, "Ready never received")
	}
	_, ready := turns.of(basketID([]string{"a", "b"}))
	require.True(t, ready, "Ready receives once the turn's Lock holds its keys")

	before := proc.Stats().Acquires
	locks, err = proc.TryEach(ctx, [][]string{{"b", "a"}}, WithTurns(&turns))
	require.NoError(t, err)
	require.NotNil(t, locks[0])
	assert.Equal(t, before, proc.Stats().Acquires, "handed out with no call to Redis")
	assert.Equal(t, []string{"a", "b"}, locks[0].Keys())
	assert.Greater(t, locks[0].Token("b"), busy.Token("b"))
	assert.Zero(t, turnCount(&turns))
	require.NoError(t, proc.UnlockEach(ctx, locks))
	assert.False(t, holderIs(t, proc, "b", locks[0].Owner()), "released")
}

// holderIs reports whether owner holds key.
func holderIs(t *testing.T, c *Client, key, owner string) bool {
	t.Helper()
	held, err := c.Inspect(t.Context(), key)
	require.NoError(t, err)
	return len(held[0].Holders) == 1 && held[0].Holders[0] == owner
}

// waitingOn is how many calls wait for key.
func waitingOn(t *testing.T, c *Client, key string) int {
	t.Helper()
	held, err := c.Inspect(t.Context(), key)
	require.NoError(t, err)
	return held[0].Waiting
}

// A turn whose wait runs out leaves its queue and is forgotten: the basket
// is tried afresh, and may take a turn again.
func TestTurnWaitEnds(t *testing.T) {
	proc, other := turnClients(t)
	ctx := t.Context()
	busy, err := other.Lock(ctx, []string{"a"})
	require.NoError(t, err)
	turns := Turns{After: 1, Wait: 100 * time.Millisecond}
	locks, err := proc.TryEach(ctx, [][]string{{"a"}}, WithTurns(&turns))
	require.NoError(t, err)
	require.Nil(t, locks[0])
	require.Equal(t, 1, turnCount(&turns))
	require.Eventually(t, func() bool { return turnCount(&turns) == 0 && waitingOn(t, proc, "a") == 0 },
		5*time.Second, 5*time.Millisecond, "the wait ran out: the turn is gone, in Redis too")
	var why []Refusal
	locks, err = proc.TryEach(ctx, [][]string{{"a"}}, WithTurns(&turns), WithRefusals(&why))
	require.NoError(t, err)
	require.Nil(t, locks[0])
	assert.Equal(t, []Refusal{{Basket: 0, Keys: []string{"a"}}}, why, "tried afresh, in Redis")
	require.NoError(t, busy.Unlock(ctx))
}

// A turn's Lock lost while it waits to be handed out (its keys forced free)
// is released instead: the call refuses its basket, and forgets the turn.
func TestTurnLostIsNotHandedOut(t *testing.T) {
	proc, other := turnClients(t, WithLease(600*time.Millisecond))
	ctx := t.Context()
	busy, err := other.Lock(ctx, []string{"a"})
	require.NoError(t, err)
	turns := Turns{After: 1, Place: 5 * time.Second}
	locks, err := proc.TryEach(ctx, [][]string{{"a"}}, WithTurns(&turns))
	require.NoError(t, err)
	require.Nil(t, locks[0])
	require.NoError(t, busy.Unlock(ctx))
	id := basketID([]string{"a"})
	require.Eventually(t, func() bool { _, ready := turns.of(id); return ready }, 5*time.Second, 5*time.Millisecond)
	tn, _ := turns.of(id)
	lost := tn.lock
	_, err = other.ForceUnlock(ctx, "a")
	require.NoError(t, err)
	require.Eventually(t, func() bool { return lost.Err() != nil }, 5*time.Second, 5*time.Millisecond, "the watchdog finds it lost")

	var why []Refusal
	locks, err = proc.TryEach(ctx, [][]string{{"a"}}, WithTurns(&turns), WithRefusals(&why))
	require.NoError(t, err)
	assert.Nil(t, locks[0], "a lost Lock is not handed out")
	assert.Equal(t, []Refusal{{Basket: 0, Turn: true}}, why)
	assert.Zero(t, turnCount(&turns))
	locks, err = proc.TryEach(ctx, [][]string{{"a"}}, WithTurns(&turns))
	require.NoError(t, err)
	require.NotNil(t, locks[0], "tried afresh")
	require.NoError(t, proc.UnlockEach(ctx, locks))
}

// A basket takes its turn once After calls in a row refused it in Redis: a
// call that refuses it in the process keeps its count, one that takes it
// or leaves it out loses it.
func TestTurnAfterRefusalsInARow(t *testing.T) {
	proc, other := turnClients(t)
	ctx := t.Context()
	busy, err := other.Lock(ctx, []string{"a"})
	require.NoError(t, err)
	var turns Turns // After 2
	try := func(baskets ...[]string) { tryAndLetGo(t, proc, &turns, baskets...) }
	try([]string{"a", "b"})
	assert.Zero(t, turnCount(&turns), "refused once")
	try([]string{"c"})
	try([]string{"a", "b"})
	assert.Zero(t, turnCount(&turns), "a call that left it out reset the count")
	try([]string{"b"}, []string{"b", "a"})
	assert.Zero(t, turnCount(&turns), "refused in the process: counted as before")
	try([]string{"a", "b"})
	assert.Equal(t, 1, turnCount(&turns), "refused in Redis twice in a row, the refusal in the process between")
	require.Eventually(t, func() bool { return waitingOn(t, proc, "a") == 1 }, 5*time.Second, 5*time.Millisecond)
	require.NoError(t, busy.Unlock(ctx))
}

// A call of Backlog baskets or more (a full tick) starts no turn, but
// counts the refusals: the first call below Backlog gives the basket its
// turn at once, and the Lock is handed out as ever.
func TestTurnsNoneFromABacklog(t *testing.T) {
	proc, other := turnClients(t)
	ctx := t.Context()
	busy, err := other.Lock(ctx, []string{"a"})
	require.NoError(t, err)
	turns := Turns{After: 2, Backlog: 3}
	try := func(baskets ...[]string) {
		t.Helper()
		assert.Nil(t, tryAndLetGo(t, proc, &turns, baskets...)[0], "a is held")
	}
	try([]string{"a", "b"}, []string{"c"}, []string{"d"})
	try([]string{"a", "b"}, []string{"c"}, []string{"d"}, []string{"e"})
	try([]string{"b", "a"}, []string{"c"}, []string{"d"})
	assert.Zero(t, turnCount(&turns), "refused in Redis three times, in calls of a backlog")
	try([]string{"a", "b"}, []string{"c"})
	assert.Equal(t, 1, turnCount(&turns), "the next call below Backlog, the refusals counted")
	require.Eventually(t, func() bool { return waitingOn(t, proc, "a") == 1 }, 5*time.Second, 5*time.Millisecond)
	require.NoError(t, busy.Unlock(ctx))
	select {
	case <-turns.Ready():
	case <-time.After(5 * time.Second):
		require.Fail(t, "the turn's Lock never held its keys")
	}
	// The turn's Lock holds a and b: no fresh basket of them could be taken.
	locks := tryAndLetGo(t, proc, &turns, []string{"b", "a"}, []string{"c"}, []string{"d"})
	assert.NotNil(t, locks[0], "a call of a backlog hands out the turn's Lock")
}

// tryAndLetGo has proc try baskets with turns, lets go of what it took,
// and returns what it took.
func tryAndLetGo(t *testing.T, proc *Client, turns *Turns, baskets ...[]string) []*Lock {
	t.Helper()
	locks, err := proc.TryEach(t.Context(), baskets, WithTurns(turns))
	require.NoError(t, err)
	require.NoError(t, proc.UnlockEach(t.Context(), locks))
	return locks
}
