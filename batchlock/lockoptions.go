package batchlock

import (
	"time"

	"github.com/batchlock/batchlock/internal/lease"
	"github.com/batchlock/batchlock/internal/routing"
)

// LockOption configures one Lock, TryLock or Do call.
type LockOption interface{ applyLock(*lockConfig) }

type lockConfig struct {
	ttl      time.Duration
	ttlSet   bool
	maxHold  maxHold
	wait     time.Duration
	waitSet  bool
	owner    string
	ownerSet bool
	ack      routing.Ack
	ackSet   bool
	shared   []string
	refusals *[]Refusal
}

// lockConfigOf applies opts, and validates what they say.
func lockConfigOf(opts []LockOption) (lockConfig, error) {
	var lc lockConfig
	for _, o := range opts {
		o.applyLock(&lc)
	}
	return lc, lc.validate()
}

func (c *lockConfig) validate() error {
	if c.ttlSet {
		if err := validateTTL(c.ttl); err != nil {
			return err
		}
	}
	if c.ownerSet && c.owner == "" {
		return invalid("owner must not be empty")
	}
	if err := c.maxHold.validate(); err != nil {
		return err
	}
	if c.waitSet && c.wait <= 0 {
		return invalid("wait %v must be > 0", c.wait)
	}
	return validateAck(c.ack)
}

// validateTTL checks a fixed lease, WithTTL's or Extend's.
func validateTTL(ttl time.Duration) error {
	if err := lease.Check(ttl); err != nil {
		return invalid("%v", err)
	}
	return nil
}

type lockOptionFunc func(*lockConfig)

func (f lockOptionFunc) applyLock(c *lockConfig) { f(c) }

// WithTTL gives the lock a fixed lease of d and no automatic renewal; Extend
// renews it by hand. The lease of each key counts from the call that took
// it; when the call waited for part of the batch and less than nine tenths
// of d would be left once the whole batch is held, every key's lease is
// restarted then. A lock is handed out only with at least half of d left;
// ValidUntil and the lock's context deadline say exactly how much.
// Default: no TTL, the Client's watchdog keeps the lock for as long as it is
// held.
func WithTTL(d time.Duration) LockOption {
	return lockOptionFunc(func(c *lockConfig) { c.ttl, c.ttlSet = d, true })
}

// WithOwner sets the owner id of the lock. Locks with the same owner are
// reentrant: they may hold the same keys at the same time, and each releases
// only its own holds. Default: the owner set with ContextWithOwner on the
// call's context, or else a fresh random id, which makes the lock exclusive
// even against other goroutines of the same process.
//
// An owner id names one holder, in every process: two processes that lock
// under one id (an order id, when an order is delivered twice) both hold the
// keys at once, since the locks of one owner are reentrant. Make ids unique
// to the holder (prefix a business id with the host and process, say), and
// give a retry after a failed call an id of its own. The rollback of a failed call may not have reached a master that was
// failing; a call under the same owner would join the holds it left and keep
// them alive, where a fresh owner waits at most one lease for them.
func WithOwner(owner string) LockOption {
	return lockOptionFunc(func(c *lockConfig) { c.owner, c.ownerSet = owner, true })
}

// WithShared takes keys shared, in the same call as the call's own keys,
// which it takes exclusively. Any number of owners hold a key shared at once;
// an owner holding it exclusively excludes every other owner, shared or not.
// A key given both ways is taken exclusively, and the call's keys may be
// empty when WithShared names some. Several WithShared options add up.
//
// A key asked for shared is granted while no other owner holds it
// exclusively and no call waits ahead for it exclusively: once a writer
// queues for a key, later readers queue behind it, so writers are not
// starved, and the writer is handed the key when the last reader leaves. A
// release that hands a key to a reader hands it to the readers queued right
// behind it too, up to the next writer, each told with its own message.
// Everything else is as for exclusive keys: all or nothing, the global
// order, the queue, leases and the watchdog, the loss signal, WithReplicas
// and rollback. An owner's holds are reentrant across modes: an owner that holds
// a key shared gets it shared again at once, even with writers queued (they
// wait for that owner anyway; so an owner id shared by many goroutines that
// keep a key shared between them can keep writers out), and one that holds
// it exclusively gets it in either mode, the key staying exclusive until
// all that owner's holds on it are gone. An owner that holds a key shared
// and asks for it exclusively is refused with ErrUpgrade, without waiting
// for that key: two owners doing so would wait for each other. (A waiting
// call finds this out when it reaches the key, in the global order.)
//
// Token of a shared key is the token of its shared ownership: taken from
// the slot's counter when the key went from free, or from a writer, to
// readers, and the same for every owner holding it shared meanwhile. A
// writer that takes the key later gets a larger one, so a reader can tell,
// by the largest token a store saw, that a writer came after its read began.
// Default: no key is shared.
func WithShared(keys ...string) LockOption {
	return lockOptionFunc(func(c *lockConfig) { c.shared = append(c.shared, keys...) })
}

// WithRefusals has TryEach append to *dst, in basket order, why it refused
// each basket it refused (see Refusal): beaten by an earlier basket of the
// call, which goes first next time, or held by another lock or Client,
// which is what a rule against starvation counts. It costs nothing when not
// given. A call that fails as a whole appends nothing; Lock, TryLock and Do
// ignore it. Default: not told.
func WithRefusals(dst *[]Refusal) LockOption {
	return lockOptionFunc(func(c *lockConfig) { c.refusals = dst })
}

// WithWait bounds how long Lock (and Do) waits for the keys: once d has passed
// without every key held, the call fails, having released every hold it took,
// with a *ConflictError naming the keys it waited for last, which wraps
// ErrNotObtained and context.DeadlineExceeded. Only the wait is bounded: the
// lock, once held, lasts as long as it is renewed, and the call's context
// still bounds both. TryLock does not wait and ignores it. d <= 0 is
// ErrInvalid. Default: the wait lasts as long as the call's context.
func WithWait(d time.Duration) LockOption {
	return lockOptionFunc(func(c *lockConfig) { c.wait, c.waitSet = d, true })
}
