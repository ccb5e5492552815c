package handoff

import (
	"context"
	"strconv"
	"sync/atomic"
)

// Subscription is one waiter's interest in the release of some lock keys.
type Subscription struct {
	hub       *Hub
	hold      string // the waiter's hold field, which a hand-off names
	keys      []string
	joined    []*listener // by key, in keys order
	woken     chan struct{}
	granted   atomic.Pointer[Grant] // the last grant to hold not taken by granted yet
	confirmed bool
	broken    bool // a listener was dropped by the server; guarded by Hub.mu
}

// Covers reports whether s listens for every one of keys.
func (s *Subscription) Covers(keys []string) bool {
	if s == nil || len(keys) > len(s.keys) {
		return false
	}
	s.hub.mu.Lock()
	broken := s.broken
	s.hub.mu.Unlock()
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

// Active reports whether a release of the keys will wake s.
func (s *Subscription) Active() bool { return s != nil && s.confirmed }

func (s *Subscription) wake() {
	select {
	case s.woken <- struct{}{}:
	default:
	}
}

// Grant is a key granted to a waiting hold by a release, as its message
// tells: the lock key and its new fencing token.
type Grant struct {
	Key   string
	Token int64
}

// grant records the grant of key to s's hold, with token (the message's
// text), and wakes its waiter.
func (s *Subscription) grant(key, token string) {
	t, err := strconv.ParseInt(token, 10, 64)
	if err != nil {
		// Not a message of ours: the next attempt finds what it is.
		t = 0
	}
	s.granted.Store(&Grant{Key: key, Token: t})
	s.wake()
}

// GrantedKey returns the grant to s's hold that came since it last said so,
// if one did.
func (s *Subscription) GrantedKey() (Grant, bool) {
	if s == nil {
		return Grant{}, false
	}
	g := s.granted.Swap(nil)
	if g == nil {
		return Grant{}, false
	}
	return *g, true
}

// Wakeups returns the channel that receives when a key of s may be free.
func (s *Subscription) Wakeups() <-chan struct{} {
	if s == nil {
		return nil
	}
	return s.woken
}

func (s *Subscription) Close() {
	if s == nil {
		return
	}
	hub := s.hub
	hub.mu.Lock()
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
	hub.mu.Unlock()
	for ln := range touched {
		hub.sendSubscriptions(context.Background(), ln)
	}
}
