package pgorders

import (
	"context"
	_ "embed"
	"fmt"
	"maps"
	"slices"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/batchlock/batchlock/batchlock"
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

// SetCapacities makes the capacity of each SKU's key its row's units, for
// a Processor.Counted: at the start, and to set right a capacity left above
// its row by a sale whose consume failed. A key whose holds hold more units
// than its row has is left as it is (batchlock.ErrOverCapacity), in the error.
func (s *Store) SetCapacities(ctx context.Context, locker *batchlock.Client) error {
	_, keys, units, err := s.capacities(ctx)
	if err != nil {
		return err
	}
	return orders.SetCapacities(ctx, locker, keys, units)
}

// capacities are every SKU, its key and its row's units.
func (s *Store) capacities(ctx context.Context) (skus, keys []string, units []int64, err error) {
	rows, err := s.units(ctx)
	if err != nil {
		return nil, nil, nil, err
	}
	for _, sku := range slices.Sorted(maps.Keys(rows)) {
		skus, keys, units = append(skus, sku), append(keys, s.Key(sku)), append(units, rows[sku])
	}
	return skus, keys, units, nil
}

// units reads every SKU's units.
func (s *Store) units(ctx context.Context) (map[string]int64, error) {
	rows, err := s.db.Query(ctx, `SELECT sku, units FROM stock`)
	if err != nil {
		return nil, fmt.Errorf("pgorders: reading stock: %w", err)
	}
	units := map[string]int64{}
	var sku string
	var n int64
	if _, err := pgx.ForEachRow(rows, []any{&sku, &n}, func() error {
		units[sku] = n
		return nil
	}); err != nil {
		return nil, fmt.Errorf("pgorders: reading stock: %w", err)
	}
	return units, nil
}
