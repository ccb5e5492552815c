package batchlock

import (
	"context"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"
)

// ClusterOptions returns go-redis cluster client settings for the seed
// addresses addrs that keep calls within their context and recover within
// about a second after a failover, a restart or a migration; go-redis's
// defaults (5 s timeouts, a failing node avoided for 15 s) take much longer,
// and a call would wait past its context. Per-node retries stay off
// (MaxRetries unset): batchlock is its calls' one retry layer, and retries
// stacked on it would outlast their context. The map of slots is reloaded
// when a call meets a redirection (go-redis) or fails (batchlock, before it
// tries again), not on a timer more often than go-redis's minute: a reload
// on a timer runs in the background, and one cut short by the cluster
// client's Close prints "Unexpected conn[N] state changed by hook to CLOSED".
// A program's own commands on the same client follow go-redis's rules:
// after a master dies they reach its replacement once the map is read
// again, by a failed batchlock call or by ReloadState on their own errors.
// Its OnConnect is NoEvictOnConnect. Each call returns a fresh copy, to
// change at will.
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
		OnConnect:                NoEvictOnConnect,
	}
}

// NoEvictOnConnect is an OnConnect hook for go-redis options that keeps each
// new connection from client eviction (CLIENT NO-EVICT on): a server with
// maxmemory-clients set may otherwise close the connection a waiter listens
// on for its hand-off, and the waiter would hear of it only when it polls
// next. A server that refuses the command (an ACL without client|no-evict)
// leaves the connection as it was: it is still used. Preflight's
// CheckClientEviction says whether the Client's connections are kept.
func NoEvictOnConnect(ctx context.Context, cn *redis.Conn) error {
	_ = cn.Do(ctx, "CLIENT", "NO-EVICT", "on").Err()
	return nil
}
