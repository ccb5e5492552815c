package batchlock

import (
	"context"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/batchlock/batchlock/hashtag"
)

// confirmTimeout bounds the wait for a subscription to be confirmed; past it
// a waiter still polls, so a slow confirmation costs latency, not safety.
const confirmTimeout = time.Second

// waiters lets waiting calls hear of releases. Channels (one per lock key, as
// release.lua announces them) are reference-counted and shared by every
// waiter of the Client, on one sharded pub/sub connection per slot: after a
// reconnect go-redis subscribes again to all the channels of a connection in
// one SSUBSCRIBE, which the server refuses unless they share a slot. A waiter
// listens to the keys of one group, so to one slot, at a time.
type waiters struct {
	c *Client

	mu        sync.Mutex
	closed    bool
	listeners map[int]*listener // by slot
	wg        sync.WaitGroup
}

// listener is the pub/sub connection of one slot.
type listener struct {
	slot     int
	ps       *redis.PubSub
	channels map[string]*channel // wanted, guarded by waiters.mu

	// sync sends (un)subscriptions one at a time, outside waiters.mu, and
	// sent is what it last asked the server for.
	sync    sync.Mutex
	sent    map[string]bool
	started bool
	dropped bool // taken out of use; guarded by waiters.mu
}

type channel struct {
	refs      int
	confirmed chan struct{} // closed once the server confirmed the subscription
	subs      map[*subscription]struct{}
}

// subscription is one waiter's interest in the release of some lock keys.
type subscription struct {
	w         *waiters
	keys      []string
	joined    []*listener // by key, in keys order
	woken     chan struct{}
	confirmed bool
	broken    bool // a listener was dropped by the server; guarded by waiters.mu
}

func newWaiters(c *Client) *waiters {
	return &waiters{c: c, listeners: make(map[int]*listener)}
}

// subscribe listens for the release of keys (lock keys), and returns once the
// servers confirmed it, or after confirmTimeout, or when ctx is done. Without
// pub/sub it returns a subscription that is never woken: its waiter polls.
func (w *waiters) subscribe(ctx context.Context, keys []string) *subscription {
	s := &subscription{w: w, keys: keys, woken: make(chan struct{}, 1)}
	if !w.c.cfg.pubsub {
		return s
	}
	var pending []chan struct{}
	touched := map[*listener]bool{}
	w.mu.Lock()
	if w.closed {
		w.mu.Unlock()
		return s
	}
	for _, key := range keys {
		slot := 0
		if w.c.cluster {
			slot = hashtag.Slot(key)
		}
		l := w.listeners[slot]
		if l == nil {
			l = &listener{slot: slot, ps: w.newPubSub(), channels: make(map[string]*channel), sent: make(map[string]bool)}
			w.listeners[slot] = l
		}
		ch := l.channels[key]
		if ch == nil {
			ch = &channel{confirmed: make(chan struct{}), subs: make(map[*subscription]struct{})}
			l.channels[key] = ch
		}
		ch.refs++
		ch.subs[s] = struct{}{}
		s.joined = append(s.joined, l)
		pending = append(pending, ch.confirmed)
		touched[l] = true
	}
	w.mu.Unlock()
	for l := range touched {
		w.sync(ctx, l)
	}

	t := time.NewTimer(confirmTimeout)
	defer t.Stop()
	for i, confirmed := range pending {
		select {
		case <-confirmed:
		case <-t.C:
			// The connection may be on a node that no longer serves
			// the slot: the next waiter starts a fresh one.
			w.mu.Lock()
			if !s.broken {
				w.drop(s.joined[i])
			}
			w.mu.Unlock()
			return s
		case <-ctx.Done():
			return s
		}
	}
	s.confirmed = true
	return s
}

// newPubSub returns a pub/sub client not yet connected: its first
// subscription connects it to the master of that channel's slot, and so
// does every reconnect.
func (w *waiters) newPubSub() *redis.PubSub {
	if w.c.cluster {
		return w.c.rdb.(*redis.ClusterClient).SSubscribe(context.Background())
	}
	return w.c.rdb.(*redis.Client).SSubscribe(context.Background())
}

