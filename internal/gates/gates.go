package gates

import (
	"context"
	"hash/maphash"
	"slices"
	"sync"
)

// Table is the gates of one process's locks, one per key, made on first use
// and forgotten once nobody holds or waits for it.
type Table struct {
	seed   maphash.Seed
	shards [gateShards]gateShard
}

const gateShards = 64

type gateShard struct {
	mu   sync.Mutex
	keys map[string]*gate // a gate exists while held or waited for
}

// gate is one lock key's gate.
type gate struct {
	owner   string         // the owner holding it exclusively; "" if none
	holds   int            // its holds when exclusive
	readers map[string]int // holds by owner when held shared
	queue   []*Waiter      // in arrival order
}

// Waiter is a call waiting at a gate.
type Waiter struct {
	sh      *gateShard
	key     string
	gt      *gate
	owner   string
	shared  bool
	granted chan struct{} // closed once the gate answered: verdict says how
	verdict Verdict       // Pass, or Upgrade once it asks to upgrade
}

func New() *Table {
	g := &Table{seed: maphash.MakeSeed()}
	for i := range g.shards {
		g.shards[i].keys = make(map[string]*gate)
	}
	return g
}

func (g *Table) shard(key string) *gateShard {
	return &g.shards[maphash.String(g.seed, key)%gateShards]
}

// Verdict is what a gate says to an owner asking for it.
type Verdict int

const (
	Pass    Verdict = iota // it may go through now
	Wait                   // another owner holds it, or a writer waits ahead
	Upgrade                // it holds the key shared and asks for it exclusively
)

// judge says what the gate says to owner asking for it, shared or not;
// queued waiters ahead count (none when the caller is at the head).
func (gt *gate) judge(owner string, shared bool, ahead []*Waiter) Verdict {
	switch {
	case gt.owner == owner:
		return Pass // an owner's locks share its holds
	case gt.owner != "":
		return Wait
	case len(gt.readers) == 0:
		if len(ahead) > 0 {
			return Wait
		}
		return Pass
	case gt.readers[owner] > 0 && !shared:
		return Upgrade
	case gt.readers[owner] > 0:
		return Pass // readers of an owner share its holds, writers queued or not
	case !shared:
		return Wait
	}
	for _, w := range ahead {
		if !w.shared {
			return Wait // a writer waits ahead: readers queue behind it
		}
	}
	return Pass
}

// Enter gives owner's hold the gate of key, and reports Pass, or how it
// could not: Upgrade at once, or Wait when it may not wait (TryLock)
// or after ctx ended (then it holds nothing). waiting is called with key
// before it waits.
func (g *Table) Enter(ctx context.Context, key, owner string, shared, mayWait bool, waiting func(key string)) Verdict {
	v, w := g.Ask(key, owner, shared, mayWait)
	if w == nil {
		return v
	}
	w.Notify(waiting)
	select {
	case <-w.granted:
		return w.verdict
	case <-ctx.Done():
	}
	w.Abandon()
	return Wait
}

