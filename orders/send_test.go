package orders

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestStockRefusesOtherClients(t *testing.T) {
	ring := redis.NewRing(&redis.RingOptions{Addrs: map[string]string{"a": "127.0.0.1:1"}})
	defer ring.Close()
	s := NewStock(ring, "t:", []string{"a"}, 1)
	errs := s.apply(context.Background(), []Order{{ID: "o", Lines: []Line{{SKU: "a", Qty: 1}}}}, map[int][]int{0: {0}}, [][]int64{{0}})
	require.Len(t, errs[0], 1)
	assert.ErrorContains(t, errs[0][0], "unsupported redis client *redis.Ring")
}

// A cancelled run does not sit out a late attempt's pause.
func TestPauseEndsWithTheContext(t *testing.T) {
	cause := errors.New("stop")
	ctx, cancel := context.WithCancelCause(t.Context())
	cancel(cause)
	start := time.Now()
	assert.ErrorIs(t, pause(ctx, 100), cause)
	assert.Less(t, time.Since(start), time.Second)
	assert.NoError(t, pause(t.Context(), 0))
}
