package batchlock

import (
	"context"
	"io"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/batchlock/batchlock/internal/wire"
	"github.com/batchlock/batchlock/internal/wire/wiretest"
)

// taken says, basket by basket, whether TryEach took it.
func taken(locks []*Lock) []bool {
	out := make([]bool, len(locks))
	for i, l := range locks {
		out[i] = l != nil
	}
	return out
}

// An earlier basket wins a key over a later one, in the process: the later
// one is refused without a call, the others are taken in one call, each an
// ordinary lock with its own owner and tokens; UnlockEach releases them
// all in one call. The caller's baskets are left as given.
func TestTryEachEarlierBasketsWin(t *testing.T) {
	rdb := wiretest.ServerClient(t)
	var mu sync.Mutex
	conflicts := map[string][]string{}
	refusedKeys := map[string][]string{}
	c, err := New(rdb, WithObserver(func(e Event) {
		switch {
		case e.Kind == EventConflict && e.Err != nil:
			mu.Lock()
			conflicts[e.Keys[0]] = e.Conflict
			refusedKeys[e.Conflict[0]] = e.Keys
			mu.Unlock()
			assert.ErrorIs(t, e.Err, ErrNotObtained)
		case e.Kind == EventFailed, e.Kind == EventConflict:
			t.Errorf("a refused basket is no failure, and has its ConflictError: %v", e.Kind)
		}
	}))
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })
	ctx := t.Context()

	baskets := [][]string{{"a", "b"}, {"e", "b", "c", "b"}, {"c", "d"}, {"a"}}
	locks, why, err := c.tryEachOf(ctx, baskets, nil, true)
	require.NoError(t, err)
	assert.Equal(t, []bool{true, false, true, false}, taken(locks))
	assert.Equal(t, [][]string{{"a", "b"}, {"e", "b", "c", "b"}, {"c", "d"}, {"a"}}, baskets, "the caller's baskets are left as given")
	assert.Equal(t, map[string][]string{"b": {"b"}, "a": {"a"}}, conflicts, "each refused basket is told its conflict")
	assert.Equal(t, map[string][]string{"b": {"b", "c", "e"}, "a": {"a"}}, refusedKeys, "an event's keys are sorted, once each")
	assert.Equal(t, []seenRefusal{{1, true, []string{"b"}}, {3, true, []string{"a"}}}, seen(why))
	assert.EqualValues(t, 1, c.Stats().Acquires, "one call for every basket")
	assert.NotEqual(t, locks[0].Owner(), locks[2].Owner(), "each basket has an owner of its own")
	assert.Equal(t, []string{"a", "b"}, locks[0].Keys())
	for _, l := range []*Lock{locks[0], locks[2]} {
		for _, k := range l.Keys() {
			assert.Positive(t, l.Token(k), "%s has its token", k)
		}
		assert.Greater(t, time.Until(l.ValidUntil()), 15*time.Second)
	}
	n, err := rdb.Exists(ctx, defaultPrefix+"a", defaultPrefix+"b", defaultPrefix+"c", defaultPrefix+"d").Result()
	require.NoError(t, err)
	assert.EqualValues(t, 4, n)

	require.NoError(t, c.UnlockEach(ctx, locks), "nil entries are skipped")
	assert.EqualValues(t, 1, c.Stats().Releases, "one call for every lock")
	n, err = rdb.Exists(ctx, defaultPrefix+"a", defaultPrefix+"b", defaultPrefix+"c", defaultPrefix+"d").Result()
	require.NoError(t, err)
	assert.Zero(t, n)
	for _, l := range []*Lock{locks[0], locks[2]} {
		assert.ErrorIs(t, l.Err(), ErrNotHeld)
		assert.ErrorIs(t, l.Unlock(ctx), ErrNotHeld, "released once")
	}
	assert.Zero(t, c.Stats().Gated)
}

