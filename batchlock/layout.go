package batchlock

import (
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/batchlock/batchlock/hashtag"
)

// The data layout in Redis, defined in two places only: here for Go, and
// in scripts/layout.lua for the scripts, which reads and writes the value of
// a lock key and describes it field by field. Tools read it only through
// Held, Inspect and ForceUnlock.
//
// Keys, all under the Client's prefix:
//   - prefix+key, the lock key of a user key (its own {tag} kept, so that
//     keys co-located stay so): a string "<token> <queue> <holds> <owner>"
//     (the fencing token, the waiters' places, the holds with the server
//     time each ends, and the owner: see layout.lua), read here by
//     parseLock, holdsIn and placeIn. It expires with its longest live hold.
//   - prefix+"fence:{"+tag+"}", one per slot (tag: hashtag.ForSlot of the
//     slot, fenceKey): the slot's fencing counter, which a fresh ownership
//     of a key increments (INCRBY) for its token. It never expires.
//   - prefix+"cancel:{"+tag+"}:"+hold (cancelMark): a hold cancelled by a
//     rollback, for one lease, so that a late acquire of that hold (a frozen
//     master) cannot take its key.
//
// User keys starting with "fence:{" or "cancel:{" are refused (reserved).
// Hold fields are "h:" and 16 hex digits, a default owner id 32 hex digits,
// both from crypto/rand (randomID). Owner ids, a caller's too, are stored
// escaped (escapeOwner), so that none reads as a separator or as "*", the
// owner field of a key held shared.
//
// Messages: a grant is announced with SPUBLISH on a channel named like the
// lock key, its message the hold field of the waiter it is for, a space and
// the key's new fencing token;
// "released" (RELEASED in layout.lua) when a key is freed with no live place
// left in its queue, or by ForceUnlock: every waiter of the key then tries
// again. A waiter whose place lapsed, and a reader that may join once the
// writer ahead of it left, are told with "again:" and their own hold field
// (AGAIN in layout.lua), which is no hand-off.
const (
	holdPrefix = "h:"

	// grantTime is how long a key granted to a waiter that listens is its
	// unless the waiter renews it (GRANT_MS in layout.lua).
	grantTime = 3 * time.Second

	// Reserved names under the prefix, one set per slot.
	fenceName  = "fence:{"
	cancelName = "cancel:{"
)

// keyspace is a Client's prefix, and the one place names are made from it
// or user keys read back from lock keys: no caller slices the prefix.
type keyspace string

// lockKey is the lock key of a user key.
func (p keyspace) lockKey(key string) string { return string(p) + key }

// userKey is the user key of a lock key.
func (p keyspace) userKey(lockKey string) string { return lockKey[len(p):] }

// userKeys are the user keys of lock keys.
func (p keyspace) userKeys(lockKeys []string) []string {
	out := make([]string, len(lockKeys))
	for i, k := range lockKeys {
		out[i] = p.userKey(k)
	}
	return out
}

// fence is the fencing counter of slot.
func (p keyspace) fence(slot int) string {
	return string(p) + fenceName + hashtag.ForSlot(slot) + "}"
}

// cancelMark is the key that marks hold cancelled in slot.
func (p keyspace) cancelMark(slot int, hold string) string {
	return string(p) + cancelName + hashtag.ForSlot(slot) + "}:" + hold
}

// pattern is a SCAN pattern of the lock keys whose user keys match glob.
func (p keyspace) pattern(glob string) string { return escapeGlob(string(p)) + glob }

// checkKey is a key of the slot of tag that Check writes to and reads.
func (p keyspace) checkKey(tag string) string { return string(p) + "check:{" + tag + "}" }

// reserved reports whether a user key would collide with a reserved name.
func reserved(key string) bool {
	return strings.HasPrefix(key, fenceName) || strings.HasPrefix(key, cancelName)
}

