package batchlockotel

import (
	"context"
	"errors"
	"fmt"

	"go.opentelemetry.io/otel/metric"

	"github.com/batchlock/batchlock/batchlock"
)

// Gauges registers, for c, gauges read from c.Stats at each collection:
//
//	batchlock.locks.held       locks c handed out that have not ended
//	batchlock.calls.waiting    Lock, TryLock and Do calls of c taking their keys
//
// Unregister the returned registration before closing c.
func Gauges(mp metric.MeterProvider, c *batchlock.Client) (metric.Registration, error) {
	m := mp.Meter(ScopeName)
	held, err1 := m.Int64ObservableGauge("batchlock.locks.held", metric.WithDescription("Locks handed out and not ended"), metric.WithUnit("{lock}"))
	waiting, err2 := m.Int64ObservableGauge("batchlock.calls.waiting", metric.WithDescription("Lock calls taking their keys"), metric.WithUnit("{call}"))
	if err := errors.Join(err1, err2); err != nil {
		return nil, fmt.Errorf("batchlockotel: creating gauges: %w", err)
	}
	reg, err := m.RegisterCallback(func(_ context.Context, o metric.Observer) error {
		s := c.Stats()
		o.ObserveInt64(held, int64(s.Held))
		o.ObserveInt64(waiting, int64(s.Waiting))
		return nil
	}, held, waiting)
	if err != nil {
		return nil, fmt.Errorf("batchlockotel: registering gauges: %w", err)
	}
	return reg, nil
}
