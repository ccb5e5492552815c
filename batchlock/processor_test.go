package batchlock

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/batchlock/batchlock/internal/wire/wiretest"
)

// newReplica is a Client of its own on rdb (a process of a replicated
// batch processor), with a Processor of string items, both closed at the
// test's end. It polls every 10 s: what comes sooner was woken.
func newReplica(t *testing.T, rdb redis.UniversalClient, tick int) (*Client, *Processor[string]) {
	t.Helper()
	c, err := New(rdb, WithPrefix(t.Name()+":"), WithPollInterval(10*time.Second))
	require.NoError(t, err)
	p, err := NewProcessor[string](c, tick)
	require.NoError(t, err)
	t.Cleanup(func() {
		_, _ = p.Close(context.Background())
		_ = c.Close()
	})
	return c, p
}

// itemsOf is the items of a tick, in its order.
func itemsOf(tick *Tick[string]) []string {
	var out []string
	for _, b := range tick.Baskets {
		out = append(out, b.Item)
	}
	return out
}

// nothingFor asserts that p takes nothing for d.
func nothingFor(t *testing.T, p *Processor[string], d time.Duration, msg string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), d)
	defer cancel()
	tick, err := p.Next(ctx)
	if !assert.ErrorIs(t, err, context.DeadlineExceeded, msg) {
		_ = tick.Done(t.Context())
	}
}

// A Processor of no Client, or of a tick below 0, is refused, naming it.
func TestNewProcessorBadInput(t *testing.T) {
	c, _ := newFaked(t)
	for _, tc := range []struct {
		name string
		c    *Client
		tick int
		want string
	}{
		{"no Client", nil, 0, "a nil Client"},
		{"a tick below 0", c, -1, "tick of -1 baskets"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, err := NewProcessor[string](tc.c, tc.tick)
			require.ErrorIs(t, err, ErrInvalid)
			assert.ErrorContains(t, err, tc.want)
			assert.Nil(t, p)
		})
	}
}

// A tick takes every basket that is free, the oldest first; one refused by
// an earlier basket of the tick waits, without a call, until that basket's
// tick is done, and is then taken at once.
func TestProcessorTakesWhatIsFreeAndWakesOnDone(t *testing.T) {
	_, p := newReplica(t, wiretest.ServerClient(t), 0)
	require.NoError(t, p.Add("ab", Basket{Keys: []string{"a", "b"}}))
	require.NoError(t, p.Add("bc", Basket{Keys: []string{"b", "c"}}))
	require.NoError(t, p.Add("d", Basket{Keys: []string{"d"}, Shared: []string{"promo"}}))
	assert.ErrorIs(t, p.Add("empty", Basket{}), ErrInvalid, "a bad basket is refused alone")
	assert.ErrorIs(t, p.Add("blank", Basket{Keys: []string{""}}), ErrInvalid)
	ctx := t.Context()
	first, err := p.Next(ctx)
	require.NoError(t, err)
	assert.Equal(t, []string{"ab", "d"}, itemsOf(first))
	assert.Equal(t, 1, p.c.Stats().Pending)
	nothingFor(t, p, 50*time.Millisecond, "bc waits for b")
	require.NoError(t, first.Done(ctx))
	second, err := p.Next(ctx)
	require.NoError(t, err)
	assert.Equal(t, []string{"bc"}, itemsOf(second))
	assert.Positive(t, second.Baskets[0].Waited)
	require.NoError(t, second.Done(ctx))
	assert.Zero(t, p.c.Stats().Pending)
}

