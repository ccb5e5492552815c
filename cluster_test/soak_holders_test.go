package cluster_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/batchlock/batchlock/batchlock"
	"github.com/batchlock/batchlock/hashtag"
)

// The soak's long holders and its check of failed calls.
//
// Long holders are Clients of their own, never replaced, each keeping many
// renewed locks on keys of its own for the whole run, through every fault:
// a lock reported lost while nothing could have stopped its renewal (no
// master slept, froze, died or lost its role meanwhile) is a healthy lock
// reported lost, a violation. A slot on the move, connections killed or a
// replica in trouble excuse nothing.
//
// A call that failed must leave nothing held past the rollback bound: a
// sample of failed calls is checked once that bound has passed, and a key
// still held by the call's owner is a leftover, unless a fault kept the
// rollback from its master for that long: one that stopped the master, or
// cut the Client's link to it, and lasted to within the rollback bound of
// the check. A key still held longer after the master came back is a
// leftover all the same.

const (
	holderClients = 2
	holderLocks   = 20 // per holder Client
	holderKeys    = 5  // per lock
)

// holderLeases are the leases of the holder Clients' renewed locks.
var holderLeases = []time.Duration{2 * time.Second, 5 * time.Second}

// stopping are the faults that can stop a renewal from landing in time, or
// a rollback from reaching its master: the master sleeps, freezes, dies or
// loses its role.
var stopping = map[string]bool{
	"master DEBUG SLEEP": true,
	"master DEBUG SLEEP past the read timeout during a TryEach": true,
	"master frozen briefly":           true,
	"master frozen until failed over": true,
	"master killed and restarted":     true,
	"failover FORCE":                  true,
	"failover TAKEOVER":               true,
}

// holderLoss is a long holder's lock reported lost.
type holderLoss struct {
	owner string
	keys  []string
	lease time.Duration
	at    time.Time
	err   error
}

// holdersKeys are the keys of holder Client c's lock i: spread over the
// masters, or, for every other lock, in one slot (so that a loss points at
// one master, and a migration of that slot moves the whole lock).
func holdersKeys(c, i int) []string {
	keys := make([]string, holderKeys)
	for k := range keys {
		keys[k] = fmt.Sprintf("holder:%d:%d:%d", c, i, k)
		if i%2 == 0 {
			keys[k] = fmt.Sprintf("{holder:%d:%d}:%d", c, i, k)
		}
	}
	return keys
}

// startHolders starts the long holders; stop ends them (their locks
// unlocked, their Clients closed).
func (s *soak) startHolders() (stop func()) {
	ctx, cancel := context.WithCancel(s.t.Context())
	var wg sync.WaitGroup
	var clients []*batchlock.Client
	for ci := range holderClients {
		lease := holderLeases[ci%len(holderLeases)]
		c, err := batchlock.New(s.rdbs[ci%len(s.rdbs)], batchlock.WithPrefix(s.prefix), batchlock.WithLease(lease))
		if err != nil {
			s.problem("holder Client: %v", err)
			continue
		}
		clients = append(clients, c)
		for i := range holderLocks {
			keys := holdersKeys(ci, i)
			s.holderKeys = append(s.holderKeys, keys...)
			wg.Go(func() { s.holdOn(ctx, c, lease, keys) })
		}
	}
	return func() {
		cancel()
		wg.Wait()
		for _, c := range clients {
			if err := c.Close(); err != nil {
				s.problem("closing a holder Client: %v", err)
			}
		}
	}
}

// holdOn keeps keys locked until ctx ends, taking them again after a loss.
func (s *soak) holdOn(ctx context.Context, c *batchlock.Client, lease time.Duration, keys []string) {
	for ctx.Err() == nil {
		wait, cancel := context.WithTimeout(ctx, 10*time.Second)
		l, err := c.Lock(wait, keys)
		cancel()
		if err != nil {
			// A fault, or the run ending: try again soon.
			select {
			case <-ctx.Done():
			case <-time.After(100 * time.Millisecond):
			}
			continue
		}
		s.count(s.ops, "holder Lock")
		select {
		case <-l.Context().Done():
			s.mu.Lock()
			s.holderLosses = append(s.holderLosses, holderLoss{owner: l.Owner(), keys: keys, lease: lease, at: time.Now(), err: l.Err()})
			s.mu.Unlock()
		case <-ctx.Done():
		}
		unlock, cancelUnlock := context.WithTimeout(context.Background(), 5*time.Second)
		err = l.Unlock(unlock)
		cancelUnlock()
		if err != nil && !errors.Is(err, batchlock.ErrNotHeld) {
			s.problem("holder %s: Unlock: %v", l.Owner(), err)
		}
	}
}