// A basket meets what other locks hold: one of the Client's own (at its
// gate, without a call) or another Client's (in Redis, which names the
// holder); it is refused and holds nothing, the others are taken. A try
// never overtakes a waiter: a key handed to a queued waiter is refused.
func TestTryEachMeetsOtherLocks(t *testing.T) {
	rdb := wiretest.ServerClient(t)
	c, err := New(rdb)
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })
	other, err := New(rdb)
	require.NoError(t, err)
	t.Cleanup(func() { _ = other.Close() })
	ctx := t.Context()

	own, err := c.Lock(ctx, []string{"mine"})
	require.NoError(t, err)
	theirs, err := other.Lock(ctx, []string{"theirs"})
	require.NoError(t, err)
	sent := c.Stats().Acquires
	locks, why, err := c.tryEachOf(ctx, [][]string{{"mine", "x1"}, {"theirs", "x2"}, {"x3"}}, nil, true)
	require.NoError(t, err)
	assert.Equal(t, []bool{false, false, true}, taken(locks))
	assert.Equal(t, []seenRefusal{{0, false, []string{"mine"}}, {1, false, []string{"theirs"}}}, seen(why),
		"who held what each refused basket met")
	assert.Equal(t, sent+1, c.Stats().Acquires, "the gate's conflict costs no call")
	held, err := c.Held(ctx, "x*")
	require.NoError(t, err)
	require.Len(t, held, 1, "the refused baskets hold nothing")
	assert.Equal(t, "x3", held[0].Key)
	require.NoError(t, c.UnlockEach(ctx, locks))

	// A waiter of "theirs", queued; its release hands the key to it.
	waiter, err := New(rdb, WithPollInterval(time.Minute))
	require.NoError(t, err)
	t.Cleanup(func() { _ = waiter.Close() })
	got := make(chan *Lock, 1)
	go func() {
		l, err := waiter.Lock(ctx, []string{"theirs"})
		assert.NoError(t, err)
		got <- l
	}()
	require.Eventually(t, func() bool {
		h, err := c.Inspect(ctx, "theirs")
		return err == nil && h[0].Waiting == 1
	}, 5*time.Second, time.Millisecond)
	locks, err = c.TryEach(ctx, [][]string{{"theirs"}})
	require.NoError(t, err)
	assert.Nil(t, locks[0], "held, with a waiter")
	theirToken := theirs.Token("theirs") // 0 once released
	require.NoError(t, theirs.Unlock(ctx))
	w := <-got
	require.NotNil(t, w)
	assert.Greater(t, w.Token("theirs"), theirToken)
	require.NoError(t, w.Unlock(ctx))
	require.NoError(t, own.Unlock(ctx))
}

// WithShared keys are shared in every basket that has them; within one call
// two baskets never both get a key exclusively, whatever their owners.
func TestTryEachSharedKeysAndOneOwner(t *testing.T) {
	rdb := wiretest.ServerClient(t)
	c, err := New(rdb)
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })
	ctx := t.Context()

	locks, err := c.TryEach(ctx, [][]string{{"promo", "a"}, {"promo", "b"}, {"b"}, {"c"}}, WithShared("promo"))
	require.NoError(t, err)
	assert.Equal(t, []bool{true, true, false, true}, taken(locks))
	held, err := c.Inspect(ctx, "promo")
	require.NoError(t, err)
	assert.Len(t, held[0].Holders, 2, "both readers hold it")
	assert.Equal(t, locks[0].Token("promo"), locks[1].Token("promo"), "readers share its token")
	writer, err := c.TryEach(ctx, [][]string{{"promo"}})
	require.NoError(t, err)
	assert.Nil(t, writer[0], "a writer is refused while readers hold it")
	require.NoError(t, c.UnlockEach(ctx, locks))

	locks, err = c.TryEach(ctx, [][]string{{"k", "a"}, {"k", "b"}}, WithOwner("one-owner"))
	require.NoError(t, err)
	assert.Equal(t, []bool{true, false}, taken(locks), "one owner, all the same")
	require.NoError(t, c.UnlockEach(ctx, locks))
}

// Bad input is ErrInvalid, naming the problem, before anything is sent; no
// baskets is no work.
func TestTryEachBadInput(t *testing.T) {
	c, f := newFaked(t)
	many := make([]string, maxEachKeys/2+1)
	for i := range many {
		many[i] = strings.Repeat("k", 1+i%7) + string(rune('a'+i%26))
	}
	for _, tc := range []struct {
		name    string
		baskets [][]string
		opts    []LockOption
		want    string
	}{
		{"an empty basket", [][]string{{"a"}, {}}, nil, "basket 1 has no keys"},
		{"an empty key", [][]string{{"a", ""}}, nil, "basket 0: key 1 must not be empty"},
		{"a reserved key", [][]string{{"fence:{x}"}}, nil, "reserved"},
		{"an empty shared key", [][]string{{"a"}}, []LockOption{WithShared("")}, "shared key 0 must not be empty"},
		{"too many keys", [][]string{many, many}, nil, "65538 keys in all: at most 65536 in one call"},
		{"too many keys, an empty basket after", [][]string{many, many, {}}, nil, "65538 keys in all"},
		{"a bad ttl", [][]string{{"a"}}, []LockOption{WithTTL(-time.Second)}, "ttl"},
		{"a wait, which TryEach ignored", [][]string{{"a"}}, []LockOption{WithWait(time.Second)}, "WithWait: TryEach never waits"},
		{"units", [][]string{{"a"}}, []LockOption{WithUnits(map[string]int64{"a": 1})}, "WithUnits: TryEach takes no counted keys"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			locks, err := c.TryEach(t.Context(), tc.baskets, tc.opts...)
			require.ErrorIs(t, err, ErrInvalid)
			assert.ErrorContains(t, err, tc.want)
			assert.Equal(t, 1, strings.Count(err.Error(), "batchlock:"), err.Error())
			assert.Nil(t, locks)
		})
	}
	locks, err := c.TryEach(t.Context(), nil)
	require.NoError(t, err)
	assert.Empty(t, locks)
	var nilCtx context.Context
	_, err = c.TryEach(nilCtx, [][]string{{"a"}})
	assert.ErrorIs(t, err, ErrInvalid)
	assert.Empty(t, f.Log(), "nothing sent")
}

