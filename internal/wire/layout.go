package wire

import (
	"slices"
	"strconv"
	"strings"
	"time"
)

// HoldPrefix starts every hold field: "h:" and 16 hex digits.
const (
	HoldPrefix = "h:"

	// GrantTime is how long a key granted to a waiter that listens is its
	// unless the waiter renews it (GRANT_MS in layout.lua).
	GrantTime = 3 * time.Second
)

// NewHold returns a fresh hold field.
func NewHold() string { return HoldPrefix + RandomID(8) }

// LockState is what a lock key holds, at the server time now.
type LockState struct {
	Owner   string   // the owner id; empty for a key held shared or counted
	Shared  bool     // held shared: holders are its owners
	Counted bool     // held in units: holders are its owners
	Holders []string // the owners with a live hold, sorted, without repeats
	// Units are, on a counted key, the units of each holder's live holds.
	Units   map[string]int64
	Token   int64
	Holds   int // holds whose lease has not ended at now
	Waiting int // waiters whose place has not lapsed at now
}

// SharedOwner starts the owner field of a key held shared, CountedOwner a
// counted key's (see layout.lua).
const (
	SharedOwner  = "*"
	CountedOwner = "#"
)

// ParseLock reads the value of a lock key; ok is false for a value that is
// not one.
func ParseLock(value string, now time.Time) (s LockState, ok bool) {
	token, rest, ok1 := strings.Cut(value, " ")
	queue, rest, ok2 := strings.Cut(rest, " ")
	holds, owner, ok3 := strings.Cut(rest, " ")
	var err error
	if s.Token, err = strconv.ParseInt(token, 10, 64); err != nil || !ok1 || !ok2 || !ok3 {
		return LockState{}, false
	}
	s.Shared, s.Counted = strings.HasPrefix(owner, SharedOwner), strings.HasPrefix(owner, CountedOwner)
	switch {
	case s.Counted:
		s.Units = map[string]int64{}
	case !s.Shared:
		s.Owner = UnescapeOwner(owner)
	}
	for e := range strings.SplitSeq(holds, ",") {
		if e == "" {
			continue // a counted key with no hold left
		}
		_, e, _ = strings.Cut(e, "=")
		ends, who, _ := strings.Cut(e, "=")
		who, units, _ := strings.Cut(who, "=")
		ends = strings.TrimSuffix(ends, "g") // a grant
		// No end: the one hold of a key taken afresh, which ends with the
		// key, there to be read.
		if ends != "" && !endsAfter(ends, now) {
			continue
		}
		s.Holds++
		switch {
		case (s.Shared || s.Counted) && who != "":
			s.Holders = append(s.Holders, UnescapeOwner(who))
			if s.Counted {
				n, _ := strconv.ParseInt(units, 10, 64)
				s.Units[UnescapeOwner(who)] += n
			}
		case !s.Shared && !s.Counted && s.Owner != "":
			s.Holders = append(s.Holders, s.Owner)
		}
	}
	slices.Sort(s.Holders)
	s.Holders = slices.Compact(s.Holders)
	for e := range strings.SplitSeq(queue, ",") {
		if _, ends, ok := placeOf(e); ok && endsAfter(ends, now) {
			s.Waiting++
		}
	}
	return s, true
}

// HoldsIn returns the hold fields of a lock value.
func HoldsIn(value string) []string {
	_, rest, _ := strings.Cut(value, " ")
	_, rest, _ = strings.Cut(rest, " ")
	holds, _, _ := strings.Cut(rest, " ")
	var out []string
	for e := range strings.SplitSeq(holds, ",") {
		if hold, _, ok := strings.Cut(e, "="); ok {
			out = append(out, hold)
		}
	}
	return out
}

// PlaceIn reports whether hold has a place in the queue of a lock value
// that has not lapsed at now.
func PlaceIn(value, hold string, now time.Time) bool {
	_, rest, _ := strings.Cut(value, " ")
	queue, _, _ := strings.Cut(rest, " ")
	for e := range strings.SplitSeq(queue, ",") {
		if h, ends, ok := placeOf(e); ok && h == hold && endsAfter(ends, now) {
			return true
		}
	}
	return false
}

// placeOf reads a place in a queue, "<hold>@<ends>[s|n][p]=<owner>=<fence>":
// its hold field and when it lapses.
func placeOf(place string) (hold, ends string, ok bool) {
	hold, rest, ok := strings.Cut(place, "@")
	rest, _, _ = strings.Cut(rest, "=")
	return hold, strings.TrimRight(rest, "snp"), ok
}

// endsAfter reports whether ends, in milliseconds, is after now.
func endsAfter(ends string, now time.Time) bool {
	ms, err := strconv.ParseInt(ends, 10, 64)
	return err == nil && time.UnixMilli(ms).After(now)
}

// ReleasedMessage is what the scripts publish on a lock key's channel when
// they free it without handing it to a waiter (RELEASED in layout.lua);
// AgainMessage and a hold field tell that hold's waiter to try again,
// without a hand-off (AGAIN: its place lapsed, or readers may join).
const (
	ReleasedMessage = "released"
	AgainMessage    = "again:"
)
