package main

import (
	"bytes"
	"encoding/json"
	"github.com/batchlock/batchlock/cmd/batchlock/internal/cli"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/batchlock/batchlock/orders"
)

func TestJudge(t *testing.T) {
	clean := orders.Check([]orders.SKUState{{SKU: "a", Initial: 5, Remaining: 2, Sold: 3}}, map[string]int64{"a": 3})
	oversold := orders.Check([]orders.SKUState{{SKU: "a", Initial: 5, Remaining: -1, Sold: 6}}, map[string]int64{"a": 6})
	oversoldMore := orders.Check([]orders.SKUState{{SKU: "a", Initial: 5, Remaining: -1, Sold: 6}, {SKU: "b", Initial: 5, Remaining: -3, Sold: 8}},
		map[string]int64{"a": 6, "b": 8})
	halfApplied := orders.Check([]orders.SKUState{{SKU: "a", Initial: 5, Remaining: 2, Sold: 3}}, map[string]int64{})

	for _, tc := range []struct {
		name   string
		noLock bool
		audit  orders.Audit
		passed bool
		want   string
	}{
		{"locked, clean", false, clean, true, "PASSED"},
		{"locked, oversold", false, oversold, false, "FAILED"},
		{"no lock, oversold", true, oversold, true, "OVERSOLD 1 unit on 1 SKU without a lock: this is what batchlock prevents"},
		{"no lock, oversold more", true, oversoldMore, true, "OVERSOLD 4 units on 2 SKUs without a lock"},
		{"no lock, lucky", true, clean, true, "no oversell this time"},
		{"no lock, half-applied", true, halfApplied, false, "lost or half-applied writes"},
	} {
		verdict, passed := judge(tc.noLock, tc.audit)
		assert.Equal(t, tc.passed, passed, tc.name)
		assert.Contains(t, verdict, tc.want, tc.name)
	}
}

func sampleReport() demoReport {
	audit := orders.Check([]orders.SKUState{{SKU: "a", Initial: 5, Remaining: 2, Sold: 3}}, map[string]int64{"a": 3})
	res := orders.Result{Orders: 10, Accepted: 1, Rejected: 9, Elapsed: time.Second, LockWaits: []time.Duration{time.Millisecond}}
	r := demoReport{
		Cluster: []string{"127.0.0.1:7000", "127.0.0.1:7001"}, Throwaway: true, Store: "postgresql 15.18: a row per SKU",
		SKUs: 1, StockPerSKU: 5, MaxBasket: 3, Seed: 9, Replicas: 1,
		Run:   orders.NewReport("batchlock", 4, res, &orders.Counters{}, audit),
		Chaos: &chaosResult{Master: "127.0.0.1:7000", Promoted: "127.0.0.1:7003", AtOrder: 3, Took: orders.Duration(1500 * time.Millisecond)},
	}
	r.Verdict, r.Passed = judge(false, audit)
	return r
}

func TestDemoReportText(t *testing.T) {
	var b bytes.Buffer
	require.NoError(t, sampleReport().writeText(&b))
	out := b.String()
	for _, want := range []string{
		"cluster          127.0.0.1:7000,127.0.0.1:7001 (throwaway)\n",
		"stock in         postgresql 15.18: a row per SKU\n",
		"workload         1 SKU of 5 units, baskets of 1 to 3 SKUs, seed 9, think 0s\n",
		"durability       every lock and write acknowledged by 1 replica\n",
		"mode             batchlock, 4 workers\n",
		"audit            PASSED\n",
		"chaos            failed master 127.0.0.1:7000 over to 127.0.0.1:7003 after 3 orders, in 1.5s\n",
		"\nPASSED: no unit oversold",
	} {
		assert.Contains(t, out, want)
	}
}

func TestDemoReportJSON(t *testing.T) {
	var b bytes.Buffer
	require.NoError(t, cli.WriteJSON(&b, sampleReport()))
	var got map[string]any
	require.NoError(t, json.Unmarshal(b.Bytes(), &got))
	assert.Equal(t, true, got["passed"])
	assert.Equal(t, 9.0, got["seed"])
	assert.Equal(t, "127.0.0.1:7003", got["chaos"].(map[string]any)["promoted"])
	assert.Equal(t, 1500.0, got["chaos"].(map[string]any)["took_ms"])
	run := got["run"].(map[string]any)
	assert.Equal(t, 10.0, run["orders"])
	assert.True(t, strings.HasPrefix(got["verdict"].(string), "PASSED"))
}

func TestProgressLines(t *testing.T) {
	var b bytes.Buffer
	p := &progress{w: &b, total: 200, tty: true}
	p.done.Store(50)
	assert.Equal(t, "[#######                       ] 50/200 orders", p.line())
	p.done.Store(200)
	assert.Equal(t, "[##############################] 200/200 orders", p.line())
	p.tty = false
	assert.Equal(t, "200/200 orders", p.line())
}

func TestProgressFinishEndsTheLine(t *testing.T) {
	var b bytes.Buffer
	p := startProgress(&b, 3) // a buffer is not a terminal: plain lines
	require.False(t, p.tty)
	p.add()
	p.logf("chaos: %s", "hello")
	p.add()
	p.add()
	p.finish()
	out := b.String()
	assert.Contains(t, out, "chaos: hello\n")
	assert.True(t, strings.HasSuffix(out, "3/3 orders\n"), out)
}
