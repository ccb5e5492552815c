package batchlock

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/batchlock/batchlock/internal/gates"
	"github.com/batchlock/batchlock/internal/lease"
	"github.com/batchlock/batchlock/internal/lifetime"
	"github.com/batchlock/batchlock/internal/owner"
	"github.com/batchlock/batchlock/internal/routing"
	"github.com/batchlock/batchlock/internal/wire"
)

// Lock is a batch of keys held by one owner, safe for concurrent use. A nil
// *Lock, what a failed call returns, holds nothing: Unlock and Extend return
// ErrNotHeld, Err returns it, Context is done, and the rest return zero
// values, so that a deferred Unlock before the error check does not panic.
type Lock struct {
	c     *Client
	owner string
	hold  string // this handle's hold in the values of its keys: "h:" + random id
	// keys are the keys without the prefix, sorted once asked for (see
	// sortedKeys), in the groups' order until then.
	keys     []string
	sortKeys sync.Once
	groups   []group
	// units are the units of each lock key taken in units (WithUnits).
	units map[string]int64
	lease time.Duration
	renew bool // kept alive by the watchdog, rather than a fixed TTL
	ack   routing.Ack

	// marks are the cancel marks of the hold in the slots where a call of
	// the acquire may have run unseen: set when the lock ends, so that
	// such a call, still in flight, cannot take anything after. Written
	// by the acquiring call only, before the lock is handed out.
	marks []string

	unlocking sync.Mutex // one release of what it holds at a time
	released  bool       // a release of all it held went through; guarded by unlocking
	consumed  bool       // that release was a Consume; guarded by unlocking
	// rest is what a release that failed in part left to release; guarded
	// by unlocking.
	rest *releasing

	life *lifetime.Lifetime

	mu sync.Mutex
	// gated are the keys whose gates the lock holds (see internal/gates),
	// given back when it ends.
	gated      []gatedKey
	tokens     map[string]int64 // by lock key
	valid      validity
	acquiredAt time.Time
	expiry     *time.Timer // fires when the lock must count as lost, unless renewed
	maxHold    *time.Timer // fires when the lock has been held for WithMaxHold
}

// newLock is the lock a call on ctx with lc takes of groups: its owner
// (ownerFor), its lease (WithTTL, else the Client's, renewed), the
// acknowledgement it needs of replicas; its Context keeps ctx's values.
func (c *Client) newLock(ctx context.Context, lc lockConfig, userKeys []string, groups []group) *Lock {
	leaseLen, renew := c.cfg.lease, true
	if lc.ttlSet {
		leaseLen, renew = lc.ttl, false
	}
	ack := c.cfg.ack
	if lc.ackSet {
		ack = lc.ack
	}
	n := 0
	for _, g := range groups {
		n += len(g.keys)
	}
	return &Lock{
		c:      c,
		owner:  c.ownerFor(ctx, lc),
		hold:   wire.NewHold(),
		keys:   userKeys,
		groups: groups,
		lease:  leaseLen,
		renew:  renew,
		ack:    ack,
		tokens: make(map[string]int64, n),
		life:   lifetime.New(ctx),
	}
}

// ownerFor is the owner of a lock of a call on ctx with lc: WithOwner's,
// else the context's, else a fresh one.
func (c *Client) ownerFor(ctx context.Context, lc lockConfig) string {
	if lc.ownerSet {
		return lc.owner
	}
	if o, ok := owner.FromContext(ctx); ok && o != "" {
		return o
	}
	return c.newOwner()
}

// counted is what an acquire says of lockKey, taken in units: its units
// and its capacity key.
func (l *Lock) counted(lockKey string) (int64, string) {
	return l.units[lockKey], l.c.capacityKey(lockKey)
}

// Keys returns the lock's keys, deduplicated and sorted, without the prefix.
func (l *Lock) Keys() []string {
	if l == nil {
		return nil
	}
	return append([]string(nil), l.sortedKeys()...)
}

// Owner returns the lock's owner id.
func (l *Lock) Owner() string {
	if l == nil {
		return ""
	}
	return l.owner
}

// Context returns a context that ends the moment the lock ends, with a cause
// that wraps ErrLockLost once it is lost and is ErrNotHeld once released. It
// keeps the values, not the cancellation, of the context the lock was taken
// with: work that must stop when the lock goes runs in it, as Do's does.
func (l *Lock) Context() context.Context {
	if l == nil {
		return nilLock.Context()
	}
	return l.life.Context()
}

