package batchlock

import (
	"strings"
	"time"

	"github.com/batchlock/batchlock/internal/script"
)

// DefaultPrefix is the prefix of the keys batchlock writes, unless
// WithPrefix gives another.
const DefaultPrefix = "batchlock:"

// Defaults, in one place.
const (
	defaultLease = 30 * time.Second
	// maxGroupKeys bounds the keys of one group: a huge single-slot batch is
	// cut into groups, which are taken in order like slots. (Every script
	// call carries at most script.MaxCallKeys keys.)
	maxGroupKeys = 512
	// rollbackTimeout bounds the releases made after a failed call, whose own
	// context may already be done: long enough to ride out a failover.
	rollbackTimeout = 5 * time.Second
)

// Option configures a Client.
type Option interface{ apply(*config) }

// LockOption configures one Lock, TryLock or Do call.
type LockOption interface{ applyLock(*lockConfig) }

type config struct {
	prefix      string
	ownerPrefix string
	lease       time.Duration
	maxHold     maxHold
	observer    func(Event)
	ack         script.Ack
	pollMax     time.Duration
	pubsub      bool
}

func defaultConfig() config {
	return config{
		prefix:      DefaultPrefix,
		ownerPrefix: defaultOwnerPrefix(),
		lease:       defaultLease,
		pollMax:     time.Second,
		pubsub:      true,
	}
}

func (c *config) validate() error {
	if c.prefix == "" {
		return invalid("prefix must not be empty: lock keys would share their names with your own keys")
	}
	if strings.ContainsAny(c.prefix, "{}") {
		return invalid("prefix %q must not contain { or }: it would change the slot of every key", c.prefix)
	}
	if c.lease < 3*time.Millisecond {
		return invalid("lease %v must be at least 3ms: it is renewed every third of it", c.lease)
	}
	if err := c.maxHold.validate(); err != nil {
		return err
	}
	return validateAck(c.ack)
}

