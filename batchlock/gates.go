package batchlock

import (
	"context"
	"hash/maphash"
	"sync"
)

// gates settle conflicts among the locks of one Client in the process, the
// first of the two levels of locking: a call takes the gate of each of its
// keys, in the global order, before it sends anything for them to Redis, so
// that Redis sees at most one contender per key from this Client, and a call
// whose keys another lock of the Client holds waits here for them instead
// of sending calls that Redis would refuse. A key's gate follows the rules
// of the key in Redis: an owner's locks pass it together (reentrancy), any
// number of owners pass it shared, one exclusively, and a waiting writer is
// not overtaken by later readers; it is let go the moment its lock ends.
type gates struct {
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
	queue   []*gateWaiter  // in arrival order
}

// gateWaiter is a call waiting at a gate.
type gateWaiter struct {
	sh      *gateShard
	key     string
	gt      *gate
	owner   string
	shared  bool
	granted chan struct{} // closed once the gate answered: verdict says how
	verdict verdict       // gatePass, or gateUpgrade once it asks to upgrade
}

func newGates() *gates {
	g := &gates{seed: maphash.MakeSeed()}
	for i := range g.shards {
		g.shards[i].keys = make(map[string]*gate)
	}
	return g
}

func (g *gates) shard(key string) *gateShard {
	return &g.shards[maphash.String(g.seed, key)%gateShards]
}

// verdict is what a gate says to an owner asking for it.
type verdict int

const (
	gatePass    verdict = iota // it may go through now
	gateWait                   // another owner holds it, or a writer waits ahead
	gateUpgrade                // it holds the key shared and asks for it exclusively
)

// judge says what the gate says to owner asking for it, shared or not;
// queued waiters ahead count (none when the caller is at the head).
func (gt *gate) judge(owner string, shared bool, ahead []*gateWaiter) verdict {
	switch {
	case gt.owner == owner:
		return gatePass // an owner's locks share its holds
	case gt.owner != "":
		return gateWait
	case len(gt.readers) == 0:
		if len(ahead) > 0 {
			return gateWait
		}
		return gatePass
	case gt.readers[owner] > 0 && !shared:
		return gateUpgrade
	case gt.readers[owner] > 0:
		return gatePass // readers of an owner share its holds, writers queued or not
	case !shared:
		return gateWait
	}
	for _, w := range ahead {
		if !w.shared {
			return gateWait // a writer waits ahead: readers queue behind it
		}
	}
	return gatePass
}

// enter gives owner's hold the gate of key, and reports gatePass, or how it
// could not: gateUpgrade at once, or gateWait when it may not wait (TryLock)
// or after ctx ended (then it holds nothing). waiting is called before it
// waits.
func (g *gates) enter(ctx context.Context, key, owner string, shared, mayWait bool, waiting func()) verdict {
	v, w := g.ask(key, owner, shared, mayWait)
	if w == nil {
		return v
	}
	w.notify(waiting)
	select {
	case <-w.granted:
		return w.verdict
	case <-ctx.Done():
	}
	w.abandon()
	return gateWait
}

// ask gives owner's hold the gate of key if it may go through now
// (gatePass); otherwise it reports gateUpgrade, or gateWait, with, when
// mayWait, a place in the gate's queue: the caller waits for its granted,
// or abandons it.
func (g *gates) ask(key, owner string, shared, mayWait bool) (verdict, *gateWaiter) {
	sh := g.shard(key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	gt := sh.keys[key]
	if gt == nil {
		gt = &gate{}
		sh.keys[key] = gt
	}
	switch v := gt.judge(owner, shared, gt.queue); {
	case v == gatePass:
		gt.admit(owner, shared)
		return gatePass, nil
	case v == gateUpgrade || !mayWait:
		if gt.free() {
			delete(sh.keys, key)
		}
		return v, nil
	}
	w := &gateWaiter{sh: sh, key: key, gt: gt, owner: owner, shared: shared, granted: make(chan struct{})}
	gt.queue = append(gt.queue, w)
	return gateWait, w
}

// notify calls waiting for w, queued; a panic in it (an observer's) takes w
// out of the queue before it goes on, or the gate would be held by nobody
// once w's turn came.
func (w *gateWaiter) notify(waiting func()) {
	defer func() {
		if r := recover(); r != nil {
			w.abandon()
			panic(r)
		}
	}()
	waiting()
}

// abandon takes w out of its gate's queue, or gives back the gate if it
// was let in meanwhile.
func (w *gateWaiter) abandon() {
	sh, gt := w.sh, w.gt
	sh.mu.Lock()
	defer sh.mu.Unlock()
	select {
	case <-w.granted:
		if w.verdict == gatePass {
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

// count returns the number of gates held or waited for.
func (g *gates) count() int {
	n := 0
	for i := range g.shards {
		sh := &g.shards[i]
		sh.mu.Lock()
		n += len(sh.keys)
		sh.mu.Unlock()
	}
	return n
}

// leave gives back one hold of owner on the gate of key.
func (g *gates) leave(key, owner string, shared bool) {
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
// (they may not wait: see ErrUpgrade); called with sh.mu held.
func (sh *gateShard) admitQueued(key string, gt *gate) {
	for len(gt.queue) > 0 {
		w := gt.queue[0]
		v := gt.judge(w.owner, w.shared, nil)
		if v == gateWait {
			break
		}
		gt.queue = gt.queue[1:]
		if v == gatePass {
			gt.admit(w.owner, w.shared)
		}
		w.verdict = v
		close(w.granted)
	}
	if gt.free() {
		delete(sh.keys, key)
	}
}
