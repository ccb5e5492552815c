package cluster_test

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/batchlock/batchlock/hashtag"
)

// The soak's judge. For each key, no two owners' sections overlap; its
// fencing tokens never go backwards and no token serves two owners; a fenced
// write is never refused while its writer still believed it held the key.
// The one exception the documentation states: a failover can lose a lock
// taken without WithReplicas (and the slot's counter with it). A breach
// whose earlier section held such a lock, on a master that lost its role
// during or before the later section, is counted apart. So is an overlap
// that the host's wall clock made, by moving forward as far between the
// two sections' starts (see wallClock), which the contract rules out.

// excusable is how far before a section's start a failover can still have
// lost its lock: its acquire reached the master before the call returned.
const excusable = time.Second

// judge returns the violations, the number of breaches excused, and how
// often readers of one key overlapped (see breaches).
func (s *soak) judge() (violations []string, excused, overlapped int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	violations = slices.Clone(s.problems)
	sections := make([]section, len(s.sections))
	for i, sec := range s.sections {
		sections[i] = sec.section
	}
	found, overlapped := breaches(sections)
	for _, b := range found {
		earlier, later := s.sections[b.earlier], s.sections[b.later]
		if b.key != "" && s.lostToFailover(earlier.replicas, earlier.Start, later.Start, b.key) {
			excused++
			continue
		}
		if b.overlap && s.clockMadeOverlap(b.key, earlier.Owner, b.what, earlier.granted, later.Start, earlier.End.Sub(later.Start)) {
			continue
		}
		violations = append(violations, b.what)
	}
	for _, r := range s.refusals {
		// The refused writer's own lock, or the lock of the writer of the
		// larger token, may have been lost to a failover: then its slot's
		// counter may have lost increments, and tokens may go back.
		if s.lostToFailover(r.replicas, r.start, r.at, r.key) || s.lostToFailover(r.by.replicas, r.by.start, r.at, r.key) {
			excused++
			continue
		}
		what := fmt.Sprintf("key %s: write of %s with token %d refused at %s, within its validity (WithReplicas %v; the larger token %d, from a section started at %s, WithReplicas %v)",
			r.key, r.owner, r.token, r.at.Format("15:04:05.000000"), r.replicas, r.by.token, r.by.start.Format("15:04:05.000000"), r.by.replicas)
		// The writer of the larger token began while the refused one
		// still counted on the key: an overlap, maybe the clock's.
		if s.clockMadeOverlap(r.key, r.owner, what, r.granted, r.by.start, r.until.Sub(r.by.start)) {
			continue
		}
		violations = append(violations, what)
	}
	lost, _ := s.judgeHolders()
	violations = append(violations, lost...)
	return violations, excused, overlapped
}

// clockMadeOverlap reports, and notes, whether the wall clock moved forward
// by at least over between granted, when the earlier holder's (cut's)
// lease was granted or last lengthened (Redis counted its expiry from
// then), and laterStart, when the later holder began: then Redis ended
// that lease early by as much, and the overlap is the clock's.
func (s *soak) clockMadeOverlap(key, cut, what string, granted, laterStart time.Time, over time.Duration) bool {
	step := s.clock.forwardBetween(granted, laterStart)
	if step <= 0 || step < over {
		return false
	}
	s.clockExcused[key] = append(s.clockExcused[key], fmt.Sprintf("%s: the wall clock moved %v forward in between", what, step))
	s.clockCut[cut] = true
	return true
}

// lostToFailover reports whether a lock on key, taken without WithReplicas
// and held from start, may have been lost by then to a master that lost its
// role.
func (s *soak) lostToFailover(replicas bool, start, then time.Time, key string) bool {
	if replicas {
		return false
	}
	slot := hashtag.Slot(s.prefix + key)
	for _, ev := range s.faults {
		if ev.slots == nil || ev.until.Before(start.Add(-excusable)) || ev.at.After(then) {
			continue
		}
		for _, r := range ev.slots {
			if slot >= r[0] && slot <= r[1] {
				return true
			}
		}
	}
	return false
}

