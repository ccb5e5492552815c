package redlock

import (
	"context"
	"math"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/batchlock/batchlock/batchlock"
)

// counter counts what a client would send: dials and commands.
type counter struct{ n atomic.Int64 }

func (c *counter) DialHook(next redis.DialHook) redis.DialHook {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		c.n.Add(1)
		return next(ctx, network, addr)
	}
}

func (c *counter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		c.n.Add(1)
		return next(ctx, cmd)
	}
}

func (c *counter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		c.n.Add(1)
		return next(ctx, cmds)
	}
}

// offline returns n clients of nothing (a closed port), counting into cnt.
func offline(t *testing.T, n int, cnt *counter) []redis.UniversalClient {
	rdbs := make([]redis.UniversalClient, n)
	for i := range rdbs {
		rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", MaxRetries: -1})
		rdb.AddHook(cnt)
		t.Cleanup(func() { _ = rdb.Close() })
		rdbs[i] = rdb
	}
	return rdbs
}

func TestNewRefusesBadInput(t *testing.T) {
	var cnt counter
	rdbs := offline(t, 3, &cnt)
	ring := redis.NewRing(&redis.RingOptions{Addrs: map[string]string{"a": "127.0.0.1:1"}})
	t.Cleanup(func() { _ = ring.Close() })

	for _, tc := range []struct {
		name string
		rdbs []redis.UniversalClient
		opts []Option
	}{
		{"no deployment", nil, nil},
		{"a nil client", []redis.UniversalClient{rdbs[0], nil, rdbs[1]}, nil},
		{"a typed nil client", []redis.UniversalClient{rdbs[0], (*redis.Client)(nil)}, nil},
		{"a ring", []redis.UniversalClient{rdbs[0], ring}, nil},
		{"one deployment twice", []redis.UniversalClient{rdbs[0], rdbs[1], rdbs[0]}, nil},
		{"a zero deployment timeout", rdbs, []Option{WithDeploymentTimeout(0)}},
		{"a negative drift factor", rdbs, []Option{WithDriftFactor(-0.1)}},
		{"a drift factor of 1", rdbs, []Option{WithDriftFactor(1)}},
		{"a NaN drift factor", rdbs, []Option{WithDriftFactor(math.NaN())}},
		{"a bad batchlock option", rdbs, []Option{WithClientOptions(batchlock.WithPrefix("{x}"))}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := New(tc.rdbs, tc.opts...)
			require.ErrorIs(t, err, batchlock.ErrInvalid)
			require.ErrorContains(t, err, "redlock: ")
			require.Nil(t, c)
		})
	}
	require.Zero(t, cnt.n.Load(), "nothing may be sent for bad input")
}

func TestCallsRefuseBadInputBeforeSendingAnything(t *testing.T) {
	var cnt counter
	c, err := New(offline(t, 3, &cnt))
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, c.Close()) })
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	for _, tc := range []struct {
		name string
		keys []string
		opts []batchlock.LockOption
	}{
		{"no keys", nil, nil},
		{"an empty key", []string{"a", ""}, nil},
		{"a zero ttl", []string{"a"}, []batchlock.LockOption{batchlock.WithTTL(0)}},
		{"an empty owner", []string{"a"}, []batchlock.LockOption{batchlock.WithOwner("")}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := c.TryLock(ctx, tc.keys, tc.opts...)
			require.ErrorIs(t, err, batchlock.ErrInvalid)
			require.NotErrorIs(t, err, batchlock.ErrNotObtained)
			// Lock must give up at once rather than try again until ctx ends.
			_, err = c.Lock(ctx, tc.keys, tc.opts...)
			require.ErrorIs(t, err, batchlock.ErrInvalid)
			err = c.Do(ctx, tc.keys, func(context.Context) error { return nil }, tc.opts...)
			require.ErrorIs(t, err, batchlock.ErrInvalid)
		})
	}
	require.ErrorIs(t, c.Do(ctx, []string{"a"}, nil), batchlock.ErrInvalid)
	require.NoError(t, ctx.Err(), "Lock retried bad input")
	require.Zero(t, cnt.n.Load(), "nothing may be sent for bad input")
}

func TestClosedClientRefusesCalls(t *testing.T) {
	var cnt counter
	c, err := New(offline(t, 3, &cnt))
	require.NoError(t, err)
	require.NoError(t, c.Close())
	require.NoError(t, c.Close(), "Close is idempotent")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err = c.TryLock(ctx, []string{"a"})
	require.ErrorIs(t, err, batchlock.ErrClosed)
	_, err = c.Lock(ctx, []string{"a"})
	require.ErrorIs(t, err, batchlock.ErrClosed)
	require.Zero(t, cnt.n.Load())
}
