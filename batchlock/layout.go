package batchlock

import (
	"strconv"
	"strings"
	"time"

	"github.com/batchlock/batchlock/hashtag"
)

// The data layout in Redis, in one place (doc.go describes it; the scripts
// in scripts/ write it): a lock key is prefix+key, a hash of the owner, the
// fencing token of the ownership and one field per hold, whose value is the
// server time in milliseconds at which that hold's lease ends. Per slot, a
// fencing counter and the cancel marks of holds live under reserved names.
const (
	fieldOwner = "owner"
	fieldFence = "fence"
	holdPrefix = "h:"

	// Reserved names under the prefix, one set per slot.
	fenceName  = "fence:{"
	cancelName = "cancel:{"
)

// reserved reports whether a user key would collide with a reserved name.
func reserved(key string) bool {
	return strings.HasPrefix(key, fenceName) || strings.HasPrefix(key, cancelName)
}

// fenceKey is the fencing counter of slot.
func (c *Client) fenceKey(slot int) string {
	return c.cfg.prefix + fenceName + hashtag.ForSlot(slot) + "}"
}

// cancelKeys is the common part of slot's cancel marks: the mark of a hold
// is cancelKeys + hold.
func (c *Client) cancelKeys(slot int) string {
	return c.cfg.prefix + cancelName + hashtag.ForSlot(slot) + "}:"
}

// newHold returns a fresh hold field.
func newHold() string { return holdPrefix + randomID(8) }

// lockState is what a lock key holds, read as a flat list of hash fields and
// values, at the server time now.
type lockState struct {
	owner string
	token int64
	holds int // holds whose lease has not ended at now
}

// parseLock reads the fields of a lock key; ok is false for a hash that is
// not one (no owner).
func parseLock(fields map[string]string, now time.Time) (s lockState, ok bool) {
	s.owner, ok = fields[fieldOwner]
	if !ok {
		return s, false
	}
	s.token, _ = strconv.ParseInt(fields[fieldFence], 10, 64)
	for f, v := range fields {
		if !strings.HasPrefix(f, holdPrefix) {
			continue
		}
		if ends, err := strconv.ParseInt(v, 10, 64); err == nil && time.UnixMilli(ends).After(now) {
			s.holds++
		}
	}
	return s, true
}
