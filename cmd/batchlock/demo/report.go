package main

import (
	"fmt"
	"github.com/batchlock/batchlock/cmd/batchlock/internal/cli"
	"io"
	"strings"

	"github.com/batchlock/batchlock/orders"
)

// demoReport is what the demo prints on stdout: its setup, the run's
// figures and audit, the failover if any, and the verdict.
type demoReport struct {
	Cluster     []string        `json:"cluster"`
	Throwaway   bool            `json:"throwaway"`
	Store       string          `json:"store"`
	SKUs        int             `json:"skus"`
	StockPerSKU int64           `json:"stock_per_sku"`
	MaxBasket   int             `json:"max_basket"`
	Promos      string          `json:"promotions"`
	Seed        uint64          `json:"seed"`
	Think       orders.Duration `json:"think_ms"`
	Replicas    int             `json:"replicas"`
	Run         orders.Report   `json:"run"`
	// Processors are the batch processors' own figures, with several.
	Processors []processorFigures `json:"processors,omitempty"`
	Chaos      *chaosResult       `json:"chaos,omitempty"`
	Verdict    string             `json:"verdict"`
	// Passed decides the exit code: 0 when true.
	Passed bool `json:"passed"`
}

// processorFigures is what one batch processor of several did.
type processorFigures struct {
	Orders       int     `json:"orders"`
	OrdersPerSec float64 `json:"orders_per_second"`
}

// chaosResult is what the failover in the middle of a run did.
type chaosResult struct {
	Master   string          `json:"master"`
	Promoted string          `json:"promoted,omitempty"`
	AtOrder  int64           `json:"at_order"`
	Took     orders.Duration `json:"took_ms"`
	Err      string          `json:"error,omitempty"`
}

// judge decides whether a run passed. With a lock, any audit problem is a
// failure. Without, an oversell is the expected demonstration and passes;
// lost or half-applied writes do not.
func judge(noLock bool, a orders.Audit) (verdict string, passed bool) {
	switch {
	case !noLock && a.Passed():
		return "PASSED: no unit oversold, every accepted order fully applied, stock consistent", true
	case !noLock:
		return "FAILED: the audit found problems under batchlock (listed above)", false
	case !a.OnlyOversell():
		return "FAILED: beyond the oversell, the audit found lost or half-applied writes (listed above)", false
	case a.OversoldUnits > 0:
		return fmt.Sprintf("OVERSOLD %s on %s without a lock: this is what batchlock prevents",
			cli.Plural(a.OversoldUnits, "unit"), cli.Plural(a.OversoldSKUs, "SKU")), true
	default:
		return "no oversell this time without a lock: the race depends on timing; " +
			"try more --workers, less --stock or some --think", true
	}
}

func (r demoReport) writeText(w io.Writer) error {
	var b strings.Builder
	row := func(name, format string, args ...any) {
		fmt.Fprintf(&b, "%-16s %s\n", name, fmt.Sprintf(format, args...))
	}
	kind := "given"
	if r.Throwaway {
		kind = "throwaway"
	}
	row("cluster", "%s (%s)", strings.Join(r.Cluster, ","), kind)
	row("stock in", "%s", r.Store)
	row("workload", "%s of %s, baskets of 1 to %s, seed %d, think %v",
		cli.Plural(r.SKUs, "SKU"), cli.Plural(r.StockPerSKU, "unit"), cli.Plural(r.MaxBasket, "SKU"), r.Seed, r.Think)
	row("promotions", "%s", r.Promos)
	if r.Replicas > 0 {
		row("durability", "every lock and write acknowledged by %s", cli.Plural(r.Replicas, "replica"))
	}
	if err := r.Run.WriteText(&b); err != nil {
		return err
	}
	if len(r.Processors) > 0 {
		var each []string
		for _, p := range r.Processors {
			each = append(each, fmt.Sprintf("%.0f", p.OrdersPerSec))
		}
		row("processors", "%d, orders/s each: %s (in all: the run's)", len(r.Processors), strings.Join(each, ", "))
	}
	if c := r.Chaos; c != nil {
		switch {
		case c.Err != "":
			row("chaos", "failover of %s after %s FAILED after %v: %s", c.Master, cli.Plural(c.AtOrder, "order"), c.Took, c.Err)
		case c.Promoted == "":
			row("chaos", "no failover: the run ended before it was due")
		default:
			row("chaos", "failed master %s over to %s after %s, in %v", c.Master, c.Promoted, cli.Plural(c.AtOrder, "order"), c.Took)
		}
	}
	fmt.Fprintf(&b, "\n%s\n", r.Verdict)
	_, err := io.WriteString(w, b.String())
	return err
}
