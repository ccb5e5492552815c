package wiretest

import (
	"context"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/batchlock/batchlock/hashtag"
	"github.com/batchlock/batchlock/internal/routing"
	"github.com/batchlock/batchlock/internal/wire"
)

// Fake models in memory what batchlock's scripts do to lock keys,
// fencing counters and cancel marks, as a routing.Sender: the acquisition
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
	Fault func(name string, c *routing.Call) (ran bool, err error)
	// Elsewhere, when set, makes a call find its slots not served here (a
	// slot moved, or in migration): nothing is changed.
	Elsewhere func(name string, c *routing.Call) bool
	// Delays, by script, slow each call of that script (after delay).
	Delays map[string]time.Duration
	// After, when set, is called once a call ran, with the fake locked, to
	// change what others hold meanwhile.
	After    func(name string, c *routing.Call)
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

func (f *Fake) Send(ctx context.Context, s *redis.Script, calls []*routing.Call, ack routing.Ack) {
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
