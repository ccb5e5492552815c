package batchlock

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"net/url"
	"os"
	"strconv"
	"strings"
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
func (c *Client) newOwner() string { return c.cfg.ownerPrefix + randomID(8) }

// randomID returns n random bytes in hex. Ids come from crypto/rand so that
// nobody can guess an owner or hold id and release or extend a foreign lock.
func randomID(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b) // crypto/rand.Read never fails (Go 1.24+)
	return hex.EncodeToString(b)
}

// escapeOwner is the form of an owner id in the values of lock keys: the
// bytes the layout uses as separators (any whitespace or control byte,
// comma, "=", "@", "*") and "%" are written %XX, so that an id cannot be
// taken for a separator, or for the owner field of a key held shared ("*").
func escapeOwner(owner string) string {
	i := 0
	for i < len(owner) && !special(owner[i]) {
		i++
	}
	if i == len(owner) {
		return owner
	}
	var b strings.Builder
	b.WriteString(owner[:i])
	for ; i < len(owner); i++ {
		if special(owner[i]) {
			b.WriteString("%" + strings.ToUpper(hex.EncodeToString([]byte{owner[i]})))
		} else {
			b.WriteByte(owner[i])
		}
	}
	return b.String()
}

// special reports whether c is written %XX in a stored owner id.
func special(c byte) bool {
	return c <= ' ' || c == 0x7f || strings.IndexByte(",=@*%", c) >= 0
}

// unescapeOwner reads an owner id as escapeOwner wrote it; a value it cannot
// read is returned as it is.
func unescapeOwner(field string) string {
	if owner, err := url.PathUnescape(field); err == nil {
		return owner
	}
	return field
}