// A basket refused in Redis, by another Client's key, is not offered again
// before a backoff: a Next with nothing else to take waits, then takes it
// once the key is free. The keys of a basket in one slot go in one call.
func TestProcessorRefusedInRedisWaits(t *testing.T) {
	rdb := wiretest.ServerClient(t)
	c, p := newReplica(t, rdb, 0)
	ctx := t.Context()
	other, err := New(rdb, WithPrefix(t.Name()+":"))
	require.NoError(t, err)
	defer other.Close()
	l, err := other.Lock(ctx, []string{"{w}k"})
	require.NoError(t, err)

	require.NoError(t, p.Add("old", Basket{Keys: []string{"{w}k", "{w}x"}}))
	got := make(chan *Tick[string], 1)
	go func() {
		tick, err := p.Next(ctx)
		assert.NoError(t, err)
		got <- tick
	}()
	began := time.Now()
	require.Eventually(t, func() bool { return p.c.Stats().RefusedInRedis >= 6 }, 5*time.Second, time.Millisecond)
	// Its retries after refusals 1 to 5 waited at least half of 2, 4, 8,
	// 16 and 32 ms (the backoff's lower half), never at once.
	assert.GreaterOrEqual(t, time.Since(began), 31*time.Millisecond, "refused, it waited between its tries")
	sent := c.Stats().Acquires
	require.NoError(t, l.Unlock(ctx))
	tick := <-got
	assert.Equal(t, []string{"old"}, itemsOf(tick))
	assert.LessOrEqual(t, c.Stats().Acquires-sent, uint64(2), "refused, it waited between its tries")
	require.NoError(t, tick.Done(ctx))
}

// A basket refused in Redis is offered again after a backoff that doubles
// with its refusals; while the Processor keeps up, at most twice as long as
// its ticks have lately held their keys (other replicas' hold theirs about
// as long), or the poll interval before any tick was done; behind, the
// backoff doubles on.
func TestProcessorRefusedInRedisBacksOffAsLongAsTicksHold(t *testing.T) {
	for _, tc := range []struct {
		name          string
		ticks         []time.Duration // how long each tick done held its keys
		behind        bool            // the Processor has more than half a tick left
		refusals      int
		least, atMost time.Duration
	}{
		{"no tick done yet: the poll interval bounds it", nil, false, 6, 32 * time.Millisecond, 64 * time.Millisecond},
		{"no tick done yet, refused more", nil, false, 7, 64 * time.Millisecond, 128 * time.Millisecond},
		{"ticks of 5 ms", []time.Duration{5 * time.Millisecond}, false, 6, 5 * time.Millisecond, 10 * time.Millisecond},
		{"ticks of 5 ms, the first refusal", []time.Duration{5 * time.Millisecond}, false, 1, time.Millisecond, 2 * time.Millisecond},
		{"ticks of 5 ms, then one of 85: the average moves an eighth", []time.Duration{5 * time.Millisecond, 85 * time.Millisecond}, false, 7, 15 * time.Millisecond, 30 * time.Millisecond},
		{"ticks shorter than half a millisecond: 1 ms", []time.Duration{100 * time.Microsecond}, false, 6, 500 * time.Microsecond, time.Millisecond},
		{"ticks of 5 ms, the Processor behind: doubling on", []time.Duration{5 * time.Millisecond}, true, 6, 32 * time.Millisecond, 64 * time.Millisecond},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, p := newReplica(t, wiretest.ServerClient(t), 0)
			for _, d := range tc.ticks {
				p.heldFor(d)
			}
			pb := &pendingBasket[string]{refusals: tc.refusals - 1}
			now := time.Now()
			p.mu.Lock()
			p.wait(pb, refusal{cause: refusedHeld}, nil, now, !tc.behind)
			p.mu.Unlock()
			assert.Equal(t, tc.refusals, pb.refusals)
			assert.False(t, pb.queued, "refused fewer times than a queued basket")
			assert.GreaterOrEqual(t, pb.readyAt.Sub(now), tc.least)
			assert.LessOrEqual(t, pb.readyAt.Sub(now), tc.atMost)
		})
	}
}

