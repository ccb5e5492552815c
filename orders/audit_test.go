package orders

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestAuditConsistentStatePasses(t *testing.T) {
	states := []SKUState{
		{SKU: "a", Initial: 10, Remaining: 4, Sold: 6},
		{SKU: "b", Initial: 10, Remaining: 10, Sold: 0},
		{SKU: "c", Initial: 10, Remaining: 0, Sold: 10},
	}
	a := Check(states, map[string]int64{"a": 6, "c": 10})
	assert.True(t, a.Passed(), "problems: %v", a.Problems)
	assert.Empty(t, a.Problems)
	assert.Equal(t, int64(30), a.Initial)
	assert.Equal(t, int64(16), a.Sold)
	assert.Equal(t, int64(14), a.Remaining)
	assert.Equal(t, int64(16), a.AcceptedUnits)
	assert.Zero(t, a.OversoldUnits)
}

func TestAuditOversellFails(t *testing.T) {
	// What two unlocked orders that both read 5 units and take 3 leave.
	states := []SKUState{
		{SKU: "a", Initial: 5, Remaining: -1, Sold: 6},
		{SKU: "b", Initial: 5, Remaining: -3, Sold: 8},
		{SKU: "c", Initial: 5, Remaining: 5, Sold: 0},
	}
	a := Check(states, map[string]int64{"a": 6, "b": 8})
	require.False(t, a.Passed())
	assert.True(t, a.OnlyOversell(), "an oversell, and nothing else: %v", a.Problems)
	assert.Equal(t, int64(4), a.OversoldUnits)
	assert.Equal(t, 2, a.OversoldSKUs)
	assert.Equal(t, map[ProblemKind]int{Oversold: 2, NegativeStock: 2}, a.Counts)
	assert.Contains(t, problemTexts(a), "a oversold: 6 units sold out of 5")
	assert.Contains(t, problemTexts(a), "b negative-stock: -3 units left")
}

func TestAuditLostWritesFail(t *testing.T) {
	// An accepted order took 4 units of a, but Redis only has 1 of them
	// (writes lost in a failover): stock looks fine, yet 3 units were
	// promised that Redis will sell again.
	states := []SKUState{{SKU: "a", Initial: 10, Remaining: 9, Sold: 1}}
	a := Check(states, map[string]int64{"a": 4})
	require.False(t, a.Passed())
	assert.False(t, a.OnlyOversell())
	assert.Equal(t, map[ProblemKind]int{Mismatch: 1}, a.Counts)
	assert.Contains(t, a.Problems[0].Detail, "3 units of accepted orders were not applied")
}

func TestAuditHalfAppliedFails(t *testing.T) {
	// A failed order wrote one of its lines.
	states := []SKUState{
		{SKU: "a", Initial: 10, Remaining: 8, Sold: 2},
		{SKU: "b", Initial: 10, Remaining: 10, Sold: 0},
	}
	a := Check(states, map[string]int64{})
	require.False(t, a.Passed())
	assert.Equal(t, map[ProblemKind]int{Mismatch: 1}, a.Counts)
	assert.Equal(t, "a", a.Problems[0].SKU)
	assert.Contains(t, a.Problems[0].Detail, "2 units were written by orders that were not accepted (half-applied)")
}

func TestAuditInconsistentStateFails(t *testing.T) {
	states := []SKUState{{SKU: "a", Initial: 10, Remaining: 7, Sold: 2}}
	a := Check(states, map[string]int64{"a": 2})
	require.False(t, a.Passed())
	assert.Equal(t, map[ProblemKind]int{Inconsistent: 1}, a.Counts)
	assert.Equal(t, "a inconsistent: initial 10 != remaining 7 + sold 2", a.Problems[0].String())
}

func TestAuditOversoldByAcceptedOrdersOnly(t *testing.T) {
	// Redis lost writes and shows stock left, while accepted orders took
	// more than there was: oversold all the same.
	states := []SKUState{{SKU: "a", Initial: 5, Remaining: 2, Sold: 3}}
	a := Check(states, map[string]int64{"a": 7})
	assert.Equal(t, int64(2), a.OversoldUnits)
	assert.Equal(t, map[ProblemKind]int{Mismatch: 1, Oversold: 1}, a.Counts)
}

func TestAuditUnknownSKU(t *testing.T) {
	a := Check([]SKUState{{SKU: "a", Initial: 1, Remaining: 1}}, map[string]int64{"zz": 1})
	require.False(t, a.Passed())
	assert.Equal(t, "zz", a.Problems[0].SKU)
	assert.Contains(t, a.Problems[0].Detail, "not in the catalogue")
}

func TestAuditKeepsFirstProblemsAndCountsAll(t *testing.T) {
	var states []SKUState
	for i := range 3 * MaxProblems {
		states = append(states, SKUState{SKU: SKU(i), Initial: 1, Remaining: -1, Sold: 2})
	}
	accepted := map[string]int64{}
	for _, s := range states {
		accepted[s.SKU] = 2
	}
	a := Check(states, accepted)
	assert.Len(t, a.Problems, MaxProblems)
	assert.Equal(t, 3*MaxProblems, a.Counts[Oversold])
	assert.Equal(t, 3*MaxProblems, a.Counts[NegativeStock])
	assert.Equal(t, 6*MaxProblems, a.problemCount())
}

func problemTexts(a Audit) []string {
	out := make([]string, len(a.Problems))
	for i, p := range a.Problems {
		out[i] = p.String()
	}
	return out
}
