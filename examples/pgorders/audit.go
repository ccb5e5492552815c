package pgorders

import (
	"context"
	"fmt"
	"maps"
	"slices"

	"github.com/jackc/pgx/v5"

	"github.com/batchlock/batchlock/batchlock"
	"github.com/batchlock/batchlock/orders"
)

// StaleToken is the audit's finding that a stock row was written by a token
// not newer than that of an earlier write of the row: a stale holder's write
// went through.
const StaleToken orders.ProblemKind = "stale-token"

// Audit reads the database back and checks it against what a run accepted
// (res.Accepted orders, res.SoldBySKU units): orders.Check on every SKU
// (nothing oversold, initial = remaining + sold, sold = the accepted
// lines), then the orders (as many recorded as accepted, each with all its
// lines), then every row's writes (numbered 1 to n, with tokens that only
// grow, the last one's token in the row's fence: no row written by a stale
// token; a counted sale's lines, sold side by side under holds of units,
// are numbered but not fenced).
func (s *Store) Audit(ctx context.Context, res orders.Result) (orders.Audit, error) {
	tx, err := s.db.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly})
	if err != nil {
		return orders.Audit{}, fmt.Errorf("pgorders: audit: %w", err)
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()

	states, rows, err := readStock(ctx, tx)
	if err != nil {
		return orders.Audit{}, err
	}
	a := orders.Check(states, res.SoldBySKU)
	if err := checkOrders(ctx, tx, res.Accepted, &a); err != nil {
		return orders.Audit{}, err
	}
	if err := checkWrites(ctx, tx, rows, &a); err != nil {
		return orders.Audit{}, err
	}
	return a, nil
}

// row is what the audit reads of a stock row besides its units.
type row struct{ fence, writes int64 }

func readStock(ctx context.Context, tx pgx.Tx) ([]orders.SKUState, map[string]row, error) {
	q, err := tx.Query(ctx, `
		SELECT s.sku, s.initial, s.units, coalesce(sum(l.qty), 0)::bigint, s.fence, s.writes
		FROM stock s LEFT JOIN order_lines l ON l.sku = s.sku
		GROUP BY s.sku ORDER BY s.sku`)
	if err != nil {
		return nil, nil, fmt.Errorf("pgorders: audit: reading stock: %w", err)
	}
	var states []orders.SKUState
	rows := make(map[string]row)
	var st orders.SKUState
	var r row
	if _, err := pgx.ForEachRow(q, []any{&st.SKU, &st.Initial, &st.Remaining, &st.Sold, &r.fence, &r.writes}, func() error {
		states = append(states, st)
		rows[st.SKU] = r
		return nil
	}); err != nil {
		return nil, nil, fmt.Errorf("pgorders: audit: reading stock: %w", err)
	}
	return states, rows, nil
}

// checkOrders checks that every order recorded has all its lines, and
// that as many were recorded as accepted.
func checkOrders(ctx context.Context, tx pgx.Tx, accepted int, a *orders.Audit) error {
	q, err := tx.Query(ctx, `
		SELECT o.id, o.lines, count(l.sku)
		FROM orders o LEFT JOIN order_lines l ON l.order_id = o.id
		GROUP BY o.id ORDER BY o.id`)
	if err != nil {
		return fmt.Errorf("pgorders: audit: reading orders: %w", err)
	}
	recorded := 0
	var id string
	var lines int32
	var written int64
	if _, err := pgx.ForEachRow(q, []any{&id, &lines, &written}, func() error {
		recorded++
		if written != int64(lines) {
			a.Add(orders.Mismatch, "order "+id, "%d of its %d lines recorded", written, lines)
		}
		return nil
	}); err != nil {
		return fmt.Errorf("pgorders: audit: reading orders: %w", err)
	}
	if recorded != accepted {
		a.Add(orders.Mismatch, "orders", "%d recorded in the database, %d accepted by the run", recorded, accepted)
	}
	return nil
}

// checkWrites follows each stock row's writes in the order they were made.
func checkWrites(ctx context.Context, tx pgx.Tx, rows map[string]row, a *orders.Audit) error {
	q, err := tx.Query(ctx, `SELECT sku, write_seq, token, order_id, counted FROM order_lines ORDER BY sku, write_seq`)
	if err != nil {
		return fmt.Errorf("pgorders: audit: reading order lines: %w", err)
	}
	type last struct {
		seq, token int64
		order      string
	}
	// seen: per row its last write's number, and the last fenced write's
	// token and order.
	seen := make(map[string]last)
	var sku, order string
	var seq, token int64
	var counted bool
	if _, err := pgx.ForEachRow(q, []any{&sku, &seq, &token, &order, &counted}, func() error {
		prev := seen[sku]
		if seq != prev.seq+1 {
			a.Add(orders.Inconsistent, sku, "write %d of the row follows write %d", seq, prev.seq)
		}
		if counted {
			seen[sku] = last{seq: seq, token: prev.token, order: prev.order}
			return nil
		}
		if prev.token > 0 && token <= prev.token {
			a.Add(StaleToken, sku, "order %s wrote with token %d after order %s wrote with %d", order, token, prev.order, prev.token)
		}
		seen[sku] = last{seq: seq, token: token, order: order}
		return nil
	}); err != nil {
		return fmt.Errorf("pgorders: audit: reading order lines: %w", err)
	}
	for _, sku := range slices.Sorted(maps.Keys(rows)) {
		r, l := rows[sku], seen[sku]
		if r.writes != l.seq || r.fence != l.token {
			a.Add(orders.Inconsistent, sku, "the row counts %d writes, fence %d; its lines %d writes, last fenced token %d", r.writes, r.fence, l.seq, l.token)
		}
	}
	return nil
}

// AuditCapacities adds to a the SKUs whose capacity in locker differs from
// their row's units (Processor.Counted keeps them equal; SetCapacities sets
// them so).
func (s *Store) AuditCapacities(ctx context.Context, locker *batchlock.Client, a *orders.Audit) error {
	skus, keys, units, err := s.capacities(ctx)
	if err != nil {
		return err
	}
	return orders.CheckCapacities(ctx, locker, skus, keys, units, a)
}
