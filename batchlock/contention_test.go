package batchlock

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

// A Client counts as contended for contendedFor after a refusal, and no
// longer. The refusal is kept as an offset from the Client's start on the
// monotonic clock, so no wall clock reading is involved (a test cannot step
// this host's wall clock; the field notes' clock faults are the soak's).
func TestContendedForASecondAfterARefusal(t *testing.T) {
	c := newOffline(t, true)
	assert.False(t, c.contended(), "never refused")
	c.noteRefusal(time.Now())
	assert.True(t, c.contended())
	c.noteRefusal(time.Now().Add(-contendedFor - time.Millisecond))
	assert.False(t, c.contended(), "refused longer ago than contendedFor")
	c.noteRefusal(c.started)
	assert.Equal(t, time.Since(c.started) < contendedFor, c.contended(), "a refusal at the Client's start")
}