// A tick that leaves a backlog of more than half a tick counts its
// Processor behind: the basket Redis refused backs off as it doubles, not
// as long as the ticks hold their keys.
func TestProcessorBehindBacksOffAsItDoubles(t *testing.T) {
	for _, tc := range []struct {
		name          string
		items         []string // added, oldest first; the tick offers two
		least, atMost time.Duration
	}{
		{"keeping up: as long as ticks hold", []string{"old"}, 0, 10 * time.Millisecond},
		{"behind", []string{"old", "young", "free"}, 25 * time.Millisecond, 64 * time.Millisecond},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rdb := wiretest.ServerClient(t)
			_, p := newReplica(t, rdb, 2)
			other, err := New(rdb, WithPrefix(t.Name()+":"))
			require.NoError(t, err)
			defer other.Close()
			l, err := other.Lock(t.Context(), []string{"{w}k"})
			require.NoError(t, err)
			defer l.Unlock(context.WithoutCancel(t.Context()))
			for _, item := range tc.items {
				key := "{w}k"
				if item == "free" {
					key = "{w}free"
				}
				require.NoError(t, p.Add(item, Basket{Keys: []string{key}}))
			}
			p.mu.Lock()
			p.heldFor(5 * time.Millisecond)
			p.pending[0].refusals = 5 // the sixth refusal: 32 to 64 ms as it doubles
			p.mu.Unlock()

			ctx, cancel := context.WithCancel(t.Context())
			ended := make(chan struct{})
			go func() {
				defer close(ended)
				if tick, err := p.Next(ctx); err == nil {
					_ = tick.Done(context.WithoutCancel(ctx))
				}
			}()
			require.Eventually(t, func() bool { return p.c.Stats().RefusedInRedis >= 1 }, 5*time.Second, time.Millisecond)
			p.mu.Lock()
			old := p.pending[0]
			refusedAt, left := time.Now(), old.readyAt
			p.mu.Unlock()
			cancel()
			<-ended
			assert.Equal(t, "old", old.item)
			assert.Equal(t, 6, old.refusals)
			assert.GreaterOrEqual(t, left.Sub(refusedAt), tc.least)
			assert.LessOrEqual(t, left.Sub(refusedAt), tc.atMost)
		})
	}
}

// A Client's Stats count the backlog of its open Processors, and the ticks
// of all of them, a closed one's too.
func TestStatsCountTheClientsProcessors(t *testing.T) {
	c, first := newReplica(t, wiretest.ServerClient(t), 0)
	second, err := NewProcessor[string](c, 0)
	require.NoError(t, err)
	require.NoError(t, first.Add("a", Basket{Keys: []string{"a"}}))
	require.NoError(t, second.Add("b", Basket{Keys: []string{"b"}}))
	require.NoError(t, second.Add("c", Basket{Keys: []string{"c"}}))
	assert.Equal(t, 3, c.Stats().Pending)
	tick, err := second.Next(t.Context())
	require.NoError(t, err)
	require.NoError(t, tick.Done(t.Context()))
	assert.Equal(t, 1, c.Stats().Pending, "the tick took the second's two")
	left, err := first.Close(t.Context())
	require.NoError(t, err)
	assert.Equal(t, []string{"a"}, left)
	stats := c.Stats()
	assert.Zero(t, stats.Pending, "a closed Processor's backlog is handed back, not counted")
	assert.Equal(t, uint64(1), stats.Ticks, "a tick counts after Close")
	_, err = second.Close(t.Context())
	require.NoError(t, err)
}

// Close hands back the baskets not taken, waits for the tick out, leaves
// the places, and tells no loss; Add and Next then say ErrClosed.
func TestProcessorClose(t *testing.T) {
	rdb := wiretest.ServerClient(t)
	var lost int
	c, err := New(rdb, WithPrefix(t.Name()+":"), WithObserver(func(e Event) {
		if e.Kind == EventLost {
			lost++
		}
	}))
	require.NoError(t, err)
	defer c.Close()
	p, err := NewProcessor[string](c, 0)
	require.NoError(t, err)
	ctx := t.Context()
	other, err := New(rdb, WithPrefix(t.Name()+":"))
	require.NoError(t, err)
	defer other.Close()
	l, err := other.Lock(ctx, []string{"k"})
	require.NoError(t, err)
	defer l.Unlock(ctx)

	require.NoError(t, p.Add("a", Basket{Keys: []string{"a"}}))
	require.NoError(t, p.Add("k", Basket{Keys: []string{"k", "y"}}))
	tick, err := p.Next(ctx)
	require.NoError(t, err)
	assert.Equal(t, []string{"a"}, itemsOf(tick))
	require.Eventually(t, func() bool { return p.c.Stats().RefusedInRedis > 0 }, time.Second, time.Millisecond)
	closed := make(chan []string)
	go func() {
		left, err := p.Close(ctx)
		assert.NoError(t, err)
		closed <- left
	}()
	select {
	case <-closed:
		t.Fatal("Close returned before the tick out was done")
	case <-time.After(50 * time.Millisecond):
	}
	require.NoError(t, tick.Done(ctx))
	assert.Equal(t, []string{"k"}, <-closed)
	assert.Zero(t, rdb.Exists(ctx, t.Name()+":a", t.Name()+":y").Val(), "nothing of the Processor is left held")
	assert.ErrorIs(t, p.Add("b", Basket{Keys: []string{"b"}}), ErrClosed)
	_, err = p.Next(ctx)
	assert.ErrorIs(t, err, ErrClosed)
	assert.Zero(t, lost)
}

