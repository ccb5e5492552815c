package pgorders_test

import (
	"context"
	"errors"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/batchlock/batchlock/batchlock"
	"github.com/batchlock/batchlock/examples/pgorders"
	"github.com/batchlock/batchlock/orders"
)

// guard bounds every wait of these tests on an event that should come.
const guard = 10 * time.Second

func line(i int, qty int64) orders.Line { return orders.Line{SKU: orders.SKU(i), Qty: qty} }

// A holder paused past its lease (its process frozen in a GC pause, so no
// renewal: a fixed WithTTL lease) loses its lock while its transaction is
// open. The transaction is rolled back at once, so the next owner takes
// the same rows and commits while the first is still paused; the paused
// holder's commit is refused, and its late write with its old tokens is
// refused by the database. The next owner's writes stand.
func TestPausedHolderCannotCommit(t *testing.T) {
	f := newFixture(t, 3, 10)
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	first := orders.Order{ID: "first", Lines: []orders.Line{line(0, 2), line(1, 3)}}
	next := orders.Order{ID: "next", Lines: []orders.Line{line(0, 1), line(1, 1), line(2, 1)}}

	// Each lock's tokens are read while it is held: Token says 0 once it
	// ended.
	paused := make(chan []int64, 1)
	resume := make(chan struct{})
	var pausedCause error
	holder := &pgorders.Processor{
		Locker: f.locker, Store: f.store,
		LockOptions: []batchlock.LockOption{batchlock.WithTTL(500 * time.Millisecond)},
		Work: func(ctx context.Context, l *batchlock.Lock, _ orders.Order) error {
			paused <- tokens(l, f.store, first)
			select {
			case <-ctx.Done(): // paused past its lease
			case <-time.After(guard):
				return errors.New("the lease never ran out")
			}
			pausedCause = context.Cause(ctx)
			<-resume // still paused while the next owner works
			return nil
		},
	}
	type result struct {
		out orders.Outcome
		err error
	}
	done := make(chan result, 1)
	go func() {
		out, err := holder.Process(ctx, first)
		done <- result{out, err}
	}()
	var staleTokens []int64
	select {
	case staleTokens = <-paused:
	case r := <-done:
		t.Fatalf("the first order ended before its pause: %+v, %v", r.out, r.err)
	}

	var newTokens []int64
	owner := &pgorders.Processor{Locker: f.locker, Store: f.store, Work: func(_ context.Context, l *batchlock.Lock, _ orders.Order) error {
		newTokens = tokens(l, f.store, next)
		return nil
	}}
	nctx, ncancel := context.WithTimeout(ctx, guard)
	out, err := owner.Process(nctx, next)
	ncancel()
	close(resume)
	require.NoError(t, err, "the next owner is not blocked by the paused holder's row locks: its transaction was rolled back")
	require.True(t, out.Accepted)

	r := <-done
	require.ErrorIs(t, r.err, batchlock.ErrLockLost, "the paused holder's commit is refused")
	assert.False(t, r.out.Accepted)
	assert.False(t, r.out.Written, "nothing of it was committed")
	assert.ErrorIs(t, pausedCause, batchlock.ErrLockLost, "its transaction's context ended with the loss")

	// Its write arrives late, with the tokens of its lost lock: PostgreSQL
	// refuses it, since a newer token has written the rows.
	require.Less(t, staleTokens[0], newTokens[0])
	require.Less(t, staleTokens[1], newTokens[1])
	tx, err := f.db.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(ctx) }() // the pool's Close waits for its connection
	err = pgorders.WriteOrder(ctx, tx, first, staleTokens)
	require.ErrorIs(t, err, pgorders.ErrFenced)
	require.NoError(t, tx.Rollback(ctx))

	assert.Equal(t, stockRow{units: 9, fence: newTokens[0], writes: 1}, f.row(t, orders.SKU(0)))
	assert.Equal(t, stockRow{units: 9, fence: newTokens[1], writes: 1}, f.row(t, orders.SKU(1)))
	assert.Equal(t, stockRow{units: 9, fence: newTokens[2], writes: 1}, f.row(t, orders.SKU(2)))
	audit, err := f.store.Audit(ctx, resultOf(next))
	require.NoError(t, err)
	assert.True(t, audit.Passed(), "only the next owner's order is in the database: %v", audit.Problems)
}

