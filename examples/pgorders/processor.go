package pgorders

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/batchlock/batchlock/batchlock"
	"github.com/batchlock/batchlock/orders"
)

// DefaultLockWait bounds the wait for an order's lock unless
// Processor.LockWait says otherwise.
const DefaultLockWait = 10 * time.Second

// Processor processes orders on a Store under batchlock locks of their
// baskets. It implements orders.Processor.
type Processor struct {
	Locker *batchlock.Client
	Store  *Store
	// LockWait bounds the wait for the basket's lock, which ends before the
	// transaction begins. Default DefaultLockWait.
	LockWait time.Duration
	// LockOptions are given to every Lock, such as batchlock.WithTTL.
	LockOptions []batchlock.LockOption
	// Work, when set, runs inside the order's transaction once every line
	// is written, before the commit, in the transaction's context: the
	// rest of a real processor's work (pricing, payment). An error rolls
	// the order back.
	Work func(ctx context.Context, l *batchlock.Lock, o orders.Order) error
	// Counted locks each line's quantity of its SKU in units
	// (batchlock.WithUnits; Store.SetCapacities first) instead of the SKU
	// exclusively, so that orders of one SKU run side by side while its
	// stock lasts: an order asking more than a SKU has left is rejected at
	// once (batchlock.ErrOverCapacity). The transaction sells each line
	// where its row has the units (SellOrder: the database's own check, the
	// order recorded once), and a committed sale is consumed
	// (Lock.Consume), keeping each capacity equal to its row's units.
	Counted bool
}

// Process implements orders.Processor: lock the basket, and the order's
// promotions shared, then one transaction in the lock's context that checks
// and takes every line.
//
// The lock's owner is "order-"+ID and a random suffix per attempt: a retry
// must not join the holds that a failed attempt's rollback could not
// release (a master failing over), or it would keep them alive.
func (p *Processor) Process(ctx context.Context, o orders.Order) (orders.Outcome, error) {
	keys := p.Store.Keys(o)
	suffix := make([]byte, 4)
	_, _ = rand.Read(suffix)
	opts := append([]batchlock.LockOption{
		batchlock.WithOwner("order-" + o.ID + "/" + hex.EncodeToString(suffix)),
		batchlock.WithShared(p.Store.PromoKeys(o)...),
	}, p.LockOptions...)
	if p.Counted {
		opts, keys = append(opts, batchlock.WithUnits(orders.LineUnits(o, p.Store.Key))), nil
	}

	// The wait has its own deadline and ends before BEGIN: no transaction
	// is open, and no connection taken, while the order waits for others.
	wait := p.LockWait
	if wait <= 0 {
		wait = DefaultLockWait
	}
	asked := time.Now()
	wctx, cancel := context.WithTimeout(ctx, wait)
	l, err := p.Locker.Lock(wctx, keys, opts...)
	cancel()
	switch {
	case errors.Is(err, batchlock.ErrOverCapacity):
		return orders.Outcome{}, nil // sold out: rejected, nothing written
	case err != nil:
		return orders.Outcome{}, fmt.Errorf("locking %d SKUs: %w", len(o.Lines), err)
	}
	out := orders.Outcome{Locked: true, LockWait: time.Since(asked)}
	// Once lost, Unlock fails with ErrNotHeld: the order's error says so.
	defer func() { _ = l.Unlock(ctx) }()

	// The transaction ends with the lock, or with ctx.
	tctx, stop := boundBy(ctx, l)
	defer stop()
	out.Accepted, out.Written, err = p.transact(tctx, l, o)
	if err != nil {
		return out, errors.Join(err, context.Cause(tctx))
	}
	if p.Counted && out.Accepted {
		// The sale is committed. A consume that fails (the lock lost since)
		// leaves the capacity above the row's units, which SellOrder's own
		// check keeps from overselling until SetCapacities sets it again.
		if err := l.Consume(ctx); err != nil {
			return out, fmt.Errorf("consuming the units of %d SKUs: %w", len(o.Lines), err)
		}
	}
	return out, nil
}

// boundBy returns a child of l's context that also ends with ctx.
func boundBy(ctx context.Context, l *batchlock.Lock) (context.Context, func()) {
	tctx, cancel := context.WithCancelCause(l.Context())
	stop := context.AfterFunc(ctx, func() { cancel(context.Cause(ctx)) })
	return tctx, func() { stop(); cancel(nil) }
}

