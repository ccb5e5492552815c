package batchlock

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/batchlock/batchlock/internal/lifetime"
	"github.com/batchlock/batchlock/internal/routing"
	"github.com/batchlock/batchlock/internal/wire"
)

// Lock is a batch of keys held by one owner. Its methods are safe for
// concurrent use. A nil *Lock, what a call that failed returns, holds
// nothing: its Unlock and Extend return ErrNotHeld, Err returns it, Done is
// closed, and the rest return zero values, so that a deferred Unlock
// written before the error check does not panic.
type Lock struct {
	c     *Client
	owner string
	hold  string // this handle's hold in the values of its keys: "h:" + random id
	// keys are the keys without the prefix, sorted once asked for (see
	// sortedKeys), in the groups' order until then.
	keys     []string
	sortKeys sync.Once
	groups   []group
	lease    time.Duration
	renew    bool // kept alive by the watchdog, rather than a fixed TTL
	ack      routing.Ack
	// gated are the keys whose gates the lock holds (see internal/gates), given
	// back when it ends; guarded by mu.
	gated []gatedKey

	// marks are the cancel marks of the hold in the slots where a call of
	// the acquire may have run unseen: set when the lock ends, so that
	// such a call, still in flight, cannot take anything after. Written
	// by the acquiring call only, before the lock is handed out.
	marks []string

	unlocking sync.Mutex // one Unlock at a time
	released  bool       // an Unlock succeeded; guarded by unlocking
	// rest is what a release that failed in part left to release; guarded
	// by unlocking.
	rest *unreleased

	life *lifetime.Lifetime

	mu         sync.Mutex
	tokens     map[string]int64 // by lock key
	validUntil time.Time        // the lease is confirmed to run at least until then
	// granted are the groups granted by a release while the call that took
	// the lock waited, which no call has renewed yet: counted on until
	// grantUntil (see waiting.takeGranted), and renewed by the watchdog.
	granted    []group
	grantUntil time.Time
	acquiredAt time.Time
	expiry     *time.Timer // fires when validUntil is near and unconfirmed
	maxHold    *time.Timer // fires when the lock has been held for WithMaxHold
}

// newLock makes the lock of a call on ctx, whose values its Context keeps.
func newLock(ctx context.Context, c *Client, owner string, keys []string, groups []group, lease time.Duration, renew bool) *Lock {
	n := 0
	for _, g := range groups {
		n += len(g.keys)
	}
	return &Lock{
		c:      c,
		owner:  owner,
		hold:   wire.NewHold(),
		keys:   keys,
		groups: groups,
		lease:  lease,
		renew:  renew,
		tokens: make(map[string]int64, n),
		life:   lifetime.New(ctx),
	}
}

