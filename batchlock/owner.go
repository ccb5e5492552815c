package batchlock

import (
	"context"
	"os"
	"strconv"

	"github.com/batchlock/batchlock/internal/wire"
)

type ownerKey struct{}

// ContextWithOwner returns a context whose Lock, TryLock and Do calls use
// owner as their owner id unless WithOwner says otherwise. Do passes such a
// context to its function, so that a lock taken inside it on the same keys is
// reentrant rather than a deadlock with itself.
func ContextWithOwner(ctx context.Context, owner string) context.Context {
	return context.WithValue(ctx, ownerKey{}, owner)
}

// OwnerFromContext returns the owner id set on ctx with ContextWithOwner, so
// that code which takes locks through several Clients (Redlock) can give
// them all the same owner.
func OwnerFromContext(ctx context.Context) (string, bool) {
	owner, ok := ctx.Value(ownerKey{}).(string)
	return owner, ok
}

// defaultOwnerPrefix is "host:pid:", which WithOwnerPrefix replaces.
func defaultOwnerPrefix() string {
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "unknown-host"
	}
	return host + ":" + strconv.Itoa(os.Getpid()) + ":"
}

// newOwner is an owner id of the Client's own: its owner prefix, then 8
// random bytes, enough that no two such ids meet.
func (c *Client) newOwner() string { return c.cfg.ownerPrefix + wire.RandomID(8) }
