package cluster_test

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"sync"
	"time"

	"github.com/batchlock/batchlock/batchlock"
)

// The soak's counted keys: soakCountedWorkers take units of one or two of
// them with Lock or TryLock, on the soak's Clients and under its faults,
// work a moment and let go with Unlock, or sell the units with Consume one
// time in three; a restocker tops up a capacity that ran low. The judge
// (judgeCounted) then checks, per key, that the units of the holds whose
// holders could count on them never exceeded what the capacity could have
// been at that moment, and that the capacity left is what the sales and
// restocks that returned, and those whose outcome is unknown, make.
const (
	soakCountedWorkers = 3
	soakCapacity       = 12 // each counted key's capacity at the start
)

// soakCountedKeys are the counted keys, spread over the masters.
var soakCountedKeys = []string{"units-a", "units-b", "units-c"}

// soakCounted is what the counted workers did, for the judge.
type soakCounted struct {
	mu      sync.Mutex
	holds   []countedHold
	changes []capacityChange
}

// countedHold is units of key held from to, as far as their holder could
// count on them (its release, or the end of its validity).
type countedHold struct {
	key      string
	units    int64
	from, to time.Time
	replicas bool
}

// capacityChange is a sale (delta < 0, at when it returned) or a restock
// (delta > 0, at when it began) of key; known says it went through, else
// its outcome is unknown; replicas, that a sale was of a lock taken
// WithReplicas (every replica), which a failover keeps.
type capacityChange struct {
	key      string
	delta    int64
	at       time.Time
	known    bool
	replicas bool
}

// setUpCounted gives every counted key its capacity.
func (s *soak) setUpCounted() {
	for _, k := range soakCountedKeys {
		if err := s.admin.SetCapacity(ctxTimeout(s.t, 30*time.Second), k, soakCapacity); err != nil {
			s.t.Fatalf("capacity of %s: %v", k, err)
		}
	}
}

// countedWorker takes units until the run ends.
func (s *soak) countedWorker(i int) {
	rng := rand.New(rand.NewPCG(s.seed, uint64(2000+i)))
	for s.running() {
		sc := s.client(rng)
		units := map[string]int64{}
		for range 1 + rng.IntN(2) {
			units[soakCountedKeys[rng.IntN(len(soakCountedKeys))]] = 1 + rng.Int64N(5)
		}
		opts, lease, replicas := s.options(rng, sc)
		opts = append(opts, batchlock.WithUnits(units), batchlock.WithOwner(fmt.Sprintf("counted-%016x", rng.Uint64())))
		ctx, cancel := s.callContext(rng)
		called := time.Now()
		kind := "Lock in units"
		var l *batchlock.Lock
		var err error
		if rng.IntN(3) == 0 {
			kind = "TryLock in units"
			l, err = sc.c.TryLock(ctx, nil, opts...)
		} else {
			l, err = sc.c.Lock(ctx, nil, opts...)
		}
		from := time.Now()
		cancel()
		s.count(s.ops, kind)
		s.outcome(kind, err)
		if err != nil {
			continue
		}
		lock := s.recordUnits(l, units, replicas, called, from)
		doneAt := make(chan time.Time, 1)
		s.locks.Go(func() {
			<-l.Context().Done()
			doneAt <- time.Now()
		})
		time.Sleep(time.Duration(rng.IntN(30)) * time.Millisecond) // the holder's work
		to := time.Now()
		if valid := l.ValidUntil(); valid.Before(to) {
			to = valid
		}
		if l.Err() != nil {
			// Ended before its holder let go (its Client closed, or the
			// lock lost): released in Redis from then on.
			if at := <-doneAt; at.Before(to) {
				to = at
			}
		}
		rctx, rcancel := s.releaseContext(rng)
		consume := rng.IntN(3) == 0
		if consume {
			err = l.Consume(rctx)
			s.count(s.ops, "Consume")
			s.outcome("Consume", err)
		} else {
			err = l.Unlock(rctx)
			s.count(s.ops, "Unlock of units")
			s.outcome("Unlock of units", err)
		}
		rcancel()
		returned := time.Now()
		ended := to
		if ended.Before(from) {
			ended = from
		}
		s.recordLetGo(l, lock, consume, err, ended, returned, lease)
		s.counted.mu.Lock()
		for k, n := range units {
			if to.After(from) {
				s.counted.holds = append(s.counted.holds, countedHold{key: k, units: n, from: from, to: to, replicas: replicas})
			}
			if consume {
				s.counted.changes = append(s.counted.changes, capacityChange{key: k, delta: -n, at: returned, known: err == nil, replicas: replicas})
			}
		}
		s.counted.mu.Unlock()
	}
}

