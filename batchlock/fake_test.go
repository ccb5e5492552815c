package batchlock

import (
	"context"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/batchlock/batchlock/internal/script"
)

// fakeRedis models in memory what batchlock's scripts do to lock keys,
// fencing counters and cancel marks, as a script.Sender: the acquisition
// loop, rollback, the watchdog, Extend and Unlock run against it without a
// server, under the real retry layer. The scripts themselves are exercised
// against a real cluster by the integration suite.
type fakeRedis struct {
	mu     sync.Mutex
	keys   map[string]*fakeKey
	fences map[string]int64
	marks  map[string]time.Time // cancel marks, until they expire
	acks   int64                // what WAIT answers
	delay  time.Duration        // before each round's replies
	// fault, when set, may fail a call: with err as its reply, and with
	// the script's effect still made when ran is true (a reply lost).
	fault func(name string, c *script.Call) (ran bool, err error)
	log   []string // name and first lock key of every call, in order
	wakes int      // releases that freed a key
}

type fakeKey struct {
	owner string
	fence int64
	holds map[string]time.Time // hold field -> end of its lease
}

func newFakeRedis() *fakeRedis {
	return &fakeRedis{keys: map[string]*fakeKey{}, fences: map[string]int64{}, marks: map[string]time.Time{}, acks: 1}
}

// newFaked returns a Client whose scripts run against a fakeRedis; waiting
// calls poll (there is no pub/sub).
func newFaked(t *testing.T, opts ...Option) (*Client, *fakeRedis) {
	t.Helper()
	c := newOffline(t, true, append([]Option{WithoutPubSub(), WithPollInterval(5 * time.Millisecond)}, opts...)...)
	f := newFakeRedis()
	c.runner = script.NewWith(f, nil)
	return c, f
}

func scriptName(s *redis.Script) string {
	switch s.Hash() {
	case acquireScript.Hash():
		return "acquire"
	case releaseScript.Hash():
		return "release"
	case extendScript.Hash():
		return "extend"
	case forceScript.Hash():
		return "force"
	}
	return "unknown"
}

func (f *fakeRedis) Send(ctx context.Context, s *redis.Script, calls []*script.Call, ack script.Ack) {
	if f.delay > 0 {
		time.Sleep(f.delay) // a slow master: the replies come late
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	name := scriptName(s)
	for _, c := range calls {
		c.Reply = redis.NewCmd(ctx)
		c.Acks = -1
		if ack.Replicas > 0 {
			c.Acks = f.acks
		}
		var err error
		ran := true
		if f.fault != nil {
			ran, err = f.fault(name, c)
			ran = ran || err == nil
		}
		f.log = append(f.log, name+" "+f.firstLockKey(name, c))
		if ran {
			c.Reply.SetVal(f.run(name, c))
		}
		if err != nil {
			c.Reply.SetErr(err)
		}
	}
}

func (f *fakeRedis) firstLockKey(name string, c *script.Call) string {
	switch {
	case name == "acquire":
		return c.Keys[2]
	case name == "release" && c.Args[2] == "1":
		return c.Keys[1]
	}
	return c.Keys[0]
}

// live returns key's state, dropping holds whose lease ended and the key
// with its last one, as the server's expiry does.
func (f *fakeRedis) live(key string, now time.Time) *fakeKey {
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

func (f *fakeRedis) run(name string, c *script.Call) []any {
	now := time.Now()
	switch name {
	case "acquire":
		fence, mark, keys := c.Keys[0], c.Keys[1], c.Keys[2:]
		owner, hold, lease := c.Args[0].(string), c.Args[1].(string), ms(c.Args[2])
		if until, ok := f.marks[mark]; ok && until.After(now) {
			return []any{int64(-1)}
		}
		refused := []any{int64(0), int64(0)}
		fresh := 0
		for _, key := range keys {
			k := f.live(key, now)
			switch {
			case k == nil:
				fresh++
			case k.owner != owner:
				refused = append(refused, key)
				for _, ends := range k.holds {
					refused[1] = max(refused[1].(int64), ends.Sub(now).Milliseconds())
				}
			}
		}
		if len(refused) > 2 {
			return refused
		}
		token := f.fences[fence]
		f.fences[fence] += int64(fresh)
		granted := []any{int64(1)}
		for _, key := range keys {
			k := f.live(key, now)
			if k == nil {
				token++
				k = &fakeKey{owner: owner, fence: token, holds: map[string]time.Time{}}
				f.keys[key] = k
			}
			k.holds[hold] = now.Add(lease)
			granted = append(granted, k.fence)
		}
		return granted
	case "release":
		owner, hold := c.Args[0].(string), c.Args[1].(string)
		keys := c.Keys
		if c.Args[2] == "1" {
			f.marks[keys[0]] = now.Add(ms(c.Args[3]))
			keys = keys[1:]
		}
		taken := []any{}
		for _, key := range keys {
			k := f.live(key, now)
			switch {
			case k != nil && !k.holds[hold].IsZero():
				delete(k.holds, hold)
				if f.live(key, now) == nil {
					f.wakes++
				}
			case k != nil && k.owner != owner:
				taken = append(taken, key)
			}
		}
		return taken
	case "extend":
		hold, ttl := c.Args[0].(string), ms(c.Args[1])
		lost := []any{}
		for _, key := range c.Keys {
			k := f.live(key, now)
			if k == nil || k.holds[hold].IsZero() {
				lost = append(lost, key)
				continue
			}
			k.holds[hold] = maxTime(k.holds[hold], now.Add(ttl))
		}
		return lost
	case "force":
		reply := []any{now.UnixMilli()}
		if k := f.live(c.Keys[0], now); k != nil {
			reply = append(reply, fieldOwner, k.owner, fieldFence, strconv.FormatInt(k.fence, 10))
			for h, ends := range k.holds {
				reply = append(reply, h, strconv.FormatInt(ends.UnixMilli(), 10))
			}
			delete(f.keys, c.Keys[0])
			f.wakes++
		}
		return reply
	}
	panic("unknown script")
}

func maxTime(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// held returns the lock keys that have a live hold, and their owners.
func (f *fakeRedis) held() map[string]string {
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

// hold makes owner hold keys (lock keys) with a lease, as another client.
func (f *fakeRedis) hold(owner string, lease time.Duration, keys ...string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, key := range keys {
		f.keys[key] = &fakeKey{owner: owner, fence: 1000, holds: map[string]time.Time{"h:other": time.Now().Add(lease)}}
	}
}

// with changes the fake's settings while calls may run.
func (f *fakeRedis) with(change func()) {
	f.mu.Lock()
	defer f.mu.Unlock()
	change()
}

// free deletes keys, as a lease running out or an operator would.
func (f *fakeRedis) free(keys ...string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, key := range keys {
		delete(f.keys, key)
	}
}

// calls returns the log entries of one script.
func (f *fakeRedis) calls(name string) []string {
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

func (f *fakeRedis) cancelMarks() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []string
	for k := range f.marks {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}
