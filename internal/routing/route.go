package routing

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// errElsewhere says that a slot was not served where a call went: it moved,
// or it is being migrated.
var errElsewhere = errors.New("the slot is being migrated or has moved")

// ErrClusterNode says that a single-node client's server is a node of a
// Redis Cluster, which serves only some slots: no retry makes it serve the
// others.
var ErrClusterNode = errors.New("the server is a Redis Cluster node: use a *redis.ClusterClient (redis.NewClusterClient), not a *redis.Client")

// plan is one call to make: parts, and where a redirection pointed.
type plan struct {
	parts   []int
	declare bool   // declare the first part's route key
	addr    string // "": the master of the route key
	asking  bool
}

// moved says that p goes where a MOVED pointed, this Route's or an earlier
// one's (movedSlots): an address that is not an ASK's.
func (p plan) moved() bool { return p.addr != "" && !p.asking }

// Route runs b: one call per master (per run of consecutive parts when
// Ordered), at most MaxCallKeys keys each, with no key declared, so that
// each part is judged by the script where it is. Parts that a call finds
// elsewhere go again, one call per slot declaring a key of it: MOVED sends
// them to the slot's new master, ASK to the importing master (with Follow),
// and otherwise they wait for the slot to settle. Calls that failed without
// running, or in a way that is safe to repeat, are sent again as they were.
// All of this within ctx and the Runner's Window; every script given to Route must
// be safe to repeat.
func (r *Runner) Route(ctx context.Context, b Batch) []Result {
	res := make([]Result, len(b.Parts))
	all := make([]int, len(b.Parts))
	for i := range all {
		all[i] = i
	}
	work, masters := r.byMaster(ctx, b, all)
	if b.Settled == nil {
		r.run(ctx, b, work, res)
		return res
	}
	// One run per master, each settling its parts on its own (parts that
	// moved meanwhile follow within their master's run).
	byAddr := map[string][]plan{}
	var order []string
	for i, p := range work {
		if _, ok := byAddr[masters[i]]; !ok {
			order = append(order, masters[i])
		}
		byAddr[masters[i]] = append(byAddr[masters[i]], p)
	}
	var wg sync.WaitGroup
	for n, addr := range order {
		settle := func() {
			plans := byAddr[addr]
			r.run(ctx, b, plans, res)
			var parts []int
			for _, p := range plans {
				parts = append(parts, p.parts...)
			}
			b.Settled(parts, res)
		}
		if n == len(order)-1 {
			settle() // the last master in this goroutine
		} else {
			wg.Go(settle)
		}
	}
	wg.Wait()
	return res
}

// run sends work, and again what failed in a way that may pass or was found
// elsewhere, until every part of it is final; it writes the results of
// those parts only.
func (r *Runner) run(ctx context.Context, b Batch, work []plan, res []Result) {
	last := make([]error, len(b.Parts)) // what each part's last attempt met
	began := time.Now()
	// A round whose every call goes where a reply pointed (MOVED, ASK
	// followed, or a key declared where a script found its slot gone) is
	// sent at once: a slot that moved costs round trips, not pauses. Others
	// pause, as do rounds past maxPointed in a row, lest two nodes that
	// disagree bounce the calls between them.
	waits, pointedInARow := 0, 0
	for len(work) > 0 {
		calls := make([]*Call, len(work))
		for i, p := range work {
			first := b.Parts[p.parts[0]]
			calls[i] = &Call{Slot: first.Slot, Route: first.Route, Args: b.Args(p.parts), Addr: p.addr, Asking: p.asking, step: b.Step}
			if p.declare {
				calls[i].Keys = []string{first.Route}
			}
		}
		r.sender.Send(ctx, b.Script, calls, b.Ack)
		if b.Sent != nil {
			b.Sent.Add(uint64(len(calls)))
		}

		var again []plan
		var moved []int
		var hints map[int]plan // by part: where a redirection pointed
		pointed := true
		for i, c := range calls {
			p := work[i]
			err := c.Reply.Err()
			if err == nil {
				elsewhere, err := b.Read(c, p.parts)
				for _, j := range p.parts {
					res[j].Err = err
				}
				for _, j := range elsewhere {
					last[j] = errElsewhere
					res[j].Err = Describe(ctx, b.Step, &Call{Slot: b.Parts[j].Slot}, errElsewhere)
				}
				moved = append(moved, elsewhere...)
				for _, j := range elsewhere {
					r.moved.forget(b.Parts[j].Slot)
				}
				// A call that declared its key ran where the slot is
				// served, and still found keys gone: a migration.
				pointed = pointed && (len(elsewhere) == 0 || !p.declare)
				continue
			}
			described := Describe(ctx, b.Step, c, err)
			for _, j := range p.parts {
				last[j] = err
				res[j].Err = described
				res[j].Unknown = res[j].Unknown || !Refused(err)
			}
			if addr, asking, ok := redirection(err); ok {
				moved = append(moved, p.parts...)
				if hints == nil {
					hints = map[int]plan{}
				}
				switch {
				case !asking:
					// MOVED vouches for the whole slot.
					stale, _ := r.master(ctx, b.Parts[p.parts[0]].Route)
					for _, j := range p.parts {
						hints[j] = plan{addr: addr}
						r.moved.point(b.Parts[j].Slot, addr, stale)
					}
				case b.Follow:
					// ASK vouches only for the key declared, which the
					// source no longer has: the others are asked about
					// again, each declaring its own key.
					hints[p.parts[0]] = plan{addr: addr, asking: true}
				default:
					pointed = false
				}
				continue
			}
			if Retryable(err) {
				if p.moved() {
					// The master a MOVED named failed: the map decides again.
					for _, j := range p.parts {
						r.moved.forget(b.Parts[j].Slot)
					}
					p.addr = ""
				}
				again = append(again, p)
				pointed = false
			}
		}
		if len(moved) > 0 && r.single {
			for _, j := range moved {
				res[j].Err = fmt.Errorf("%s: %w", b.Step, ErrClusterNode)
			}
			moved = nil
		}
		if len(moved) > 0 {
			slices.Sort(moved)
			again = append(again, r.perSlot(b, moved, hints)...)
		}
		work = again
		if len(work) == 0 {
			break
		}
		pause := !pointed || pointedInARow >= maxPointed
		if pause {
			pointedInARow = 0
		} else {
			pointedInARow++
		}
		if !r.wait(ctx, began, waits, pause) {
			// Given up: say what the last attempt met, and why it was
			// the last.
			for _, p := range work {
				for _, j := range p.parts {
					res[j].Err = Describe(ctx, b.Step, &Call{Slot: b.Parts[j].Slot}, last[j])
				}
			}
			break
		}
		if pause {
			waits++
		}
	}
}

