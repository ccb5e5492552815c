package pgorders

import (
	"context"
	_ "embed"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/batchlock/batchlock/orders"
)

//go:embed schema.sql
var schema string

// Store is a catalogue's stock in a PostgreSQL database, and the lock keys
// of its SKUs.
type Store struct {
	db     *pgxpool.Pool
	prefix string
}

// NewStore describes the stock in db, whose SKUs are locked under the keys
// prefix+sku (such as "shop:stock:"). It touches nothing until Setup.
func NewStore(db *pgxpool.Pool, prefix string) *Store {
	return &Store{db: db, prefix: prefix}
}

// Key returns the lock key of sku.
func (s *Store) Key(sku string) string { return s.prefix + sku }

// Keys returns the lock keys of an order's lines, in line order.
func (s *Store) Keys(o orders.Order) []string {
	keys := make([]string, len(o.Lines))
	for i, l := range o.Lines {
		keys[i] = s.Key(l.SKU)
	}
	return keys
}

// PromoKeys returns the lock keys of an order's promotions, which it reads
// and never writes: the processor locks them shared. The example stores
// nothing for them.
func (s *Store) PromoKeys(o orders.Order) []string { return orders.PromoKeys(s.prefix, o) }

// Setup creates the tables in an empty database and stocks every SKU with
// initial units.
func (s *Store) Setup(ctx context.Context, skus []string, initial int64) error {
	tx, err := s.db.Begin(ctx)
	if err != nil {
		return fmt.Errorf("pgorders: setup: %w", err)
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	if _, err := tx.Exec(ctx, schema); err != nil {
		return fmt.Errorf("pgorders: creating the tables: %w", err)
	}
	rows := make([][]any, len(skus))
	for i, sku := range skus {
		rows[i] = []any{sku, initial, initial}
	}
	if _, err := tx.CopyFrom(ctx, pgx.Identifier{"stock"}, []string{"sku", "initial", "units"}, pgx.CopyFromRows(rows)); err != nil {
		return fmt.Errorf("pgorders: stocking %d SKUs: %w", len(skus), err)
	}
	if err := tx.Commit(ctx); err != nil {
		return fmt.Errorf("pgorders: setup: %w", err)
	}
	return nil
}
