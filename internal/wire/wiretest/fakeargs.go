package wiretest

import (
	"strconv"
	"strings"
	"time"

	"github.com/batchlock/batchlock/internal/routing"
	"github.com/batchlock/batchlock/internal/wire"
)

// How Fake reads the scripts' arguments (see their headers).

// KeysIn counts the lock keys a call of the script name carries.
func KeysIn(name string, c *routing.Call) int {
	switch name {
	case "acquire":
		n := 0
		for _, sl := range acquireSlots(c) {
			n += len(sl.keys)
		}
		return n
	case "release":
		n := 0
		for _, r := range releaseLocks(c) {
			n += len(r.keys)
		}
		return n
	case "extend":
		n := 0
		for _, e := range extendLocks(c) {
			n += len(e.keys)
		}
		return n
	}
	return len(c.Args)
}

// firstLockKey is the first lock key a call carries, for the log.
func (f *Fake) firstLockKey(name string, c *routing.Call) string {
	switch name {
	case "acquire":
		return acquireSlots(c)[0].keys[0]
	case "release":
		// A call may carry cancel marks only.
		for _, r := range releaseLocks(c) {
			if len(r.keys) > 0 {
				return r.keys[0]
			}
		}
		return c.Args[6].(string)
	case "extend":
		return c.Args[3].(string)
	}
	return c.Args[0].(string)
}

// ms reads a number of milliseconds, as the scripts take it.
func ms(v any) time.Duration {
	switch n := v.(type) {
	case int64:
		return time.Duration(n) * time.Millisecond
	case string:
		i, _ := strconv.ParseInt(n, 10, 64)
		return time.Duration(i) * time.Millisecond
	}
	panic("not a number of milliseconds")
}

// releaseLock is one lock's share of a release call (see release.lua).
type releaseLock struct {
	owner, hold string
	remember    time.Duration
	marks, keys []string
}

// releaseLocks reads the locks of a release call's arguments.
func releaseLocks(c *routing.Call) []releaseLock {
	var out []releaseLock
	for i := 0; i < len(c.Args); {
		m, n, consumed := c.Args[i+3].(int), c.Args[i+4].(int), c.Args[i+5].(int)
		r := releaseLock{owner: c.Args[i].(string), hold: c.Args[i+1].(string), remember: ms(c.Args[i+2])}
		for _, a := range c.Args[i+6 : i+6+m] {
			r.marks = append(r.marks, a.(string))
		}
		for _, a := range c.Args[i+6+m : i+6+m+n] {
			r.keys = append(r.keys, a.(string))
		}
		out = append(out, r)
		i += 6 + m + n + 2*consumed
	}
	return out
}

// extendLock is one lock's share of an extend call (see extend.lua).
type extendLock struct {
	hold string
	ttl  time.Duration
	keys []any
}

// extendLocks reads the locks of an extend call's arguments.
func extendLocks(c *routing.Call) []extendLock {
	var out []extendLock
	for i := 0; i < len(c.Args); {
		n := c.Args[i+2].(int)
		out = append(out, extendLock{hold: c.Args[i].(string), ttl: ms(c.Args[i+1]), keys: c.Args[i+3 : i+3+n]})
		i += 3 + n
	}
	return out
}

// SlotsIn counts the slots of an acquire call.
func SlotsIn(c *routing.Call) int { return len(acquireSlots(c)) }

// acquireSlot is one slot of an acquire call: its fencing counter and keys.
type acquireSlot struct {
	fence string
	keys  []string
}

// acquireSlots reads the slots of an acquire call's arguments (see
// acquire.lua: a mode ending in "s" has each slot's modes after its count).
func acquireSlots(c *routing.Call) []acquireSlot {
	modes := 0
	if strings.HasSuffix(c.Args[3].(string), "s") {
		modes = 1
	}
	var out []acquireSlot
	for i := 6; i < len(c.Args); {
		n := c.Args[i+1].(int)
		sl := acquireSlot{fence: c.Args[i].(string)}
		for _, a := range c.Args[i+2+modes : i+2+modes+n] {
			sl.keys = append(sl.keys, a.(string))
		}
		out = append(out, sl)
		counted := 0 // units and a capacity key each, after the keys
		if modes == 1 {
			counted = strings.Count(c.Args[i+2].(string), string(wire.ModeCounted))
		}
		i += 2 + modes + n + 2*counted
	}
	return out
}
