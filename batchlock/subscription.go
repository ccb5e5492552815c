package batchlock

import (
	"context"
	"strconv"
	"sync/atomic"
)

// subscription is one waiter's interest in the release of some lock keys.
type subscription struct {
	ws        *waiters
	hold      string // the waiter's hold field, which a hand-off names
	keys      []string
	joined    []*listener // by key, in keys order
	woken     chan struct{}
	granted   atomic.Pointer[grant] // the last grant to hold not taken by granted yet
	confirmed bool
	broken    bool // a listener was dropped by the server; guarded by waiters.mu
}

// covers reports whether s listens for every one of keys.
func (s *subscription) covers(keys []string) bool {
	if s == nil || len(keys) > len(s.keys) {
		return false
	}
	s.ws.mu.Lock()
	broken := s.broken
	s.ws.mu.Unlock()
	if broken {
		return false
	}
	have := make(map[string]bool, len(s.keys))
	for _, k := range s.keys {
		have[k] = true
	}
	for _, k := range keys {
		if !have[k] {
			return false
		}
	}
	return true
}

// active reports whether a release of the keys will wake s.
func (s *subscription) active() bool { return s != nil && s.confirmed }

func (s *subscription) wake() {
	select {
	case s.woken <- struct{}{}:
	default:
	}
}

// grant is a key granted to a waiting hold by a release, as its message
// tells: the lock key and its new fencing token.
type grant struct {
	key   string
	token int64
}

// grant records the grant of key to s's hold, with token (the message's
// text), and wakes its waiter.
func (s *subscription) grant(key, token string) {
	t, err := strconv.ParseInt(token, 10, 64)
	if err != nil {
		// Not a message of ours: the next attempt finds what it is.
		t = 0
	}
	s.granted.Store(&grant{key: key, token: t})
	s.wake()
}

// grantedKey returns the grant to s's hold that came since it last said so,
// if one did.
func (s *subscription) grantedKey() (grant, bool) {
	if s == nil {
		return grant{}, false
	}
	g := s.granted.Swap(nil)
	if g == nil {
		return grant{}, false
	}
	return *g, true
}

// wakeups returns the channel that receives when a key of s may be free.
func (s *subscription) wakeups() <-chan struct{} {
	if s == nil {
		return nil
	}
	return s.woken
}

func (s *subscription) close() {
	if s == nil {
		return
	}
	ws := s.ws
	ws.mu.Lock()
	touched := map[*listener]bool{}
	for i, ln := range s.joined {
		key := s.keys[i]
		ch := ln.channels[key]
		if ch == nil {
			continue
		}
		delete(ch.subs, s)
		if len(ch.subs) == 0 {
			delete(ln.channels, key)
			touched[ln] = true
		}
	}
	s.joined = nil
	ws.mu.Unlock()
	for ln := range touched {
		ws.sendSubscriptions(context.Background(), ln)
	}
}
