package batchlock

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/batchlock/batchlock/internal/backoff"
	"github.com/batchlock/batchlock/internal/gates"
)

// A lock's gates (see internal/gates) are kept in step with its keys in Redis: a
// call first takes the gate of each of its keys in the global order, but
// once Redis refuses it at a key, it gives back the gates of every key after
// that one while it waits, and takes them again, in order, before the
// attempt that asks for them. So at both levels a waiting call holds only
// keys before the one it waits for (and that key's gate, while it waits for
// the key in Redis).

// gatedKey is a key whose gate a lock holds, and how.
type gatedKey struct {
	key    string
	shared bool
}

// enterGates takes, for l, the gate of each of its keys in the global
// order, waiting (Lock) while another lock of the Client holds one, or
// refusing at once (TryLock) with every key another one holds. On any
// error it holds no gate.
func (a *acquisition) enterGates(ctx context.Context) error {
	c, l, wait := a.c, a.l, a.wait
	var busy []string
	for _, g := range l.groups {
		for i, key := range g.keys {
			shared := g.shared(i)
			switch c.gates.Enter(ctx, key, l.owner, shared, wait, func() { a.waitingAtGate(key) }) {
			case gates.Pass:
				l.addGated(key, shared)
			case gates.Upgrade:
				l.leaveGates()
				return c.upgradeAtGate(key)
			case gates.Wait:
				if wait {
					l.leaveGates()
					return c.gateWaitEnded(ctx, key)
				}
				busy = append(busy, key)
			}
		}
	}
	if len(busy) > 0 {
		l.leaveGates()
		conflict := &ConflictError{Keys: c.names.UserKeys(busy), Holders: c.gateHolders(busy)}
		l.emit(Event{Kind: EventConflict, Conflict: conflict.Keys})
		return conflict
	}
	return nil
}

// regate takes again the gates that l gave back after a refusal (see
// leaveGatesAfter), for the attempt at l.groups[a.held:end], in order and
// without waiting. It returns where the attempt must end: at the first key
// whose gate another lock of the Client holds (its group split there), so
// that the keys before it are taken in Redis first. When that key is the
// first of the attempt, the call waits at its gate, the keys it holds
// renewed meanwhile, and goes on from there. On an error it has rolled back
// what l held (the caller's gates go when the call fails).
func (a *acquisition) regate(ctx context.Context, end int) (int, error) {
	c, l := a.c, a.l
	gi, ki := l.locate(len(l.gated))
	for gi < end {
		key, shared := l.groups[gi].keys[ki], l.groups[gi].shared(ki)
		v, w := c.gates.Ask(key, l.owner, shared, gi == a.held && ki == 0)
		switch {
		case v == gates.Pass:
			l.addGated(key, shared)
		case v == gates.Upgrade:
			a.rollback(a.reached())
			return 0, c.upgradeAtGate(key)
		case w == nil && ki > 0:
			l.split(gi, ki)
			return gi + 1, nil
		case w == nil:
			return gi, nil
		default:
			if err := a.waitAtGate(ctx, w); err != nil {
				a.rollback(l.groups[:a.held])
				return 0, err
			}
			l.addGated(key, shared)
		}
		if ki++; ki == len(l.groups[gi].keys) {
			gi, ki = gi+1, 0
		}
	}
	return end, nil
}

