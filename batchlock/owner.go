package batchlock

import (
	"context"
	"crypto/rand"
	"encoding/hex"
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

// randomID returns n random bytes in hex. Ids come from crypto/rand so that
// nobody can guess an owner or hold id and release or extend a foreign lock.
func randomID(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b) // crypto/rand.Read never fails (Go 1.24+)
	return hex.EncodeToString(b)
}