// A basket refused in Redis queueAfter times in a row waits in its key's
// queue: the holder's release grants the key to it, not to another
// Client's TryLock, and Next hands it out. Close ends such a wait, leaves
// nothing held and hands the basket back.
func TestProcessorQueuesABasketRefusedOverAndOver(t *testing.T) {
	rdb := wiretest.ServerClient(t)
	holder, _ := newReplica(t, rdb, 0)
	other, _ := newReplica(t, rdb, 0)
	_, p := newReplica(t, rdb, 0)
	ctx := t.Context()
	next := func() <-chan *Tick[string] {
		out := make(chan *Tick[string], 1)
		go func() {
			tick, err := p.Next(ctx)
			if err != nil {
				tick = nil
			}
			out <- tick
		}()
		return out
	}
	queued := func() bool { return p.c.Stats().Queued == 1 }

	l, err := holder.Lock(ctx, []string{"a"})
	require.NoError(t, err)
	require.NoError(t, p.Add("a", Basket{Keys: []string{"a"}, Shared: []string{"promo"}}))
	ticks := next()
	require.Eventually(t, queued, 10*time.Second, time.Millisecond)
	assert.GreaterOrEqual(t, p.c.Stats().RefusedInRedis, uint64(queueAfter))
	// Queued in the Processor first, then in Redis by its Lock.
	require.Eventually(t, func() bool {
		h, err := other.Inspect(ctx, "a")
		return err == nil && h[0].Waiting == 1
	}, 10*time.Second, time.Millisecond)
	require.NoError(t, p.Add("a again", Basket{Keys: []string{"a"}}))
	require.NoError(t, l.Unlock(ctx))
	_, err = other.TryLock(ctx, []string{"a"})
	require.ErrorIs(t, err, ErrNotObtained, "the release granted the key to the queued basket")
	tick := <-ticks
	require.NotNil(t, tick)
	assert.Equal(t, []string{"a"}, itemsOf(tick), "a basket of the same key waits for the queued one")
	reader, err := other.TryLock(ctx, []string{"other"}, WithShared("promo"))
	require.NoError(t, err, "the queued basket reads promo, as it asked")
	require.NoError(t, reader.Unlock(ctx))
	nothingFor(t, p, 50*time.Millisecond, "a again waits for the queued basket's tick")
	require.NoError(t, tick.Done(ctx))
	assert.Zero(t, p.c.Stats().Queued)
	again, err := p.Next(ctx)
	require.NoError(t, err)
	assert.Equal(t, []string{"a again"}, itemsOf(again))
	require.NoError(t, again.Done(ctx))

	l, err = holder.Lock(ctx, []string{"b"})
	require.NoError(t, err)
	require.NoError(t, p.Add("b", Basket{Keys: []string{"b"}}))
	ticks = next()
	require.Eventually(t, queued, 10*time.Second, time.Millisecond)
	left, err := p.Close(ctx)
	require.NoError(t, err)
	assert.Equal(t, []string{"b"}, left)
	assert.Nil(t, <-ticks)
	require.NoError(t, l.Unlock(ctx))
	// The queued Lock's place goes with its rollback, after Close (see
	// Close), and a grant it got meanwhile with it.
	require.Eventually(t, func() bool {
		taken, err := other.TryLock(ctx, []string{"b"})
		if err != nil {
			return false
		}
		require.NoError(t, taken.Unlock(ctx))
		return true
	}, 2*rollbackTimeout, 10*time.Millisecond, "the queued basket left the queue")
}

// Close ends every Next, those that wait included.
func TestProcessorCloseEndsEveryNext(t *testing.T) {
	_, p := newReplica(t, wiretest.ServerClient(t), 0)
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	errs := make(chan error, 2)
	for range 2 {
		go func() {
			_, err := p.Next(ctx)
			errs <- err
		}()
	}
	// Nothing to observe tells that both wait; either way, both must end.
	time.Sleep(50 * time.Millisecond)
	_, err := p.Close(t.Context())
	require.NoError(t, err)
	for range 2 {
		assert.ErrorIs(t, <-errs, ErrClosed)
	}
}

