// Package batchlockotel records batchlock's lock events as OpenTelemetry
// metrics. Install it with batchlock.WithObserver:
//
//	observe, err := batchlockotel.Observer(otel.GetMeterProvider())
//	locks, err := batchlock.New(rdb, batchlock.WithObserver(observe))
//	reg, err := batchlockotel.Gauges(otel.GetMeterProvider(), locks) // locks held, calls waiting
//
// Attributes carry outcomes, never keys or owners, so that every series stays
// small enough to aggregate.
package batchlockotel