// A lock whose keys are deleted behind its back (an operator's ForceUnlock)
// is reported lost by the watchdog's next round: the transaction's context
// ends, PostgreSQL rolls the transaction back at once (its row locks are
// free before the holder notices anything), and the commit that follows is
// refused. Nothing of the order is in the database.
func TestLockLostMidTransactionRollsBack(t *testing.T) {
	f := newFixture(t, 4, 10, batchlock.WithLease(900*time.Millisecond))
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	o := orders.Order{ID: "lost", Lines: []orders.Line{line(0, 1), line(1, 2), line(3, 3)}}

	var lostCause error
	rowsFree := false
	p := &pgorders.Processor{Locker: f.locker, Store: f.store, Work: func(ctx context.Context, l *batchlock.Lock, o orders.Order) error {
		if _, err := f.locker.ForceUnlock(ctx, l.Keys()...); err != nil {
			return err
		}
		select {
		case <-ctx.Done():
		case <-time.After(guard):
			return errors.New("the loss was never reported")
		}
		lostCause = context.Cause(ctx)
		rowsFree = assert.Eventually(t, func() bool { return lockable(t, f, o) }, guard, 10*time.Millisecond,
			"the transaction's row locks are released")
		return nil // as if the work went on regardless: the commit must still not happen
	}}
	out, err := p.Process(ctx, o)
	require.ErrorIs(t, err, batchlock.ErrLockLost)
	assert.False(t, out.Accepted)
	assert.False(t, out.Written)
	assert.ErrorIs(t, lostCause, batchlock.ErrLockLost)
	assert.True(t, rowsFree, "rolled back while the holder was still in its work")

	assert.Zero(t, f.count(t, "orders"), "the order is not recorded")
	assert.Zero(t, f.count(t, "order_lines"))
	for i := range 4 {
		assert.Equal(t, stockRow{units: 10}, f.row(t, orders.SKU(i)), "SKU %d untouched", i)
	}
	audit, err := f.store.Audit(ctx, resultOf())
	require.NoError(t, err)
	assert.True(t, audit.Passed(), "%v", audit.Problems)
}

// lockable reports whether another session can lock the order's stock rows
// at once: no open transaction holds them.
func lockable(t *testing.T, f *fixture, o orders.Order) bool {
	skus := make([]string, len(o.Lines))
	for i, l := range o.Lines {
		skus[i] = l.SKU
	}
	tx, err := f.db.Begin(t.Context())
	if err != nil {
		return false
	}
	defer func() { _ = tx.Rollback(t.Context()) }()
	_, err = tx.Exec(t.Context(), `SELECT 1 FROM stock WHERE sku = ANY($1) FOR UPDATE NOWAIT`, skus)
	return err == nil
}

