package batchlock

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/batchlock/batchlock/hashtag"
	"github.com/batchlock/batchlock/internal/lease"
	"github.com/batchlock/batchlock/internal/script"
)

// This file holds the three things done to a lock's holds: acquire, release
// and extend, one script call per master (per run of consecutive slots, for
// acquire), and what a call does when a slot turns out to be elsewhere.

// run is one acquire call's share of a batch: consecutive groups, in the
// global order, served by one master, with at most maxCallKeys keys.
type run struct {
	first  int // index of its first group among those planned
	groups []group
}

// runs cuts groups into runs by the masters that serve them. perSlot makes
// every group a run of its own, as after a slot was found elsewhere.
func (c *Client) runs(ctx context.Context, groups []group, perSlot bool) []run {
	var out []run
	prev, keys := "", 0
	for i, g := range groups {
		addr, err := c.runner.Master(ctx, g.fenceKey)
		if err != nil {
			// No map of slots: each group alone, for the call to fail and
			// be retried on its own.
			addr = "unknown:" + strconv.Itoa(i)
		}
		if len(out) == 0 || perSlot || addr != prev || keys+len(g.keys) > maxCallKeys {
			out = append(out, run{first: i})
			keys = 0
		}
		r := &out[len(out)-1]
		r.groups = append(r.groups, g)
		keys += len(g.keys)
		prev = addr
	}
	return out
}

// acquireOutcome is what one attempt at some groups found.
type acquireOutcome struct {
	refused        int      // index of the first refused group, -1 when none was
	part           int      // keys of the first refused group now held (waiting)
	queued         []int    // refused groups whose first conflict queues this hold (waiting)
	granted        []int    // groups now held
	conflicts      []string // lock keys held by other owners
	groupConflicts []string // those of the first refused group
	wait           time.Duration
	unknown        []int    // groups that may be held despite an error
	unknownRuns    []string // cancel marks of the calls whose outcome is unknown
	err            error
}

// acquire makes one attempt at groups, one call per run: each takes its
// groups in order, all or none (TryLock) or up to the first refused one
// (Lock, wait). Runs that find a slot elsewhere changed nothing; they are
// tried again slot by slot, with the map of slots refreshed, within ctx and
// script.RetryWindow.
func (c *Client) acquire(ctx context.Context, l *Lock, groups []group, wait bool) acquireOutcome {
	out := acquireOutcome{refused: -1}
	mode := "try"
	if wait {
		mode = "wait"
	}
	ms := lease.Millis(l.lease)
	pending := make([]int, len(groups)) // indices into groups
	for i := range pending {
		pending[i] = i
	}
	began := time.Now()
	for attempt := 0; ; attempt++ {
		sub := make([]group, len(pending))
		for i, gi := range pending {
			sub[i] = groups[gi]
		}
		runs := c.runs(ctx, sub, attempt > 0)
		calls := make([]*script.Call, len(runs))
		for i, r := range runs {
			calls[i] = acquireCall(l, r, ms, mode)
		}
		c.runner.Run(ctx, acquireScript, calls, l.ack)

		var elsewhere []int
		var where *script.Call
		for i, cl := range calls {
			at := make([]int, len(runs[i].groups)) // indices into groups
			for j := range at {
				at[j] = pending[runs[i].first+j]
			}
			if c.acquired(ctx, l, &out, groups, at, cl, wait) {
				elsewhere, where = append(elsewhere, at...), cl
			}
		}
		if len(elsewhere) == 0 {
			return out
		}
		if !c.runner.Wait(ctx, began, attempt) {
			if out.err == nil {
				out.err = script.Describe(ctx, "batchlock: acquire", where, errElsewhere)
			}
			return out
		}
		pending = elsewhere
	}
}

// errElsewhere says that a slot was not served where the map of slots said:
// it moved, or it is being migrated.
var errElsewhere = errors.New("the slot is being migrated or has moved")

func acquireCall(l *Lock, r run, leaseMs int64, mode string) *script.Call {
	first := r.groups[0]
	args := []any{escapeOwner(l.owner), l.hold, leaseMs, mode, first.cancelKey(l.hold), lease.Millis(l.c.place())}
	for _, g := range r.groups {
		args = append(args, g.fenceKey, len(g.keys), string(g.modes))
		for _, k := range g.keys {
			args = append(args, k)
		}
	}
	return &script.Call{Slot: first.slot, Keys: []string{first.fenceKey}, Args: args}
}

