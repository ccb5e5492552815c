package orders

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/batchlock/batchlock/batchlock"
)

func sampleResult() Result {
	waits := make([]time.Duration, 100)
	for i := range waits {
		waits[i] = time.Duration(i+1) * time.Millisecond
	}
	return Result{
		Orders: 100, Accepted: 60, Rejected: 39, Errors: 1, Retries: 3,
		LockWaits:    waits,
		Elapsed:      2 * time.Second,
		FirstErrors:  []string{"order o0000042: boom"},
		FirstRetried: []string{"order o0000007: not obtained"},
	}
}

func TestReportText(t *testing.T) {
	var c Counters
	c.Observe(batchlock.Event{Kind: batchlock.EventConflict})
	c.Observe(batchlock.Event{Kind: batchlock.EventConflict})
	c.Observe(batchlock.Event{Kind: batchlock.EventAcquired})
	c.Observe(batchlock.Event{Kind: batchlock.EventLost, Owner: "order-o1", Keys: []string{"a", "b"}, Err: batchlock.ErrLockLost})
	audit := Check([]SKUState{{SKU: "a", Initial: 10, Remaining: 4, Sold: 6}}, map[string]int64{"a": 6})
	r := NewReport("batchlock", 8, sampleResult(), &c, audit)

	assert.InDelta(t, 50.0, r.OrdersPerSec, 1e-9)
	require.NotNil(t, r.LockWait)
	assert.Equal(t, Duration(50*time.Millisecond), r.LockWait.P50)
	assert.Equal(t, Duration(99*time.Millisecond), r.LockWait.P99)
	assert.Equal(t, Duration(100*time.Millisecond), r.LockWait.Max)
	assert.Equal(t, Duration(160*time.Millisecond), r.MeanCycle, "8 workers at 50 orders/s")

	var b strings.Builder
	require.NoError(t, r.WriteText(&b))
	out := b.String()
	for _, want := range []string{
		"mode             batchlock, 8 workers\n",
		"orders           100 in 2s: 50.0 orders/s\n",
		"accepted         60\n",
		"rejected         39 (short of stock)\n",
		"errors           1 (nothing written) after 3 retries\n",
		"lock wait        p50 50ms, p99 99ms, max 100ms (100 locks)\n",
		"order cycle      mean 160ms (workers / orders per second): the longest lock wait is 0.6x it\n",
		"conflicts        2\n",
		"locks lost       1\n",
		"stock            1 SKUs: 10 units, 6 sold, 4 left\n",
		"oversold         0 units on 0 SKUs\n",
		"audit            PASSED\n",
		"  error: order o0000042: boom\n",
		"  retried: order o0000007: not obtained\n",
		"  lost: lock of order-o1 on 2 keys: batchlock: lock lost\n",
	} {
		assert.Contains(t, out, want)
	}
	assert.NotContains(t, out, "unknown outcome")
}

func TestReportTextFailedAudit(t *testing.T) {
	audit := Check([]SKUState{
		{SKU: "a", Initial: 5, Remaining: -1, Sold: 6},
		{SKU: "b", Initial: 5, Remaining: 5, Sold: 0},
	}, map[string]int64{"a": 6})
	res := sampleResult()
	res.Unknown = 2
	r := NewReport("no-lock", 8, res, nil, audit)
	assert.Nil(t, r.LockWait, "no lock, no lock wait")

	var b strings.Builder
	require.NoError(t, r.WriteText(&b))
	out := b.String()
	assert.Contains(t, out, "oversold         1 units on 1 SKUs\n")
	assert.Contains(t, out, "audit            FAILED: 1 SKUs negative-stock, 1 SKUs oversold\n")
	assert.Contains(t, out, "  a negative-stock: -1 units left\n")
	assert.Contains(t, out, "unknown outcome  2 (failed while writing: may be half-applied)\n")
	assert.NotContains(t, out, "lock wait")
}

func TestReportJSON(t *testing.T) {
	r := NewReport("batchlock", 8, sampleResult(), &Counters{}, Check(nil, nil))
	data, err := json.Marshal(r)
	require.NoError(t, err)
	var got map[string]any
	require.NoError(t, json.Unmarshal(data, &got))
	assert.Equal(t, "batchlock", got["mode"])
	assert.Equal(t, 2000.0, got["elapsed_ms"])
	assert.Equal(t, 60.0, got["accepted"])
	wait := got["lock_wait"].(map[string]any)
	assert.Equal(t, 50.0, wait["p50_ms"])
	assert.Equal(t, 99.0, wait["p99_ms"])
	audit := got["audit"].(map[string]any)
	assert.Equal(t, 0.0, audit["oversold_units"])
	assert.NotContains(t, audit, "problems")
}

func TestPercentileNearestRank(t *testing.T) {
	one := []time.Duration{7}
	assert.Equal(t, time.Duration(7), percentile(one, 50))
	assert.Equal(t, time.Duration(7), percentile(one, 99))
	four := []time.Duration{1, 2, 3, 4}
	assert.Equal(t, time.Duration(2), percentile(four, 50))
	assert.Equal(t, time.Duration(4), percentile(four, 99))
	assert.Equal(t, &Waits{}, summarise(nil))
}
