package batchlock

import (
	"context"
	"errors"
	"slices"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/batchlock/batchlock/internal/handoff"
	"github.com/batchlock/batchlock/internal/wire"
)

// since is what a waiter finds when it reads the keys that refused it,
// after its subscription to their releases is confirmed.
type since int

const (
	stillHeld  since = iota // every one is still held by other owners: wait for a message
	mayBeFree               // one may be free, or a read failed: try again at once
	handedOver              // every one has been granted to the waiter: take all the rest too
)

// recheck reads blockers, the keys of g that refused l's last attempt, to
// tell whether a release came between that attempt and the subscription,
// which no message will announce. A GET per key, on the master that serves
// g (never a replica, which may not have seen the release yet), in place of
// an attempt (a script call) that would find the same. It says stillHeld
// only when that is certain: every key is held by other owners (not l's)
// and l still has its place in the key's queue, so that the release will
// hand the key to it or tell it. For a key l asks shared that readers hold,
// which l may join or not as the queue says, and on any read that fails it
// says mayBeFree, and the waiter tries again as it would without the read;
// a key a writer holds keeps a reader waiting as it keeps a writer. Holds' and
// places' ends are judged by this host's clock: a master whose clock is
// behind makes it say mayBeFree (an attempt that is refused), one ahead
// stillHeld until the blocker's lease, which bounds every pause. A key
// granted to l is handedOver whether l asks it shared or not: the hold in
// its value is l's, a fact no queue changes. With
// handedOver it returns the grant of the one blocker, when there is one (its
// token 0 otherwise).
func (a *acquisition) recheck(ctx context.Context, g group, blockers []string) (since, handoff.Grant) {
	c, l := a.c, a.l
	shared := false
	for _, k := range blockers {
		i := slices.Index(g.keys, k)
		if i < 0 {
			return mayBeFree, handoff.Grant{}
		}
		shared = shared || g.shared(i)
	}
	master, err := c.deployment.masterOf(ctx, blockers[0])
	if err != nil {
		return mayBeFree, handoff.Grant{}
	}
	pipe := master.Pipeline()
	values := make([]*redis.StringCmd, len(blockers))
	for i, k := range blockers {
		values[i] = pipe.Get(ctx, k)
	}
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return mayBeFree, handoff.Grant{}
	}
	now, handed, token := time.Now(), 0, int64(0)
	for _, v := range values {
		value, err := v.Result()
		if err != nil {
			return mayBeFree, handoff.Grant{} // gone, or unread
		}
		s, ok := wire.ParseLock(value, now)
		switch {
		case !ok || s.Holds == 0:
			return mayBeFree, handoff.Grant{}
		case slices.Contains(wire.HoldsIn(value), l.hold):
			handed, token = handed+1, s.Token
		case shared && s.Shared || s.Owner == l.owner || slices.Contains(s.Holders, l.owner) || !wire.PlaceIn(value, l.hold, now):
			return mayBeFree, handoff.Grant{} // l may join it; or l lost its place
		}
	}
	switch {
	case handed == 0:
		return stillHeld, handoff.Grant{}
	case handed == 1 && len(values) == 1:
		return handedOver, handoff.Grant{Key: blockers[0], Token: token}
	case handed == len(values):
		return handedOver, handoff.Grant{}
	}
	return mayBeFree, handoff.Grant{}
}
