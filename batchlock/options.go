package batchlock

import (
	"strings"
	"time"
)

// Defaults, in one place.
const (
	defaultPrefix = "batchlock:"
	defaultLease  = 30 * time.Second
	// maxGroupKeys bounds the keys one script call handles, so that a call on
	// a huge single-slot batch neither blocks a master for long nor meets
	// Lua's stack limit.
	maxGroupKeys = 512
	// rollbackTimeout bounds the releases made after a failed call, whose own
	// context may already be done.
	rollbackTimeout = 5 * time.Second
)

// Option configures a Client.
type Option interface{ apply(*config) }

// LockOption configures one Lock, TryLock or Do call.
type LockOption interface{ applyLock(*lockConfig) }

type config struct {
	prefix         string
	lease          time.Duration
	observer       func(Event)
	pollMax        time.Duration
	pubsub         bool
}

func defaultConfig() config {
	return config{
		prefix:  defaultPrefix,
		lease:   defaultLease,
		pollMax: time.Second,
		pubsub:  true,
	}
}

func (c *config) validate() error {
	if strings.ContainsAny(c.prefix, "{}") {
		return invalid("prefix %q must not contain { or }: it would change the slot of every key", c.prefix)
	}
	if c.lease <= 0 {
		return invalid("lease %v must be > 0", c.lease)
	}
	if c.lease < 3*time.Millisecond {
		return invalid("lease %v is too short to be renewed (minimum 3ms)", c.lease)
	}
	return nil
}

type lockConfig struct {
	ttl            time.Duration
	ttlSet         bool
	owner          string
	ownerSet       bool
}

func (c *lockConfig) validate() error {
	if c.ttlSet && c.ttl < time.Millisecond {
		return invalid("ttl %v must be at least 1ms", c.ttl)
	}
	if c.ownerSet && c.owner == "" {
		return invalid("owner must not be empty")
	}
	return nil
}

type optionFunc func(*config)

func (f optionFunc) apply(c *config) { f(c) }

type lockOptionFunc func(*lockConfig)

func (f lockOptionFunc) applyLock(c *lockConfig) { f(c) }

// WithPrefix sets the prefix of every key batchlock writes. It must not
// contain { or }. Default "batchlock:".
func WithPrefix(prefix string) Option {
	return optionFunc(func(c *config) { c.prefix = prefix })
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

// WithTTL gives the lock a fixed lease of d, counted from the moment the
// whole batch is held, and no automatic renewal; Extend renews it by hand.
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
func WithOwner(owner string) LockOption {
	return lockOptionFunc(func(c *lockConfig) { c.owner, c.ownerSet = owner, true })
}
