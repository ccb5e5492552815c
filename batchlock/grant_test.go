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
				assert.Empty(t, a.valid.granted)
				return
			}
			assert.Equal(t, 1, a.held)
			assert.Equal(t, tc.g.Token, l.tokens[key])
			assert.WithinDuration(t, a.placedAt.Add(wire.GrantTime), a.valid.grantUntil, 0, "counted on from the attempt that found the place")
		})
	}
}

// A lock with a key granted and not renewed yet counts on it until the
// grant ends, however its other keys are lengthened: a renewal shorter than
// the grant keeps the grant's end (and the renewal still due); a longer one
// makes the whole lock run until the renewal's end. Renewing only the
// granted keys leaves the others' end as it was, unless it is later.
func TestValidityWithAGrant(t *testing.T) {
	now := time.Now()
	grantEnd := now.Add(2 * time.Second)
	for _, tc := range []struct {
		name      string
		base      time.Time // the other groups' end; zero: every group granted
		renew     time.Time
		grantOnly bool
		want      time.Time
		still     bool // the grant still to be renewed
	}{
		{name: "short renewal", base: now.Add(30 * time.Second), renew: now.Add(time.Second), want: grantEnd, still: true},
		{name: "renewal past the grant", base: now.Add(30 * time.Second), renew: now.Add(10 * time.Second), want: now.Add(10 * time.Second)},
		{name: "every group granted, short renewal", renew: now.Add(time.Second), want: grantEnd, still: true},
		{name: "every group granted, renewal past the grant", renew: now.Add(20 * time.Second), want: now.Add(20 * time.Second)},
		{name: "the grant alone renewed past it", base: now.Add(30 * time.Second), renew: now.Add(10 * time.Second), grantOnly: true, want: now.Add(10 * time.Second)},
		{name: "the grant alone renewed past the others", base: now.Add(5 * time.Second), renew: now.Add(10 * time.Second), grantOnly: true, want: now.Add(5 * time.Second)},
		{name: "the grant alone renewed short of it", base: now.Add(30 * time.Second), renew: now.Add(time.Second), grantOnly: true, want: grantEnd, still: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v := validity{until: tc.base}
			v.grant(group{keys: []string{"p:k"}}, grantEnd)
			assert.Equal(t, grantEnd, v.end(), "the grant's end first")
			if tc.grantOnly {
				v.grantRenewed(tc.renew)
			} else {
				v.renewed(tc.renew)
			}
			assert.Equal(t, tc.want, v.end())
			assert.Equal(t, tc.still, v.granted != nil)
		})
	}
}

// A validity is renewed a third of a lease after its oldest lease began,
// and half a grant before a grant ends, whichever comes first; it counts
// as lost a sixth of a lease before its end when renewed, at its end when
// not, and a sixth of a grant before a grant's end.
func TestValidityRenewalAndLoss(t *testing.T) {
	now := time.Now()
	const leaseLen = 30 * time.Second
	v := validity{until: now.Add(leaseLen)}
	assert.Equal(t, now.Add(10*time.Second), v.renewAt(leaseLen))
	at, ok := v.lossAt(leaseLen, true)
	assert.True(t, ok)
	assert.Equal(t, now.Add(25*time.Second), at)
	at, _ = v.lossAt(leaseLen, false)
	assert.Equal(t, now.Add(leaseLen), at)

	v.grant(group{keys: []string{"p:k"}}, now.Add(grantTime))
	assert.Equal(t, now.Add(grantTime/2), v.renewAt(leaseLen), "the grant is due first")
	at, _ = v.lossAt(leaseLen, true)
	assert.Equal(t, now.Add(grantTime-grantTime/6), at)
	assert.Equal(t, now.Add(10*time.Second), v.leaseRenewal(leaseLen), "the keys taken, apart")

	_, ok = validity{}.lossAt(leaseLen, true)
	assert.False(t, ok, "nothing held, nothing bounds it")
	assert.True(t, validity{}.renewAt(leaseLen).IsZero())
}
