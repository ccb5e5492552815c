package orders

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	mrand "math/rand/v2"
	"time"

	"github.com/batchlock/batchlock/batchlock"
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
	var out Outcome
	levels, err := s.read(ctx, o)
	if err != nil {
		return out, err
	}
	if tokens == nil {
		tokens = make([]int64, len(o.Lines))
	}
	for i, lv := range levels {
		if tokens[i] > 0 && tokens[i] < lv.fence {
			// Nothing written yet: the order can be retried under a new lock.
			return out, fmt.Errorf("%w: %s was written with token %d, this lock has %d",
				ErrFenced, o.Lines[i].SKU, lv.fence, tokens[i])
		}
	}
	if !inStock(o, levels) {
		return out, nil
	}
	if err := sleep(ctx, think); err != nil {
		return out, err
	}

	out.Written = true
	pending := make([]int, len(o.Lines))
	for i := range pending {
		pending[i] = i
	}
	attempts := 1
	if locked {
		attempts = writeAttempts
	}
	for attempt := 0; ; attempt++ {
		errs := s.apply(ctx, o, pending, tokens)
		var again []int
		var last error
		for j, err := range errs {
			if err == nil {
				continue
			}
			if errors.Is(err, ErrFenced) {
				return out, err
			}
			again, last = append(again, pending[j]), err
		}
		if len(again) == 0 {
			out.Accepted = true
			return out, nil
		}
		if attempt+1 >= attempts || ctx.Err() != nil {
			return out, fmt.Errorf("writing %d of %d lines: %w", len(again), len(o.Lines), errors.Join(last, context.Cause(ctx)))
		}
		if err := pause(ctx, attempt); err != nil {
			return out, fmt.Errorf("writing %d of %d lines: %w", len(again), len(o.Lines), err)
		}
		pending = again
	}
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
	d := 10 * time.Millisecond << min(attempt, 6)
	d = min(d, 500*time.Millisecond)
	return sleep(ctx, d/2+mrand.N(d/2+1))
}

// sleep waits d, or until ctx is done, and then returns its cause.
func sleep(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return context.Cause(ctx)
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return context.Cause(ctx)
	}
}
