package backoff

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

func TestJitteredStaysInBounds(t *testing.T) {
	for attempt := 0; attempt < 70; attempt++ {
		d := Jittered(attempt, time.Millisecond, time.Second)
		assert.GreaterOrEqual(t, d, time.Duration(0))
		assert.LessOrEqual(t, d, time.Second)
	}
	assert.GreaterOrEqual(t, Jittered(40, time.Millisecond, time.Second), 500*time.Millisecond, "a late attempt waits at least half the cap")
	assert.LessOrEqual(t, Jittered(0, 10*time.Millisecond, time.Second), 10*time.Millisecond, "the first pause is at most base")
}

func TestSleepEndsWithContext(t *testing.T) {
	ctx, cancel := context.WithCancelCause(context.Background())
	cause := context.DeadlineExceeded
	cancel(cause)
	assert.ErrorIs(t, Sleep(ctx, time.Hour), cause)
	assert.NoError(t, Sleep(context.Background(), time.Microsecond))
	assert.NoError(t, Sleep(context.Background(), 0))
}
