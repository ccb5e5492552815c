package wire

import (
	"crypto/rand"
	"encoding/hex"
	"net/url"
	"strings"
)

// RandomID returns n random bytes in hex. Ids come from crypto/rand so that
// nobody can guess an owner or hold id and release or extend a foreign lock.
func RandomID(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b) // crypto/rand.Read never fails (Go 1.24+)
	return hex.EncodeToString(b)
}

// EscapeOwner is the form of an owner id in the values of lock keys: the
// bytes the layout uses as separators (any whitespace or control byte,
// comma, "=", "@", "*", "#") and "%" are written %XX, so that an id cannot
// be taken for a separator, or for the owner field of a key held shared
// ("*") or counted ("#...").
func EscapeOwner(owner string) string {
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
	return c <= ' ' || c == 0x7f || strings.IndexByte(",=@*#%", c) >= 0
}

// UnescapeOwner reads an owner id as EscapeOwner wrote it; a value it cannot
// read is returned as it is.
func UnescapeOwner(field string) string {
	if owner, err := url.PathUnescape(field); err == nil {
		return owner
	}
	return field
}
