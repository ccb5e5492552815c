package handoff

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/batchlock/batchlock/hashtag"
	"github.com/batchlock/batchlock/internal/wire/wiretest"
)

// A waiter that stops listening to a key just before another starts: the
// reply to the first one's unsubscription, arriving once the second one
// listens, is not taken for the server dropping the channel, which would
// tear the slot's listener down and make every waiter on it subscribe
// again.
func TestWaitersOwnUnsubscriptionIsNoDrop(t *testing.T) {
	rdb := wiretest.ServerClient(t)
	hub := New(Config{Slot: hashtag.Slot, PubSub: func() *redis.PubSub { return rdb.SSubscribe(context.Background()) }, Reload: func() {}})
	defer hub.Close()
	ctx := t.Context()
	// A waiter on another key keeps the listener of the slot open.
	other := hub.Subscribe(ctx, "h:other", []string{"k2"})
	require.True(t, other.Active())
	defer other.Close()
	for round := range 50 {
		first := hub.Subscribe(ctx, "h:first", []string{"k"})
		require.True(t, first.Active(), "round %d: the first waiter listens", round)
		first.Close()
		second := hub.Subscribe(ctx, "h:second", []string{"k"})
		require.True(t, second.Active(), "round %d: the second waiter listens", round)
		require.NoError(t, rdb.SPublish(ctx, "k", "h:second").Err())
		select {
		case <-second.Wakeups():
		case <-time.After(2 * time.Second):
			t.Fatalf("round %d: the second waiter was not woken", round)
		}
		hub.mu.Lock()
		broken := second.broken
		hub.mu.Unlock()
		require.False(t, broken, "round %d: the listener was dropped", round)
		second.Close()
	}
}

func TestMain(m *testing.M) { wiretest.Main(m) }