// A queued basket that got its keys after its Client closed is not handed
// out (its Lock ended with the Client): Next says ErrClosed, and Close
// hands the basket back.
func TestProcessorQueuedBasketOfAClosedClient(t *testing.T) {
	rdb := wiretest.ServerClient(t)
	holder, _ := newReplica(t, rdb, 0)
	c, p := newReplica(t, rdb, 0)
	ctx := t.Context()
	l, err := holder.Lock(ctx, []string{"a"})
	require.NoError(t, err)
	require.NoError(t, p.Add("a", Basket{Keys: []string{"a"}}))
	waiting, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		_, err := p.Next(waiting)
		done <- err
	}()
	require.Eventually(t, func() bool { return p.c.Stats().Queued == 1 }, 10*time.Second, time.Millisecond)
	stop()
	require.ErrorIs(t, <-done, context.Canceled)
	require.NoError(t, l.Unlock(ctx))
	require.Eventually(t, func() bool { s := p.c.Stats(); return s.Queued == 0 && s.Pending == 1 }, 10*time.Second, time.Millisecond)

	require.NoError(t, c.Close())
	_, err = p.Next(ctx)
	assert.ErrorIs(t, err, ErrClosed)
	left, err := p.Close(ctx)
	require.NoError(t, err)
	assert.Equal(t, []string{"a"}, left)
}

// A Processor's basket reports its wait from Add, as Taken.Waited says,
// in its EventAcquired: taken by a tick once an earlier tick let go, and
// granted through its keys' queue once another Client let go.
func TestProcessorAcquiredEventsTellTheWaitFromAdd(t *testing.T) {
	for _, tc := range []struct {
		name string
		// hold holds "a" until the let go it returns, from another tick of
		// the Processor or another Client.
		hold func(t *testing.T, p *Processor[string], other *Client) (letGo func() error)
		// queued: the basket waits in the key's queue (refused by another
		// Client, over and over), not for a tick of its Processor.
		queued bool
	}{
		{"a tick", func(t *testing.T, p *Processor[string], _ *Client) func() error {
			require.NoError(t, p.Add("first", Basket{Keys: []string{"a"}}))
			first, err := p.Next(t.Context())
			require.NoError(t, err)
			return func() error { return first.Done(t.Context()) }
		}, false},
		{"its keys' queue", func(t *testing.T, _ *Processor[string], other *Client) func() error {
			l, err := other.Lock(t.Context(), []string{"a"})
			require.NoError(t, err)
			return func() error { return l.Unlock(t.Context()) }
		}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rdb := wiretest.ServerClient(t)
			other, _ := newReplica(t, rdb, 0)
			acquired := make(chan Event, 8)
			c, err := New(rdb, WithPrefix(t.Name()+":"), WithPollInterval(10*time.Second),
				WithObserver(func(e Event) {
					if e.Kind == EventAcquired {
						acquired <- e
					}
				}))
			require.NoError(t, err)
			p, err := NewProcessor[string](c, 0)
			require.NoError(t, err)
			t.Cleanup(func() {
				_, _ = p.Close(context.Background())
				_ = c.Close()
			})
			letGo := tc.hold(t, p, other)
			for len(acquired) > 0 {
				<-acquired // the first tick's
			}
			require.NoError(t, p.Add("waits", Basket{Keys: []string{"a"}}))
			added := time.Now()
			ticks := make(chan *Tick[string], 1)
			go func() {
				tick, _ := p.Next(t.Context())
				ticks <- tick
			}()
			if tc.queued {
				require.Eventually(t, func() bool { return p.c.Stats().Queued == 1 }, 10*time.Second, time.Millisecond)
			}
			nothingFor(t, p, 50*time.Millisecond, "a is held")
			held := time.Since(added)
			require.NoError(t, letGo())
			tick := <-ticks
			require.NotNil(t, tick)
			require.Equal(t, []string{"waits"}, itemsOf(tick))
			e := <-acquired
			assert.Equal(t, tick.Baskets[0].Lock.Owner(), e.Owner)
			assert.GreaterOrEqual(t, e.Duration, held, "from Add, not from the call that took it")
			assert.LessOrEqual(t, e.Duration, tick.Baskets[0].Waited)
			require.NoError(t, tick.Done(t.Context()))
		})
	}
}
