package batchlock

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/batchlock/batchlock/internal/wire/wiretest"
)

// order is an item of the tests' admissions: an id and its keys.
type order struct {
	id   string
	keys []string
}

func orderKeys(o order) []string { return o.keys }

// ids are the items of admitted, in order.
func ids(admitted []Admitted[order]) []string {
	var out []string
	for _, a := range admitted {
		out = append(out, a.Item.id)
	}
	return out
}

func unlockAdmitted(t *testing.T, c *Client, admitted []Admitted[order]) {
	t.Helper()
	locks := make([]*Lock, len(admitted))
	for i, a := range admitted {
		locks[i] = a.Lock
	}
	require.NoError(t, c.UnlockEach(t.Context(), locks))
}

// An item refused by an earlier one of its tick stays pending and goes
// first in the next tick, ahead of the new items, with no wait in Redis.
func TestAdmissionRefusedInTheTickGoesFirst(t *testing.T) {
	c, err := New(wiretest.ServerClient(t))
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })
	a := NewAdmission(c, orderKeys)
	t.Cleanup(func() { a.Close() })

	got, err := a.Tick(t.Context(), []order{{"1", []string{"a", "b"}}, {"2", []string{"b", "c"}}})
	require.NoError(t, err)
	assert.Equal(t, []string{"1"}, ids(got))
	assert.Equal(t, 1, a.Pending())
	unlockAdmitted(t, c, got)

	got, err = a.Tick(t.Context(), []order{{"3", []string{"c"}}})
	require.NoError(t, err)
	assert.Equal(t, []string{"2"}, ids(got), "the older item wins c")
	assert.Equal(t, 1, a.Pending())
	unlockAdmitted(t, c, got)
	got, err = a.Tick(t.Context(), nil)
	require.NoError(t, err)
	assert.Equal(t, []string{"3"}, ids(got))
	assert.Zero(t, a.Pending())
	unlockAdmitted(t, c, got)
	assert.Zero(t, c.Stats().Waiting, "nothing waited in Redis")
}

// An item refused because another Client holds its keys keeps its turn:
// it waits in the keys' queue, so that the other Client's newer baskets are
// refused, and the first tick after the release hands it out, whatever new
// items come meanwhile.
func TestAdmissionKeepsItsTurnAgainstAnotherClient(t *testing.T) {
	rdb := wiretest.ServerClient(t)
	c, err := New(rdb)
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })
	other, err := New(rdb, WithOwnerPrefix("other:"))
	require.NoError(t, err)
	t.Cleanup(func() { _ = other.Close() })
	ctx := t.Context()
	held, err := other.Lock(ctx, []string{"k"})
	require.NoError(t, err)

	a := NewAdmission(c, orderKeys)
	t.Cleanup(func() { a.Close() })
	got, err := a.Tick(ctx, []order{{"big", []string{"a", "k", "z"}}})
	require.NoError(t, err)
	assert.Empty(t, got)
	for range admissionPatience - 1 {
		assert.Zero(t, c.Stats().Waiting, "it tries at each tick first")
		got, err = a.Tick(ctx, nil)
		require.NoError(t, err)
		assert.Empty(t, got)
	}
	require.Eventually(t, func() bool {
		h, err := c.Inspect(ctx, "k")
		return err == nil && h[0].Waiting == 1
	}, 5*time.Second, time.Millisecond, "the item waits in k's queue")

	newer, err := other.TryEach(ctx, [][]string{{"k"}, {"a"}})
	require.NoError(t, err)
	assert.Nil(t, newer[0], "the other Client's newer basket does not overtake it")
	require.NoError(t, other.UnlockEach(ctx, newer))
	require.NoError(t, held.Unlock(ctx))

	// A newer item of this processor on a key the waiting one holds waits
	// behind it, in the process.
	got, err = a.Tick(ctx, []order{{"new", []string{"a"}}})
	require.NoError(t, err)
	assert.Empty(t, got)
	var admitted []Admitted[order]
	require.Eventually(t, func() bool {
		got, err := a.Tick(ctx, nil)
		require.NoError(t, err)
		admitted = append(admitted, got...)
		return len(admitted) > 0
	}, 5*time.Second, 10*time.Millisecond, "handed out once the key is its own")
	require.Equal(t, []string{"big"}, ids(admitted), "the older item first, alone: the newer one needs its a")
	big := admitted[0].Lock
	assert.Greater(t, big.Token("k"), held.Token("k"), "k was handed to it by the release")
	unlockAdmitted(t, c, admitted)
	got, err = a.Tick(ctx, nil)
	require.NoError(t, err)
	assert.Equal(t, []string{"new"}, ids(got))
	unlockAdmitted(t, c, got)
	assert.Empty(t, a.Close())
}