// Many workers on overlapping baskets, a hot few SKUs in most of them, and
// random pauses: most orders work a few milliseconds, and one first attempt
// in seven pauses until its lock's lease has run out. Those are rolled back
// and retried under a new lock; the audit, read from the database, finds
// nothing oversold, every accepted order whole, and no row written by a
// stale token.
func TestManyWorkersWithPausesNeverOversell(t *testing.T) {
	const skus = 40
	f := newFixture(t, skus, 12)
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	list, err := orders.Generate(orders.GenConfig{SKUs: skus, Orders: 300, MaxBasket: 8, MaxQty: 3, HotSKUs: 5, HotShare: 0.3, Seed: 3})
	require.NoError(t, err)

	var (
		mu       sync.Mutex
		rng      = rand.New(rand.NewPCG(3, 17))
		attempts = map[string]int{}
	)
	var pauses, lostInPause atomic.Int64
	p := &pgorders.Processor{
		Locker: f.locker, Store: f.store,
		LockOptions: []batchlock.LockOption{batchlock.WithTTL(time.Second)},
		Work: func(ctx context.Context, l *batchlock.Lock, o orders.Order) error {
			mu.Lock()
			attempts[o.ID]++
			pause := attempts[o.ID] == 1 && rng.IntN(7) == 0
			work := time.Duration(rng.IntN(3000)) * time.Microsecond
			mu.Unlock()
			if !pause {
				time.Sleep(work) // the order's own work, not a synchronisation
				return nil
			}
			pauses.Add(1)
			select {
			case <-ctx.Done():
			case <-time.After(guard):
				return errors.New("the lease never ran out")
			}
			if errors.Is(context.Cause(ctx), batchlock.ErrLockLost) {
				lostInPause.Add(1)
			}
			return nil
		},
	}
	res := orders.Run(ctx, p, list, orders.RunConfig{Workers: 12})
	require.Equal(t, len(list), res.Orders)
	require.Zero(t, res.Errors+res.Unknown, "errors: %v, retried: %v", res.FirstErrors, res.FirstRetried)
	require.Positive(t, pauses.Load())
	assert.Equal(t, pauses.Load(), lostInPause.Load(), "every paused holder lost its lock")
	assert.GreaterOrEqual(t, int64(res.Retries), pauses.Load(), "every paused order was tried again")
	assert.Positive(t, res.Accepted)
	assert.Positive(t, res.Rejected, "the stock ran out: the run tested the stock check")

	audit, err := f.store.Audit(ctx, res)
	require.NoError(t, err)
	assert.True(t, audit.Passed(), "audit problems: %v", audit.Problems)
	assert.Zero(t, audit.OversoldUnits)
	assert.Equal(t, audit.AcceptedUnits, audit.Sold, "every accepted order fully applied")
	assert.Equal(t, res.Accepted, f.count(t, "orders"))
}

// The audit is not a formality: it finds a row written by a stale token, an
// order missing a line, and an oversell.
func TestAuditFindsStaleWritesAndOversell(t *testing.T) {
	f := newFixture(t, 2, 5)
	ctx := t.Context()
	write := func(o orders.Order, toks ...int64) {
		tx, err := f.db.Begin(ctx)
		require.NoError(t, err)
		defer func() { _ = tx.Rollback(ctx) }() // the pool's Close waits for its connection
		require.NoError(t, pgorders.WriteOrder(ctx, tx, o, toks))
		require.NoError(t, tx.Commit(ctx))
	}
	a := orders.Order{ID: "a", Lines: []orders.Line{line(0, 4)}}
	b := orders.Order{ID: "b", Lines: []orders.Line{line(0, 3), line(1, 1)}}
	write(a, 7)
	write(b, 7, 2) // the same token as a's on SKU 0: not newer, so stale
	_, err := f.db.Exec(ctx, `DELETE FROM order_lines WHERE order_id = 'b' AND sku = $1`, orders.SKU(1))
	require.NoError(t, err)

	audit, err := f.store.Audit(ctx, resultOf(a, b))
	require.NoError(t, err)
	assert.Equal(t, 1, audit.Counts[pgorders.StaleToken], "%v", audit.Problems)
	assert.Positive(t, audit.Counts[orders.Oversold], "7 units of 5 sold")
	assert.Positive(t, audit.Counts[orders.Mismatch], "order b lacks a line")
	assert.Contains(t, problems(audit), "order b mismatch: 1 of its 2 lines recorded")
}

func problems(a orders.Audit) []string {
	out := make([]string, len(a.Problems))
	for i, p := range a.Problems {
		out[i] = p.String()
	}
	return out
}

// A flash sale under holds of units: orders of one SKU commit side by side
// while its stock lasts, the sold-out ones are rejected at once, nothing is
// oversold, and every capacity ends equal to its row's units.
func TestCountedSaleNeverOversells(t *testing.T) {
	const skus = 20
	f := newFixture(t, skus, 15)
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	res := f.runCounted(ctx, t, orders.GenConfig{SKUs: skus, Orders: 300, MaxBasket: 6, MaxQty: 3, HotSKUs: 4, HotShare: 0.3,
		FlashShare: 0.3, Seed: 4}, orders.RunConfig{Workers: 12})
	assert.Positive(t, res.Accepted)
	assert.Positive(t, res.Rejected, "the flash SKU sold out")

	audit, err := f.store.Audit(ctx, res)
	require.NoError(t, err)
	require.NoError(t, f.store.AuditCapacities(ctx, f.locker, &audit))
	assert.True(t, audit.Passed(), "audit problems: %v", audit.Problems)
	assert.Equal(t, audit.AcceptedUnits, audit.Sold, "every accepted order fully applied")
	assert.Zero(t, f.row(t, orders.SKU(0)).fence, "counted sales fence no row")
}

