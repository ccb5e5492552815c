package orders

import (
	"context"
	"fmt"
	"sort"
)

// ProblemKind classifies what an audit found wrong with a SKU.
type ProblemKind string

const (
	// Oversold: more units were sold than the SKU had. The failure
	// batchlock exists to prevent.
	Oversold ProblemKind = "oversold"
	// NegativeStock: the SKU's remaining units in Redis are below zero;
	// oversold as Redis sees it.
	NegativeStock ProblemKind = "negative-stock"
	// Inconsistent: in Redis, initial != remaining + sold. Writes always
	// move both, so this means the data was changed behind the workload.
	Inconsistent ProblemKind = "inconsistent"
	// Mismatch: the units Redis counts as sold differ from the lines of
	// accepted orders: an accepted order was not fully applied (writes
	// lost), or a failed order was half-applied.
	Mismatch ProblemKind = "mismatch"
	// Capacity: a counted SKU's capacity, in the lock, differs from its
	// remaining units: a sale not consumed, or consumed without its write.
	Capacity ProblemKind = "capacity"
)

// Problem is one thing wrong with one SKU.
type Problem struct {
	Kind   ProblemKind `json:"kind"`
	SKU    string      `json:"sku"`
	Detail string      `json:"detail"`
}

func (p Problem) String() string { return fmt.Sprintf("%s %s: %s", p.SKU, p.Kind, p.Detail) }

// Audit is the check of stock in Redis against the orders accepted.
type Audit struct {
	SKUs      int   `json:"skus"`
	Initial   int64 `json:"initial_units"`
	Sold      int64 `json:"sold_units"` // as Redis counts them
	Remaining int64 `json:"remaining_units"`
	// AcceptedUnits sums the lines of accepted orders.
	AcceptedUnits int64 `json:"accepted_units"`
	// OversoldUnits sums, over SKUs, the units sold beyond the SKU's
	// initial stock, as the accepted orders or Redis count them, whichever
	// is more.
	OversoldUnits int64 `json:"oversold_units"`
	OversoldSKUs  int   `json:"oversold_skus"`
	// Counts has the number of SKUs with each kind of problem.
	Counts map[ProblemKind]int `json:"problem_counts,omitempty"`
	// Problems lists the first MaxProblems problems, by SKU.
	Problems []Problem `json:"problems,omitempty"`
}

// MaxProblems bounds Audit.Problems; Counts has them all.
const MaxProblems = 20

// Passed reports whether no problem was found.
func (a Audit) Passed() bool { return len(a.Counts) == 0 }

// OnlyOversell reports whether every problem found is an oversell
// (Oversold or NegativeStock): what running without a lock is expected to
// cause, as opposed to lost or half-applied writes.
func (a Audit) OnlyOversell() bool {
	for k := range a.Counts {
		if k != Oversold && k != NegativeStock {
			return false
		}
	}
	return true
}

// Add counts a problem of kind with sku, and keeps it among the first
// MaxProblems. Stores that check more than Check does (the database's own
// records of orders, say) add their findings with it.
func (a *Audit) Add(kind ProblemKind, sku, format string, args ...any) {
	if a.Counts == nil {
		a.Counts = make(map[ProblemKind]int)
	}
	a.Counts[kind]++
	if len(a.Problems) < MaxProblems {
		a.Problems = append(a.Problems, Problem{Kind: kind, SKU: sku, Detail: fmt.Sprintf(format, args...)})
	}
}

// Check audits stock states against the units of accepted orders per SKU.
// A SKU passes when its stock is not below zero, initial == remaining +
// sold, Redis's sold equals the accepted units, and those do not exceed
// the initial stock.
func Check(states []SKUState, accepted map[string]int64) Audit {
	a := Audit{SKUs: len(states)}
	add := a.Add
	known := make(map[string]bool, len(states))
	for _, s := range states {
		known[s.SKU] = true
		want := accepted[s.SKU]
		a.Initial += s.Initial
		a.Sold += s.Sold
		a.Remaining += s.Remaining
		a.AcceptedUnits += want

		if s.Remaining+s.Sold != s.Initial {
			add(Inconsistent, s.SKU, "initial %d != remaining %d + sold %d", s.Initial, s.Remaining, s.Sold)
		}
		if s.Remaining < 0 {
			add(NegativeStock, s.SKU, "%d units left", s.Remaining)
		}
		switch {
		case s.Sold < want:
			add(Mismatch, s.SKU, "accepted orders took %d units but Redis counts %d sold: %d units of accepted orders were not applied (lost writes)",
				want, s.Sold, want-s.Sold)
		case s.Sold > want:
			add(Mismatch, s.SKU, "Redis counts %d units sold but accepted orders took %d: %d units were written by orders that were not accepted (half-applied)",
				s.Sold, want, s.Sold-want)
		}
		if over := max(want, s.Sold) - s.Initial; over > 0 {
			a.OversoldUnits += over
			a.OversoldSKUs++
			add(Oversold, s.SKU, "%d units sold out of %d", max(want, s.Sold), s.Initial)
		}
	}
	var unknown []string
	for sku := range accepted {
		if !known[sku] {
			unknown = append(unknown, sku)
		}
	}
	sort.Strings(unknown)
	for _, sku := range unknown {
		a.AcceptedUnits += accepted[sku]
		add(Mismatch, sku, "accepted orders took %d units of a SKU not in the catalogue", accepted[sku])
	}
	return a
}

// Audit reads every SKU's stock and checks it against the units of
// accepted orders per SKU (Result.SoldBySKU).
func (s *Stock) Audit(ctx context.Context, accepted map[string]int64) (Audit, error) {
	states, err := s.States(ctx)
	if err != nil {
		return Audit{}, err
	}
	return Check(states, accepted), nil
}