// The judge is what the soak trusts: shown here to catch each breach, and
// to excuse exactly the documented one, on made-up histories.
func TestSoakJudge(t *testing.T) {
	t0 := time.Now()
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	const key = "sku:1"
	prefix := "judge:"
	slot := hashtag.Slot(prefix + key)
	sec := func(owner string, from, to int, token int64, replicas bool) soakSection {
		return soakSection{section: section{Owner: owner, Keys: []string{key}, Tokens: map[string]int64{key: token},
			Start: at(from), End: at(to)}, replicas: replicas, granted: at(from)}
	}
	// renewedAt is sec's lock with its lease last lengthened at ms.
	renewedAt := func(s soakSection, ms int) soakSection {
		s.granted = at(ms)
		return s
	}
	failover := faultEvent{kind: "failover", at: at(50), until: at(60), slots: [][2]int{{slot, slot}}}
	elsewhere := faultEvent{kind: "failover", at: at(50), until: at(60), slots: [][2]int{{(slot + 1) % 16384, (slot + 1) % 16384}}}
	served := [][2]int{{slot, slot}}
	sleep := faultEvent{kind: "master DEBUG SLEEP", at: at(50), until: at(60), served: served}
	sleepElsewhere := faultEvent{kind: "master DEBUG SLEEP", at: at(50), until: at(60), served: [][2]int{{(slot + 1) % 16384, (slot + 1) % 16384}}}
	migrated := faultEvent{kind: "slot migrated key by key", at: at(50), until: at(60), served: served}
	failoverOf := func(ev faultEvent) faultEvent {
		ev.kind, ev.served = "master frozen until failed over", ev.slots
		return ev
	}
	loss := holderLoss{owner: "h", keys: []string{key}, lease: 100 * time.Millisecond, at: at(100)}
	lateLoss := loss
	lateLoss.at = at(300)
	for _, tc := range []struct {
		name       string
		sections   []soakSection
		faults     []faultEvent
		refusals   []refusal
		losses     []holderLoss
		violations []string
		excused    int
		clock      []clockSample // the wall clock's moves after t0
		clockMade  int           // overlaps excused as the wall clock's
	}{
		{name: "holder lost while its master slept", losses: []holderLoss{loss}, faults: []faultEvent{sleep}},
		{name: "holder lost while another master slept", losses: []holderLoss{loss}, faults: []faultEvent{sleepElsewhere},
			violations: []string{"holder h lost its lock"}},
		{name: "holder lost while another master failed over", losses: []holderLoss{loss}, faults: []faultEvent{failoverOf(elsewhere)}},
		{name: "holder lost while its slot moved", losses: []holderLoss{loss}, faults: []faultEvent{migrated},
			violations: []string{"holder h lost its lock"}},
		{name: "holder lost as the wall clock moved forward a third of its lease", losses: []holderLoss{loss},
			clock: []clockSample{{at: at(60), lead: 40 * time.Millisecond}}},
		{name: "a smaller move of the wall clock excuses no holder loss", losses: []holderLoss{loss},
			clock: []clockSample{{at: at(60), lead: 20 * time.Millisecond}}, violations: []string{"holder h lost its lock"}},
		{name: "a move of the wall clock a lease before excuses no holder loss", losses: []holderLoss{lateLoss},
			clock: []clockSample{{at: at(100), lead: 90 * time.Millisecond}}, violations: []string{"holder h lost its lock"}},
		{name: "clean", sections: []soakSection{sec("a", 0, 10, 1, false), sec("b", 10, 20, 2, true)}},
		{name: "overlap", sections: []soakSection{sec("a", 0, 100, 1, true), sec("b", 90, 120, 2, true)},
			violations: []string{"key sku:1: b held it"}},
		{name: "overlap after a failover, first lock without WithReplicas",
			sections: []soakSection{sec("a", 0, 100, 1, false), sec("b", 90, 120, 2, true)},
			faults:   []faultEvent{failover}, excused: 1},
		{name: "overlap after a failover, first lock WithReplicas",
			sections: []soakSection{sec("a", 0, 100, 1, true), sec("b", 90, 120, 2, false)},
			faults:   []faultEvent{failover}, violations: []string{"key sku:1: b held it"}},
		{name: "failover of another slot excuses nothing",
			sections: []soakSection{sec("a", 0, 100, 1, false), sec("b", 90, 120, 2, false)},
			faults:   []faultEvent{elsewhere}, violations: []string{"key sku:1: b held it"}},
		{name: "overlap the wall clock made, moving forward as far in between",
			sections: []soakSection{sec("a", 0, 100, 1, true), sec("b", 90, 120, 2, true)},
			clock:    []clockSample{{at: at(50), lead: 15 * time.Millisecond}}, clockMade: 1},
		{name: "overlap longer than the wall clock's move",
			sections: []soakSection{sec("a", 0, 100, 1, true), sec("b", 90, 120, 2, true)},
			clock:    []clockSample{{at: at(50), lead: 5 * time.Millisecond}}, violations: []string{"key sku:1: b held it"}},
		{name: "the wall clock moving forward after the later start excuses nothing",
			sections: []soakSection{sec("a", 0, 100, 1, true), sec("b", 90, 120, 2, true)},
			clock:    []clockSample{{at: at(200), lead: 50 * time.Millisecond}}, violations: []string{"key sku:1: b held it"}},
		{name: "the wall clock moving back excuses nothing",
			sections: []soakSection{sec("a", 0, 100, 1, true), sec("b", 90, 120, 2, true)},
			clock:    []clockSample{{at: at(50), lead: -50 * time.Millisecond}}, violations: []string{"key sku:1: b held it"}},
		{name: "a move of the wall clock before the lease's last renewal excuses nothing",
			sections: []soakSection{renewedAt(sec("a", 0, 3150, 1, true), 2150), sec("b", 3000, 3100, 2, true)},
			clock:    []clockSample{{at: at(1000), lead: 200 * time.Millisecond}}, violations: []string{"key sku:1: b held it"}},
		{name: "a move of the wall clock after the lease's last renewal",
			sections: []soakSection{renewedAt(sec("a", 0, 3150, 1, true), 2150), sec("b", 3000, 3100, 2, true)},
			clock:    []clockSample{{at: at(2500), lead: 200 * time.Millisecond}}, clockMade: 1},
		{name: "a write refused within its validity that the wall clock made",
			refusals: []refusal{{key: key, token: 1, owner: "a", replicas: true, start: at(0), granted: at(0), until: at(100), at: at(95),
				by: storeWrite{token: 2, replicas: true, start: at(90)}}},
			clock: []clockSample{{at: at(50), lead: 15 * time.Millisecond}}, clockMade: 1},
		{name: "a write refused within its validity, more than the wall clock's move",
			refusals: []refusal{{key: key, token: 1, owner: "a", replicas: true, start: at(0), granted: at(0), until: at(100), at: at(95),
				by: storeWrite{token: 2, replicas: true, start: at(50)}}},
			clock:      []clockSample{{at: at(20), lead: 15 * time.Millisecond}},
			violations: []string{"write of a with token 1 refused"}},
		{name: "the wall clock's move excuses no token given twice",
			sections: []soakSection{sec("a", 0, 10, 5, true), sec("b", 20, 30, 5, true)},
			clock:    []clockSample{{at: at(15), lead: 50 * time.Millisecond}}, violations: []string{"token 5 given to both a and b"}},
		{name: "token backwards", sections: []soakSection{sec("a", 0, 10, 5, true), sec("b", 20, 30, 3, true)},
			violations: []string{"token went backwards from 5 (a) to 3 (b)"}},
		{name: "token backwards after a failover", sections: []soakSection{sec("a", 0, 10, 5, false), sec("b", 70, 80, 3, true)},
			faults: []faultEvent{failover}, excused: 1},
		{name: "token given twice", sections: []soakSection{sec("a", 0, 10, 5, true), sec("b", 20, 30, 5, true)},
			violations: []string{"token 5 given to both a and b"}},
		{name: "write refused within validity",
			refusals:   []refusal{{key: key, token: 4, owner: "a", replicas: true, start: at(0), at: at(5), by: storeWrite{token: 5, replicas: true, start: at(1)}}},
			violations: []string{"write of a with token 4 refused"}},
		{name: "write refused after a failover, the larger token's lock without WithReplicas",
			refusals: []refusal{{key: key, token: 4, owner: "a", replicas: true, start: at(70), at: at(75), by: storeWrite{token: 5, replicas: false, start: at(0)}}},
			faults:   []faultEvent{failover}, excused: 1},
		{name: "write refused after a failover, both WithReplicas",
			refusals:   []refusal{{key: key, token: 4, owner: "a", replicas: true, start: at(70), at: at(75), by: storeWrite{token: 5, replicas: true, start: at(0)}}},
			faults:     []faultEvent{failover},
			violations: []string{"write of a with token 4 refused"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := &soak{t: t, prefix: prefix, sections: tc.sections, faults: tc.faults, refusals: tc.refusals, holderLosses: tc.losses,
				clock: &wallClock{origin: t0, moves: append([]clockSample{{at: t0}}, tc.clock...)}, clockExcused: map[string][]string{}, clockCut: map[string]bool{}}
			violations, excused, _ := s.judge()
			require.Len(t, violations, len(tc.violations), "violations: %q", violations)
			for i, want := range tc.violations {
				assert.Contains(t, violations[i], want)
			}
			assert.Equal(t, tc.excused, excused, "excused")
			assert.Len(t, s.clockExcused[key], tc.clockMade, "overlaps excused as the wall clock's")
			if tc.clockMade > 0 {
				assert.True(t, s.clockCut["a"], "the earlier holder's lease was cut short")
			}
		})
	}
}

