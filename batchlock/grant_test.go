package batchlock

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"

	"github.com/batchlock/batchlock/internal/handoff"
	"github.com/batchlock/batchlock/internal/wire"
)

// A grant is counted on without a call only where that is sound: the
// waiter's lock is renewed and needs no acknowledgement, the key is its
// whole group, half the grant is left, and the grant's token is newer than
// the key's when it last refused the waiter (an older one is a late
// message of a grant that lapsed since).
func TestTakeGrantedOnlyWhatCanBeCountedOn(t *testing.T) {
	const key = "p:k"
	for _, tc := range []struct {
		name  string
		lock  func(l *Lock)
		a     func(a *acquisition)
		g     handoff.Grant
		taken bool
	}{
		{name: "a fresh grant", g: handoff.Grant{Key: key, Token: 9}, taken: true},
		{name: "a late grant, older than the refusal", g: handoff.Grant{Key: key, Token: 4}},
		{name: "the token of the refusal itself", g: handoff.Grant{Key: key, Token: 5}},
		{name: "no token", g: handoff.Grant{Key: key}},
		{name: "another key", g: handoff.Grant{Key: "p:other", Token: 9}},
		{name: "WithTTL", lock: func(l *Lock) { l.renew = false }, g: handoff.Grant{Key: key, Token: 9}},
		{name: "WithReplicas", lock: func(l *Lock) { l.ack.Replicas = 1 }, g: handoff.Grant{Key: key, Token: 9}},
		{name: "a group of two keys", lock: func(l *Lock) { l.groups[0].keys = []string{key, "p:l"} }, g: handoff.Grant{Key: key, Token: 9}},
		{name: "less than half the grant left", a: func(a *acquisition) { a.placedAt = time.Now().Add(-2 * time.Second) }, g: handoff.Grant{Key: key, Token: 9}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l := &Lock{renew: true, groups: []group{{keys: []string{key}}}, tokens: map[string]int64{}}
			a := &acquisition{l: l, placedAt: time.Now(), refusedToken: 5}
			if tc.lock != nil {
				tc.lock(l)
			}
			if tc.a != nil {
				tc.a(a)
			}
			a.takeGranted(tc.g)
			if !tc.taken {
				assert.Zero(t, a.held, "not counted as held")
				assert.Empty(t, a.granted)
				return
			}
			assert.Equal(t, 1, a.held)
			assert.Equal(t, tc.g.Token, l.tokens[key])
			assert.WithinDuration(t, a.placedAt.Add(wire.GrantTime), a.grantUntil, 0, "counted on from the attempt that found the place")
		})
	}
}

// A lock with a key granted and not renewed yet counts on it until the
// grant ends, however its other keys are lengthened: an Extend shorter than
// the grant keeps the grant's end (and the renewal still due); a longer one
// makes the whole lock run until the Extend's end.
func TestValidityWithAGrant(t *testing.T) {
	now := time.Now()
	grantEnd := now.Add(2 * time.Second)
	for _, tc := range []struct {
		name   string
		base   time.Time // the other groups' validity; zero: every group granted
		extend time.Time
		want   time.Time
		still  bool // the grant still to be renewed
	}{
		{name: "short Extend", base: now.Add(30 * time.Second), extend: now.Add(time.Second), want: grantEnd, still: true},
		{name: "Extend past the grant", base: now.Add(30 * time.Second), extend: now.Add(10 * time.Second), want: now.Add(10 * time.Second)},
		{name: "every group granted, short Extend", extend: now.Add(time.Second), want: grantEnd, still: true},
		{name: "every group granted, Extend past the grant", extend: now.Add(20 * time.Second), want: now.Add(20 * time.Second)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l := &Lock{validUntil: tc.base}
			l.expectGrant([]group{{keys: []string{"p:k"}}}, grantEnd)
			assert.Equal(t, grantEnd, l.ValidUntil(), "the grant's end first")
			l.extended(tc.extend)
			assert.Equal(t, tc.want, l.ValidUntil())
			granted, _ := l.grant()
			assert.Equal(t, tc.still, granted != nil)
		})
	}
}
