package orders

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"time"

	"github.com/batchlock/batchlock/batchlock"
	"github.com/batchlock/batchlock/internal/backoff"
)

// Processor takes one order: it checks stock for every line, then either
// decrements every line or rejects the order.
type Processor interface {
	Process(ctx context.Context, o Order) (Outcome, error)
}

// Outcome is what became of one order.
type Outcome struct {
	// Accepted: every line was applied. Without an error and not accepted,
	// the order was rejected, some line being short of stock, and nothing
	// was written.
	Accepted bool
	// LockWait is the time from asking for the basket's lock to holding it.
	LockWait time.Duration
	// Locked: LockWait was measured (the order was processed under a lock).
	Locked bool
	// Written, with an error: some lines may have been applied, so the order
	// must not be tried again and the audit may find it half-applied.
	// Without it, an error left stock untouched and a retry is safe.
	Written bool
}

// Locked processes orders under a batchlock lock on their whole basket.
type Locked struct {
	Locker *batchlock.Client
	Stock  *Stock
	// Think is a pause between reading stock and writing it, standing for
	// the work a real processor does there (pricing, payment).
	Think time.Duration
	// ExclusivePromos locks an order's promotions exclusively, as a lock
	// without shared keys has to. By default they are locked shared
	// (batchlock.WithShared), in the same call as the stock: orders only
	// read them, so orders applying one promotion run side by side.
	ExclusivePromos bool
}

// writeAttempts bounds the retries of an order's writes while its lock is
// held: enough to ride out a failover within the lock's lease.
const writeAttempts = 30

// Process implements Processor. The order's lock is owned by "order-"+ID
// and a random suffix per attempt: a retry must not join the holds that a
// failed attempt's rollback could not release (a master failing over), or
// it would keep them alive and block other orders.
//
// The work runs inside Do, in the lock's context: it stops the moment the
// lock is lost, since past that point another order may be writing the same
// SKUs. Once the work is done, the order's outcome is the work's: a loss, or
// an unlock that fails, afterwards changes nothing it did (the keys are left
// to their lease).
func (p *Locked) Process(ctx context.Context, o Order) (Outcome, error) {
	keys := p.Stock.Keys(o)
	opts := []batchlock.LockOption{batchlock.WithShared(p.Stock.PromoKeys(o)...)}
	if p.ExclusivePromos {
		// The stock keys stay first: the lines' tokens are read by index.
		keys = append(keys, p.Stock.PromoKeys(o)...)
		opts = nil
	}
	asked := time.Now()
	suffix := make([]byte, 4)
	_, _ = rand.Read(suffix)
	var out Outcome
	var workErr error
	ran := false
	err := p.Locker.Do(ctx, keys, func(ctx context.Context) error {
		ran = true
		wait := time.Since(asked)
		l, _ := batchlock.LockFromContext(ctx)
		tokens := make([]int64, len(o.Lines))
		for i := range tokens {
			tokens[i] = l.Token(keys[i])
		}
		out, workErr = p.Stock.Fulfil(ctx, o, tokens, p.Think, true)
		out.LockWait, out.Locked = wait, true
		return workErr
	}, append(opts, batchlock.WithOwner("order-"+o.ID+"/"+hex.EncodeToString(suffix)))...)
	if !ran {
		return Outcome{}, fmt.Errorf("locking %d SKUs and %d promotions: %w", len(o.Lines), len(o.Promos), err)
	}
	return out, workErr
}

// Counted processes orders under holds of units: each line takes its
// quantity of its SKU's stock key, counted (batchlock.WithUnits), whose
// capacity is the SKU's units (SetCapacities), so that orders of one SKU
// run side by side while its stock lasts; an order asking more units than
// a SKU has left is rejected at once (batchlock.ErrOverCapacity). An order
// whose lines were written consumes its units (Lock.Consume), keeping each
// capacity equal to its SKU's units; the writes are recorded per order
// (Stock.WriteConcurrently), which the Stock must be told.
type Counted struct {
	Locker *batchlock.Client
	Stock  *Stock
	Think  time.Duration // as in Locked
}

// Process implements Processor.
func (p *Counted) Process(ctx context.Context, o Order) (Outcome, error) {
	asked := time.Now()
	l, err := p.Locker.Lock(ctx, nil, batchlock.WithUnits(LineUnits(o, p.Stock.Key)), batchlock.WithShared(p.Stock.PromoKeys(o)...))
	switch {
	case errors.Is(err, batchlock.ErrOverCapacity):
		return Outcome{}, nil // sold out: rejected, nothing written
	case err != nil:
		return Outcome{}, fmt.Errorf("locking units of %d SKUs: %w", len(o.Lines), err)
	}
	wait := time.Since(asked)
	// No tokens: the holders of a SKU write it at once, each within its
	// own lease, in the units it holds.
	out, err := p.Stock.Fulfil(l.Context(), o, nil, p.Think, true)
	out.LockWait, out.Locked = wait, true
	if out.Accepted && err == nil {
		if cerr := l.Consume(ctx); cerr != nil {
			return out, fmt.Errorf("consuming the units of %d SKUs: %w", len(o.Lines), cerr)
		}
		return out, nil
	}
	_ = l.Unlock(ctx)
	return out, err
}

// Unlocked processes orders with the same read, check and write as Locked,
// but no lock: orders that read a SKU before either writes it both take
// the same units. This is the oversell batchlock prevents. Writes are not
// retried.
type Unlocked struct {
	Stock *Stock
	Think time.Duration // as in Locked
}

// Process implements Processor.
func (p *Unlocked) Process(ctx context.Context, o Order) (Outcome, error) {
	return p.Stock.Fulfil(ctx, o, nil, p.Think, false)
}

