package wiretest

import (
	"strconv"
	"strings"
	"time"

	"github.com/batchlock/batchlock/internal/routing"
)

// What Fake does for each script, as the scripts do it.

// live returns key's state, dropping holds whose lease ended and the key
// with its last one, as the server's expiry does.
func (f *Fake) live(key string, now time.Time) *fakeEntry {
	k := f.keys[key]
	if k == nil {
		return nil
	}
	for h, ends := range k.holds {
		if !ends.After(now) {
			delete(k.holds, h)
		}
	}
	if len(k.holds) == 0 {
		delete(f.keys, key)
		return nil
	}
	return k
}

func (f *Fake) run(name string, c *routing.Call) []any {
	now := time.Now()
	switch name {
	case "acquire":
		return f.acquire(c, now)
	case "release":
		var out []any
		for _, r := range releaseLocks(c) {
			for _, mark := range r.marks {
				f.marks[mark] = now.Add(r.remember)
			}
			taken := []any{}
			for _, key := range r.keys {
				k := f.live(key, now)
				switch {
				case k != nil && !k.holds[r.hold].IsZero():
					delete(k.holds, r.hold)
					f.live(key, now) // the key goes with its last hold
				case k != nil && k.owner != r.owner:
					taken = append(taken, key)
				}
			}
			out = append(out, taken, []any{})
		}
		return out
	case "extend":
		var out []any
		for _, e := range extendLocks(c) {
			lost := []any{}
			for _, a := range e.keys {
				key := a.(string)
				k := f.live(key, now)
				if k == nil || k.holds[e.hold].IsZero() {
					lost = append(lost, key)
					continue
				}
				k.holds[e.hold] = maxTime(k.holds[e.hold], now.Add(e.ttl))
			}
			out = append(out, lost, []any{})
		}
		return out
	case "force":
		reply := []any{now.UnixMilli(), []any{}}
		for _, a := range c.Args {
			key := a.(string)
			k := f.live(key, now)
			if k == nil {
				reply = append(reply, nil)
				continue
			}
			var holds []string
			for h, ends := range k.holds {
				holds = append(holds, h+"="+strconv.FormatInt(ends.UnixMilli(), 10))
			}
			reply = append(reply, strconv.FormatInt(k.fence, 10)+" - "+strings.Join(holds, ",")+" "+k.owner)
			delete(f.keys, key)
		}
		return reply
	}
	panic("unknown script")
}

// notHere is the reply of a script that finds its keys elsewhere.
func (f *Fake) notHere(name string, c *routing.Call) []any {
	switch name {
	case "acquire":
		return []any{int64(-2)}
	case "release":
		var out []any
		for _, r := range releaseLocks(c) {
			away := []any{}
			for _, k := range append(r.marks, r.keys...) {
				away = append(away, k)
			}
			out = append(out, []any{}, away)
		}
		return out
	case "extend":
		var out []any
		for _, e := range extendLocks(c) {
			out = append(out, []any{}, e.keys)
		}
		return out
	case "force":
		reply := []any{int64(0), c.Args}
		for range c.Args {
			reply = append(reply, nil)
		}
		return reply
	}
	panic("no elsewhere reply for " + name)
}

// acquire is acquire.lua's logic but for queues and shared keys (taken as
// exclusive ones): the groups of a run in
// order, all or none ("try") or up to the first refused key ("wait").
func (f *Fake) acquire(c *routing.Call, now time.Time) []any {
	owner, hold, lease, mode, mark := c.Args[0].(string), c.Args[1].(string), ms(c.Args[2]), c.Args[3].(string), c.Args[4].(string)
	if until, ok := f.marks[mark]; ok && until.After(now) {
		return []any{int64(-1)}
	}
	slots := acquireSlots(c)
	refusedBy := func(key string) (bool, int64) {
		k := f.live(key, now)
		if k == nil || k.owner == owner {
			return false, 0
		}
		var left int64
		for _, ends := range k.holds {
			left = max(left, ends.Sub(now).Milliseconds())
		}
		return true, left
	}
	conflicts := []any{}
	var wait int64
	held, part := 0, 0
	for _, sl := range slots {
		first := -1
		for i, key := range sl.keys {
			if refused, left := refusedBy(key); refused {
				if first < 0 {
					first = i
				}
				conflicts = append(conflicts, key)
				wait = max(wait, left)
				if mode != "try" {
					break
				}
			}
		}
		if first >= 0 && mode != "try" {
			part = first
			break
		}
		if len(conflicts) == 0 {
			held++
		}
	}
	if len(conflicts) > 0 && mode == "try" {
		return []any{int64(0), int64(0), wait, conflicts, []any{}, int64(0)}
	}
	tokens := []any{}
	take := func(fence string, keys []string) {
		f.fences[fence]++ // one token per slot, as acquire.lua takes
		for _, key := range keys {
			k := f.live(key, now)
			if k == nil {
				k = &fakeEntry{owner: owner, fence: f.fences[fence], holds: map[string]time.Time{}}
				f.keys[key] = k
			}
			k.holds[hold] = now.Add(lease)
			tokens = append(tokens, k.fence)
		}
	}
	for _, sl := range slots[:held] {
		take(sl.fence, sl.keys)
	}
	if len(conflicts) > 0 {
		take(slots[held].fence, slots[held].keys[:part])
		return []any{int64(0), int64(held), wait, conflicts, tokens, int64(part)}
	}
	return append([]any{int64(1)}, tokens...)
}

func maxTime(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}
