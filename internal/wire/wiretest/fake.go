package wiretest

import (
	"context"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/batchlock/batchlock/hashtag"
	"github.com/batchlock/batchlock/internal/script"
	"github.com/batchlock/batchlock/internal/wire"
)

// Fake models in memory what batchlock's scripts do to lock keys,
// fencing counters and cancel marks, as a script.Sender: the acquisition
// loop, rollback, the watchdog, Extend and Unlock run against it without a
// server, under the real retry layer, with the faults those tests stage (a
// lost reply, a slot found elsewhere, a slow master, a holder changed
// between calls). It models no queue and no shared key; on what it models
// it agrees with the scripts step by step (TestScriptFakeAgrees). The
// scripts themselves are checked, case by case, against a real
// redis-server by the TestScript tests, and against a real cluster by the
// integration suite.
type Fake struct {
	mu     sync.Mutex
	keys   map[string]*fakeEntry
	fences map[string]int64
	marks  map[string]time.Time // cancel marks, until they expire
	Acks   int64                // what WAIT answers
	Delay  time.Duration        // before each round's replies
	// Fault, when set, may fail a call: with err as its reply, and with
	// the script's effect still made when ran is true (a reply lost).
	Fault func(name string, c *script.Call) (ran bool, err error)
	// Elsewhere, when set, makes a call find its slots not served here (a
	// slot moved, or in migration): nothing is changed.
	Elsewhere func(name string, c *script.Call) bool
	// Delays, by script, slow each call of that script (after delay).
	Delays map[string]time.Duration
	// After, when set, is called once a call ran, with the fake locked, to
	// change what others hold meanwhile.
	After    func(name string, c *script.Call)
	log      []string         // name and first lock key of every call, in order
	callKeys map[string][]int // by script, the lock keys of each call
}

type fakeEntry struct {
	owner string
	fence int64
	holds map[string]time.Time // hold field -> end of its lease
}

func NewFake() *Fake {
	return &Fake{keys: map[string]*fakeEntry{}, fences: map[string]int64{}, marks: map[string]time.Time{}, Acks: 1,
		callKeys: map[string][]int{}}
}

// FakeMaster serves slots in three ranges, as a six-node cluster does.
func FakeMaster(_ context.Context, key string) (string, error) {
	return "master-" + strconv.Itoa(hashtag.Slot(key)*3/hashtag.SlotCount), nil
}

func scriptName(s *redis.Script) string {
	switch s.Hash() {
	case wire.AcquireScript.Hash():
		return "acquire"
	case wire.ReleaseScript.Hash():
		return "release"
	case wire.ExtendScript.Hash():
		return "extend"
	case wire.ForceScript.Hash():
		return "force"
	}
	return "unknown"
}

func (f *Fake) Send(ctx context.Context, s *redis.Script, calls []*script.Call, ack script.Ack) {
	if f.Delay > 0 {
		time.Sleep(f.Delay) // a slow master: the replies come late
	}
	name := scriptName(s)
	if d := f.delayOf(name); d > 0 {
		time.Sleep(d) // a slow master for this script
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, c := range calls {
		c.Reply = redis.NewCmd(ctx)
		c.Acks = -1
		if ack.Replicas > 0 {
			c.Acks = f.Acks
		}
		var err error
		ran := true
		if f.Fault != nil {
			ran, err = f.Fault(name, c)
			ran = ran || err == nil
		}
		f.log = append(f.log, name+" "+f.firstLockKey(name, c))
		f.callKeys[name] = append(f.callKeys[name], KeysIn(name, c))
		if f.Elsewhere != nil && f.Elsewhere(name, c) {
			c.Reply.SetVal(f.notHere(name, c))
			continue
		}
		if ran {
			c.Reply.SetVal(f.run(name, c))
			if f.After != nil {
				f.After(name, c)
			}
		}
		if err != nil {
			c.Reply.SetErr(err)
		}
	}
}

func (f *Fake) delayOf(name string) time.Duration {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.Delays[name]
}

// KeysIn counts the lock keys a call of the script name carries.
func KeysIn(name string, c *script.Call) int {
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
		for i := 0; i < len(c.Args); i += 3 + c.Args[i+2].(int) {
			n += c.Args[i+2].(int)
		}
		return n
	}
	return len(c.Args)
}

// firstLockKey is the first lock key a call carries, for the log.
func (f *Fake) firstLockKey(name string, c *script.Call) string {
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
		return c.Args[5].(string)
	case "extend":
		return c.Args[3].(string)
	}
	return c.Args[0].(string)
}

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

