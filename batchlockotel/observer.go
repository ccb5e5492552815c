package batchlockotel

import (
	"context"
	"errors"
	"fmt"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/batchlock/batchlock/batchlock"
)

// ScopeName is the instrumentation scope of the meter.
const ScopeName = "github.com/batchlock/batchlock/batchlockotel"

// Outcomes of an acquisition, the values of the "outcome" attribute.
const (
	OutcomeAcquired   = "acquired"
	OutcomeConflict   = "conflict"
	OutcomeNoReplicas = "no_replicas"
	OutcomeTimeout    = "timeout"
	OutcomeClosed     = "closed"
	OutcomeError      = "error"
)

type instruments struct {
	acquisitions metric.Int64Counter
	conflicts    metric.Int64Counter
	refusals     metric.Int64Counter
	wait         metric.Float64Histogram
	hold         metric.Float64Histogram
	keys         metric.Int64Histogram
	renewals     metric.Int64Counter
	margin       metric.Float64Histogram
	queued       metric.Int64Counter
	handoffs     metric.Int64Counter
	losses       metric.Int64Counter
	releases     metric.Int64Counter
}

// Observer returns a function for batchlock.WithObserver that records:
//
//	batchlock.acquisitions     counter of Lock, TryLock and Do calls and of TryEach's baskets not
//	                           refused, by outcome (acquired, conflict, no_replicas, timeout, closed, error)
//	batchlock.conflicts        counter of attempts that found keys held by another owner
//	batchlock.refusals         counter of TryEach baskets refused (a refusal, not a failure): the
//	                           conflicts whose Err is the basket's *ConflictError
//	batchlock.wait.duration    histogram, seconds from asking for a lock (a Processor's basket: its Add)
//	                           to holding it
//	batchlock.hold.duration    histogram, seconds from holding a lock to its unlock
//	batchlock.lock.keys        histogram, keys per acquired lock
//	batchlock.renewals         counter of watchdog renewals
//	batchlock.renewal.margin   histogram, seconds of lease left when a renewal landed
//	batchlock.queued           counter of places taken in a key's queue in Redis
//	batchlock.handoffs         counter of hand-offs that reached a waiting call
//	batchlock.losses           counter of locks lost
//	batchlock.releases         counter of unlocks, by result (ok, error)
func Observer(mp metric.MeterProvider) (func(batchlock.Event), error) {
	m := mp.Meter(ScopeName)
	var in instruments
	var errs []error
	add := func(err error) { errs = append(errs, err) }
	var err error
	in.acquisitions, err = m.Int64Counter("batchlock.acquisitions", metric.WithDescription("Lock, TryLock and Do calls, and TryEach baskets not refused, by outcome"), metric.WithUnit("{call}"))
	add(err)
	in.conflicts, err = m.Int64Counter("batchlock.conflicts", metric.WithDescription("Attempts that found keys held by another owner"), metric.WithUnit("{attempt}"))
	add(err)
	in.refusals, err = m.Int64Counter("batchlock.refusals", metric.WithDescription("TryEach baskets refused: another basket, lock or Client held a key"), metric.WithUnit("{basket}"))
	add(err)
	in.wait, err = m.Float64Histogram("batchlock.wait.duration", metric.WithDescription("Time from asking for a lock (a Processor's basket: its Add) to holding it"), metric.WithUnit("s"))
	add(err)
	in.hold, err = m.Float64Histogram("batchlock.hold.duration", metric.WithDescription("Time a lock was held until its unlock"), metric.WithUnit("s"))
	add(err)
	in.keys, err = m.Int64Histogram("batchlock.lock.keys", metric.WithDescription("Keys per acquired lock"), metric.WithUnit("{key}"))
	add(err)
	in.renewals, err = m.Int64Counter("batchlock.renewals", metric.WithDescription("Lease renewals by the watchdog"), metric.WithUnit("{renewal}"))
	add(err)
	in.margin, err = m.Float64Histogram("batchlock.renewal.margin", metric.WithDescription("Lease left when a renewal landed"), metric.WithUnit("s"))
	add(err)
	in.queued, err = m.Int64Counter("batchlock.queued", metric.WithDescription("Places a waiting call took in a key's queue in Redis"), metric.WithUnit("{place}"))
	add(err)
	in.handoffs, err = m.Int64Counter("batchlock.handoffs", metric.WithDescription("Hand-offs that reached a waiting call"), metric.WithUnit("{handoff}"))
	add(err)
	in.losses, err = m.Int64Counter("batchlock.losses", metric.WithDescription("Locks lost while held"), metric.WithUnit("{lock}"))
	add(err)
	in.releases, err = m.Int64Counter("batchlock.releases", metric.WithDescription("Unlocks by result"), metric.WithUnit("{call}"))
	add(err)
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("batchlockotel: creating instruments: %w", err)
	}
	return in.record, nil
}

func (in *instruments) record(e batchlock.Event) {
	// Events come from lock calls and the watchdog, whose contexts are not
	// at hand here; metrics need none.
	ctx := context.Background()
	switch e.Kind {
	case batchlock.EventAcquired:
		in.acquisitions.Add(ctx, 1, outcome(OutcomeAcquired))
		in.wait.Record(ctx, e.Duration.Seconds())
		in.keys.Record(ctx, int64(len(e.Keys)))
	case batchlock.EventFailed:
		in.acquisitions.Add(ctx, 1, outcome(Outcome(e.Err)))
	case batchlock.EventConflict:
		if e.Err != nil {
			in.refusals.Add(ctx, 1) // a TryEach basket's: everyday, not a failure
		} else {
			in.conflicts.Add(ctx, 1)
		}
	case batchlock.EventRenewed:
		in.renewals.Add(ctx, 1)
		in.margin.Record(ctx, e.Duration.Seconds())
	case batchlock.EventQueued:
		in.queued.Add(ctx, 1)
	case batchlock.EventHandedOff:
		in.handoffs.Add(ctx, 1)
	case batchlock.EventLost:
		in.losses.Add(ctx, 1)
	case batchlock.EventReleased:
		result := "ok"
		if e.Err != nil {
			result = "error"
		}
		in.releases.Add(ctx, 1, metric.WithAttributes(attribute.String("result", result)))
		in.hold.Record(ctx, e.Duration.Seconds())
	}
}

// Outcome names the outcome of a failed acquisition.
func Outcome(err error) string {
	switch {
	case errors.Is(err, batchlock.ErrNoReplicas):
		return OutcomeNoReplicas
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, context.Canceled):
		return OutcomeTimeout
	case errors.Is(err, batchlock.ErrClosed):
		return OutcomeClosed
	case errors.Is(err, batchlock.ErrNotObtained):
		return OutcomeConflict
	}
	return OutcomeError
}

func outcome(o string) metric.AddOption {
	return metric.WithAttributes(attribute.String("outcome", o))
}