// UnlockEach skips nil entries and repeats, releases locks of several
// owners and kinds (Lock, TryEach) in one call, says ErrNotHeld for one
// already released, and refuses a lock of another Client before sending
// anything.
func TestUnlockEach(t *testing.T) {
	rdb := wiretest.ServerClient(t)
	c, err := New(rdb)
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })
	other, err := New(rdb)
	require.NoError(t, err)
	t.Cleanup(func() { _ = other.Close() })
	ctx := t.Context()

	single, err := c.Lock(ctx, []string{"one", "two"}, WithOwner("alice"))
	require.NoError(t, err)
	nested, err := c.Lock(ctx, []string{"two"}, WithOwner("alice"))
	require.NoError(t, err)
	each, err := c.TryEach(ctx, [][]string{{"three"}, {"four"}}, WithTTL(time.Minute))
	require.NoError(t, err)
	foreign, err := other.Lock(ctx, []string{"five"})
	require.NoError(t, err)

	err = c.UnlockEach(ctx, []*Lock{single, foreign})
	require.ErrorIs(t, err, ErrInvalid)
	assert.ErrorContains(t, err, "lock 1 was taken through another Client")
	assert.NoError(t, single.Err(), "nothing released")

	sent := c.Stats().Releases
	require.NoError(t, c.UnlockEach(ctx, []*Lock{nil, single, each[0], nested, each[1], single}))
	assert.Equal(t, sent+1, c.Stats().Releases)
	held, err := c.Held(ctx, "*")
	require.NoError(t, err)
	require.Len(t, held, 1)
	assert.Equal(t, "five", held[0].Key, "every other key is released")

	err = c.UnlockEach(ctx, []*Lock{single})
	assert.ErrorIs(t, err, ErrNotHeld)
	assert.ErrorContains(t, err, "already released")
	require.NoError(t, foreign.Unlock(ctx))
}

// An owner that holds a key shared and asks for it exclusively in a basket
// fails the call as a whole with ErrInvalid (at the gate, before anything
// is sent), whatever baskets come after it, and leaves nothing held.
func TestTryEachUpgradeFailsTheCall(t *testing.T) {
	rdb := wiretest.ServerClient(t)
	c, err := New(rdb)
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })
	ctx := t.Context()
	reader, err := c.Lock(ctx, nil, WithOwner("o"), WithShared("k"))
	require.NoError(t, err)
	gated := c.Stats().Gated

	locks, err := c.TryEach(ctx, [][]string{{"a"}, {"k"}, {"x"}}, WithOwner("o"))
	require.ErrorIs(t, err, ErrInvalid)
	assert.ErrorContains(t, err, "held shared or in units by this owner")
	require.ErrorIs(t, err, ErrNotObtained)
	assert.Nil(t, locks)
	assert.Equal(t, gated, c.Stats().Gated, "no gate of the call is left")
	held, err := c.Held(ctx, "*")
	require.NoError(t, err)
	require.Len(t, held, 1, "only the reader's key is held")
	assert.Equal(t, "k", held[0].Key)
	require.NoError(t, reader.Unlock(ctx))
}

// tryEachFault is a go-redis hook on the pipelines that run tryeach.lua by
// its digest. The first one's reply is lost once it ran, as after a read
// timeout; or, with between set, the first one is held back (its caller
// hears nothing) and runs after the next one, once between has run, as the
// request a frozen master runs late.
type tryEachFault struct {
	between func()

	mu    sync.Mutex
	calls int
	held  []redis.Cmder
}

