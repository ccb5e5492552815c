package batchlock

import (
	"context"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"

	"github.com/batchlock/batchlock/internal/lease"
	"github.com/batchlock/batchlock/internal/lifetime"
	"github.com/batchlock/batchlock/internal/routing"
	"github.com/batchlock/batchlock/internal/wire"
)

// maxEachKeys bounds the keys of all the baskets of one TryEach call
// together, repeats counted: past it the call is ErrInvalid. Lock, TryLock
// and Do take a batch of any size.
const maxEachKeys = 1 << 16

// The package's tunable defaults, in one place: every duration the library
// waits for or counts on, but the leases its options set.
const (
	defaultLease    = 30 * time.Second
	defaultPollMax  = time.Second
	rollbackTimeout = 5 * time.Second // releases a failed call owes, also once its context is done
	// unlockTimeout bounds an Unlock (and Do's) made with a context that
	// already ended.
	unlockTimeout = lifetime.UnlockTimeout
	// retryWindow bounds the retries of a call whose context has no
	// deadline: long enough to ride out a failover.
	retryWindow = routing.RetryWindow
	// grantTime is how long a key granted to a waiter that listens is its
	// without a call of its own: a dead waiter's grant lapses that soon.
	grantTime = wire.GrantTime
	// leastPlace is the shortest a waiter's place in a queue lasts unless
	// it asks again (see Client.placeLease).
	leastPlace = 2 * time.Second
	// contendedFor is how long after a refusal in Redis a Client's waiting
	// calls ask one master at a time (see Client.contended).
	contendedFor = time.Second
	// clockBound is how far apart the masters' clocks may be for the
	// preflight to pass: leases are measured by each master's clock.
	clockBound = 500 * time.Millisecond
	// maxGroupKeys bounds the keys of one group: a huge single-slot batch is
	// cut into groups, taken in order like slots.
	maxGroupKeys = 512
)

// Option configures a Client.
type Option interface{ apply(*config) }

// LockOption configures one Lock, TryLock, Do or TryEach call.
type LockOption interface{ applyLock(*lockConfig) }

// Setting is an option that is both: given to New, the default of every
// lock of the Client; given to a call, that call's.
type Setting interface {
	Option
	LockOption
}

type config struct {
	prefix   string
	lease    time.Duration
	maxHold  maxHold
	observer func(Event)
	ack      routing.Ack
	pollMax  time.Duration
	pubsub   bool
}

func defaultConfig() config {
	return config{prefix: string(wire.DefaultPrefix), lease: defaultLease, pollMax: defaultPollMax, pubsub: true}
}

