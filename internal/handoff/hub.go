package handoff

import (
	"context"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/batchlock/batchlock/internal/wire"
)

// confirmTimeout bounds the wait for a subscription to be confirmed; past it
// a waiter still polls, so a slow confirmation costs latency, not safety.
const confirmTimeout = time.Second

// Hub lets waiting calls hear of releases. Channels (one per lock key, as
// release.lua announces them) are shared by every waiter of the Client and
// kept while one listens, on one sharded pub/sub connection per slot: after a
// reconnect go-redis subscribes again to all the channels of a connection in
// one SSUBSCRIBE, which the server refuses unless they share a slot. A waiter
// listens to the keys of one group, so to one slot, at a time.
type Hub struct {
	cfg Config

	mu        sync.Mutex
	closed    bool
	listeners map[int]*listener // by slot
	wg        sync.WaitGroup
}

// listener is the pub/sub connection of one slot.
type listener struct {
	slot     int
	ps       *redis.PubSub
	channels map[string]*channel // wanted, guarded by Hub.mu

	// sending sends (un)subscriptions one at a time, outside Hub.mu, and
	// sent is what it last asked the server for.
	sending sync.Mutex
	sent    map[string]bool
	started bool
	dropped bool // taken out of use; guarded by Hub.mu
	// leaving counts, per channel, the unsubscriptions sent whose reply
	// has not come yet, so that the reply to one is not taken for the
	// server dropping a channel subscribed to again meanwhile; guarded by
	// Hub.mu.
	leaving map[string]int
}

// channel is one lock key's release channel, wanted while it has
// subscriptions.
type channel struct {
	confirmed chan struct{} // closed once the server confirmed the subscription
	subs      map[*Subscription]struct{}
}

// Config is what a Hub needs of the deployment it listens to.
type Config struct {
	// Disabled makes every subscription one that is never woken: its
	// waiter polls (WithoutPubSub).
	Disabled bool
	// Slot is the slot of a lock key, whose listener hears of it.
	Slot func(key string) int
	// PubSub returns a pub/sub client not yet connected, whose first
	// subscription picks the node that serves its slot.
	PubSub func() *redis.PubSub
	// Reload asks for the map of slots to be read again, after a listener
	// was dropped by the server (its slot moved).
	Reload func()
}

// New returns a Hub with no listener yet; Close ends it.
func New(cfg Config) *Hub {
	return &Hub{cfg: cfg, listeners: make(map[int]*listener)}
}

// Subscribe listens, for the waiting hold, for the hand-off or release of
// keys (lock keys), and returns once the servers confirmed it, or after
// confirmTimeout, or when ctx is done. Without pub/sub it returns a
// subscription that is never woken: its waiter polls.
func (hub *Hub) Subscribe(ctx context.Context, hold string, keys []string) *Subscription {
	s := &Subscription{hub: hub, hold: hold, keys: keys, woken: make(chan struct{}, 1)}
	if hub.cfg.Disabled {
		return s
	}
	var pending []chan struct{}
	touched := map[*listener]bool{}
	hub.mu.Lock()
	if hub.closed {
		hub.mu.Unlock()
		return s
	}
	for _, key := range keys {
		slot := hub.cfg.Slot(key)
		ln := hub.listeners[slot]
		if ln == nil {
			ln = &listener{slot: slot, ps: hub.cfg.PubSub(), channels: make(map[string]*channel),
				sent: make(map[string]bool), leaving: make(map[string]int)}
			hub.listeners[slot] = ln
		}
		ch := ln.channels[key]
		if ch == nil {
			ch = &channel{confirmed: make(chan struct{}), subs: make(map[*Subscription]struct{})}
			ln.channels[key] = ch
		}
		ch.subs[s] = struct{}{}
		s.joined = append(s.joined, ln)
		pending = append(pending, ch.confirmed)
		touched[ln] = true
	}
	hub.mu.Unlock()
	for ln := range touched {
		hub.sendSubscriptions(ctx, ln)
	}

	t := time.NewTimer(confirmTimeout)
	defer t.Stop()
	for i, confirmed := range pending {
		select {
		case <-confirmed:
		case <-t.C:
			// The connection may be on a node that no longer serves
			// the slot: the next waiter starts a fresh one.
			hub.mu.Lock()
			if !s.broken {
				hub.drop(s.joined[i])
			}
			hub.mu.Unlock()
			return s
		case <-ctx.Done():
			return s
		}
	}
	s.confirmed = true
	return s
}