func (h *tryEachFault) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *tryEachFault) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }

func (h *tryEachFault) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if !slices.ContainsFunc(cmds, func(c redis.Cmder) bool {
			args := c.Args()
			return len(args) > 1 && args[0] == "evalsha" && args[1] == wire.TryEachScript.Hash()
		}) {
			return next(ctx, cmds)
		}
		h.mu.Lock()
		defer h.mu.Unlock()
		h.calls++
		switch {
		case h.calls == 1 && h.between != nil:
			h.held = cmds
		case h.calls == 1:
			_ = next(ctx, cmds)
		case h.calls == 2 && h.between != nil:
			err := next(ctx, cmds)
			h.between()
			_ = next(ctx, h.held)
			return err
		default:
			return next(ctx, cmds)
		}
		for _, c := range cmds {
			c.SetErr(io.ErrUnexpectedEOF)
		}
		return io.ErrUnexpectedEOF
	}
}

// withBusyKey is a redis-server client with the fault hook on it, a key
// "busy" that another Client holds, and a Client of the test's.
func withBusyKey(t *testing.T, fault func(busy *Lock) *tryEachFault) (*Client, *Lock) {
	rdb := wiretest.ServerClient(t)
	other, err := New(rdb)
	require.NoError(t, err)
	t.Cleanup(func() { _ = other.Close() })
	busy, err := other.Lock(t.Context(), []string{"busy"})
	require.NoError(t, err)
	require.NoError(t, wire.TryEachScript.Load(t.Context(), rdb).Err())
	rdb.AddHook(fault(busy))
	c, err := New(rdb)
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })
	return c, busy
}

// heldNames are the keys held now, sorted.
func heldNames(t *testing.T, c *Client) []string {
	held, err := c.Held(t.Context(), "*")
	require.NoError(t, err)
	var keys []string
	for _, h := range held {
		keys = append(keys, h.Key)
	}
	return keys
}

// A TryEach call whose reply was lost is sent again; the second run finds
// the keys the first run took for the same baskets, and keeps them: each
// basket is taken, with the first run's tokens. A basket refused by
// another owner gives back what the lost run may have taken, so nothing of
// it is left held once the call returns.
func TestTryEachAfterALostReply(t *testing.T) {
	c, busy := withBusyKey(t, func(*Lock) *tryEachFault { return &tryEachFault{} })
	ctx := t.Context()
	locks, err := c.TryEach(ctx, [][]string{{"a", "b"}, {"c", "busy"}, {"d"}})
	require.NoError(t, err)
	assert.EqualValues(t, 2, c.Stats().Acquires, "the call was sent again")
	require.Equal(t, []bool{true, false, true}, taken(locks), "refused only by the other owner's key")
	for _, l := range []*Lock{locks[0], locks[2]} {
		for _, k := range l.Keys() {
			assert.Positive(t, l.Token(k), "%s has its token", k)
		}
	}
	assert.Equal(t, []string{"a", "b", "busy", "d"}, heldNames(t, c), "nothing of the refused basket is held")
	require.NoError(t, c.UnlockEach(ctx, locks))
	require.NoError(t, busy.Unlock(ctx))
	assert.Empty(t, heldNames(t, c))
}

// A TryEach call whose request the master runs late, after the call was
// sent again, refused by another owner's key and that key released: the
// late run takes the basket, and the give-back, which treats it as taken,
// releases it, so nothing of the refused basket is left held.
func TestTryEachAfterALateRun(t *testing.T) {
	c, _ := withBusyKey(t, func(busy *Lock) *tryEachFault {
		return &tryEachFault{between: func() { assert.NoError(t, busy.Unlock(t.Context())) }}
	})
	locks, err := c.TryEach(t.Context(), [][]string{{"c", "busy"}})
	require.NoError(t, err)
	assert.Equal(t, []bool{false}, taken(locks), "refused by the other owner's key")
	assert.Equal(t, 0, c.Stats().Held)
	assert.Empty(t, heldNames(t, c), "what the late run took is given back")
}

// seenRefusal is what a test reads of a refusal: the basket, whether an
// earlier basket of the call refused it, and the keys it met.
type seenRefusal struct {
	basket  int
	earlier bool
	keys    []string
}

func seen(why []refusal) []seenRefusal {
	out := make([]seenRefusal, len(why))
	for i, r := range why {
		out[i] = seenRefusal{r.basket, r.cause == refusedEarlier, r.keys}
	}
	return out
}
