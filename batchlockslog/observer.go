package batchlockslog

import (
	"context"
	"log/slog"

	"github.com/batchlock/batchlock/batchlock"
)

// sampleKeys is how many keys of a lock a log line names.
const sampleKeys = 3

// Observer returns a function for batchlock.WithObserver that logs every
// event to logger.
func Observer(logger *slog.Logger) func(batchlock.Event) {
	return func(e batchlock.Event) {
		level := slog.LevelDebug
		switch e.Kind {
		case batchlock.EventLost:
			level = slog.LevelError
		case batchlock.EventFailed:
			level = slog.LevelWarn
		}
		// Events carry no context of their own; handlers need none.
		ctx := context.Background()
		if !logger.Enabled(ctx, level) {
			return
		}
		attrs := []slog.Attr{
			slog.String("event", e.Kind),
			slog.String("owner", e.Owner),
			slog.Int("keys", len(e.Keys)),
			slog.Any("sample", e.Keys[:min(len(e.Keys), sampleKeys)]),
		}
		if len(e.Conflict) > 0 {
			attrs = append(attrs, slog.Int("conflicts", len(e.Conflict)), slog.Any("conflict_sample", e.Conflict[:min(len(e.Conflict), sampleKeys)]))
		}
		if e.Duration > 0 {
			attrs = append(attrs, slog.Duration("duration", e.Duration))
		}
		if e.Err != nil {
			attrs = append(attrs, slog.String("error", e.Err.Error()))
		}
		logger.LogAttrs(ctx, level, "batchlock "+e.Kind, attrs...)
	}
}