// A partition porcupine finds illegal is the clock's when one of its keys
// had an overlap the clock made, or was held by an owner whose lease the
// clock cut short on another key; other owners excuse nothing.
func TestClockMadePartition(t *testing.T) {
	s := &soak{clockExcused: map[string][]string{"sku:1": {"an overlap"}}, clockCut: map[string]bool{"a": true}}
	ops := []historyOp{{Kind: opAcquire, Owner: "a", Keys: []string{"sku:2", "promo:3"}}, {Kind: opAcquire, Owner: "b", Keys: []string{"promo:4"}}}
	for _, tc := range []struct {
		keys []string
		want bool
	}{
		{[]string{"sku:1"}, true},
		{[]string{"promo:3"}, true},
		{[]string{"promo:4"}, false},
		{[]string{"sku:9"}, false},
	} {
		assert.Equal(t, tc.want, s.clockMade(tc.keys, ops), "%v", tc.keys)
	}
}

// The rollback judge excuses keys a failed call left held only where a fault
// kept its rollback from the master until within the rollback bound of the
// check (made a second past the bound after the call failed): a master that
// slept, or a Client cut off from it, that long. Keys still held longer
// after the master came back are a leftover, whatever fault came before.
func TestSoakRollbackJudge(t *testing.T) {
	t0 := time.Now()
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	const key = "sku:1"
	prefix := "judge:"
	slot := hashtag.Slot(prefix + key)
	served := [][2]int{{slot, slot}}
	checked := at(100 + int((rollbackBound + time.Second).Milliseconds()))
	call := failedCall{owner: "a", keys: []string{key}, held: []string{key}, start: at(100), checked: checked}
	for _, tc := range []struct {
		name     string
		fault    faultEvent
		leftover bool
	}{
		{name: "asleep past the call's failure, to within the bound of the check",
			fault: faultEvent{kind: "master DEBUG SLEEP", at: at(50), until: at(1500), served: served}},
		{name: "asleep, awake soon after the call began", leftover: true,
			fault: faultEvent{kind: "master DEBUG SLEEP", at: at(50), until: at(400), served: served}},
		{name: "a lost reply's sleep, awake soon after the call began", leftover: true,
			fault: faultEvent{kind: "master DEBUG SLEEP past the read timeout during a TryEach", at: at(50), until: at(900), served: served}},
		{name: "another master asleep", leftover: true,
			fault: faultEvent{kind: "master DEBUG SLEEP", at: at(50), until: at(6000), served: [][2]int{{(slot + 1) % 16384, (slot + 1) % 16384}}}},
		{name: "the Client cut off until within the bound of the check",
			fault: faultEvent{kind: "a Client cut off from a master", at: at(50), until: at(2000), served: served}},
		{name: "a slot migrated meanwhile", leftover: true,
			fault: faultEvent{kind: "slot migrated", at: at(50), until: at(6000), served: served}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := &soak{t: t, prefix: prefix, faults: []faultEvent{tc.fault}, failedCalls: []failedCall{call}}
			leftovers, excused := s.judgeRollbacks()
			assert.Equal(t, tc.leftover, len(leftovers) == 1, "leftovers %q", leftovers)
			assert.Equal(t, !tc.leftover, excused == 1)
		})
	}
}