type lockConfig struct {
	ttl      time.Duration
	ttlSet   bool
	maxHold  maxHold
	wait     time.Duration
	waitSet  bool
	owner    string
	ownerSet bool
	ack      script.Ack
	ackSet   bool
	shared   []string
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
	if c.ttlSet && c.ttl < time.Millisecond {
		return invalid("ttl %v must be at least 1ms", c.ttl)
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

// validateAck checks a replica acknowledgement: how many replicas of each
// master must acknowledge a write that grants or lengthens a lease, and how
// long to wait for them; zero replicas waits for none.
func validateAck(a script.Ack) error {
	if a.Replicas < 0 {
		return invalid("replicas %d must be >= 0", a.Replicas)
	}
	if a.Replicas > 0 && a.Timeout < time.Millisecond {
		return invalid("replica timeout %v must be at least 1ms", a.Timeout)
	}
	return nil
}

type optionFunc func(*config)

func (f optionFunc) apply(c *config) { f(c) }

type lockOptionFunc func(*lockConfig)

func (f lockOptionFunc) applyLock(c *lockConfig) { f(c) }

// WithPrefix sets the prefix of every key batchlock writes. It must not be
// empty (a lock key would be one of your own keys) nor contain { or }.
// Default "batchlock:".
func WithPrefix(prefix string) Option {
	return optionFunc(func(c *config) { c.prefix = prefix })
}

// WithOwnerPrefix sets how the owner ids the Client makes start: a lock
// taken without WithOwner or ContextWithOwner has the owner id prefix
// followed by 16 random hex digits, so that Held, Inspect, a
// *ConflictError's Holders and the batchlock command show which process holds
// a key. Default: the host name and the process id, "host:pid:". The random
// part alone keeps such locks exclusive. Owner ids given with WithOwner or
// ContextWithOwner are used as they are.
func WithOwnerPrefix(prefix string) Option {
	return optionFunc(func(c *config) { c.ownerPrefix = prefix })
}

// WithLease sets the lease of locks taken without WithTTL: the watchdog
// renews them every lease/3, and a lock whose renewal cannot be confirmed
// within the lease is reported lost. Default 30s.
func WithLease(d time.Duration) Option {
	return optionFunc(func(c *config) { c.lease = d })
}

// WithObserver sets a function called for every lock event (see Event), so
// that applications can count and log them; batchlock itself never logs. It is
// called synchronously from the goroutine that caused the event and must not
// block. Default none.
func WithObserver(fn func(Event)) Option {
	return optionFunc(func(c *config) { c.observer = fn })
}

// WithPollInterval caps the pause between two attempts of a waiting Lock when
// no release message arrives: the pause grows from 1ms, doubling with jitter,
// up to this cap, and never runs past the blocker's lease or the context.
// Default 1s.
func WithPollInterval(max time.Duration) Option {
	return optionFunc(func(c *config) {
		if max > 0 {
			c.pollMax = max
		}
	})
}

// WithoutPubSub makes waiting Locks poll instead of listening for release
// messages, for servers where sharded pub/sub is refused. Default: pub/sub.
func WithoutPubSub() Option {
	return optionFunc(func(c *config) { c.pubsub = false })
}

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

// maxHold is a WithMaxHold setting; zero when none was given.
type maxHold struct {
	d   time.Duration
	set bool
}

func (m maxHold) validate() error {
	if m.set && m.d <= 0 {
		return invalid("max hold %v must be > 0", m.d)
	}
	return nil
}

// MaxHoldOption is returned by WithMaxHold; it is both a client-wide default
// (Option) and a per-lock setting (LockOption).
type MaxHoldOption struct{ d time.Duration }

func (o MaxHoldOption) apply(c *config) { c.maxHold = maxHold{o.d, true} }

func (o MaxHoldOption) applyLock(c *lockConfig) { c.maxHold = maxHold{o.d, true} }

// WithMaxHold caps how long a lock is held: d after Lock returned it, the
// lock ends, whatever its lease or renewals (one stuck holder must not pin
// its keys, and the queue behind them, for ever). Its context is cancelled
// with a cause that wraps ErrLockLost and ErrMaxHold, Done closes, Err says
// so, and the Client releases its keys as Unlock would, handing them to
// their waiters; a holder still writing is refused by storage that checks
// fencing tokens, since the next owner's are newer. Unlock then returns
// ErrNotHeld wrapping that cause. A WithTTL lock is already capped by its
// TTL; WithMaxHold caps it also when Extend pushes its lease further. If
// the release fails (a master unreachable), the keys go at the end of their
// lease. Given to New it is the default of every lock; given to a call it
// overrides that. d <= 0 is ErrInvalid. Default: no cap.
func WithMaxHold(d time.Duration) MaxHoldOption { return MaxHoldOption{d} }

// ReplicasOption is returned by WithReplicas; it is both a client-wide
// default (Option) and a per-lock setting (LockOption).
type ReplicasOption struct{ ack script.Ack }

func (o ReplicasOption) apply(c *config) { c.ack = o.ack }

func (o ReplicasOption) applyLock(c *lockConfig) { c.ack, c.ackSet = o.ack, true }

// WithReplicas makes a lock count as taken only once n replicas of every
// master it touches acknowledged the acquire within timeout: WAIT n timeout
// goes in the same pipeline, on the same connection, after the acquire
// scripts of each master. With fewer acknowledgements the call rolls back and
// fails with an error that wraps ErrNotObtained and ErrNoReplicas. A failover
// keeps such a lock only when n is the number of replicas of each master:
// with more, Redis can promote a replica that did not acknowledge it (a
// CLUSTER FAILOVER TAKEOVER on it, or a failover while the others are down).
// Given to New it is the default of every lock; given to a call it overrides
// that.
// WithReplicas(0, 0) waits for none. Default: none.
func WithReplicas(n int, timeout time.Duration) ReplicasOption {
	return ReplicasOption{ack: script.Ack{Replicas: n, Timeout: timeout}}
}