// Done is closed when the lock is released or lost: Context().Done().
func (l *Lock) Done() <-chan struct{} { return l.Context().Done() }

// Err returns nil while the lock is held, then the cause of Context.
func (l *Lock) Err() error {
	if l == nil {
		return nilLock.Err()
	}
	return l.life.Err()
}

// errNilLock is what a nil *Lock says (see Lock).
var errNilLock = fmt.Errorf("%w: a nil *Lock, which the call that failed returned", ErrNotHeld)

// nilLock is the lifetime of every nil *Lock: ended.
var nilLock = func() *lifetime.Lifetime {
	life := lifetime.New(context.Background())
	life.End(errNilLock)
	return life
}()

// Token returns the fencing token of key (without the prefix) in this lock,
// or 0 when key is not one of its keys or the lock ended: tokens start at 1,
// so storage that refuses a token below 1 catches a wrong key and a late
// write. A key's token grows with each new ownership of it (taken fresh, or
// handed on); keys of one slot taken by one call share theirs, and locks of
// one owner share the token of the ownership they joined.
func (l *Lock) Token(key string) int64 {
	if l == nil || l.Err() != nil {
		return 0
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.tokens[l.c.names.LockKey(key)]
}

// ValidUntil returns until when the lock's keys are known held: the lease
// counted from before the request that set it was sent (the acquire, a
// renewal, Extend), or a grant's end.
func (l *Lock) ValidUntil() time.Time {
	if l == nil {
		return time.Time{}
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.valid.end()
}

// leaseLeft is the error of a lock whose call took too long to hand it out
// (see lease.Enough): of what the call took (taken), too little of the
// lease is left.
func (l *Lock) leaseLeft(taken string) error {
	if left := time.Until(l.ValidUntil()); !lease.Enough(left, l.lease) {
		return fmt.Errorf("%w: the lease ran out while %s were taken: %v of %v left",
			ErrNotObtained, taken, max(left, 0).Round(time.Millisecond), l.lease)
	}
	return nil
}

// Extend makes every key's lease run for at least ttl from now (a longer one
// is kept); with WithReplicas only once acknowledged. Keys found no longer
// held end the lock (lost) and the error wraps ErrNotHeld; on any error
// ValidUntil stays as it was.
func (l *Lock) Extend(ctx context.Context, ttl time.Duration) error {
	if err := checkContext(ctx); err != nil {
		return err
	}
	if err := validateTTL(ttl); err != nil {
		return err
	}
	if err := l.Err(); err != nil {
		return err
	}
	start := time.Now()
	lost, err := l.c.extend(ctx, l, l.groups, ttl)
	if len(lost) > 0 {
		notHeld := fmt.Errorf("%w: %d of %d keys, such as %q", ErrNotHeld, len(lost), len(l.keys), l.c.names.UserKeys(lost)[0])
		l.end(endLetGo, fmt.Errorf("%w: %w", ErrLockLost, inner(notHeld)))
		return errors.Join(notHeld, err)
	}
	if err != nil {
		return err
	}
	_ = l.renewed(start.Add(ttl), true) // a lock that ended meanwhile says so to the next call
	return nil
}

// Unlock releases the lock's holds; a key with no hold left is deleted and
// handed to its first waiter (after a Consume, Unlock does nothing). With a
// context already done it still tries,
// for at most 2s. It returns ErrNotHeld when the lock was released or lost
// before, or another owner holds some keys (the others are released all the
// same). A failed Unlock can be called again: it sends only what did not go
// through, and meanwhile the keys go at the end of their lease.
func (l *Lock) Unlock(ctx context.Context) error {
	if err := checkContext(ctx); err != nil {
		return err
	}
	if l == nil {
		return errNilLock
	}
	return l.c.endAll(ctx, unlocking, []*Lock{l})[0]
}

// Consume releases the lock as Unlock does, and turns the units it holds of
// counted keys (WithUnits) into a sale in the same call: each key's
// capacity goes down by them, once however often Consume is sent. A lock
// already lost sells nothing; a hold whose lease ran out unnoticed sells
// nothing on its master, the others all the same: Consume returns
// ErrNotHeld naming it. With WithReplicas an unacknowledged sale is
// ErrNoReplicas, sold on the master all the same.
// The store of record applies the sale with the key's fencing token, once
// per order (docs/sql.md).
func (l *Lock) Consume(ctx context.Context) error {
	if err := checkContext(ctx); err != nil {
		return err
	}
	if l == nil {
		return errNilLock
	}
	return l.c.endAll(ctx, consuming, []*Lock{l})[0]
}

// emit hands e, about l, to the Client's observer, if it has one.
func (l *Lock) emit(e Event) {
	if l.c.cfg.observer == nil {
		return
	}
	e.Owner, e.Keys = l.owner, l.sortedKeys()
	l.c.cfg.observer(e)
}

// sortedKeys sorts the lock's keys, once: most locks are never asked for
// them, and a big batch sorts for a while.
func (l *Lock) sortedKeys() []string {
	l.sortKeys.Do(func() { slices.Sort(l.keys) })
	return l.keys
}

// setTokens records the fencing tokens of keys, in order, as far as tokens
// go.
func (l *Lock) setTokens(keys []string, tokens []int64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for i, k := range keys[:min(len(keys), len(tokens))] {
		l.tokens[k] = tokens[i]
	}
}

// split cuts l.groups[i] after its first n keys into two groups of the same
// slot: a waiting call holds the first, and waits at the first key of the
// second. l is not yet shared with the watchdog.
func (l *Lock) split(i, n int) {
	g := l.groups[i]
	head, tail := g, g
	head.keys, tail.keys = g.keys[:n:n], g.keys[n:]
	if g.modes != nil {
		head.modes, tail.modes = g.modes[:n:n], g.modes[n:]
	}
	l.groups = slices.Insert(l.groups, i+1, tail)
	l.groups[i] = head
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

// The validity of a lock, and its end.

// validity returns the lock's validity (see validity).
func (l *Lock) validity() validity {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.valid
}

// handValidity gives l the validity its call took it with.
func (l *Lock) handValidity(v validity) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.valid = v
}

// renewed records a renewal until end: of every key (all), or of the
// granted ones only (see validity.renewed and grantRenewed). It reports
// false, changing nothing, when the lock ended meanwhile: a renewal whose
// reply lands after an Unlock or Close must not start again the timer that
// Lock.end stopped.
func (l *Lock) renewed(end time.Time, all bool) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.life.Err() != nil {
		return false
	}
	if all {
		l.valid.renewed(end)
	} else {
		l.valid.grantRenewed(end)
	}
	if l.expiry != nil {
		l.expiry.Reset(l.untilLoss())
	}
	return true
}

// arm starts the timer that reports the lock lost when its validity was not
// moved on in time.
func (l *Lock) arm() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.expiry = time.AfterFunc(l.untilLoss(), l.expire)
}