// fenceKey is the fencing counter of slot, made once per slot and kept: a
// batch names one per slot it touches.
func (c *Client) fenceKey(slot int) string {
	if name := c.fences[slot].Load(); name != nil {
		return *name
	}
	name := c.names.fence(slot)
	c.fences[slot].Store(&name)
	return name
}

// newHold returns a fresh hold field.
func newHold() string { return holdPrefix + randomID(8) }

// lockState is what a lock key holds, at the server time now.
type lockState struct {
	owner   string   // the owner id; empty for a key held shared
	shared  bool     // held shared: holders are its owners
	holders []string // the owners with a live hold, sorted, without repeats
	token   int64
	holds   int // holds whose lease has not ended at now
	waiting int // waiters whose place has not lapsed at now
}

// sharedOwner is the owner field of a key held shared.
const sharedOwner = "*"

// parseLock reads the value of a lock key; ok is false for a value that is
// not one.
func parseLock(value string, now time.Time) (s lockState, ok bool) {
	token, rest, ok1 := strings.Cut(value, " ")
	queue, rest, ok2 := strings.Cut(rest, " ")
	holds, owner, ok3 := strings.Cut(rest, " ")
	var err error
	if s.token, err = strconv.ParseInt(token, 10, 64); err != nil || !ok1 || !ok2 || !ok3 {
		return lockState{}, false
	}
	s.shared = owner == sharedOwner
	if !s.shared {
		s.owner = unescapeOwner(owner)
	}
	for e := range strings.SplitSeq(holds, ",") {
		_, e, _ = strings.Cut(e, "=")
		ends, who, _ := strings.Cut(e, "=")
		ends = strings.TrimSuffix(ends, "g") // a grant
		// No end: the one hold of a key taken afresh, which ends with the
		// key, there to be read.
		if ends != "" && !endsAfter(ends, now) {
			continue
		}
		s.holds++
		switch {
		case s.shared && who != "":
			s.holders = append(s.holders, unescapeOwner(who))
		case !s.shared && s.owner != "":
			s.holders = append(s.holders, s.owner)
		}
	}
	slices.Sort(s.holders)
	s.holders = slices.Compact(s.holders)
	for e := range strings.SplitSeq(queue, ",") {
		if _, ends, ok := placeOf(e); ok && endsAfter(ends, now) {
			s.waiting++
		}
	}
	return s, true
}

// holdsIn returns the hold fields of a lock value.
func holdsIn(value string) []string {
	_, rest, _ := strings.Cut(value, " ")
	_, rest, _ = strings.Cut(rest, " ")
	holds, _, _ := strings.Cut(rest, " ")
	var out []string
	for e := range strings.SplitSeq(holds, ",") {
		if hold, _, ok := strings.Cut(e, "="); ok {
			out = append(out, hold)
		}
	}
	return out
}

// placeIn reports whether hold has a place in the queue of a lock value
// that has not lapsed at now.
func placeIn(value, hold string, now time.Time) bool {
	_, rest, _ := strings.Cut(value, " ")
	queue, _, _ := strings.Cut(rest, " ")
	for e := range strings.SplitSeq(queue, ",") {
		if h, ends, ok := placeOf(e); ok && h == hold && endsAfter(ends, now) {
			return true
		}
	}
	return false
}

// placeOf reads a place in a queue, "<hold>@<ends>[s][p]=<owner>=<fence>":
// its hold field and when it lapses.
func placeOf(place string) (hold, ends string, ok bool) {
	hold, rest, ok := strings.Cut(place, "@")
	rest, _, _ = strings.Cut(rest, "=")
	return hold, strings.TrimRight(rest, "sp"), ok
}

// endsAfter reports whether ends, in milliseconds, is after now.
func endsAfter(ends string, now time.Time) bool {
	ms, err := strconv.ParseInt(ends, 10, 64)
	return err == nil && time.UnixMilli(ms).After(now)
}

// firstHolder is the owner the admin API names for the key: its owner, or
// the first of its holders when it is held shared.
func (s lockState) firstHolder() string {
	if s.shared && len(s.holders) > 0 {
		return s.holders[0]
	}
	return s.owner
}
