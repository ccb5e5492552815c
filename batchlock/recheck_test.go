package batchlock

import (
	"context"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/batchlock/batchlock/internal/handoff"
	"github.com/batchlock/batchlock/internal/wire"
	"github.com/batchlock/batchlock/internal/wire/wiretest"
)

// A release that comes between a waiter's refused attempt and its
// subscription announces itself to nobody; the waiter, which polls once a
// minute here, finds it by reading the keys once listening, and takes the
// key handed to it and the rest of its batch in one more call.
func TestReleaseBeforeTheWaiterListensIsNotMissed(t *testing.T) {
	rdb := wiretest.ServerClient(t)
	prefix := "t:recheck:" + wire.RandomID(4) + ":"
	holder, err := New(rdb, WithPrefix(prefix))
	require.NoError(t, err)
	t.Cleanup(func() { _ = holder.Close() })
	ctx := t.Context()
	held, err := holder.Lock(ctx, []string{"a"})
	require.NoError(t, err)

	var once sync.Once
	released := make(chan error, 1)
	waiter, err := New(rdb, WithPrefix(prefix), WithPollInterval(time.Minute), WithObserver(func(e Event) {
		if e.Kind == EventConflict {
			// Called by the waiting Lock between its refused attempt and
			// its subscription: the moment a release is announced to
			// nobody.
			once.Do(func() { released <- held.Unlock(ctx) })
		}
	}))
	require.NoError(t, err)
	t.Cleanup(func() { _ = waiter.Close() })

	wctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	l, err := waiter.Lock(wctx, []string{"a", "b", "c"})
	require.NoError(t, err, "woken by its read of the key, not by the minute-long poll")
	require.NoError(t, <-released)
	assert.EqualValues(t, 2, waiter.Stats().Acquires, "the refused attempt, then every key in one call")
	require.NoError(t, l.Unlock(ctx))
}

// What a waiter concludes from reading the key that refused it, by the
// key's value: it waits for a message only when the key is held by another
// owner and the waiter still has its place in the queue.
func TestRecheckReadsTheKey(t *testing.T) {
	rdb := wiretest.ServerClient(t)
	c, err := New(rdb)
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })
	ctx := t.Context()
	later := strconv.FormatInt(time.Now().Add(time.Minute).UnixMilli(), 10)
	earlier := strconv.FormatInt(time.Now().Add(-time.Minute).UnixMilli(), 10)
	l := &Lock{hold: "h:me", owner: "me"}
	for _, tc := range []struct {
		name   string
		value  string // "" for no key
		want   recheckResult
		shared bool // the key asked for shared
	}{
		{"gone", "", mayBeFree, false},
		{"held by another owner, our place kept", "7 h:me@" + later + "=me=fence:{x} h:x=" + later + " other", stillHeld, false},
		{"held by another owner, taken afresh, our place kept", "7 h:me@" + later + "=me=fence:{x} h:x other", stillHeld, false},
		{"held by another owner, our place lapsed", "7 h:me@" + earlier + "=me=fence:{x} h:x=" + later + " other", mayBeFree, false},
		{"held by another owner, no place of ours", "7 - h:x=" + later + " other", mayBeFree, false},
		{"held by our owner under another hold", "7 h:me@" + later + "=me=fence:{x} h:x=" + later + " me", mayBeFree, false},
		{"held shared, our owner among the readers", "7 h:me@" + later + "=me=fence:{x} h:x=" + later + "=me *", mayBeFree, false},
		{"granted to us", "9 - h:me=" + later + "g me", handedOver, false},
		{"its holds ended", "7 h:me@" + later + "=me=fence:{x} h:x=" + earlier + " other", mayBeFree, false},
		{"not a lock value", "garbage", mayBeFree, false},
		{"asked shared, held by a writer, our place kept", "7 h:me@" + later + "s=me=fence:{x} h:x=" + later + " other", stillHeld, true},
		{"asked shared, held by a writer, our place lapsed", "7 h:me@" + earlier + "s=me=fence:{x} h:x=" + later + " other", mayBeFree, true},
		{"asked shared, held by readers, our place kept", "7 h:me@" + later + "s=me=fence:{x} h:x=" + later + "=other *", mayBeFree, true},
		{"asked shared, granted to us and another reader", "9 - h:me=" + later + "g=me,h:r=" + later + "g=r *", handedOver, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			key := defaultPrefix + "recheck:" + wire.RandomID(4)
			if tc.value != "" {
				require.NoError(t, rdb.Set(ctx, key, tc.value, time.Minute).Err())
			}
			g := group{keys: []string{key}}
			if tc.shared {
				g.modes = []byte{'s'}
			}
			found, granted := (&acquisition{c: c, l: l}).recheck(ctx, g, []string{key})
			assert.Equal(t, tc.want, found)
			if found == handedOver {
				assert.Equal(t, handoff.Grant{Key: key, Token: 9}, granted, "the grant, with the token it gave")
			}
		})
	}
}
