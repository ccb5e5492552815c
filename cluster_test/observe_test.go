package cluster_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/batchlock/batchlock/batchlock"
	"github.com/batchlock/batchlock/batchlockotel"
)

func TestMetricsOfARealLockRun(t *testing.T) {
	reader, mp := newMeters(t)
	observe, err := batchlockotel.Observer(mp)
	require.NoError(t, err)

	rdb := newClient(t)
	c, _ := newLocker(t, rdb, batchlock.WithObserver(observe), batchlock.WithLease(300*time.Millisecond))
	ctx := ctxTimeout(t, 30*time.Second)
	keys := spread(25, "otel")

	l, err := c.Lock(ctx, keys)
	require.NoError(t, err)
	_, err = c.TryLock(ctx, keys[3:4])
	require.ErrorIs(t, err, batchlock.ErrNotObtained)
	_, err = c.TryLock(ctx, spread(2, "otel-ack"), batchlock.WithReplicas(2, 50*time.Millisecond))
	require.ErrorIs(t, err, batchlock.ErrNoReplicas, "each master has one replica, not two")
	require.Eventually(t, func() bool { return sum(t, reader, "batchlock.renewals") >= 1 }, 10*time.Second, 10*time.Millisecond)
	assert.Positive(t, histogramCount(t, reader, "batchlock.renewal.margin"), "the lease left at each renewal")
	require.NoError(t, l.Unlock(ctx))

	var rm metricdata.ResourceMetrics
	require.NoError(t, reader.Collect(ctx, &rm))
	byOutcome := map[string]int64{}
	for _, m := range rm.ScopeMetrics[0].Metrics {
		if m.Name != "batchlock.acquisitions" {
			continue
		}
		for _, dp := range m.Data.(metricdata.Sum[int64]).DataPoints {
			o, _ := dp.Attributes.Value("outcome")
			byOutcome[o.AsString()] += dp.Value
		}
	}
	assert.Equal(t, map[string]int64{"acquired": 1, "conflict": 1, "no_replicas": 1}, byOutcome)
	assert.EqualValues(t, 1, sum(t, reader, "batchlock.conflicts"))
	assert.EqualValues(t, 1, sum(t, reader, "batchlock.releases"))
	assert.EqualValues(t, 1, histogramCount(t, reader, "batchlock.hold.duration"))
	assert.EqualValues(t, 25, histogramSum(t, reader, "batchlock.lock.keys"))
	assert.Zero(t, sum(t, reader, "batchlock.losses"))
}

// The gauges read a Client's locks held and calls taking their keys.
func TestGaugesOfAClient(t *testing.T) {
	reader, mp := newMeters(t)
	c, _ := newLocker(t, newClient(t))
	reg, err := batchlockotel.Gauges(mp, c)
	require.NoError(t, err)
	t.Cleanup(func() { _ = reg.Unregister() })
	ctx := ctxTimeout(t, 30*time.Second)
	keys := spread(4, "gauges")

	l, err := c.Lock(ctx, keys)
	require.NoError(t, err)
	waiting := make(chan error, 1)
	go func() {
		w, err := c.Lock(ctx, keys[:1])
		if err == nil {
			err = w.Unlock(ctx)
		}
		waiting <- err
	}()
	require.Eventually(t, func() bool { return gauge(t, reader, "batchlock.calls.waiting") == 1 }, 10*time.Second, 5*time.Millisecond)
	assert.EqualValues(t, 1, gauge(t, reader, "batchlock.locks.held"))
	require.NoError(t, l.Unlock(ctx))
	require.NoError(t, <-waiting)
	assert.Zero(t, gauge(t, reader, "batchlock.locks.held"))
	assert.Zero(t, gauge(t, reader, "batchlock.calls.waiting"))
}

// newMeters is a meter provider whose metrics reader reads, shut down at
// the test's end.
func newMeters(t *testing.T) (sdkmetric.Reader, *sdkmetric.MeterProvider) {
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	t.Cleanup(func() { _ = mp.Shutdown(context.Background()) })
	return reader, mp
}

func gauge(t *testing.T, reader sdkmetric.Reader, name string) int64 {
	t.Helper()
	for _, m := range collect(t, reader) {
		if g, ok := m.Data.(metricdata.Gauge[int64]); ok && m.Name == name && len(g.DataPoints) > 0 {
			return g.DataPoints[0].Value
		}
	}
	return -1
}

func sum(t *testing.T, reader sdkmetric.Reader, name string) int64 {
	t.Helper()
	var total int64
	for _, m := range collect(t, reader) {
		if m.Name == name {
			for _, dp := range m.Data.(metricdata.Sum[int64]).DataPoints {
				total += dp.Value
			}
		}
	}
	return total
}

func histogramCount(t *testing.T, reader sdkmetric.Reader, name string) uint64 {
	t.Helper()
	var n uint64
	for _, m := range collect(t, reader) {
		if m.Name != name {
			continue
		}
		switch h := m.Data.(type) {
		case metricdata.Histogram[float64]:
			for _, dp := range h.DataPoints {
				n += dp.Count
			}
		case metricdata.Histogram[int64]:
			for _, dp := range h.DataPoints {
				n += dp.Count
			}
		}
	}
	return n
}