// acquired records what the call for groups at (indices into groups) did,
// and reports whether its slots were elsewhere (nothing was changed).
func (c *Client) acquired(ctx context.Context, l *Lock, out *acquireOutcome, groups []group, at []int, cl *script.Call, wait bool) (elsewhere bool) {
	vals, err := cl.Reply.Slice()
	status := int64(acquireMalformed)
	if err == nil && len(vals) > 0 {
		status, _ = vals[0].(int64)
	}
	switch {
	case err == nil && status == acquireGranted && len(vals) == 2:
		c.granted(l, out, groups, at, vals[1])
		if !l.ack.Acknowledged(cl) && out.err == nil {
			out.err = fmt.Errorf("%w: %w", ErrNotObtained, unacknowledged(cl, l.ack))
		}
	case err == nil && status == acquireRefused && len(vals) == 6:
		held, _ := vals[1].(int64)
		waitMs, _ := vals[2].(int64)
		conflicts := stringsOf(vals[3])
		part, _ := vals[5].(int64)
		held = min(held, int64(len(at)-1))
		if held+part > 0 && !l.ack.Acknowledged(cl) && out.err == nil {
			out.err = fmt.Errorf("%w: %w", ErrNotObtained, unacknowledged(cl, l.ack))
		}
		refused := at[held]
		if held == 0 && len(conflicts) > 0 {
			refused = groupOf(groups, at, conflicts[0])
		}
		out.conflicts = append(out.conflicts, conflicts...)
		c.granted(l, out, groups, at[:held], vals[4])
		// The part keys' tokens come last, after those of the held groups.
		if toks, _ := vals[4].([]any); part > 0 && int(part) <= min(len(toks), len(groups[refused].keys)) {
			l.setTokens(groups[refused].keys[:part], toks[len(toks)-int(part):])
		}
		if wait {
			out.queued = append(out.queued, refused)
		}
		if out.refused < 0 || refused < out.refused {
			out.refused = refused
			out.part = int(part)
			out.groupConflicts = inGroup(groups[refused], conflicts)
			out.wait = time.Duration(waitMs) * time.Millisecond
		}
	case err == nil && status == acquireElsewhere:
		return true
	case err == nil && status == acquireUpgrade && len(vals) == 2:
		// Nothing was changed, and waiting would not help: an error,
		// with no group of this call held.
		key, _ := vals[1].(string)
		if out.err == nil {
			out.err = fmt.Errorf("%w: %w: %q", ErrNotObtained, ErrUpgrade, strings.TrimPrefix(key, c.cfg.prefix))
		}
	default:
		// An error, a cancelled hold (a rollback overtook this acquire)
		// or a reply of another shape: unless every attempt was refused
		// unrun, the groups may or may not be held.
		if cl.Ran {
			out.unknown = append(out.unknown, at...)
			out.unknownRuns = append(out.unknownRuns, groups[at[0]].cancelKey(l.hold))
		}
		switch {
		case err == nil && status == acquireCancelled:
			err = errors.New("a rollback overtook it")
		case err == nil:
			err = fmt.Errorf("unexpected reply %v", vals)
		}
		if out.err == nil {
			out.err = script.Describe(ctx, "batchlock: acquire", cl, err)
		}
	}
	return false
}

// granted records groups at (indices into groups) as held, with the tokens
// of their keys in order.
func (c *Client) granted(l *Lock, out *acquireOutcome, groups []group, at []int, tokens any) {
	var keys []string
	for _, gi := range at {
		out.granted = append(out.granted, gi)
		keys = append(keys, groups[gi].keys...)
	}
	toks, _ := tokens.([]any)
	l.setTokens(keys, toks)
}

// setTokens records the fencing tokens of keys, in order, as far as tokens
// go.
func (l *Lock) setTokens(keys []string, tokens []any) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for i, k := range keys[:min(len(keys), len(tokens))] {
		l.tokens[k], _ = tokens[i].(int64)
	}
}

func stringsOf(v any) []string {
	vals, _ := v.([]any)
	out := make([]string, 0, len(vals))
	for _, e := range vals {
		if s, ok := e.(string); ok {
			out = append(out, s)
		}
	}
	return out
}

// groupOf returns the index (among at) of the group holding key.
func groupOf(groups []group, at []int, key string) int {
	for _, gi := range at {
		for _, k := range groups[gi].keys {
			if k == key {
				return gi
			}
		}
	}
	return at[0]
}

func inGroup(g group, keys []string) []string {
	var out []string
	for _, k := range keys {
		for _, gk := range g.keys {
			if gk == k {
				out = append(out, k)
				break
			}
		}
	}
	return out
}

// unacknowledged says that fewer replicas than asked for acknowledged cl.
func unacknowledged(cl *script.Call, ack script.Ack) error {
	return fmt.Errorf("%w: slot %d: %d of %d replicas acknowledged within %v",
		ErrNoReplicas, cl.Slot, max(cl.Acks, 0), ack.Replicas, ack.Timeout)
}

