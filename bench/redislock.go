package bench

import (
	"context"
	"time"

	"github.com/bsm/redislock"
	"github.com/redis/go-redis/v9"
)

// RedislockRetry is the retry of redislock's documented example: try again
// every 100 ms. Its example also stops after three retries; here the
// context bounds the wait instead, so that a sample never gives up.
const RedislockRetry = 100 * time.Millisecond

// NewRedislock uses redislock as its documentation shows: Obtain with a TTL
// and a linear backoff retry, then Release.
func NewRedislock(name string, rdb redis.UniversalClient, parallel bool) Locker {
	c := redislock.New(rdb)
	lock := func(ctx context.Context, key string) (func(context.Context) error, error) {
		l, err := c.Obtain(ctx, key, TTL, &redislock.Options{RetryStrategy: redislock.LinearBackoff(RedislockRetry)})
		if err != nil {
			return nil, err
		}
		return l.Release, nil
	}
	// Both taking and releasing are scripts.
	return &perKey{name: name, lock: lock, parallel: parallel, commands: scriptCommands}
}