// sync makes l's subscriptions on the server what its channels want, and
// starts its reader after its first subscription. A listener left with no
// channel is closed.
func (w *waiters) sync(ctx context.Context, l *listener) {
	l.sync.Lock()
	defer l.sync.Unlock()
	w.mu.Lock()
	var add, drop []string
	for key := range l.channels {
		if !l.sent[key] {
			add = append(add, key)
		}
	}
	for key := range l.sent {
		if l.channels[key] == nil {
			drop = append(drop, key)
		}
	}
	empty := len(l.channels) == 0 && !l.dropped
	if empty {
		l.dropped = true
		delete(w.listeners, l.slot)
	}
	skip := w.closed || (l.dropped && !empty)
	w.mu.Unlock()
	if skip {
		return
	}
	if empty {
		_ = l.ps.Close()
		return
	}
	if len(add) > 0 {
		_ = l.ps.SSubscribe(ctx, add...)
		for _, key := range add {
			l.sent[key] = true
		}
	}
	if len(drop) > 0 {
		_ = l.ps.SUnsubscribe(context.WithoutCancel(ctx), drop...)
		for _, key := range drop {
			delete(l.sent, key)
		}
	}
	w.mu.Lock()
	start := !l.started && !w.closed
	if start {
		l.started = true
		w.wg.Add(1)
	}
	w.mu.Unlock()
	if start {
		go w.listen(l)
	}
}

// listen hands the messages of one connection to the subscriptions waiting on
// their channel. It ends when the connection is closed.
func (w *waiters) listen(l *listener) {
	defer w.wg.Done()
	for msg := range l.ps.ChannelWithSubscriptions() {
		w.mu.Lock()
		switch m := msg.(type) {
		case *redis.Subscription:
			ch := l.channels[m.Channel]
			switch {
			case ch == nil:
			case m.Kind == "ssubscribe":
				select {
				case <-ch.confirmed:
				default:
					close(ch.confirmed)
				}
			case m.Kind == "sunsubscribe":
				// The server dropped a channel that is still wanted: its
				// slot moved (a failover, a migration). Its waiters try
				// again now and subscribe afresh, on the slot's new master.
				w.drop(l)
			}
		case *redis.Message:
			if ch := l.channels[m.Channel]; ch != nil {
				for s := range ch.subs {
					s.wake()
				}
			}
		}
		w.mu.Unlock()
	}
}

// drop takes l out of use and wakes its waiters, whose subscriptions no
// longer cover their keys; called with w.mu held.
func (w *waiters) drop(l *listener) {
	if l.dropped || w.closed {
		return
	}
	l.dropped = true
	delete(w.listeners, l.slot)
	for _, ch := range l.channels {
		for s := range ch.subs {
			s.broken = true
			s.wake()
		}
	}
	if w.c.cluster {
		w.c.rdb.(*redis.ClusterClient).ReloadState(context.Background())
	}
	w.wg.Go(func() { _ = l.ps.Close() })
}

func (w *waiters) close() error {
	w.mu.Lock()
	if w.closed {
		w.mu.Unlock()
		return nil
	}
	w.closed = true
	listeners := w.listeners
	w.listeners = nil
	w.mu.Unlock()
	var err error
	for _, l := range listeners {
		if e := l.ps.Close(); e != nil && err == nil {
			err = e
		}
	}
	w.wg.Wait()
	return err
}

// covers reports whether s listens for every one of keys.
func (s *subscription) covers(keys []string) bool {
	if s == nil || len(keys) > len(s.keys) {
		return false
	}
	s.w.mu.Lock()
	broken := s.broken
	s.w.mu.Unlock()
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
	w := s.w
	w.mu.Lock()
	touched := map[*listener]bool{}
	for i, l := range s.joined {
		key := s.keys[i]
		ch := l.channels[key]
		if ch == nil {
			continue
		}
		delete(ch.subs, s)
		if ch.refs--; ch.refs == 0 {
			delete(l.channels, key)
			touched[l] = true
		}
	}
	s.joined = nil
	w.mu.Unlock()
	for l := range touched {
		w.sync(context.Background(), l)
	}
}