// untilLoss is the time left before the lock must count as lost (see
// validity.lossAt). Called with l.mu held.
func (l *Lock) untilLoss() time.Duration {
	at, ok := l.valid.lossAt(l.lease, l.renew)
	if !ok {
		return time.Duration(1<<63 - 1)
	}
	return time.Until(at)
}

func (l *Lock) expire() {
	l.mu.Lock()
	if l.life.Err() != nil {
		l.mu.Unlock()
		return // fired as Lock.end stopped it
	}
	if d := l.untilLoss(); d > 0 {
		l.expiry.Reset(d)
		l.mu.Unlock()
		return
	}
	l.mu.Unlock()
	if !l.renew {
		l.end(endLetGo, fmt.Errorf("%w: its lease (WithTTL) ran out", ErrLockLost))
		return
	}
	l.end(endLetGo, fmt.Errorf("%w: lease ran out before it could be renewed", ErrLockLost))
}

// capHold ends l d from now (WithMaxHold).
func (l *Lock) capHold(d time.Duration) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.Err() == nil {
		l.maxHold = time.AfterFunc(d, func() { l.endAtMaxHold(d) })
	}
}

// endAtMaxHold ends l, held for d, its longest hold, and lets its keys go
// (endLetGo). An Unlock under way when the cap comes wins: the lock is then
// released, not lost.
func (l *Lock) endAtMaxHold(d time.Duration) {
	l.unlocking.Lock()
	ended := l.released || l.Err() != nil
	l.unlocking.Unlock()
	if !ended {
		l.end(endLetGo, fmt.Errorf("%w: %w, %v", ErrLockLost, inner(ErrMaxHold), d))
	}
}