// maxPointed bounds the rounds in a row sent at once (see run).
const maxPointed = 3

// redirection reads a MOVED or ASK reply: the node it names, and whether
// the slot is being imported there (ASK).
func redirection(err error) (addr string, asking, ok bool) {
	if addr, ok := redis.IsMovedError(err); ok {
		return addr, false, true
	}
	if addr, ok := redis.IsAskError(err); ok {
		return addr, true, true
	}
	return "", false, false
}

// byMaster plans parts as the map of slots places them: one call per master
// (per run of consecutive parts when b is Ordered), at most MaxCallKeys keys
// each, with the master of each call. A part whose master is unknown goes
// alone, to fail and be tried again.
func (r *Runner) byMaster(ctx context.Context, b Batch, parts []int) ([]plan, []string) {
	var out []plan
	var open []string // by plan, its master; a master's open plan is its last one
	var keys []int    // by plan, its keys
	lastSlot, addr, moved := -1, "", ""
	for _, j := range parts {
		part := b.Parts[j]
		if part.Slot != lastSlot {
			// Parts come grouped by slot: one look-up per slot.
			var err error
			if addr, err = r.master(ctx, part.Route); err != nil {
				addr = "unknown:" + strconv.Itoa(part.Slot)
			}
			moved = r.moved.where(part.Slot, addr)
			if moved != "" {
				addr = moved
			}
			lastSlot = part.Slot
		}
		i := -1
		if b.Ordered {
			if n := len(out); n > 0 && open[n-1] == addr {
				i = n - 1
			}
		} else {
			for n := len(out) - 1; n >= 0; n-- {
				if open[n] == addr {
					i = n
					break
				}
			}
		}
		if i < 0 || keys[i]+part.Keys > MaxCallKeys {
			i = len(out)
			out = append(out, plan{addr: moved})
			open = append(open, addr)
			keys = append(keys, 0)
		}
		out[i].parts = append(out[i].parts, j)
		keys[i] += part.Keys
	}
	return out, open
}

// perSlot plans parts found elsewhere: one call per slot (at most MaxCallKeys
// keys each) declaring a key of it, sent where a redirection pointed; with
// Follow, one call per part but where MOVED pointed, so that an ASK, which
// vouches for the key declared, vouches for all that the call carries.
func (r *Runner) perSlot(b Batch, parts []int, hints map[int]plan) []plan {
	var out []plan
	keys := 0
	for _, j := range parts {
		part, hint := b.Parts[j], hints[j]
		if n := len(out); n == 0 || b.Follow && (hint.asking || hint.addr == "") || b.Parts[out[n-1].parts[0]].Slot != part.Slot ||
			out[n-1].addr != hint.addr || out[n-1].asking != hint.asking || keys+part.Keys > MaxCallKeys {
			out = append(out, plan{declare: true, addr: hint.addr, asking: hint.asking})
			keys = 0
		}
		last := &out[len(out)-1]
		last.parts = append(last.parts, j)
		keys += part.Keys
	}
	return out
}

// wait comes before a round's next attempt: it refreshes the map of slots
// and, with pause, sleeps a jittered backoff, the waits-th of the round
// that began at began. It reports false, at once, when ctx is done or the
// Window has passed since began.
func (r *Runner) wait(ctx context.Context, began time.Time, waits int, pause bool) bool {
	window := r.Window
	if window <= 0 {
		window = RetryWindow
	}
	left := window - time.Since(began)
	if left <= 0 || ctx.Err() != nil {
		return false
	}
	r.Refresh(ctx)
	if !pause {
		return true
	}
	return sleep(ctx, min(jittered(waits), left))
}