// judgeHolders returns a violation per loss that no stopping fault
// explains (one on a master that served one of its keys, overlapping the
// lease before the loss), nor the wall clock: Redis expires keys by it, and
// a holder renewed every third of its lease keeps at least two thirds of it
// left, so a step forward of a third of the lease within the lease before
// the loss may have ended it (outside the contract, as for overlaps; see
// wallClock).
func (s *soak) judgeHolders() (violations []string, excused int) {
	for _, loss := range s.holderLosses {
		if s.stoppedBetween(stopping, loss.at.Add(-loss.lease-time.Second), loss.at, loss.keys) ||
			s.clock.forwardBetween(loss.at.Add(-loss.lease), loss.at) >= loss.lease/3 {
			excused++
			continue
		}
		violations = append(violations, fmt.Sprintf("holder %s lost its lock at %s with no fault to stop its renewal: %v",
			loss.owner, loss.at.Format("15:04:05.000000"), loss.err))
	}
	return violations, excused
}

func (s *soak) holdersExcused() int {
	_, excused := s.judgeHolders()
	return excused
}

// stoppedBetween reports whether a fault of kinds overlapped [from, to] on
// a master that served one of keys. A master that lost its role stops every
// master: until its replica takes over, the cluster is down (with the
// default cluster-require-full-coverage) and every master refuses calls.
func (s *soak) stoppedBetween(kinds map[string]bool, from, to time.Time, keys []string) bool {
	return s.stoppedUntil(kinds, from, to, from, keys)
}

// stoppedUntil is stoppedBetween for faults that lasted until lasted or
// later.
func (s *soak) stoppedUntil(kinds map[string]bool, from, to, lasted time.Time, keys []string) bool {
	return slices.ContainsFunc(s.faults, func(ev faultEvent) bool {
		if !kinds[ev.kind] || ev.at.After(to) || ev.until.Before(from) || ev.until.Before(lasted) {
			return false
		}
		if ev.slots != nil {
			return true
		}
		return slices.ContainsFunc(keys, func(k string) bool {
			slot := hashtag.Slot(s.prefix + k)
			return slices.ContainsFunc(ev.served, func(r [2]int) bool { return slot >= r[0] && slot <= r[1] })
		})
	})
}

// failedCall is a call that failed, to be checked for keys left held.
type failedCall struct {
	owner   string
	keys    []string
	start   time.Time
	checked time.Time
	held    []string // keys its owner still held once checked
}

// maxChecks bounds the failed calls checked at once.
const maxChecks = 16

// checkRolledBack checks, once the rollback bound has passed, that a call
// that failed (started at start, owner's call on keys) left nothing held.
func (s *soak) checkRolledBack(owner string, keys []string, start time.Time) {
	select {
	case s.checks <- struct{}{}:
	default:
		return // enough in flight: this one is not sampled
	}
	s.locks.Go(func() {
		defer func() { <-s.checks }()
		time.Sleep(rollbackBound + time.Second) // the bound itself is what is checked
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		held, err := s.admin.Inspect(ctx, keys...)
		if err != nil {
			return // a fault under way: nothing to say
		}
		fc := failedCall{owner: owner, keys: keys, start: start, checked: time.Now()}
		for _, h := range held {
			if slices.Contains(h.Holders, owner) {
				fc.held = append(fc.held, h.Key)
			}
		}
		s.mu.Lock()
		s.checked++
		if len(fc.held) > 0 {
			s.failedCalls = append(s.failedCalls, fc)
		}
		s.mu.Unlock()
	})
}

// judgeRollbacks returns a leftover per failed call whose keys stayed held
// with no stopping fault, nor a fault on its Client's link (the long
// holders' Clients do not go through it), to explain it: one that lasted
// to within the rollback bound of the check, so that the rollback, which
// the call began before the check's wait, may have spent its bound in it.
func (s *soak) judgeRollbacks() (leftovers []string, excused int) {
	explains := s.linkFaults()
	for kind := range stopping {
		explains[kind] = true
	}
	for _, fc := range s.failedCalls {
		if s.stoppedUntil(explains, fc.start, fc.checked, fc.checked.Add(-rollbackBound), fc.held) {
			excused++
			continue
		}
		leftovers = append(leftovers, fmt.Sprintf("failed call of %s (started %s) still held %v past the rollback bound",
			fc.owner, fc.start.Format("15:04:05.000000"), fc.held))
	}
	return leftovers, excused
}