// Close ends the waits: what a wait took and no tick handed out is
// released, the items never admitted are returned, and nothing is left
// held or waiting in Redis; a tick after Close is ErrClosed.
func TestAdmissionCloseLeavesNothing(t *testing.T) {
	rdb := wiretest.ServerClient(t)
	c, err := New(rdb)
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })
	other, err := New(rdb, WithOwnerPrefix("other:"))
	require.NoError(t, err)
	t.Cleanup(func() { _ = other.Close() })
	ctx := t.Context()
	held, err := other.Lock(ctx, []string{"k"})
	require.NoError(t, err)

	a := NewAdmission(c, orderKeys)
	_, err = a.Tick(ctx, []order{{"waits", []string{"a", "k"}}, {"ready", []string{"j"}}, {"later", []string{"j", "x"}}})
	require.NoError(t, err)
	for range admissionPatience - 1 {
		_, err = a.Tick(ctx, nil)
		require.NoError(t, err)
	}
	require.Eventually(t, func() bool { return c.Stats().Waiting == 1 }, 5*time.Second, time.Millisecond)
	left := a.Close()
	var names []string
	for _, o := range left {
		names = append(names, o.id)
	}
	assert.Equal(t, []string{"waits", "later"}, names, "the items never admitted, oldest first")
	assert.Zero(t, c.Stats().Waiting)
	require.NoError(t, held.Unlock(ctx))
	h, err := c.Held(ctx, "*")
	require.NoError(t, err)
	require.Len(t, h, 1, "the ready item's lock is the caller's")
	assert.Equal(t, "j", h[0].Key)
	_, err = a.Tick(ctx, nil)
	assert.ErrorIs(t, err, ErrClosed)
}

// Shared keys go as WithShared says, also for an item that waits: the
// readers of a promotion share it, and its wait takes it shared.
func TestAdmissionSharedKeys(t *testing.T) {
	rdb := wiretest.ServerClient(t)
	c, err := New(rdb)
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })
	other, err := New(rdb, WithOwnerPrefix("other:"))
	require.NoError(t, err)
	t.Cleanup(func() { _ = other.Close() })
	ctx := t.Context()
	held, err := other.Lock(ctx, []string{"k"})
	require.NoError(t, err)

	a := NewAdmission(c, orderKeys, WithShared("promo"))
	t.Cleanup(func() { a.Close() })
	got, err := a.Tick(ctx, []order{{"1", []string{"a", "promo"}}, {"2", []string{"k", "promo"}}})
	require.NoError(t, err)
	assert.Equal(t, []string{"1"}, ids(got))
	for range admissionPatience - 1 {
		more, err := a.Tick(ctx, nil)
		require.NoError(t, err)
		require.Empty(t, more)
	}
	require.Eventually(t, func() bool { return c.Stats().Waiting == 1 }, 5*time.Second, time.Millisecond, "item 2 waits")
	require.NoError(t, held.Unlock(ctx))
	var later []Admitted[order]
	require.Eventually(t, func() bool {
		more, err := a.Tick(ctx, nil)
		require.NoError(t, err)
		later = append(later, more...)
		return len(later) == 1
	}, 5*time.Second, 10*time.Millisecond)
	h, err := c.Inspect(ctx, "promo")
	require.NoError(t, err)
	assert.True(t, h[0].Shared)
	assert.Len(t, h[0].Holders, 2, "both items read the promotion")
	assert.NotContains(t, strings.Join(later[0].Lock.Keys(), ","), "a", "the wait took only its own keys")
	unlockAdmitted(t, c, append(got, later...))
}