// sendSubscriptions makes ln's subscriptions on the server what its channels want, and
// starts its reader after its first subscription. A listener left with no
// channel is closed.
func (hub *Hub) sendSubscriptions(ctx context.Context, ln *listener) {
	ln.sending.Lock()
	defer ln.sending.Unlock()
	hub.mu.Lock()
	var add, drop []string
	for key := range ln.channels {
		if !ln.sent[key] {
			add = append(add, key)
		}
	}
	for key := range ln.sent {
		if ln.channels[key] == nil {
			drop = append(drop, key)
		}
	}
	empty := len(ln.channels) == 0 && !ln.dropped
	if empty {
		ln.dropped = true
		delete(hub.listeners, ln.slot)
	}
	skip := hub.closed || (ln.dropped && !empty)
	hub.mu.Unlock()
	if skip {
		return
	}
	if empty {
		_ = ln.ps.Close()
		return
	}
	if len(add) > 0 {
		_ = ln.ps.SSubscribe(ctx, add...)
		for _, key := range add {
			ln.sent[key] = true
		}
	}
	if len(drop) > 0 {
		hub.mu.Lock()
		for _, key := range drop {
			ln.leaving[key]++
		}
		hub.mu.Unlock()
		if err := ln.ps.SUnsubscribe(context.WithoutCancel(ctx), drop...); err != nil {
			// Not sent: no reply will come for it.
			hub.mu.Lock()
			for _, key := range drop {
				if ln.leaving[key]--; ln.leaving[key] <= 0 {
					delete(ln.leaving, key)
				}
			}
			hub.mu.Unlock()
		}
		for _, key := range drop {
			delete(ln.sent, key)
		}
	}
	hub.mu.Lock()
	start := !ln.started && !hub.closed
	if start {
		ln.started = true
		hub.wg.Add(1)
	}
	hub.mu.Unlock()
	if start {
		go hub.listen(ln)
	}
}

// listen hands the messages of one connection to the subscriptions waiting on
// their channel. It ends when the connection is closed.
func (hub *Hub) listen(ln *listener) {
	defer hub.wg.Done()
	for msg := range ln.ps.ChannelWithSubscriptions() {
		hub.mu.Lock()
		switch m := msg.(type) {
		case *redis.Subscription:
			ch := ln.channels[m.Channel]
			switch {
			case m.Kind == "sunsubscribe" && ln.leaving[m.Channel] > 0:
				// The reply to our own unsubscription.
				if ln.leaving[m.Channel]--; ln.leaving[m.Channel] == 0 {
					delete(ln.leaving, m.Channel)
				}
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
				hub.drop(ln)
			}
		case *redis.Message:
			// A grant names the one waiter it is for, and so does a call
			// to try again; a release that handed nothing on wakes every
			// waiter of the key.
			if ch := ln.channels[m.Channel]; ch != nil {
				hold, token, _ := strings.Cut(m.Payload, " ")
				for s := range ch.subs {
					switch m.Payload {
					case wire.ReleasedMessage, wire.AgainMessage + s.hold:
						s.wake()
					default:
						if hold == s.hold {
							s.grant(m.Channel, token)
						}
					}
				}
			}
		}
		hub.mu.Unlock()
	}
}

// drop takes ln out of use and wakes its waiters, whose subscriptions no
// longer cover their keys; called with hub.mu held.
func (hub *Hub) drop(ln *listener) {
	if ln.dropped || hub.closed {
		return
	}
	ln.dropped = true
	delete(hub.listeners, ln.slot)
	for _, ch := range ln.channels {
		for s := range ch.subs {
			s.broken = true
			s.wake()
		}
	}
	hub.cfg.Reload()
	hub.wg.Go(func() { _ = ln.ps.Close() })
}

// Close ends every listener and waits for their readers.
func (hub *Hub) Close() error {
	hub.mu.Lock()
	if hub.closed {
		hub.mu.Unlock()
		return nil
	}
	hub.closed = true
	listeners := hub.listeners
	hub.listeners = nil
	hub.mu.Unlock()
	var err error
	for _, ln := range listeners {
		if e := ln.ps.Close(); e != nil && err == nil {
			err = e
		}
	}
	hub.wg.Wait()
	return err
}