// rollback releases every hold the call may have taken: groups[:held], and
// the groups of the last attempt (which started at held) that were granted,
// queued for (their first keys held, a place in a queue) or whose outcome is
// unknown. Releases are idempotent; the hold of a call
// whose outcome is unknown is also marked cancelled, so that the call,
// should it still be in flight (a frozen master), cannot take anything.
//
// The releases run on a context of their own, so that they are made even
// when ctx is done, for at most rollbackTimeout. rollback waits for them
// while ctx lasts; once it is done, they go on in the background (Close
// waits for them), so that the call returns within its context.
func (c *Client) rollback(ctx context.Context, l *Lock, held int, last acquireOutcome) {
	groups := append([]group(nil), l.groups[:held]...)
	for _, i := range last.granted {
		groups = append(groups, l.groups[held+i])
	}
	for _, i := range last.unknown {
		groups = append(groups, l.groups[held+i])
	}
	for _, i := range last.queued {
		groups = append(groups, l.groups[held+i])
	}
	if len(groups) == 0 {
		return
	}
	done := make(chan struct{})
	c.calls.Join()
	go func() {
		defer c.calls.Leave()
		defer close(done)
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), rollbackTimeout)
		defer cancel()
		_, _ = c.release(rctx, l, groups, last.unknownRuns)
	}()
	select {
	case <-done:
	case <-ctx.Done():
	}
}

// release drops l's hold from groups, one call per master, and sets the
// cancel marks given; it returns the lock keys that another owner holds.
func (c *Client) release(ctx context.Context, l *Lock, groups []group, marks []string) ([]string, error) {
	if len(groups) == 0 {
		return nil, nil
	}
	var keys []string
	for _, g := range groups {
		keys = append(keys, g.keys...)
	}
	remember := lease.Millis(l.lease)
	var taken []string
	errs := c.perMaster(ctx, "release", keys, marks, func(cl *script.Call, at []int, marks []string) {
		cl.Args = append([]any{escapeOwner(l.owner), l.hold, remember, len(marks)}, anys(marks)...)
		cl.Args = append(cl.Args, keysAt(keys, at)...)
	}, func(cl *script.Call, at []int, vals []any) []int {
		taken = append(taken, stringsOf(vals[0])...)
		return indicesOf(keys, at, stringsOf(vals[1]))
	}, releaseScript, script.Ack{})
	return taken, firstError(errs)
}

// holdKeys is one lock's share of an extension: its hold, the lease and its
// keys.
type holdKeys struct {
	hold  string
	lease int64 // ms
	keys  []string
}

// extend makes the lease of l's hold on groups run at least ttl from now, and
// returns the lock keys that no longer carry it. With WithReplicas, the
// extension counts only once acknowledged: otherwise the error wraps
// ErrNoReplicas.
func (c *Client) extend(ctx context.Context, l *Lock, groups []group, ttl time.Duration) ([]string, error) {
	h := holdKeys{hold: l.hold, lease: lease.Millis(ttl)}
	for _, g := range groups {
		h.keys = append(h.keys, g.keys...)
	}
	lost, errs := c.extendAll(ctx, []holdKeys{h}, l.ack)
	return lost[0], errs[0]
}

// extendAll extends the holds of several locks, one call per master for all
// of them (the watchdog's round), and returns per lock the keys lost and its
// error: the first error among its keys, or ErrNoReplicas. Locks of one owner
// may share keys: every hold is extended on its own.
func (c *Client) extendAll(ctx context.Context, locks []holdKeys, ack script.Ack) ([][]string, []error) {
	lost := make([][]string, len(locks))
	errs := make([]error, len(locks))
	var keys []string
	var lockOf []int // the lock of keys[i]
	for i, h := range locks {
		keys = append(keys, h.keys...)
		for range h.keys {
			lockOf = append(lockOf, i)
		}
	}
	segs := map[*script.Call][][]int{} // per call, the key indices of each lock it carries
	keyErrs := c.perMaster(ctx, "extend", keys, nil, func(cl *script.Call, at []int, _ []string) {
		var bySeg [][]int
		seg := map[int]int{}
		for _, j := range at {
			n, ok := seg[lockOf[j]]
			if !ok {
				n = len(bySeg)
				seg[lockOf[j]] = n
				bySeg = append(bySeg, nil)
			}
			bySeg[n] = append(bySeg[n], j)
		}
		for _, at := range bySeg {
			h := locks[lockOf[at[0]]]
			cl.Args = append(cl.Args, h.hold, h.lease, len(at))
			cl.Args = append(cl.Args, keysAt(keys, at)...)
		}
		segs[cl] = bySeg
	}, func(cl *script.Call, _ []int, vals []any) []int {
		var again []int
		for n, at := range segs[cl] {
			i := lockOf[at[0]]
			if 2*n+1 < len(vals) {
				lost[i] = append(lost[i], stringsOf(vals[2*n])...)
				again = append(again, indicesOf(keys, at, stringsOf(vals[2*n+1]))...)
			}
			if !ack.Acknowledged(cl) && errs[i] == nil {
				errs[i] = unacknowledged(cl, ack)
			}
		}
		return again
	}, extendScript, ack)
	for j, err := range keyErrs {
		if err != nil && errs[lockOf[j]] == nil {
			errs[lockOf[j]] = err
		}
	}
	return lost, errs
}

