package redlock

import (
	"fmt"
	"time"

	"github.com/batchlock/batchlock/batchlock"
)

// Defaults, in one place.
const (
	// defaultDeploymentTimeout covers one round trip per master of a big
	// batch on a loaded network, while keeping a dead deployment's cost to a
	// small part of any sensible lease.
	defaultDeploymentTimeout = 200 * time.Millisecond
	defaultDriftFactor       = 0.01
	// driftFloor is added to the drift allowance for the millisecond
	// resolution of Redis expiries.
	driftFloor = 2 * time.Millisecond
	// retryBase and retryMax bound the random pause of a waiting Lock between
	// two attempts, so that contenders that failed together do not retry in
	// step.
	retryBase = 5 * time.Millisecond
	retryMax  = 250 * time.Millisecond
)

// Option configures a Client.
type Option interface{ apply(*config) }

type config struct {
	clientOpts []batchlock.Option
	timeout    time.Duration
	drift      float64
}

func defaultConfig() config {
	return config{timeout: defaultDeploymentTimeout, drift: defaultDriftFactor}
}

func (c *config) validate() error {
	if c.timeout < time.Millisecond {
		return invalid("deployment timeout %v must be at least 1ms", c.timeout)
	}
	if !(c.drift >= 0 && c.drift < 1) {
		return invalid("drift factor %v must be in [0, 1)", c.drift)
	}
	return nil
}

type optionFunc func(*config)

func (f optionFunc) apply(c *config) { f(c) }

// WithClientOptions passes options to the batchlock Client of every
// deployment (WithPrefix, WithLease, WithObserver...). Every deployment gets
// the same ones, so that a lock has one key name and one lease everywhere.
// Default none: batchlock's defaults.
func WithClientOptions(opts ...batchlock.Option) Option {
	return optionFunc(func(c *config) { c.clientOpts = append(c.clientOpts, opts...) })
}

// WithDeploymentTimeout sets how long an attempt waits for each deployment:
// one that has not answered by then counts as refusing, and its lease is
// already running, so the timeout is also the most an attempt spends of a
// lease. It must cover one round trip per master of the biggest batch.
// Default 200ms.
func WithDeploymentTimeout(d time.Duration) Option {
	return optionFunc(func(c *config) { c.timeout = d })
}

// WithDriftFactor sets the share of a lease set aside for clocks that run
// at different rates: a lock counts as valid for its lease, less the time
// taken to acquire it, less lease*f+2ms. Default 0.01.
func WithDriftFactor(f float64) Option {
	return optionFunc(func(c *config) { c.drift = f })
}

func invalid(format string, args ...any) error {
	return fmt.Errorf("redlock: %w: "+format, append([]any{batchlock.ErrInvalid}, args...)...)
}
