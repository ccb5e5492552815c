package batchlock

import (
	"strings"
	"time"

	"github.com/batchlock/batchlock/internal/routing"
)

// DefaultPrefix is the prefix of the keys batchlock writes, unless
// WithPrefix gives another.
const DefaultPrefix = "batchlock:"

// Defaults, in one place.
const (
	defaultLease = 30 * time.Second
	// maxGroupKeys bounds the keys of one group: a huge single-slot batch is
	// cut into groups, which are taken in order like slots. (Every script
	// call carries at most routing.MaxCallKeys keys.)
	maxGroupKeys = 512
	// rollbackTimeout bounds the releases made after a failed call, whose own
	// context may already be done: long enough to ride out a failover.
	rollbackTimeout = 5 * time.Second
)

// Option configures a Client.
type Option interface{ apply(*config) }

type config struct {
	prefix      string
	ownerPrefix string
	lease       time.Duration
	maxHold     maxHold
	observer    func(Event)
	ack         routing.Ack
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

// validateAck checks a replica acknowledgement: how many replicas of each
// master must acknowledge a write that grants or lengthens a lease, and how
// long to wait for them; zero replicas waits for none.
func validateAck(a routing.Ack) error {
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

// Setting is an option that is both: given to New, the default of every
// lock of the Client (an Option); given to a call, that call's (a
// LockOption), which overrides the default.
type Setting interface {
	Option
	LockOption
}

type maxHoldSetting struct{ d time.Duration }

func (o maxHoldSetting) apply(c *config) { c.maxHold = maxHold{o.d, true} }

func (o maxHoldSetting) applyLock(c *lockConfig) { c.maxHold = maxHold{o.d, true} }

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
func WithMaxHold(d time.Duration) Setting { return maxHoldSetting{d} }

type replicasSetting struct{ ack routing.Ack }

func (o replicasSetting) apply(c *config) { c.ack = o.ack }

func (o replicasSetting) applyLock(c *lockConfig) { c.ack, c.ackSet = o.ack, true }

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
func WithReplicas(n int, timeout time.Duration) Setting {
	return replicasSetting{ack: routing.Ack{Replicas: n, Timeout: timeout}}
}
