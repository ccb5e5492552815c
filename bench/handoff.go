package bench

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"
)

// HandoffPair is one library in the hand-off workload: a holder and a
// waiter, separate clients as they would be in separate processes.
type HandoffPair struct {
	Name           string
	Holder, Waiter Locker
	// HandedOff, where the library tells it, is when a hand-off last
	// reached the waiter (batchlock's EventHandedOff).
	HandedOff func() time.Time
}

// Hold times are drawn at random in [minHold, maxHold), so that a release
// falls anywhere in a polling waiter's retry cycle.
const (
	minHold = 20 * time.Millisecond
	maxHold = 120 * time.Millisecond
)

// ErrTwoHolders means a waiter obtained a key its holder had not released.
var ErrTwoHolders = errors.New("waiter obtained the key before the holder released it")

// HandoffResult holds the hand-off delays of one library.
type HandoffResult struct {
	Library string
	Samples []time.Duration
	// Phases split the samples of a pair that tells HandedOff.
	Phases []HandoffPhases
}

// HandoffPhases split one hand-off, each phase from the moment the holder
// starts its unlock: Release until the holder's unlock returns, Notice until
// the hand-off reaches the waiter; Resume is the rest, from the notice to
// the waiter's lock call returning.
type HandoffPhases struct{ Release, Notice, Resume time.Duration }

// RunHandoff takes samples hand-offs per library, round-robin between
// libraries (one sample each per round, the order rotating). A sample is the
// delay from the moment the holder starts its unlock to the moment the
// waiter's lock call returns holding the key.
func RunHandoff(ctx context.Context, pairs []HandoffPair, samples int) ([]HandoffResult, error) {
	results := make([]HandoffResult, len(pairs))
	for i, p := range pairs {
		results[i] = HandoffResult{Library: p.Name, Samples: make([]time.Duration, 0, samples)}
	}
	for round := range samples {
		for j := range pairs {
			i := (j + round) % len(pairs)
			key := fmt.Sprintf("bench:handoff:%s:%d", pairs[i].Name, round)
			d, phases, err := handoff(ctx, pairs[i], key)
			if err != nil {
				return nil, fmt.Errorf("hand-off %s: %w", pairs[i].Name, err)
			}
			results[i].Samples = append(results[i].Samples, d)
			if phases.Notice > 0 {
				results[i].Phases = append(results[i].Phases, phases)
			}
		}
	}
	return results, nil
}

type waited struct {
	at   time.Time
	held Held
	err  error
}

func handoff(ctx context.Context, p HandoffPair, key string) (time.Duration, HandoffPhases, error) {
	keys := []string{key}
	h, err := p.Holder.Lock(ctx, keys)
	if err != nil {
		return 0, HandoffPhases{}, err
	}
	wctx, cancel := context.WithTimeout(ctx, TTL)
	defer cancel()
	ch := make(chan waited, 1)
	go func() {
		held, err := p.Waiter.Lock(wctx, keys)
		ch <- waited{time.Now(), held, err}
	}()

	hold := minHold + rand.N(maxHold-minHold)
	var w waited
	early := false
	select {
	case w = <-ch: // while the holder still holds the key
		early = true
	case <-time.After(hold):
	}
	released := time.Now()
	unlockErr := h.Unlock(ctx)
	unlocked := time.Now()
	if !early {
		w = <-ch
	}
	if w.err != nil {
		return 0, HandoffPhases{}, errors.Join(w.err, unlockErr)
	}
	err = errors.Join(unlockErr, w.held.Unlock(ctx))
	if early || w.at.Before(released) {
		err = errors.Join(ErrTwoHolders, err)
	}
	var phases HandoffPhases
	if p.HandedOff != nil {
		if at := p.HandedOff(); at.After(released) && !at.After(w.at) {
			phases = HandoffPhases{Release: unlocked.Sub(released), Notice: at.Sub(released), Resume: w.at.Sub(at)}
		}
	}
	return w.at.Sub(released), phases, err
}
