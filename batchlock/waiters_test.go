package batchlock

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/batchlock/batchlock/internal/wire/wiretest"
)

// A waiter that stops listening to a key just before another starts: the
// reply to the first one's unsubscription, arriving once the second one
// listens, is not taken for the server dropping the channel, which would
// tear the slot's listener down and make every waiter on it subscribe
// again.
func TestWaitersOwnUnsubscriptionIsNoDrop(t *testing.T) {
	rdb := wiretest.ServerClient(t)
	c, err := New(rdb)
	require.NoError(t, err)
	defer c.Close()
	ctx := t.Context()
	// A waiter on another key keeps the listener of the slot open.
	other := c.waiters.subscribe(ctx, "h:other", []string{"k2"})
	require.True(t, other.active())
	defer other.close()
	for round := range 50 {
		first := c.waiters.subscribe(ctx, "h:first", []string{"k"})
		require.True(t, first.active(), "round %d: the first waiter listens", round)
		first.close()
		second := c.waiters.subscribe(ctx, "h:second", []string{"k"})
		require.True(t, second.active(), "round %d: the second waiter listens", round)
		require.NoError(t, rdb.SPublish(ctx, "k", "h:second").Err())
		select {
		case <-second.wakeups():
		case <-time.After(2 * time.Second):
			t.Fatalf("round %d: the second waiter was not woken", round)
		}
		c.waiters.mu.Lock()
		broken := second.broken
		c.waiters.mu.Unlock()
		require.False(t, broken, "round %d: the listener was dropped", round)
		second.close()
	}
}