// Ask gives owner's hold the gate of key if it may go through now
// (Pass); otherwise it reports Upgrade, or Wait, with, when
// mayWait, a place in the gate's queue: the caller waits for its granted,
// or abandons it.
func (g *Table) Ask(key, owner string, shared, mayWait bool) (Verdict, *Waiter) {
	sh := g.shard(key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	gt := sh.keys[key]
	if gt == nil {
		gt = &gate{}
		sh.keys[key] = gt
	}
	switch v := gt.judge(owner, shared, gt.queue); {
	case v == Pass:
		gt.admit(owner, shared)
		return Pass, nil
	case v == Upgrade || !mayWait:
		if gt.free() {
			delete(sh.keys, key)
		}
		return v, nil
	}
	w := &Waiter{sh: sh, key: key, gt: gt, owner: owner, shared: shared, granted: make(chan struct{})}
	gt.queue = append(gt.queue, w)
	return Wait, w
}

// Notify calls waiting with w's key, for w, queued; a panic in it (an
// observer's) takes w out of the queue before it goes on, or the gate would
// be held by nobody once w's turn came.
func (w *Waiter) Notify(waiting func(key string)) {
	defer func() {
		if r := recover(); r != nil {
			w.Abandon()
			panic(r)
		}
	}()
	waiting(w.key)
}

// Abandon takes w out of its gate's queue, or gives back the gate if it
// was let in meanwhile.
func (w *Waiter) Abandon() {
	sh, gt := w.sh, w.gt
	sh.mu.Lock()
	defer sh.mu.Unlock()
	select {
	case <-w.granted:
		if w.verdict == Pass {
			sh.leave(w.key, gt, w.owner, w.shared)
		}
	default:
		for i, q := range gt.queue {
			if q == w {
				gt.queue = append(gt.queue[:i], gt.queue[i+1:]...)
				break
			}
		}
		// Readers behind a writer that gave up may go in now.
		sh.admitQueued(w.key, gt)
	}
}

// Count returns the number of gates held or waited for.
func (g *Table) Count() int {
	n := 0
	for i := range g.shards {
		sh := &g.shards[i]
		sh.mu.Lock()
		n += len(sh.keys)
		sh.mu.Unlock()
	}
	return n
}

// Leave gives back one hold of owner on the gate of key.
func (g *Table) Leave(key, owner string, shared bool) {
	sh := g.shard(key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if gt := sh.keys[key]; gt != nil {
		sh.leave(key, gt, owner, shared)
	}
}

func (gt *gate) admit(owner string, shared bool) {
	switch {
	case gt.owner == owner:
		gt.holds++
	case shared && gt.owner == "":
		if gt.readers == nil {
			gt.readers = make(map[string]int)
		}
		gt.readers[owner]++
	default:
		gt.owner, gt.holds = owner, 1
	}
}

func (gt *gate) free() bool {
	return gt.owner == "" && len(gt.readers) == 0 && len(gt.queue) == 0
}

// leave drops one hold of owner from gt (the gate of key), lets in those
// waiting it can, and forgets the gate once nobody holds or waits for it;
// called with sh.mu held.
func (sh *gateShard) leave(key string, gt *gate, owner string, shared bool) {
	switch {
	case gt.owner == owner:
		if gt.holds--; gt.holds == 0 {
			gt.owner = ""
		}
	case gt.readers[owner] > 0:
		if gt.readers[owner]--; gt.readers[owner] == 0 {
			delete(gt.readers, owner)
		}
	}
	sh.admitQueued(key, gt)
}

// admitQueued lets in the waiters at the head of gt's queue that may go in
// now, in order, and answers those that now ask to upgrade a key they read
// (they may not wait: see owner.ErrUpgrade); called with sh.mu held.
func (sh *gateShard) admitQueued(key string, gt *gate) {
	for len(gt.queue) > 0 {
		w := gt.queue[0]
		v := gt.judge(w.owner, w.shared, nil)
		if v == Wait {
			break
		}
		gt.queue = gt.queue[1:]
		if v == Pass {
			gt.admit(w.owner, w.shared)
		}
		w.verdict = v
		close(w.granted)
	}
	if gt.free() {
		delete(sh.keys, key)
	}
}

// Granted is closed once the gate answered w: Verdict says how.
func (w *Waiter) Granted() <-chan struct{} { return w.granted }

// Verdict is the gate's answer to w, once Granted is closed: Pass, or
// Upgrade when w asks exclusively for a key its owner holds shared.
func (w *Waiter) Verdict() Verdict { return w.verdict }

// Key is the key w waits for.
func (w *Waiter) Key() string { return w.key }

// Holders returns the owners holding the gate of key now, sorted.
func (g *Table) Holders(key string) []string {
	sh := g.shard(key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	gt := sh.keys[key]
	if gt == nil {
		return nil
	}
	var owners []string
	if gt.owner != "" {
		owners = []string{gt.owner}
	}
	for owner := range gt.readers {
		owners = append(owners, owner)
	}
	slices.Sort(owners)
	return owners
}

// Queued returns the number of calls waiting at the gate of key.
func (g *Table) Queued(key string) int {
	sh := g.shard(key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if gt := sh.keys[key]; gt != nil {
		return len(gt.queue)
	}
	return 0
}