// lockEnd is how a lock ends, by what its end does beyond ending it.
type lockEnd int

const (
	// endReleased: its release went through (Unlock, Consume, UnlockEach),
	// which took it off the watchdog.
	endReleased lockEnd = iota
	// endAbandoned: the call that took it panicked before handing it out.
	endAbandoned
	// endLost: lost, told as EventLost; its holds go with their lease.
	endLost
	// endLetGo: lost, and what it still holds is released in the
	// background (lettingGo): once lost, the lock is no use to its holder,
	// and its other keys go to their waiters now rather than at the end of
	// their lease. Once Close began, Close releases it instead: it was among
	// the locks Close found held (see Client.stopHolding).
	endLetGo
	// endClosed: Close ends it, after an Unlock whose release is running
	// (which ends it as released), and releases it itself, telling
	// EventReleased, not EventLost: a Client closed on purpose (a deploy)
	// lost nothing, though its holder must stop (err wraps ErrLockLost).
	endClosed
)

// end is the one place a lock ends: with err, the cause its Context and Err
// give, and as how says. Only the first end counts; end reports whether it
// was this one.
func (l *Lock) end(how lockEnd, err error) bool {
	switch how {
	case endClosed:
		l.unlocking.Lock()
		defer l.unlocking.Unlock()
	case endLetGo:
		// Counted before the lock ends, so that Close, which no longer finds
		// the lock held, waits for this release.
		if !l.c.calls.Enter(1) {
			how = endLost
		}
	}
	if !l.life.End(err) {
		if how == endLetGo {
			l.c.calls.Leave()
		}
		return false
	}
	l.c.unhold(l)
	l.leaveGates()
	l.mu.Lock()
	if l.expiry != nil {
		l.expiry.Stop()
	}
	if l.maxHold != nil {
		l.maxHold.Stop()
	}
	l.mu.Unlock()
	if how != endReleased {
		l.c.watchdog.remove(l)
	}
	if how == endLost || how == endLetGo {
		l.emit(Event{Kind: EventLost, Err: err})
	}
	if how == endLetGo {
		go func() {
			defer l.c.calls.Leave()
			_ = l.c.release(context.Background(), lettingGo, []releasing{{l: l}})
		}()
	}
	return true
}

// The lock's gates, the in-process level of locking (see internal/gates),
// are kept in step with its keys in Redis: a call first takes the gate of
// each of its keys in the global order, but once Redis refuses it at a key,
// it gives back the gates of every key after that one while it waits, and
// takes them again, in order, before the attempt that asks for them. So at
// both levels a waiting call holds only keys before the one it waits for
// (and that key's gate, while it waits for the key in Redis).

// gatedKey is a key whose gate a lock holds, and how.
type gatedKey struct {
	key    string
	shared bool
}

// enterGates takes, for l, the gate of each of its keys in the global
// order: with wait, waiting while another lock of the Client holds one
// (waiting is told of each such key); without, taking none of them and
// returning every key another lock holds. On an error, or busy keys, l
// holds no gate.
func (l *Lock) enterGates(ctx context.Context, wait bool, waiting func(key string)) (busy []string, err error) {
	c := l.c
	for _, g := range l.groups {
		for i, key := range g.keys {
			shared := g.shared(i)
			switch c.gates.Enter(ctx, key, l.owner, shared, wait, waiting) {
			case gates.Pass:
				l.addGated(key, shared)
			case gates.Upgrade:
				l.leaveGates()
				return nil, c.upgradeAtGate(key)
			case gates.Wait:
				if wait {
					l.leaveGates()
					return nil, c.gateWaitEnded(ctx, key)
				}
				busy = append(busy, key)
			}
		}
	}
	if len(busy) > 0 {
		l.leaveGates()
	}
	return busy, nil
}

// addGated records that l holds the gate of key.
func (l *Lock) addGated(key string, shared bool) {
	l.mu.Lock()
	l.gated = append(l.gated, gatedKey{key, shared})
	l.mu.Unlock()
}

// gatedCount is how many of l's keys, the first in the global order, have
// their gate held by l.
func (l *Lock) gatedCount() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.gated)
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
