package batchlockotel_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/batchlock/batchlock/batchlock"
	"github.com/batchlock/batchlock/batchlockotel"
)

// A refused TryEach basket is counted as a refusal, apart from the
// acquisitions and the calls' conflicts: a healthy batch processor's
// refusals look neither like failed calls nor like contended locks.
func TestRefusalsAreCountedApart(t *testing.T) {
	reader := sdkmetric.NewManualReader()
	observe, err := batchlockotel.Observer(sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader)))
	require.NoError(t, err)
	conflict := &batchlock.ConflictError{Keys: []string{"sku:1"}}
	for range 3 {
		observe(batchlock.Event{Kind: batchlock.EventConflict, Keys: []string{"sku:1"}, Conflict: conflict.Keys, Err: conflict})
	}
	observe(batchlock.Event{Kind: batchlock.EventFailed, Keys: []string{"sku:2"}, Err: conflict})
	observe(batchlock.Event{Kind: batchlock.EventConflict, Keys: []string{"sku:3"}, Conflict: []string{"sku:3"}}) // a Lock's

	var rm metricdata.ResourceMetrics
	require.NoError(t, reader.Collect(t.Context(), &rm))
	sums := map[string]int64{}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if sum, ok := m.Data.(metricdata.Sum[int64]); ok {
				for _, p := range sum.DataPoints {
					sums[m.Name] += p.Value
				}
			}
		}
	}
	assert.Equal(t, map[string]int64{"batchlock.refusals": 3, "batchlock.conflicts": 1, "batchlock.acquisitions": 1}, sums)
}