func (f *Fake) run(name string, c *script.Call) []any {
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
		for i := 0; i < len(c.Args); {
			hold, ttl, n := c.Args[i].(string), ms(c.Args[i+1]), c.Args[i+2].(int)
			lost := []any{}
			for _, a := range c.Args[i+3 : i+3+n] {
				key := a.(string)
				k := f.live(key, now)
				if k == nil || k.holds[hold].IsZero() {
					lost = append(lost, key)
					continue
				}
				k.holds[hold] = maxTime(k.holds[hold], now.Add(ttl))
			}
			out = append(out, lost, []any{})
			i += 3 + n
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
func (f *Fake) notHere(name string, c *script.Call) []any {
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
		for i := 0; i < len(c.Args); {
			n := c.Args[i+2].(int)
			out = append(out, []any{}, c.Args[i+3:i+3+n])
			i += 3 + n
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

// releaseLock is one lock's share of a release call (see release.lua).
type releaseLock struct {
	owner, hold string
	remember    time.Duration
	marks, keys []string
}

// releaseLocks reads the locks of a release call's arguments.
func releaseLocks(c *script.Call) []releaseLock {
	var out []releaseLock
	for i := 0; i < len(c.Args); {
		m, n := c.Args[i+3].(int), c.Args[i+4].(int)
		r := releaseLock{owner: c.Args[i].(string), hold: c.Args[i+1].(string), remember: ms(c.Args[i+2])}
		for _, a := range c.Args[i+5 : i+5+m] {
			r.marks = append(r.marks, a.(string))
		}
		for _, a := range c.Args[i+5+m : i+5+m+n] {
			r.keys = append(r.keys, a.(string))
		}
		out = append(out, r)
		i += 5 + m + n
	}
	return out
}

// SlotsIn counts the slots of an acquire call.
func SlotsIn(c *script.Call) int { return len(acquireSlots(c)) }

// acquireSlot is one slot of an acquire call: its fencing counter and keys.
type acquireSlot struct {
	fence string
	keys  []string
}

// acquireSlots reads the slots of an acquire call's arguments (see
// acquire.lua: a mode ending in "s" has each slot's modes after its count).
func acquireSlots(c *script.Call) []acquireSlot {
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
		i += 2 + modes + n
	}
	return out
}

// acquire is acquire.lua's logic but for queues and shared keys (taken as
// exclusive ones): the groups of a run in
// order, all or none ("try") or up to the first refused key ("wait").
func (f *Fake) acquire(c *script.Call, now time.Time) []any {
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

// Held returns the lock keys that have a live hold, and their owners.
func (f *Fake) Held() map[string]string {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := map[string]string{}
	now := time.Now()
	for key := range f.keys {
		if k := f.live(key, now); k != nil {
			out[key] = k.owner
		}
	}
	return out
}

// Hold makes owner Hold keys (lock keys) with a lease, as another client.
func (f *Fake) Hold(owner string, lease time.Duration, keys ...string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, key := range keys {
		f.Put(key, owner, "h:other", 1000, lease)
	}
}

// Put makes owner hold key (a lock key) with hold, token fence and a lease.
// It is for a change made while the fake is locked (With, After).
func (f *Fake) Put(key, owner, hold string, fence int64, lease time.Duration) {
	f.keys[key] = &fakeEntry{owner: owner, fence: fence, holds: map[string]time.Time{hold: time.Now().Add(lease)}}
}

// Log returns the name and first lock key of every call so far, in order.
func (f *Fake) Log() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.log)
}

// CallKeys returns, for each call of the script name so far, the number of
// lock keys it carried.
func (f *Fake) CallKeys(name string) []int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.callKeys[name])
}

// With changes the fake's settings while calls may run.
func (f *Fake) With(change func()) {
	f.mu.Lock()
	defer f.mu.Unlock()
	change()
}

// Free deletes keys, as a lease running out or an operator would.
func (f *Fake) Free(keys ...string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, key := range keys {
		delete(f.keys, key)
	}
}

// Calls returns the log entries of one script.
func (f *Fake) Calls(name string) []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []string
	for _, e := range f.log {
		if len(e) > len(name) && e[:len(name)] == name {
			out = append(out, e[len(name)+1:])
		}
	}
	return out
}

func (f *Fake) CancelMarks() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []string
	for k := range f.marks {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}
