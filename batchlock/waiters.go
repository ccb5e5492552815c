package batchlock

import (
	"context"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// confirmTimeout bounds the wait for a subscription to be confirmed; past it
// a waiter still polls, so a slow confirmation costs latency, not safety.
const confirmTimeout = time.Second

// waiters lets waiting calls hear of releases: one sharded pub/sub connection
// per master, shared by every waiter of the Client, with channels (one per
// lock key, as release.lua announces them) reference-counted.
type waiters struct {
	c       *Client
	closing chan struct{}

	mu        sync.Mutex
	closed    bool
	listeners map[string]*listener // by node address
	wg        sync.WaitGroup
}

type listener struct {
	ps       *redis.PubSub
	channels map[string]*channel
}

type channel struct {
	refs      int
	confirmed chan struct{} // closed once the server confirmed the subscription
	subs      map[*subscription]struct{}
}

// joined is a channel a subscription counts in.
type joined struct {
	l   *listener
	key string
}

// subscription is one waiter's interest in the release of some lock keys.
type subscription struct {
	w         *waiters
	keys      []string
	joined    []joined
	woken     chan struct{}
	confirmed bool
}

func newWaiters(c *Client) *waiters {
	return &waiters{c: c, closing: make(chan struct{}), listeners: make(map[string]*listener)}
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
	for _, key := range keys {
		node, addr, err := w.c.nodeFor(ctx, key)
		if err != nil {
			continue
		}
		w.mu.Lock()
		if w.closed {
			w.mu.Unlock()
			return s
		}
		l := w.listeners[addr]
		if l == nil {
			l = &listener{ps: node.SSubscribe(context.WithoutCancel(ctx)), channels: make(map[string]*channel)}
			w.listeners[addr] = l
			w.wg.Add(1)
			go w.listen(l)
		}
		ch := l.channels[key]
		if ch == nil {
			ch = &channel{confirmed: make(chan struct{}), subs: make(map[*subscription]struct{})}
			l.channels[key] = ch
			_ = l.ps.SSubscribe(ctx, key)
		}
		ch.refs++
		ch.subs[s] = struct{}{}
		s.joined = append(s.joined, joined{l, key})
		pending = append(pending, ch.confirmed)
		w.mu.Unlock()
	}

	t := time.NewTimer(confirmTimeout)
	defer t.Stop()
	for _, confirmed := range pending {
		select {
		case <-confirmed:
			s.confirmed = true
		case <-t.C:
			return s
		case <-ctx.Done():
			return s
		}
	}
	return s
}

// listen hands the messages of one connection to the subscriptions waiting on
// their channel. It ends when the connection is closed.
func (w *waiters) listen(l *listener) {
	defer w.wg.Done()
	for msg := range l.ps.ChannelWithSubscriptions() {
		w.mu.Lock()
		switch m := msg.(type) {
		case *redis.Subscription:
			if ch := l.channels[m.Channel]; ch != nil && m.Kind == "ssubscribe" {
				select {
				case <-ch.confirmed:
				default:
					close(ch.confirmed)
				}
			}
		case *redis.Message:
			if ch := l.channels[m.Channel]; ch != nil {
				for s := range ch.subs {
					select {
					case s.woken <- struct{}{}:
					default:
					}
				}
			}
		}
		w.mu.Unlock()
	}
}

func (w *waiters) close() error {
	w.mu.Lock()
	if w.closed {
		w.mu.Unlock()
		return nil
	}
	w.closed = true
	close(w.closing)
	var err error
	for _, l := range w.listeners {
		if e := l.ps.Close(); e != nil && err == nil {
			err = e
		}
	}
	w.mu.Unlock()
	w.wg.Wait()
	return err
}

// nodeFor returns the client of the master that serves key, and its address.
func (c *Client) nodeFor(ctx context.Context, key string) (*redis.Client, string, error) {
	if !c.cluster {
		node := c.rdb.(*redis.Client)
		return node, node.Options().Addr, nil
	}
	node, err := c.rdb.(*redis.ClusterClient).MasterForKey(ctx, key)
	if err != nil {
		return nil, "", err
	}
	return node, node.Options().Addr, nil
}

// covers reports whether s listens for every one of keys.
func (s *subscription) covers(keys []string) bool {
	if s == nil || len(keys) > len(s.keys) {
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

func (s *subscription) wake() <-chan struct{} {
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
	defer w.mu.Unlock()
	for _, j := range s.joined {
		l, key := j.l, j.key
		ch := l.channels[key]
		if ch == nil {
			continue
		}
		delete(ch.subs, s)
		if ch.refs--; ch.refs == 0 {
			delete(l.channels, key)
			if !w.closed {
				_ = l.ps.SUnsubscribe(context.Background(), key)
			}
		}
	}
	s.joined = nil
}
