package batchlockslog_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"log/slog"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/batchlock/batchlock/batchlock"
	"github.com/batchlock/batchlock/batchlockslog"
)

func TestObserverLevelsAndAttributes(t *testing.T) {
	var buf bytes.Buffer
	logger := slog.New(slog.NewJSONHandler(&buf, &slog.HandlerOptions{Level: slog.LevelWarn}))
	observe := batchlockslog.Observer(logger)

	keys := []string{"a", "b", "c", "d", "e"}
	observe(batchlock.Event{Kind: batchlock.EventAcquired, Owner: "o", Keys: keys, Duration: time.Millisecond})
	assert.Zero(t, buf.Len(), "debug events are not logged at warn level")

	observe(batchlock.Event{Kind: batchlock.EventLost, Owner: "o", Keys: keys, Err: batchlock.ErrLockLost})
	observe(batchlock.Event{Kind: batchlock.EventFailed, Owner: "o", Keys: keys, Err: errors.New("boom")})

	lines := bytes.Split(bytes.TrimSpace(buf.Bytes()), []byte("\n"))
	require.Len(t, lines, 2)
	var lost, failed map[string]any
	require.NoError(t, json.Unmarshal(lines[0], &lost))
	require.NoError(t, json.Unmarshal(lines[1], &failed))
	assert.Equal(t, "ERROR", lost["level"])
	assert.Equal(t, "lost", lost["event"])
	assert.EqualValues(t, 5, lost["keys"])
	assert.Equal(t, []any{"a", "b", "c"}, lost["sample"], "keys are sampled, not all logged")
	assert.Equal(t, batchlock.ErrLockLost.Error(), lost["error"])
	assert.Equal(t, "WARN", failed["level"])
	assert.Equal(t, "boom", failed["error"])
}

func TestObserverDebugEvents(t *testing.T) {
	var buf bytes.Buffer
	logger := slog.New(slog.NewJSONHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug}))
	observe := batchlockslog.Observer(logger)
	observe(batchlock.Event{Kind: batchlock.EventConflict, Owner: "o", Keys: []string{"a"}, Conflict: []string{"a"}})
	var line map[string]any
	require.NoError(t, json.Unmarshal(buf.Bytes(), &line))
	assert.Equal(t, "DEBUG", line["level"])
	assert.Equal(t, "conflict", line["event"])
	assert.EqualValues(t, 1, line["conflicts"])
}
