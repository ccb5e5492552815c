package batchlockotel

import (
	"context"
	"errors"
	"fmt"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/batchlock/batchlock/batchlock"
)

// Gauges registers, for c, instruments read from c.Stats at each
// collection:
//
//	batchlock.locks.held           locks c handed out that have not ended
//	batchlock.calls.waiting        Lock, TryLock and Do calls of c taking their keys
//	batchlock.processor.pending    baskets added to c's Processors and not taken: the backlog
//	batchlock.processor.queued     of those, baskets waiting in their keys' queues
//	batchlock.processor.ticks      counter of ticks handed out
//	batchlock.processor.refusals   counter of baskets refused, by cause: earlier (a basket
//	                               of the tick), client (another lock of the Client), redis
//
// Each Processor basket's wait from Add to its lock is Observer's
// batchlock.wait.duration. Unregister the returned registration before
// closing c.
func Gauges(mp metric.MeterProvider, c *batchlock.Client) (metric.Registration, error) {
	m := mp.Meter(ScopeName)
	held, err1 := m.Int64ObservableGauge("batchlock.locks.held", metric.WithDescription("Locks handed out and not ended"), metric.WithUnit("{lock}"))
	waiting, err2 := m.Int64ObservableGauge("batchlock.calls.waiting", metric.WithDescription("Lock calls taking their keys"), metric.WithUnit("{call}"))
	pending, err3 := m.Int64ObservableGauge("batchlock.processor.pending", metric.WithDescription("Baskets added and not taken"), metric.WithUnit("{basket}"))
	queued, err4 := m.Int64ObservableGauge("batchlock.processor.queued", metric.WithDescription("Baskets waiting in their keys' queues"), metric.WithUnit("{basket}"))
	ticks, err5 := m.Int64ObservableCounter("batchlock.processor.ticks", metric.WithDescription("Ticks handed out"), metric.WithUnit("{tick}"))
	refusals, err6 := m.Int64ObservableCounter("batchlock.processor.refusals", metric.WithDescription("Baskets refused, by cause"), metric.WithUnit("{basket}"))
	if err := errors.Join(err1, err2, err3, err4, err5, err6); err != nil {
		return nil, fmt.Errorf("batchlockotel: creating gauges: %w", err)
	}
	cause := func(c string) metric.ObserveOption { return metric.WithAttributes(attribute.String("cause", c)) }
	byEarlier, byClient, inRedis := cause("earlier"), cause("client"), cause("redis")
	reg, err := m.RegisterCallback(func(_ context.Context, o metric.Observer) error {
		s := c.Stats()
		o.ObserveInt64(held, int64(s.Held))
		o.ObserveInt64(waiting, int64(s.Waiting))
		o.ObserveInt64(pending, int64(s.Pending))
		o.ObserveInt64(queued, int64(s.Queued))
		o.ObserveInt64(ticks, int64(s.Ticks))
		o.ObserveInt64(refusals, int64(s.RefusedByEarlier), byEarlier)
		o.ObserveInt64(refusals, int64(s.RefusedByClient), byClient)
		o.ObserveInt64(refusals, int64(s.RefusedInRedis), inRedis)
		return nil
	}, held, waiting, pending, queued, ticks, refusals)
	if err != nil {
		return nil, fmt.Errorf("batchlockotel: registering gauges: %w", err)
	}
	return reg, nil
}

// UnitsGauges registers gauges of counted keys (batchlock.WithUnits), read
// with one Client.Inspect of keys at each collection, each data point with
// the attribute key:
//
//	batchlock.units.held        units of the key's live holds
//	batchlock.units.free        units of its capacity that no live hold holds
//	batchlock.units.capacity    its capacity
//
// A collection whose Inspect fails observes nothing and returns its error.
// Unregister the returned registration before closing c.
func UnitsGauges(mp metric.MeterProvider, c *batchlock.Client, keys ...string) (metric.Registration, error) {
	m := mp.Meter(ScopeName)
	held, err1 := m.Int64ObservableGauge("batchlock.units.held", metric.WithDescription("Units of a counted key held"), metric.WithUnit("{unit}"))
	free, err2 := m.Int64ObservableGauge("batchlock.units.free", metric.WithDescription("Units of a counted key free"), metric.WithUnit("{unit}"))
	capacity, err3 := m.Int64ObservableGauge("batchlock.units.capacity", metric.WithDescription("Capacity of a counted key"), metric.WithUnit("{unit}"))
	if err := errors.Join(err1, err2, err3); err != nil {
		return nil, fmt.Errorf("batchlockotel: creating units gauges: %w", err)
	}
	reg, err := m.RegisterCallback(func(ctx context.Context, o metric.Observer) error {
		found, err := c.Inspect(ctx, keys...)
		if err != nil {
			return fmt.Errorf("batchlockotel: reading units: %w", err)
		}
		for _, h := range found {
			key := metric.WithAttributes(attribute.String("key", h.Key))
			o.ObserveInt64(held, h.Capacity-h.Free, key)
			o.ObserveInt64(free, h.Free, key)
			o.ObserveInt64(capacity, h.Capacity, key)
		}
		return nil
	}, held, free, capacity)
	if err != nil {
		return nil, fmt.Errorf("batchlockotel: registering units gauges: %w", err)
	}
	return reg, nil
}
