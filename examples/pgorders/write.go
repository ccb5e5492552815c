package pgorders

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/batchlock/batchlock/orders"
)

// ErrFenced means a stock row refused a write: a newer fencing token had
// written it, so the writer's lock had been lost to another owner.
var ErrFenced = errors.New("pgorders: refused a stale fencing token")

// takeLine decrements one stock row and records the line, in one statement,
// only when no newer token than the writer's ($4) has written the row. A
// stale token updates no row, and so inserts no line; nor does a token of 0,
// what Token returns for a key the lock does not hold.
const takeLine = `
WITH w AS (
	UPDATE stock SET units = units - $3, fence = $4, writes = writes + 1
	WHERE sku = $2 AND $4 > 0 AND fence <= $4
	RETURNING writes
)
INSERT INTO order_lines (order_id, sku, qty, token, write_seq)
SELECT $1, $2, $3, $4, writes FROM w`

// WriteOrder records order o in tx and takes the units of every line, each
// stock row's write fenced by its line's token (tokens[i] for o.Lines[i]),
// in one round trip. It checks no stock level: that is the caller's, under
// its lock. When a row refuses its token, the error wraps ErrFenced and tx
// must be rolled back.
func WriteOrder(ctx context.Context, tx pgx.Tx, o orders.Order, tokens []int64) error {
	b := &pgx.Batch{}
	b.Queue(`INSERT INTO orders (id, lines) VALUES ($1, $2)`, o.ID, len(o.Lines))
	for i, l := range o.Lines {
		b.Queue(takeLine, o.ID, l.SKU, l.Qty, tokens[i])
	}
	br := tx.SendBatch(ctx, b)
	if _, err := br.Exec(); err != nil {
		return errors.Join(fmt.Errorf("recording order %s: %w", o.ID, err), br.Close())
	}
	var fenced []string
	for _, l := range o.Lines {
		tag, err := br.Exec()
		if err != nil {
			return errors.Join(fmt.Errorf("writing %s: %w", l.SKU, err), br.Close())
		}
		if tag.RowsAffected() == 0 {
			fenced = append(fenced, l.SKU)
		}
	}
	if err := br.Close(); err != nil {
		return fmt.Errorf("writing order %s: %w", o.ID, err)
	}
	if len(fenced) > 0 {
		return fmt.Errorf("%w: order %s, SKUs %v written by a newer token", ErrFenced, o.ID, fenced)
	}
	return nil
}

// sellLine takes the units of one line from its stock row, only as many as
// the row has, and records the line, in one statement: a row short of
// stock, or a token of 0 (a key the lock does not hold), changes nothing.
// The row is not fenced: holds of units of one SKU write it in any order.
const sellLine = `
WITH w AS (
	UPDATE stock SET units = units - $3, writes = writes + 1
	WHERE sku = $2 AND $4 > 0 AND units >= $3
	RETURNING writes
)
INSERT INTO order_lines (order_id, sku, qty, token, write_seq, counted)
SELECT $1, $2, $3, $4, writes, true FROM w`

// ErrShort means a stock row had fewer units than a line asked for: the
// order is rejected, and tx must be rolled back.
var ErrShort = errors.New("pgorders: short of stock")

// SellOrder records order o in tx as a sale under holds of units
// (Processor.Counted): every line takes its units from its stock row where
// the row has them, recorded with its hold's token (tokens[i] for
// o.Lines[i]), in two round trips: the order, then its lines. The order is
// recorded once: sold already (a sale sent again after its commit's reply
// was lost), it writes nothing and reports sold false. A line its row
// cannot serve is ErrShort; a token of 0 (no hold of the line's key) is an
// error before anything is written.
func SellOrder(ctx context.Context, tx pgx.Tx, o orders.Order, tokens []int64) (sold bool, err error) {
	for i, t := range tokens {
		if t <= 0 {
			return false, fmt.Errorf("selling %s of order %s: no hold of its key (token %d)", o.Lines[i].SKU, o.ID, t)
		}
	}
	b := &pgx.Batch{}
	b.Queue(`INSERT INTO orders (id, lines) VALUES ($1, $2) ON CONFLICT (id) DO NOTHING`, o.ID, len(o.Lines))
	br := tx.SendBatch(ctx, b)
	tag, err := br.Exec()
	if err = errors.Join(err, br.Close()); err != nil {
		return false, fmt.Errorf("recording order %s: %w", o.ID, err)
	}
	if tag.RowsAffected() == 0 {
		return false, nil
	}
	// Rows in SKU order: orders holding units of the same SKUs write
	// them at once, and two that locked the same rows in different orders
	// would wait for each other (PostgreSQL's "deadlock detected").
	lines := make([]int, len(o.Lines))
	for i := range lines {
		lines[i] = i
	}
	slices.SortFunc(lines, func(a, b int) int { return strings.Compare(o.Lines[a].SKU, o.Lines[b].SKU) })
	b = &pgx.Batch{}
	for _, i := range lines {
		b.Queue(sellLine, o.ID, o.Lines[i].SKU, o.Lines[i].Qty, tokens[i])
	}
	br = tx.SendBatch(ctx, b)
	var short []string
	for _, i := range lines {
		l := o.Lines[i]
		tag, err := br.Exec()
		if err != nil {
			return false, errors.Join(fmt.Errorf("selling %s: %w", l.SKU, err), br.Close())
		}
		if tag.RowsAffected() == 0 {
			short = append(short, l.SKU)
		}
	}
	if err := br.Close(); err != nil {
		return false, fmt.Errorf("selling order %s: %w", o.ID, err)
	}
	if len(short) > 0 {
		return false, fmt.Errorf("%w: order %s, SKUs %v", ErrShort, o.ID, short)
	}
	return true, nil
}
