package cluster_test

import (
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/batchlock/batchlock/batchlock"
)

// A waiter is told when it takes a place in a key's queue (once, however
// many attempts it makes) and when the hand-off reaches it; a renewal says
// how much lease was left when it landed.
func TestWaitingAndRenewalEvents(t *testing.T) {
	rdb := newClient(t)
	var mu sync.Mutex
	var events []batchlock.Event
	holderClient, prefix := newLocker(t, rdb, batchlock.WithLease(600*time.Millisecond), batchlock.WithObserver(func(e batchlock.Event) {
		if e.Kind == batchlock.EventRenewed {
			mu.Lock()
			events = append(events, e)
			mu.Unlock()
		}
	}))
	waiter := peerOf(t, rdb, prefix, batchlock.WithPollInterval(time.Minute), batchlock.WithObserver(func(e batchlock.Event) {
		mu.Lock()
		events = append(events, e)
		mu.Unlock()
	}))
	kinds := func(kind string) []batchlock.Event {
		mu.Lock()
		defer mu.Unlock()
		var out []batchlock.Event
		for _, e := range events {
			if e.Kind == kind {
				out = append(out, e)
			}
		}
		return out
	}
	ctx := ctxTimeout(t, 30*time.Second)
	keys := spread(6, "events")
	holder, err := holderClient.Lock(ctx, keys[3:4])
	require.NoError(t, err)
	require.Eventually(t, func() bool { return len(kinds(batchlock.EventRenewed)) > 0 }, 10*time.Second, 5*time.Millisecond)
	renewed := kinds(batchlock.EventRenewed)[0]
	assert.Positive(t, renewed.Duration, "the lease left when the renewal landed")
	assert.Less(t, renewed.Duration, 600*time.Millisecond)

	got := make(chan *batchlock.Lock, 1)
	go func() {
		l, err := waiter.Lock(ctx, keys)
		assert.NoError(t, err)
		got <- l
	}()
	require.Eventually(t, func() bool { return len(kinds(batchlock.EventQueued)) > 0 }, 10*time.Second, 5*time.Millisecond)
	require.NoError(t, holder.Unlock(ctx))
	l := <-got
	require.NotNil(t, l)
	queued, handed := kinds(batchlock.EventQueued), kinds(batchlock.EventHandedOff)
	require.Len(t, queued, 1, "one place taken")
	assert.Equal(t, keys[3:4], queued[0].Conflict)
	require.Len(t, handed, 1, "one hand-off")
	assert.Equal(t, keys[3:4], handed[0].Conflict)
	require.NoError(t, l.Unlock(ctx))
}