// Orders holding units of the same few SKUs, their lines in every order,
// sell side by side without one try: their transactions write the rows in
// one order, so none waits for another that waits for it (PostgreSQL's
// "deadlock detected" failed 46 of the demo's 300 counted orders before).
func TestCountedSalesOfTheSameSKUsDoNotDeadlock(t *testing.T) {
	const skus, count = 4, 400
	f := newFixture(t, skus, 100_000)
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	res := f.runCounted(ctx, t, orders.GenConfig{SKUs: skus, Orders: count, MaxBasket: skus, MaxQty: 1, UniformBaskets: true, Seed: 9},
		orders.RunConfig{Workers: 16, Attempts: 1})
	assert.Equal(t, count, res.Accepted)
}

// runCounted sets every capacity from its row, then runs the orders gen
// makes through a counted Processor on f with cfg, and requires every one
// of them done without an error.
func (f *fixture) runCounted(ctx context.Context, t *testing.T, gen orders.GenConfig, cfg orders.RunConfig) orders.Result {
	t.Helper()
	require.NoError(t, f.store.SetCapacities(ctx, f.locker))
	list, err := orders.Generate(gen)
	require.NoError(t, err)
	p := &pgorders.Processor{Locker: f.locker, Store: f.store, Counted: true}
	res := orders.Run(ctx, p, list, cfg)
	require.Equal(t, len(list), res.Orders)
	require.Zero(t, res.Errors+res.Unknown, "errors: %v", res.FirstErrors)
	return res
}

// A counted sale sent again after its commit's outcome was lost (the sale
// committed, its hold let go unsold) is recorded once: the second attempt
// writes nothing, and consumes its units, so the capacity matches the row.
// An order asking for more than a SKU's capacity is rejected without a
// transaction.
func TestCountedSaleSentAgainCountsOnce(t *testing.T) {
	f := newFixture(t, 2, 10)
	ctx := t.Context()
	require.NoError(t, f.store.SetCapacities(ctx, f.locker))
	o := orders.Order{ID: "again", Lines: []orders.Line{line(0, 3), line(1, 2)}}
	tx, err := f.db.Begin(ctx)
	require.NoError(t, err)
	sold, err := pgorders.SellOrder(ctx, tx, o, []int64{1, 1})
	require.NoError(t, err)
	require.True(t, sold)
	require.NoError(t, tx.Commit(ctx))

	p := &pgorders.Processor{Locker: f.locker, Store: f.store, Counted: true}
	out, err := p.Process(ctx, o)
	require.NoError(t, err)
	assert.True(t, out.Accepted)
	assert.Equal(t, int64(7), f.row(t, orders.SKU(0)).units, "sold once")
	assert.Equal(t, int64(8), f.row(t, orders.SKU(1)).units, "sold once")
	assert.Equal(t, 1, f.count(t, "orders"))
	assert.Equal(t, 2, f.count(t, "order_lines"))
	audit, err := f.store.Audit(ctx, resultOf(o))
	require.NoError(t, err)
	require.NoError(t, f.store.AuditCapacities(ctx, f.locker, &audit))
	assert.True(t, audit.Passed(), "audit problems: %v", audit.Problems)

	big := orders.Order{ID: "big", Lines: []orders.Line{line(0, 8)}}
	out, err = p.Process(ctx, big)
	require.NoError(t, err)
	assert.False(t, out.Accepted, "8 of a SKU with 7 left: sold out")
	assert.False(t, out.Locked)
	assert.Equal(t, 1, f.count(t, "orders"))
}