// Fulfil is an order's work once its basket is locked (or not): it reads
// the stock of every line in one pipeline, rejects the order when a line
// is short, pauses for think, and applies every line. tokens, when not
// nil, are the lines' fencing tokens: a SKU already written with a newer
// one refuses the order (ErrFenced). locked says that no other order
// writes these SKUs meanwhile, which makes failed writes safe to retry;
// without it they are not retried, since a retry cannot tell whether the
// first write was applied. Processors on other lock libraries call it
// between their lock and unlock.
func (s *Stock) Fulfil(ctx context.Context, o Order, tokens []int64, think time.Duration, locked bool) (Outcome, error) {
	r := s.FulfilAll(ctx, []Order{o}, [][]int64{tokens}, think, locked)[0]
	return r.Outcome, r.Err
}

// Fulfilled is what FulfilAll did to one order.
type Fulfilled struct {
	Outcome
	Err error
}

// FulfilAll is Fulfil for several orders at once, whose baskets share no
// SKU they write (a batch admitted by TryEach): the stock of every line of
// every order is read in one pipeline per master, the orders short of stock
// are rejected, the others, after one pause for think, have every line
// applied in one pipeline per master (failed lines retried together when
// locked). tokens[i] are order i's lines' tokens, or nil.
func (s *Stock) FulfilAll(ctx context.Context, orders []Order, tokens [][]int64, think time.Duration, locked bool) []Fulfilled {
	out := make([]Fulfilled, len(orders))
	levels, errs := s.readAll(ctx, orders)
	var accepted []int
	for i, o := range orders {
		if errs[i] != nil {
			out[i].Err = errs[i]
			continue
		}
		if tokens[i] == nil {
			tokens[i] = make([]int64, len(o.Lines))
		}
		if err := fenced(o, levels[i], tokens[i]); err != nil {
			// Nothing written yet: the order can be retried under a new lock.
			out[i].Err = err
			continue
		}
		if inStock(o, levels[i]) {
			accepted = append(accepted, i)
		}
	}
	if len(accepted) == 0 {
		return out
	}
	if err := backoff.Sleep(ctx, think); err != nil {
		for _, i := range accepted {
			out[i].Err = err
		}
		return out
	}

	// pending: per accepted order still writing, the lines not applied yet.
	pending := make(map[int][]int, len(accepted))
	for _, i := range accepted {
		out[i].Written = true
		lines := make([]int, len(orders[i].Lines))
		for j := range lines {
			lines[j] = j
		}
		pending[i] = lines
	}
	attempts := 1
	if locked {
		attempts = writeAttempts
	}
	for attempt := 0; len(pending) > 0; attempt++ {
		results := s.apply(ctx, orders, pending, tokens)
		last := map[int]error{}
		for i, errs := range results {
			var again []int
			for j, err := range errs {
				switch {
				case err == nil:
				case errors.Is(err, ErrFenced):
					out[i].Err = err
					delete(pending, i)
				default:
					again, last[i] = append(again, pending[i][j]), err
				}
				if out[i].Err != nil {
					break
				}
			}
			switch {
			case out[i].Err != nil:
			case len(again) == 0:
				out[i].Accepted = true
				delete(pending, i)
			default:
				pending[i] = again
			}
		}
		if len(pending) == 0 {
			break
		}
		stop := attempt+1 >= attempts || ctx.Err() != nil
		var err error
		if !stop {
			err = pause(ctx, attempt)
		}
		if stop || err != nil {
			for i, lines := range pending {
				out[i].Err = fmt.Errorf("writing %d of %d lines: %w", len(lines), len(orders[i].Lines),
					errors.Join(last[i], err, context.Cause(ctx)))
			}
			break
		}
	}
	return out
}

// FulfilTaken fulfils, as FulfilAll does, the orders of batch at taken
// (indices, ascending), whose baskets a processor locked in wait, line j of
// order i fenced by token(i, j); it returns per order of batch what became
// of it, those taken marked Locked with that LockWait.
func (s *Stock) FulfilTaken(ctx context.Context, batch []Order, taken []int, wait time.Duration, token func(i, line int) int64, think time.Duration) []Fulfilled {
	orders := make([]Order, len(taken))
	tokens := make([][]int64, len(taken))
	for n, i := range taken {
		orders[n] = batch[i]
		tokens[n] = make([]int64, len(batch[i].Lines))
		for j := range tokens[n] {
			tokens[n][j] = token(i, j)
		}
	}
	done := s.FulfilAll(ctx, orders, tokens, think, true)
	out := make([]Fulfilled, len(batch))
	for n, i := range taken {
		out[i] = done[n]
		out[i].Locked, out[i].LockWait = true, wait
	}
	return out
}

// fenced refuses an order whose lines' tokens are older than one that
// already wrote their SKU: its lock was lost meanwhile.
func fenced(o Order, levels []level, tokens []int64) error {
	for i, lv := range levels {
		if tokens[i] > 0 && tokens[i] < lv.fence {
			return fmt.Errorf("%w: %s was written with token %d, this lock has %d",
				ErrFenced, o.Lines[i].SKU, lv.fence, tokens[i])
		}
	}
	return nil
}

func inStock(o Order, levels []level) bool {
	for i, l := range o.Lines {
		if levels[i].units < l.Qty {
			return false
		}
	}
	return true
}

// pause waits before retry number attempt+1: exponential from 10ms, capped
// at 500ms, drawn at random from the upper half of that, so that orders that
// failed together (a failover) do not retry together.
func pause(ctx context.Context, attempt int) error {
	return backoff.Sleep(ctx, backoff.Jittered(attempt, 10*time.Millisecond, 500*time.Millisecond))
}