// transact runs the order's transaction in ctx, the lock's. It reports
// whether the order was accepted (committed) and whether, on an error, it
// may have been committed all the same.
func (p *Processor) transact(ctx context.Context, l *batchlock.Lock, o orders.Order) (accepted, written bool, err error) {
	conn, err := p.Store.db.Acquire(ctx)
	if err != nil {
		return false, false, fmt.Errorf("connecting: %w", err)
	}
	// pgx watches ctx only while a statement runs. To end the transaction
	// the moment the lock ends, also between statements (the holder busy
	// in Work, or paused), close its connection then: PostgreSQL rolls the
	// transaction back and frees its row locks for the next owner.
	netConn := conn.Conn().PgConn().Conn()
	abort := context.AfterFunc(ctx, func() { _ = netConn.Close() })
	defer func() {
		if abort() {
			conn.Release()
			return
		}
		// Closed under it: keep it out of the pool.
		_ = conn.Hijack().Close(context.WithoutCancel(ctx))
	}()

	tx, err := conn.Begin(ctx)
	if err != nil {
		return false, false, fmt.Errorf("beginning: %w", err)
	}
	// After a commit this does nothing; after a lost lock the connection
	// is closed and the server has rolled back already.
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()

	tokens := make([]int64, len(o.Lines))
	for i, line := range o.Lines {
		tokens[i] = l.Token(p.Store.Key(line.SKU))
	}
	if p.Counted {
		// A sale sent again, its first commit's outcome unknown (that
		// attempt failed, its hold let go unsold), writes nothing new: it
		// is accepted, and its units are consumed now, once.
		if _, err := SellOrder(ctx, tx, o, tokens); errors.Is(err, ErrShort) {
			return false, false, nil
		} else if err != nil {
			return false, false, err
		}
	} else if inStock, err := check(ctx, tx, o, tokens); err != nil || !inStock {
		return false, false, err
	} else if err := WriteOrder(ctx, tx, o, tokens); err != nil {
		return false, false, err
	}
	if p.Work != nil {
		if err := p.Work(ctx, l, o); err != nil {
			return false, false, err
		}
	}
	// Commit only while the lock holds: once it is lost, the next owner
	// may already have read these rows. (A loss during the COMMIT itself
	// is what the fencing tokens are for.)
	if err := ctx.Err(); err != nil {
		return false, false, fmt.Errorf("not committed: %w", err)
	}
	if err := tx.Commit(ctx); err != nil {
		// A COMMIT that was never sent committed nothing.
		return false, !pgconn.SafeToRetry(err), fmt.Errorf("committing: %w", err)
	}
	return true, true, nil
}

// check reads every line's stock row, locking the rows (in SKU order, so
// that two transactions on overlapping baskets cannot deadlock). A row
// written by a newer token than the line's means the lock is stale: the
// error wraps ErrFenced. Otherwise it reports whether every line is in
// stock.
func check(ctx context.Context, tx pgx.Tx, o orders.Order, tokens []int64) (bool, error) {
	skus := make([]string, len(o.Lines))
	for i, l := range o.Lines {
		skus[i] = l.SKU
	}
	rows, err := tx.Query(ctx, `SELECT sku, units, fence FROM stock WHERE sku = ANY($1) ORDER BY sku FOR UPDATE`, skus)
	if err != nil {
		return false, fmt.Errorf("reading stock: %w", err)
	}
	type level struct{ units, fence int64 }
	levels := make(map[string]level, len(skus))
	var sku string
	var lv level
	if _, err := pgx.ForEachRow(rows, []any{&sku, &lv.units, &lv.fence}, func() error {
		levels[sku] = lv
		return nil
	}); err != nil {
		return false, fmt.Errorf("reading stock: %w", err)
	}
	inStock := true
	for i, l := range o.Lines {
		lv, ok := levels[l.SKU]
		switch {
		case !ok:
			return false, fmt.Errorf("no stock row for SKU %s", l.SKU)
		case lv.fence > tokens[i]:
			return false, fmt.Errorf("%w: %s was written with token %d, this lock has %d", ErrFenced, l.SKU, lv.fence, tokens[i])
		case lv.units < l.Qty:
			inStock = false
		}
	}
	return inStock, nil
}