func (c *config) validate() error {
	switch {
	case c.prefix == "":
		return invalid("prefix must not be empty: lock keys would share their names with your own keys")
	case strings.ContainsAny(c.prefix, "{}"):
		return invalid("prefix %q must not contain { or }: it would change the slot of every key", c.prefix)
	case c.lease < 3*time.Millisecond:
		return invalid("lease %v must be at least 3ms: it is renewed every third of it", c.lease)
	case c.pollMax <= 0:
		return invalid("poll interval %v must be > 0", c.pollMax)
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
	ack      routing.Ack
	ackSet   bool
	shared   []string
	units    map[string]int64
	since    time.Time // when set, the start of the wait EventAcquired reports: a Processor's basket's Add
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
	for k, n := range c.units {
		if n < 1 {
			return invalid("units of %q: %d must be > 0", k, n)
		}
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

// validateAck checks a replica acknowledgement: zero replicas waits for
// none.
func validateAck(a routing.Ack) error {
	if a.Replicas < 0 {
		return invalid("replicas %d must be >= 0", a.Replicas)
	}
	if a.Replicas > 0 && a.Timeout < time.Millisecond {
		return invalid("replica timeout %v must be at least 1ms", a.Timeout)
	}
	return nil
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

type optionFunc func(*config)

func (f optionFunc) apply(c *config) { f(c) }

type lockOptionFunc func(*lockConfig)

func (f lockOptionFunc) applyLock(c *lockConfig) { f(c) }

type setting struct {
	client func(*config)
	lock   func(*lockConfig)
}

func (s setting) apply(c *config)         { s.client(c) }
func (s setting) applyLock(c *lockConfig) { s.lock(c) }

// WithPrefix sets the prefix of every key batchlock writes: not empty, and
// without { or }. Default "batchlock:".
func WithPrefix(prefix string) Option {
	return optionFunc(func(c *config) { c.prefix = prefix })
}

// WithLease sets the lease of locks taken without WithTTL: the watchdog
// renews them every lease/3, and one not renewed in time is lost. Default
// 30s.
func WithLease(d time.Duration) Option {
	return optionFunc(func(c *config) { c.lease = d })
}

// WithObserver sets a function called, synchronously and without blocking
// (so not Close), for every lock event (see Event); batchlock itself never
// logs. Default none.
func WithObserver(fn func(Event)) Option {
	return optionFunc(func(c *config) { c.observer = fn })
}

// WithPollInterval caps the pause between two attempts of a waiting Lock
// that hears of no release; d <= 0 is ErrInvalid. Default 1s.
func WithPollInterval(d time.Duration) Option {
	return optionFunc(func(c *config) { c.pollMax = d })
}

// WithoutPubSub makes waiting Locks poll instead of listening for release
// messages, for servers that refuse sharded pub/sub. Default: pub/sub.
func WithoutPubSub() Option {
	return optionFunc(func(c *config) { c.pubsub = false })
}

// WithMaxHold caps how long a lock is held: d after it was handed out it
// ends, lost (ErrLockLost with ErrMaxHold), however it was renewed, and its keys go to
// their waiters. d <= 0 is ErrInvalid. Default: no cap.
func WithMaxHold(d time.Duration) Setting {
	m := maxHold{d, true}
	return setting{func(c *config) { c.maxHold = m }, func(c *lockConfig) { c.maxHold = m }}
}

// WithReplicas makes every write that grants or lengthens a lease count only
// once n replicas of its master acknowledged it within timeout (WAIT);
// otherwise the call fails with ErrNoReplicas, rolled back. A failover keeps
// the lock only when n is every master's number of replicas. A Consume of
// such a lock waits for its sale to be acknowledged the same way, and
// fails with ErrNoReplicas when it was not: the lock is released and its
// units sold on the master, which a failover may undo. Default: none.
func WithReplicas(n int, timeout time.Duration) Setting {
	a := routing.Ack{Replicas: n, Timeout: timeout}
	return setting{func(c *config) { c.ack = a }, func(c *lockConfig) { c.ack, c.ackSet = a, true }}
}

// WithTTL gives the lock a fixed lease of d, which nothing renews but
// Extend. A lock is handed out only with at least half of d left (nine
// tenths after a wait, or its leases are restarted). Default: the Client's
// lease, renewed by its watchdog.
func WithTTL(d time.Duration) LockOption {
	return lockOptionFunc(func(c *lockConfig) { c.ttl, c.ttlSet = d, true })
}

// WithOwner sets the lock's owner id: locks of one owner are reentrant, in
// every process, so give an id unique to one holder (two processes locking
// under one order's id both hold its keys). Default: ContextWithOwner's,
// else a fresh one per call.
func WithOwner(owner string) LockOption {
	return lockOptionFunc(func(c *lockConfig) { c.owner, c.ownerSet = owner, true })
}

// WithShared takes keys shared, in the same call as its own keys (taken
// exclusively): readers share a key and its token, a writer excludes every
// other owner, later readers queue behind a waiting writer, and an owner
// that holds a key shared and asks for it exclusively gets ErrInvalid.
// Default: no key shared.
func WithShared(keys ...string) LockOption {
	return lockOptionFunc(func(c *lockConfig) { c.shared = append(c.shared, keys...) })
}

// WithUnits takes units of counted keys, units[key] of each, in the same
// call as its other keys: any number of owners hold a counted key at once,
// each hold with its units and a token of its own, while the units held fit
// the key's capacity (Client.SetCapacity). A call asking for more than are
// free is refused, or waits in the key's queue, where small requests do not
// pass a big one; one asking for more than the capacity fails at once with
// ErrOverCapacity (sold out). An owner holding units of a key that asks for
// more, or for the key exclusively, gets ErrInvalid. Lock.Consume turns the
// units into a sale. Default: no key counted.
func WithUnits(units map[string]int64) LockOption {
	return lockOptionFunc(func(c *lockConfig) {
		if c.units == nil {
			c.units = make(map[string]int64, len(units))
		}
		for k, n := range units {
			c.units[k] = n
		}
	})
}

// WithWait bounds how long Lock and Do wait for the keys, not how long they
// are held: past d the call fails holding nothing, with an error wrapping
// ErrNotObtained and context.DeadlineExceeded: a *ConflictError naming the
// keys held by others, when some were. d <= 0 is ErrInvalid, and so is
// WithWait given to TryLock or TryEach, which never wait. Default: as long
// as the context.
func WithWait(d time.Duration) LockOption {
	return lockOptionFunc(func(c *lockConfig) { c.wait, c.waitSet = d, true })
}

// ClusterOptions returns fresh go-redis cluster settings for the seeds addrs
// with which calls end with their context and recover within about a second
// after a failover, a restart or a migration (go-redis's defaults take tens
// of seconds): short timeouts, no per-node retries (batchlock is its calls'
// one retry layer), and connections kept from client eviction.
func ClusterOptions(addrs ...string) *redis.ClusterOptions {
	return &redis.ClusterOptions{
		Addrs:                 addrs,
		ContextTimeoutEnabled: true, // calls end with their context
		DialTimeout:           time.Second,
		ReadTimeout:           time.Second,
		WriteTimeout:          time.Second,
		DialerRetries:         2,
		DialerRetryTimeout:    50 * time.Millisecond,
		MaxRedirects:          16, // ride out MOVED and TRYAGAIN in failovers and migrations
		MinRetryBackoff:       16 * time.Millisecond,
		MaxRetryBackoff:       256 * time.Millisecond,
		PoolTimeout:           2 * time.Second,
		FailingTimeoutSeconds: 1,
		DisableIdentity:       true, // no CLIENT SETINFO on every new connection
		// Not CLIENT MAINT_NOTIFICATIONS on every new connection either: a
		// Redis Cloud feature, tried (and refused) by default.
		MaintNotificationsConfig: &maintnotifications.Config{Mode: maintnotifications.ModeDisabled},
		OnConnect:                noEvictOnConnect,
	}
}

// noEvictOnConnect keeps each new connection from client eviction (CLIENT
// NO-EVICT on): a server with maxmemory-clients set may otherwise close the
// connection a waiter listens on for its hand-off, and the waiter would hear
// of it only when it polls next. A server that refuses the command (an ACL
// without client|no-evict) leaves the connection as it was. The map of slots
// is reloaded when a call meets a redirection (go-redis) or fails
// (batchlock), not on a timer more often than go-redis's minute: a reload cut
// short by the cluster client's Close prints "Unexpected conn[N] state
// changed by hook to CLOSED".
func noEvictOnConnect(ctx context.Context, cn *redis.Conn) error {
	_ = cn.Do(ctx, "CLIENT", "NO-EVICT", "on").Err()
	return nil
}
