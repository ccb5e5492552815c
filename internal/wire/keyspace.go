package wire

import (
	"strings"
	"time"

	"github.com/batchlock/batchlock/hashtag"
)

// Reserved names under the prefix: one fencing counter per slot, cancel
// marks and capacities of counted keys in their slots.
const (
	FenceName  = "fence:{"
	CancelName = "cancel:{"
	UnitsName  = "units:{"
)

// DefaultPrefix is the prefix of a Client not given WithPrefix, and the
// command's.
const DefaultPrefix Keyspace = "batchlock:"

// Keyspace is a Client's prefix, and the one place names are made from it
// or user keys read back from lock keys: no caller slices the prefix.
type Keyspace string

// LockKey is the lock key of a user key.
func (p Keyspace) LockKey(key string) string { return string(p) + key }

// UserKey is the user key of a lock key.
func (p Keyspace) UserKey(lockKey string) string { return lockKey[len(p):] }

// UserKeys are the user keys of lock keys.
func (p Keyspace) UserKeys(lockKeys []string) []string {
	out := make([]string, len(lockKeys))
	for i, k := range lockKeys {
		out[i] = p.UserKey(k)
	}
	return out
}

// Fence is the fencing counter of slot.
func (p Keyspace) Fence(slot int) string {
	return string(p) + FenceName + hashtag.ForSlot(slot) + "}"
}

// CancelMark is the key that marks hold cancelled in slot.
func (p Keyspace) CancelMark(slot int, hold string) string {
	return string(p) + CancelName + hashtag.ForSlot(slot) + "}:" + hold
}

// ChangeMark is the key that marks a capacity change made in slot, named
// by change: a random id of the call, which its resends share.
func (p Keyspace) ChangeMark(slot int, change string) string {
	return string(p) + CancelName + hashtag.ForSlot(slot) + "}:c:" + change
}

// ChangeMarkLife is how long a ChangeMark lives: longer than a call and
// its resends take (the cluster client's retries after a read timeout
// and redirections, a few seconds each at most).
const ChangeMarkLife = time.Minute

// Capacity is the capacity key of the counted user key key of slot: in
// its slot, outliving its holds.
func (p Keyspace) Capacity(slot int, key string) string {
	return string(p) + UnitsName + hashtag.ForSlot(slot) + "}:" + key
}

// Pattern is a SCAN Pattern of the lock keys whose user keys match glob.
func (p Keyspace) Pattern(glob string) string { return escapeGlob(string(p)) + glob }

// CheckKey is a key of the slot of tag that Check writes to and reads.
func (p Keyspace) CheckKey(tag string) string { return string(p) + "check:{" + tag + "}" }

// Reserved reports whether a user key would collide with a Reserved name.
func Reserved(key string) bool {
	return strings.HasPrefix(key, FenceName) || strings.HasPrefix(key, CancelName) || strings.HasPrefix(key, UnitsName)
}

// escapeGlob makes s match itself in a SCAN MATCH pattern.
func escapeGlob(s string) string {
	var b strings.Builder
	for _, r := range s {
		if strings.ContainsRune(`*?[]\`, r) {
			b.WriteByte('\\')
		}
		b.WriteRune(r)
	}
	return b.String()
}