// The judge of counted keys: units held beyond what the capacity could
// have been are caught, unless a failover of a lock taken without
// WithReplicas or the wall clock explains them; restocks count from when
// they began, sales from when they returned.
func TestSoakCountedJudge(t *testing.T) {
	t0 := time.Now()
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	key := soakCountedKeys[0]
	prefix := "judge:"
	slot := hashtag.Slot(prefix + key)
	hold := func(units int64, from, to int, replicas bool) countedHold {
		return countedHold{key: key, units: units, from: at(from), to: at(to), replicas: replicas}
	}
	failover := faultEvent{kind: "failover", at: at(50), until: at(60), slots: [][2]int{{slot, slot}}}
	for _, tc := range []struct {
		name       string
		holds      []countedHold
		changes    []capacityChange
		faults     []faultEvent
		clock      []clockSample
		violations []string
		excused    int
	}{
		{name: "holds that fit", holds: []countedHold{hold(8, 0, 100, true), hold(4, 10, 20, true), hold(4, 30, 40, true)}},
		{name: "holds beyond the capacity", holds: []countedHold{hold(8, 0, 100, true), hold(5, 10, 20, true)},
			violations: []string{"13 units held"}},
		{name: "a hold ended before the next began", holds: []countedHold{hold(8, 0, 10, true), hold(12, 10, 20, true)}},
		{name: "a restock begun before", holds: []countedHold{hold(8, 0, 100, true), hold(10, 20, 30, true)},
			changes: []capacityChange{{key: key, delta: 6, at: at(15)}}},
		{name: "a restock of unknown outcome counts", holds: []countedHold{hold(8, 0, 100, true), hold(10, 20, 30, true)},
			changes: []capacityChange{{key: key, delta: 6, at: at(15), known: false}}},
		{name: "a restock begun after", holds: []countedHold{hold(8, 0, 100, true), hold(10, 20, 30, true)},
			changes: []capacityChange{{key: key, delta: 6, at: at(25), known: true}}, violations: []string{"18 units held"}},
		{name: "a sale returned before", holds: []countedHold{hold(3, 0, 100, true), hold(4, 20, 30, true)},
			changes: []capacityChange{{key: key, delta: -6, at: at(10), known: true}}, violations: []string{"7 units held"}},
		{name: "a sale of unknown outcome takes nothing", holds: []countedHold{hold(3, 0, 100, true), hold(4, 20, 30, true)},
			changes: []capacityChange{{key: key, delta: -6, at: at(10)}}},
		{name: "beyond after a failover, a lock without WithReplicas", holds: []countedHold{hold(8, 0, 100, false), hold(5, 70, 80, true)},
			faults: []faultEvent{failover}, excused: 1},
		{name: "beyond after a failover, both WithReplicas", holds: []countedHold{hold(8, 0, 100, true), hold(5, 70, 80, true)},
			faults: []faultEvent{failover}, violations: []string{"13 units held"}},
		{name: "a sale a failover may have undone", holds: []countedHold{hold(3, 0, 100, true), hold(4, 70, 80, true)},
			changes: []capacityChange{{key: key, delta: -6, at: at(10), known: true}}, faults: []faultEvent{failover}},
		{name: "a sale before a failover of another slot", holds: []countedHold{hold(3, 0, 100, true), hold(4, 70, 80, true)},
			changes:    []capacityChange{{key: key, delta: -6, at: at(10), known: true}},
			faults:     []faultEvent{{kind: "failover", at: at(50), until: at(60), slots: [][2]int{{(slot + 1) % 16384, (slot + 1) % 16384}}}},
			violations: []string{"7 units held"}},
		{name: "beyond after the wall clock stepped forward", holds: []countedHold{hold(8, 0, 100, true), hold(5, 70, 80, true)},
			clock: []clockSample{{at: at(50), lead: 20 * time.Millisecond}}, excused: 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := &soak{t: t, prefix: prefix, faults: tc.faults, counted: soakCounted{holds: tc.holds, changes: tc.changes},
				clock: &wallClock{origin: t0, moves: append([]clockSample{{at: t0}}, tc.clock...)}}
			violations, excused := s.countedOverlaps(key)
			require.Len(t, violations, len(tc.violations), "violations: %q", violations)
			for i, want := range tc.violations {
				assert.Contains(t, violations[i], want)
			}
			assert.Equal(t, tc.excused, excused, "excused")
		})
	}
}