// waitAtGate waits for w, l's place at a gate, to be let in, while the
// groups l holds in Redis are renewed a third of a lease after their oldest
// lease started. It holds no place when it returns an error.
func (a *acquisition) waitAtGate(ctx context.Context, w *gates.Waiter) error {
	c, l := a.c, a.l
	w.Notify(func() { a.waitingAtGate(w.Key()) })
	retries := 0
	retryAt := time.Time{}
	for {
		// No call waits here before it holds a key in Redis (enterGates
		// waits for every gate first), but without one there is nothing
		// to renew.
		next := time.Now().Add(l.lease)
		if a.held > 0 {
			next = a.renewAt()
			if next.Before(retryAt) {
				next = retryAt
			}
		}
		t := time.NewTimer(time.Until(next))
		select {
		case <-w.Granted():
			t.Stop()
			if w.Verdict() == gates.Upgrade {
				return c.upgradeAtGate(w.Key())
			}
			return nil
		case <-ctx.Done():
			t.Stop()
			w.Abandon()
			return c.gateWaitEnded(ctx, w.Key())
		case <-t.C:
		}
		if a.held == 0 {
			continue
		}
		renewed, err := a.renewHeld(ctx)
		if err != nil {
			w.Abandon()
			return fmt.Errorf("%w: waiting for %q, held by another lock of this Client: %w", ErrNotObtained, c.names.UserKey(w.Key()), inner(err))
		}
		if renewed {
			retries, retryAt = 0, time.Time{}
			continue
		}
		retries++
		retryAt = time.Now().Add(backoff.Jittered(retries, 10*time.Millisecond, c.cfg.pollMax))
	}
}

// waitingAtGate counts and tells that l waits at the gate of key, which
// WithWait's error names once the wait runs out.
func (a *acquisition) waitingAtGate(key string) {
	c, l := a.c, a.l
	c.localWaits.Add(1)
	a.blockers = []string{c.names.UserKey(key)}
	a.blockerHolders = c.gateHolders([]string{key})
	l.emit(Event{Kind: EventConflict, Conflict: a.blockers})
}

// gateWaitEnded is the error of a wait at the gate of key that ctx ended.
func (c *Client) gateWaitEnded(ctx context.Context, key string) error {
	return fmt.Errorf("%w: waiting for %q, held by another lock of this Client: %w", ErrNotObtained, c.names.UserKey(key), inner(context.Cause(ctx)))
}

// upgradeAtGate is the error of an owner asking exclusively for key, which
// it holds shared.
func (c *Client) upgradeAtGate(key string) error {
	return fmt.Errorf("%w: %w: %q", ErrNotObtained, inner(ErrUpgrade), c.names.UserKey(key))
}

// gateHolders returns, by key without the prefix, the owners holding the
// gates of lockKeys now, sorted.
func (c *Client) gateHolders(lockKeys []string) map[string][]string {
	out := make(map[string][]string, len(lockKeys))
	for _, key := range lockKeys {
		if owners := c.gates.Holders(key); len(owners) > 0 {
			out[c.names.UserKey(key)] = owners
		}
	}
	return out
}

// addGated records that l holds the gate of key.
func (l *Lock) addGated(key string, shared bool) {
	l.mu.Lock()
	l.gated = append(l.gated, gatedKey{key, shared})
	l.mu.Unlock()
}

// leaveGatesAfter gives back the gates l holds of its keys after the first
// n, in the global order.
func (l *Lock) leaveGatesAfter(n int) {
	l.mu.Lock()
	var after []gatedKey
	if n < len(l.gated) {
		after = slices.Clone(l.gated[n:])
		l.gated = l.gated[:n]
	}
	l.mu.Unlock()
	for i := len(after) - 1; i >= 0; i-- {
		l.c.gates.Leave(after[i].key, l.owner, after[i].shared)
	}
}

// leaveGates gives back the gates l holds; once done, it does nothing.
func (l *Lock) leaveGates() {
	l.mu.Lock()
	gated := l.gated
	l.gated = nil
	l.mu.Unlock()
	for _, g := range gated {
		l.c.gates.Leave(g.key, l.owner, g.shared)
	}
}

// locate returns the group and the index in it of l's key at position n in
// the global order (len(l.groups) and 0 past the last).
func (l *Lock) locate(n int) (gi, ki int) {
	for gi = range l.groups {
		if n < len(l.groups[gi].keys) {
			return gi, n
		}
		n -= len(l.groups[gi].keys)
	}
	return len(l.groups), 0
}

// keysBefore counts the keys of l's groups before group gi.
func (l *Lock) keysBefore(gi int) int {
	n := 0
	for _, g := range l.groups[:gi] {
		n += len(g.keys)
	}
	return n
}
