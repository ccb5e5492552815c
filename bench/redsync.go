package bench

import (
	"context"

	"github.com/go-redsync/redsync/v4"
	"github.com/go-redsync/redsync/v4/redis/goredis/v9"
	"github.com/redis/go-redis/v9"
)

// NewRedsync uses redsync as its README shows, through its go-redis v9 pool
// (one pool: on a cluster the client routes each key to its master), with
// its default retry settings (32 tries, 50–250 ms apart) and the benchmark's
// TTL.
func NewRedsync(name string, rdb redis.UniversalClient, parallel bool) Locker {
	rs := redsync.New(goredis.NewPool(rdb))
	lock := func(ctx context.Context, key string) (func(context.Context) error, error) {
		m := rs.NewMutex(key, redsync.WithExpiry(TTL))
		if err := m.LockContext(ctx); err != nil {
			return nil, err
		}
		return func(ctx context.Context) error {
			_, err := m.UnlockContext(ctx)
			return err
		}, nil
	}
	// SET NX to take, a script (GET, DEL) to release.
	return &perKey{name: name, lock: lock, parallel: parallel, commands: append([]string{"set"}, scriptCommands...)}
}