func histogramSum(t *testing.T, reader sdkmetric.Reader, name string) int64 {
	t.Helper()
	var s int64
	for _, m := range collect(t, reader) {
		if h, ok := m.Data.(metricdata.Histogram[int64]); ok && m.Name == name {
			for _, dp := range h.DataPoints {
				s += dp.Sum
			}
		}
	}
	return s
}

func collect(t *testing.T, reader sdkmetric.Reader) []metricdata.Metrics {
	t.Helper()
	var rm metricdata.ResourceMetrics
	require.NoError(t, reader.Collect(context.Background(), &rm))
	if len(rm.ScopeMetrics) == 0 {
		return nil
	}
	return rm.ScopeMetrics[0].Metrics
}

// A Processor's instruments: its backlog and refusals by cause from its
// Client's Stats, each basket's wait from Add to its lock from the observer (in
// batchlock.wait.duration, as every call's).
func TestMetricsOfAProcessor(t *testing.T) {
	reader, mp := newMeters(t)
	observe, err := batchlockotel.Observer(mp)
	require.NoError(t, err)
	rdb := newClient(t)
	c, prefix := newLocker(t, rdb, batchlock.WithObserver(observe))
	p, err := batchlock.NewProcessor[string](c, 0)
	require.NoError(t, err)
	reg, err := batchlockotel.Gauges(mp, c)
	require.NoError(t, err)
	t.Cleanup(func() { _ = reg.Unregister() })
	ctx := ctxTimeout(t, 30*time.Second)

	other, err := peerOf(t, rdb, prefix).Lock(ctx, []string{"{m}held"})
	require.NoError(t, err)
	require.NoError(t, p.Add("free", batchlock.Basket{Keys: []string{"{m}a", "{m}b"}}))
	require.NoError(t, p.Add("behind", batchlock.Basket{Keys: []string{"{m}b"}}))
	require.NoError(t, p.Add("held", batchlock.Basket{Keys: []string{"{m}held"}}))
	tick, err := p.Next(ctx)
	require.NoError(t, err)
	assert.EqualValues(t, 2, gauge(t, reader, "batchlock.processor.pending"))
	assert.EqualValues(t, 1, sum(t, reader, "batchlock.processor.ticks"))
	byCause := map[string]int64{}
	for _, m := range collect(t, reader) {
		if m.Name == "batchlock.processor.refusals" {
			for _, dp := range m.Data.(metricdata.Sum[int64]).DataPoints {
				cause, _ := dp.Attributes.Value("cause")
				byCause[cause.AsString()] += dp.Value
			}
		}
	}
	assert.Equal(t, map[string]int64{"earlier": 1, "client": 0, "redis": 1}, byCause)
	assert.EqualValues(t, 1, histogramCount(t, reader, "batchlock.wait.duration"), "the basket taken, from its Add")
	require.NoError(t, tick.Done(ctx))
	require.NoError(t, other.Unlock(ctx))
	_, err = p.Close(ctx)
	require.NoError(t, err)
}

// gaugesByKey is the data points of the gauge name, by their key
// attribute.
func gaugesByKey(t *testing.T, reader sdkmetric.Reader, name string) map[string]int64 {
	t.Helper()
	out := map[string]int64{}
	for _, m := range collect(t, reader) {
		if g, ok := m.Data.(metricdata.Gauge[int64]); ok && m.Name == name {
			for _, dp := range g.DataPoints {
				key, _ := dp.Attributes.Value("key")
				out[key.AsString()] = dp.Value
			}
		}
	}
	return out
}

// Counted keys' units held, free and their capacity, per key, read at each
// collection.
func TestMetricsOfCountedKeys(t *testing.T) {
	reader, mp := newMeters(t)
	c, _ := newLocker(t, newClient(t))
	ctx := ctxTimeout(t, 30*time.Second)
	keys := spread(2, "metered")
	require.NoError(t, c.SetCapacity(ctx, keys[0], 10))
	require.NoError(t, c.SetCapacity(ctx, keys[1], 5))
	reg, err := batchlockotel.UnitsGauges(mp, c, keys...)
	require.NoError(t, err)
	t.Cleanup(func() { _ = reg.Unregister() })
	l, err := c.Lock(ctx, nil, batchlock.WithUnits(map[string]int64{keys[0]: 3, keys[1]: 5}))
	require.NoError(t, err)
	assert.Equal(t, map[string]int64{keys[0]: 3, keys[1]: 5}, gaugesByKey(t, reader, "batchlock.units.held"))
	assert.Equal(t, map[string]int64{keys[0]: 7, keys[1]: 0}, gaugesByKey(t, reader, "batchlock.units.free"))
	require.NoError(t, l.Consume(ctx))
	assert.Equal(t, map[string]int64{keys[0]: 7, keys[1]: 0}, gaugesByKey(t, reader, "batchlock.units.capacity"))
	assert.Equal(t, map[string]int64{keys[0]: 0, keys[1]: 0}, gaugesByKey(t, reader, "batchlock.units.held"))
}