// perMaster runs s over keys (and cancel marks), one call per master: fill
// gives a call its arguments for the keys at the indices given, read takes
// its reply and returns the indices of the keys it found elsewhere. Those
// are sent again, one call per slot, after the map of slots is refreshed,
// within ctx and script.RetryWindow. It returns the error of each key, nil
// for those that went through.
func (c *Client) perMaster(ctx context.Context, step string, keys, marks []string,
	fill func(cl *script.Call, at []int, marks []string), read func(cl *script.Call, at []int, vals []any) []int,
	s *redis.Script, ack script.Ack) []error {
	errs := make([]error, len(keys))
	pending := make([]int, len(keys))
	for i := range pending {
		pending[i] = i
	}
	began := time.Now()
	for attempt := 0; len(pending)+len(marks) > 0; attempt++ {
		parts := c.byMaster(ctx, keys, pending, marks, attempt > 0)
		calls := make([]*script.Call, len(parts))
		for i, p := range parts {
			route := p.route(keys)
			calls[i] = &script.Call{Slot: hashtag.Slot(route), Keys: []string{route}}
			fill(calls[i], p.at, p.marks)
		}
		c.runner.Run(ctx, s, calls, ack)
		pending, marks = nil, nil
		var where *script.Call
		for i, cl := range calls {
			vals, err := cl.Reply.Slice()
			if err == nil && len(vals) == 0 {
				err = fmt.Errorf("unexpected reply %v", vals)
			}
			if err != nil {
				err = script.Describe(ctx, "batchlock: "+step, cl, err)
				for _, j := range parts[i].at {
					errs[j] = err
				}
				continue
			}
			if again := read(cl, parts[i].at, vals); len(again) > 0 {
				pending, where = append(pending, again...), cl
			}
		}
		if len(pending) > 0 && !c.runner.Wait(ctx, began, attempt) {
			err := script.Describe(ctx, "batchlock: "+step, where, errElsewhere)
			for _, j := range pending {
				errs[j] = err
			}
			break
		}
	}
	return errs
}

// share is what one call of perMaster carries: indices of keys, and marks.
type share struct {
	at    []int
	marks []string
}

// route is the key that routes the call: a key of its master.
func (p share) route(keys []string) string {
	if len(p.marks) > 0 {
		return p.marks[0]
	}
	return keys[p.at[0]]
}

// byMaster splits the keys at the indices given, and marks, by the master
// that serves them (asked once per slot), or by slot.
func (c *Client) byMaster(ctx context.Context, keys []string, at []int, marks []string, perSlot bool) []share {
	var out []share
	byWhere := map[string]int{}
	masterOf := map[int]string{}
	where := func(k string) string {
		slot := hashtag.Slot(k)
		if perSlot {
			return strconv.Itoa(slot)
		}
		addr, ok := masterOf[slot]
		if !ok {
			var err error
			if addr, err = c.runner.Master(ctx, k); err != nil {
				addr = "unknown:" + strconv.Itoa(slot)
			}
			masterOf[slot] = addr
		}
		return addr
	}
	part := func(k string) *share {
		w := where(k)
		i, ok := byWhere[w]
		if !ok {
			i = len(out)
			byWhere[w] = i
			out = append(out, share{})
		}
		return &out[i]
	}
	for _, m := range marks {
		p := part(m)
		p.marks = append(p.marks, m)
	}
	for _, j := range at {
		p := part(keys[j])
		p.at = append(p.at, j)
	}
	return out
}

// keysAt returns the keys at the indices given, as arguments.
func keysAt(keys []string, at []int) []any {
	out := make([]any, len(at))
	for i, j := range at {
		out[i] = keys[j]
	}
	return out
}

// indicesOf returns the indices, among at, of the keys named.
func indicesOf(keys []string, at []int, named []string) []int {
	if len(named) == 0 {
		return nil
	}
	want := make(map[string]bool, len(named))
	for _, k := range named {
		want[k] = true
	}
	var out []int
	for _, j := range at {
		if want[keys[j]] {
			out = append(out, j)
		}
	}
	return out
}

func firstError(errs []error) error {
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

func anys(ss []string) []any {
	out := make([]any, len(ss))
	for i, s := range ss {
		out[i] = s
	}
	return out
}

// userKeys strips the prefix from lock keys.
func (c *Client) userKeys(lockKeys []string) []string {
	out := make([]string, len(lockKeys))
	for i, k := range lockKeys {
		out[i] = k[len(c.cfg.prefix):]
	}
	return out
}