// Keys returns the lock's keys, deduplicated and sorted, without the prefix.
func (l *Lock) Keys() []string {
	if l == nil {
		return nil
	}
	return append([]string(nil), l.sortedKeys()...)
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

// Owner returns the lock's owner id.
func (l *Lock) Owner() string {
	if l == nil {
		return ""
	}
	return l.owner
}

// Context returns a context that ends the moment the lock ends: its cause
// wraps ErrLockLost once the lock is lost, and is ErrNotHeld once it was
// released. It carries the values of the context the lock was taken with,
// but not its cancellation. Work that must stop when the lock goes runs in
// it, or in a child of it, as Do's function does.
func (l *Lock) Context() context.Context {
	if l == nil {
		return nilLock.Context()
	}
	return l.life.Context()
}

// Done returns a channel that is closed when the lock is released or lost:
// Context().Done().
func (l *Lock) Done() <-chan struct{} { return l.Context().Done() }

// Err returns nil while the lock is held, an error wrapping ErrLockLost once
// it is lost, and ErrNotHeld once it was released: the cause of Context.
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

// Token returns the fencing token of key in this lock. Tokens start at 1;
// Token returns 0 when key is not one of the lock's keys (given without the
// prefix, as to Lock), so storage that refuses a token below 1 catches a
// wrong key at its first write (README's fenced script does). A key's token
// is taken from its slot's counter when an owner takes the key fresh (keys
// of one slot taken fresh by one call share it), and only ever grows:
// storage that remembers the largest token it has seen per key can refuse
// writes from a stale holder. Reentrant locks of one owner share the token
// of the ownership they joined.
func (l *Lock) Token(key string) int64 {
	if l == nil {
		return 0
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.tokens[l.c.names.LockKey(key)]
}

// ValidUntil returns the time until which the lock's lease is known to run,
// measured from before the request that set it (the acquire, a renewal or
// Extend) was sent, so that it holds as long as clocks advance at the same
// rate. Algorithms built on several locks, such as Redlock, derive their own
// validity from it.
func (l *Lock) ValidUntil() time.Time {
	if l == nil {
		return time.Time{}
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.grantUntil.IsZero() && (l.validUntil.IsZero() || l.grantUntil.Before(l.validUntil)) {
		return l.grantUntil
	}
	return l.validUntil
}

// confirmedUntil is until when the lease of the groups not granted is
// confirmed; zero when every group was granted and none renewed yet.
func (l *Lock) confirmedUntil() time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.validUntil
}

// expectGrant records the groups granted to the lock, and renewed by no
// call yet, which it counts on until until.
func (l *Lock) expectGrant(groups []group, until time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.granted, l.grantUntil = groups, until
}

// grant returns the groups granted to the lock and not renewed yet, and
// until when they are counted on; none when there are none.
func (l *Lock) grant() ([]group, time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.granted, l.grantUntil
}

// confirmGrant records that the groups granted to the lock were renewed
// until t. A grant that runs longer than t (a lease shorter than a grant)
// is kept, to be renewed again; otherwise the lock's validity is the
// earlier of t and that of its other groups.
func (l *Lock) confirmGrant(t time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.granted == nil || t.Before(l.grantUntil) {
		return
	}
	l.granted, l.grantUntil = nil, time.Time{}
	if l.validUntil.IsZero() || t.Before(l.validUntil) {
		l.validUntil = t
	}
	if l.expiry != nil {
		l.expiry.Reset(l.untilExpiry())
	}
}

// extended records that every group of the lock was renewed until at least
// t, a lease that ran longer kept: the groups not granted run until the
// later of t and what they had, the granted ones until t, or until their
// grant ends if that is later (then still to be renewed).
func (l *Lock) extended(t time.Time) {
	l.mu.Lock()
	granted := l.granted != nil
	if (!granted || !l.validUntil.IsZero()) && t.After(l.validUntil) {
		l.validUntil = t
	}
	if l.expiry != nil {
		l.expiry.Reset(l.untilExpiry())
	}
	l.mu.Unlock()
	if granted {
		l.confirmGrant(t)
	}
}

// Extend makes every key's lease run for at least ttl from now; a lease that
// already runs longer (another hold of the same owner) is kept. When keys are
// found no longer held, the lock is lost and the error wraps ErrNotHeld. With
// WithReplicas, the extension counts only once replicas acknowledged it:
// otherwise the error wraps ErrNoReplicas and the lock's validity (ValidUntil)
// is not lengthened. On any error the validity stays as it was.
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
		l.letGo(fmt.Errorf("%w: %w", ErrLockLost, inner(notHeld)))
		return errors.Join(notHeld, err)
	}
	if err != nil {
		return err
	}
	l.extended(start.Add(ttl))
	return nil
}

// Unlock releases the lock's holds on all its keys; a key with no hold left
// is deleted and its waiters are woken. It returns an error wrapping
// ErrNotHeld when the lock was already released, when it had been lost, or
// when another owner holds some of its keys; the other keys are released all
// the same. A key found gone is not reported: a release that the redis client
// ran twice finds the same, and the watchdog reports such a loss.
//
// When ctx is already done, Unlock still makes its attempt, for at most 2s,
// so that a deferred Unlock with a request's ended context releases. When
// the release fails (the network, a master down, ctx ending), Unlock returns
// the error and the lock can be unlocked again: the next Unlock sends only
// what did not go through. The lock is no longer renewed, so its keys are
// freed when their lease runs out if no later Unlock succeeds.
func (l *Lock) Unlock(ctx context.Context) error {
	if err := checkContext(ctx); err != nil {
		return err
	}
	if l == nil {
		return errNilLock
	}
	return l.c.unlockAll(ctx, []*Lock{l})[0]
}
