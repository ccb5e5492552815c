package batchlock

import (
	"context"
	"sync"

	"github.com/redis/go-redis/v9"
)

// Client takes batch locks through one go-redis client. It is safe for
// concurrent use. Close it when done: it owns a watchdog goroutine and the
// pub/sub connections of waiters.
type Client struct {
	rdb     redis.UniversalClient
	cluster bool
	cfg     config

	watchdog *watchdog
	waiters  *waiters

	mu     sync.Mutex
	closed bool
}

// New returns a Client that locks keys through rdb: a *redis.ClusterClient,
// or a *redis.Client for a single node (or a Sentinel failover client).
// A *redis.Ring is refused: it spreads keys by its own hashing, with no
// atomicity across them. rdb stays the caller's; Close does not close it.
//
// Redis 7.0 or newer is required (sharded pub/sub).
func New(rdb redis.UniversalClient, opts ...Option) (*Client, error) {
	c := &Client{rdb: rdb, cfg: defaultConfig()}
	switch r := rdb.(type) {
	case *redis.ClusterClient:
		if r == nil {
			return nil, invalid("nil redis client")
		}
		c.cluster = true
	case *redis.Client:
		if r == nil {
			return nil, invalid("nil redis client")
		}
	case nil:
		return nil, invalid("nil redis client")
	default:
		return nil, invalid("unsupported redis client %T: use a *redis.ClusterClient or a *redis.Client", rdb)
	}
	for _, o := range opts {
		o.apply(&c.cfg)
	}
	if err := c.cfg.validate(); err != nil {
		return nil, err
	}
	c.watchdog = newWatchdog(c)
	c.waiters = newWaiters(c)
	return c, nil
}

// Close stops the watchdog and the waiters' pub/sub connections, and makes
// every later call fail with ErrClosed. It releases nothing: locks still held
// stay in Redis until their lease runs out, or until Unlock, which still works
// after Close. Locks the watchdog was renewing are reported lost at once
// (Done closes, Err wraps ErrLockLost and ErrClosed), since nothing renews
// them any more. Waiting calls return ErrClosed. Close is idempotent; no
// goroutine of the Client outlives it.
func (c *Client) Close() error {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil
	}
	c.closed = true
	c.mu.Unlock()
	c.watchdog.close()
	return c.waiters.close()
}

func (c *Client) isClosed() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.closed
}

func (c *Client) emit(e Event) {
	if c.cfg.observer != nil {
		c.cfg.observer(e)
	}
}

// detached returns a context for clean-up work that must run even when the
// caller's context is done, such as rolling back a failed call.
func detached(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(ctx), rollbackTimeout)
}