// recordUnits adds to the history the take of units by l, called at
// called and returned at returned, and returns its lock's number there.
func (s *soak) recordUnits(l *batchlock.Lock, units map[string]int64, replicas bool, called, returned time.Time) int {
	op := historyOp{Kind: opUnits, Owner: l.Owner(), Keys: slices.Sorted(maps.Keys(units)), Replicas: replicas,
		Call: s.hist.at(called), Return: s.hist.at(returned)}
	for _, k := range op.Keys {
		op.Tokens, op.Units = append(op.Tokens, l.Token(k)), append(op.Units, units[k])
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.hist.Ops = append(s.hist.Ops, op)
	id := len(s.hist.Ops)
	s.hist.Ops[id-1].Lock, s.hist.Ops[id-1].Client = id, id
	return id
}

// recordLetGo adds to the history the end of lock (its number there) l:
// from to, when its holder stopped counting on it (not before its take
// returned), to returned, when its
// Unlock or Consume returned err; a call that failed may have left its
// keys to their lease. A Consume that returned ErrNotHeld sold nothing.
func (s *soak) recordLetGo(l *batchlock.Lock, lock int, consume bool, err error, to, returned time.Time, lease time.Duration) {
	op := historyOp{Kind: opRelease, Lock: lock, Owner: l.Owner(), Keys: l.Keys(), Call: s.hist.at(to), Client: lock}
	if consume && !errors.Is(err, batchlock.ErrNotHeld) {
		op.Kind, op.Known = opConsume, err == nil
	}
	if err != nil {
		returned = returned.Add(lease + 3*time.Second)
	}
	op.Return = s.hist.at(returned)
	s.mu.Lock()
	s.hist.Ops = append(s.hist.Ops, op)
	s.mu.Unlock()
}

// restock tops up, until the run ends, each counted key whose capacity
// fell below half of soakCapacity.
func (s *soak) restock() {
	for s.running() {
		time.Sleep(50 * time.Millisecond) // a restocker's rhythm, not a wait for anything
		ctx, cancel := context.WithTimeout(s.t.Context(), 2*time.Second)
		found, err := s.admin.Inspect(ctx, soakCountedKeys...)
		if err != nil {
			cancel()
			continue
		}
		for _, h := range found {
			if h.Capacity >= soakCapacity/2 {
				continue
			}
			began := time.Now()
			_, err := s.admin.AddCapacity(ctx, h.Key, soakCapacity/2)
			s.count(s.ops, "AddCapacity")
			s.outcome("AddCapacity", err)
			returned := time.Now()
			if err != nil {
				returned = returned.Add(time.Minute) // it may yet be made, late (the change's mark lives a minute)
			}
			s.mu.Lock()
			s.hist.Ops = append(s.hist.Ops, historyOp{Kind: opRestock, Keys: []string{h.Key}, Delta: soakCapacity / 2, Known: err == nil,
				Call: s.hist.at(began), Return: s.hist.at(returned), Client: -1})
			s.mu.Unlock()
			s.counted.mu.Lock()
			s.counted.changes = append(s.counted.changes, capacityChange{key: h.Key, delta: soakCapacity / 2, at: began, known: err == nil})
			s.counted.mu.Unlock()
		}
		cancel()
	}
}

// judgeCounted checks the counted keys once the run is over (see
// soakCounted), and returns the violations and how many overlaps it
// excused (see countedOverlaps).
func (s *soak) judgeCounted(start time.Time) (violations []string, excused int) {
	s.counted.mu.Lock()
	defer s.counted.mu.Unlock()
	for _, key := range soakCountedKeys {
		v, e := s.countedOverlaps(key)
		violations, excused = append(violations, v...), excused+e
		violations = append(violations, s.judgeCapacity(key, start)...)
	}
	return violations, excused
}

// countedOverlaps checks that the units of key held, at each moment a hold
// began, fit what its capacity could have been then: every restock begun
// by then counted, only the sales that had returned taken away, but those
// that a failover of the key's master since may have undone (a Consume
// of a lock taken without WithReplicas waits for no replica). It excuses an excess when one of the
// holds was of a lock taken without WithReplicas across a failover of the
// key's master, or the wall clock stepped forward while it was held.
// Called with s.counted.mu held.
func (s *soak) countedOverlaps(key string) (violations []string, excused int) {
	var holds []countedHold
	for _, h := range s.counted.holds {
		if h.key == key {
			holds = append(holds, h)
		}
	}
	slices.SortFunc(holds, func(a, b countedHold) int { return a.from.Compare(b.from) })
	for i, h := range holds {
		t := h.from
		most := int64(soakCapacity)
		for _, c := range s.counted.changes {
			if c.key == key && !c.at.After(t) && (c.delta > 0 || c.known && !s.lostToFailover(c.replicas, c.at, t, key)) {
				most += c.delta
			}
		}
		held, forgiven := int64(0), false
		var during []string // the holds at t, for the record
		for _, o := range holds[:i+1] {
			if o.to.After(t) {
				held += o.units
				forgiven = forgiven || s.lostToFailover(o.replicas, o.from, t, key) || s.clock.forwardBetween(o.from, t) > 0
				during = append(during, fmt.Sprintf("%d from %s to %s", o.units, o.from.Format("05.000000"), o.to.Format("05.000000")))
			}
		}
		switch {
		case held <= most:
		case forgiven:
			excused++
		default:
			var recent []string
			for _, c := range s.counted.changes {
				if c.key == key && !c.at.After(t) && c.at.After(t.Add(-2*time.Second)) {
					recent = append(recent, fmt.Sprintf("%+d at %s (known %v)", c.delta, c.at.Format("05.000000"), c.known))
				}
			}
			violations = append(violations, fmt.Sprintf("counted key %s: %d units held at %s, its capacity at most %d; holds %v; changes in the 2 s before %v",
				key, held, t.Format("15:04:05.000000"), most, during, recent))
		}
	}
	return violations, excused
}

// judgeCapacity checks key's capacity at the end against its sales and
// restocks: those that went through, and at most all those of unknown
// outcome. A failover of its master during the run may have lost any of
// them.
func (s *soak) judgeCapacity(key string, start time.Time) []string {
	found, err := s.admin.Inspect(ctxTimeout(s.t, 30*time.Second), key)
	if err != nil {
		return []string{fmt.Sprintf("counted key %s: reading its capacity: %v", key, err)}
	}
	low, high := int64(soakCapacity), int64(soakCapacity)
	for _, c := range s.counted.changes {
		switch {
		case c.key != key:
		case c.known:
			low, high = low+c.delta, high+c.delta
		case c.delta < 0:
			low += c.delta
		default:
			high += c.delta
		}
	}
	if got := found[0].Capacity; (got < low || got > high) && !s.lostToFailover(false, start, time.Now(), key) {
		return []string{fmt.Sprintf("counted key %s: capacity %d at the end, its sales and restocks make %d to %d", key, got, low, high)}
	}
	return nil
}
