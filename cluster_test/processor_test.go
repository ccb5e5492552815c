package cluster_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/batchlock/batchlock/batchlock"
	"github.com/batchlock/batchlock/hashtag"
)

// A bad basket is refused alone, at Add, with its own error; the others
// are taken as if it had not come.
func TestProcessorRefusesABadBasketAlone(t *testing.T) {
	rdb := newClient(t)
	c, prefix := newLocker(t, rdb)
	p, err := batchlock.NewProcessor[string](c, 0)
	require.NoError(t, err)
	ctx := ctxTimeout(t, 30*time.Second)
	require.NoError(t, p.Add("a", batchlock.Basket{Keys: spread(5, "bad-a")}))
	for name, b := range map[string]batchlock.Basket{
		"empty":    {},
		"blank":    {Keys: []string{"x", ""}},
		"reserved": {Shared: []string{"fence:{1}"}},
	} {
		assert.ErrorIs(t, p.Add(name, b), batchlock.ErrInvalid, name)
	}
	require.NoError(t, p.Add("b", batchlock.Basket{Keys: spread(5, "bad-b"), Shared: []string{"promo"}}))
	tick, err := p.Next(ctx)
	require.NoError(t, err)
	var items []string
	for _, b := range tick.Baskets {
		items = append(items, b.Item)
	}
	assert.Equal(t, []string{"a", "b"}, items)
	require.NoError(t, tick.Done(ctx))
	left, err := p.Close(ctx)
	require.NoError(t, err)
	assert.Empty(t, left)
	assert.Empty(t, lockKeysUnder(t, rdb, prefix))
}

// Three replicas take overlapping baskets over a few hot SKUs, each with
// two goroutines calling Next on one context that names one owner: no SKU
// is ever held by two baskets at once, whatever the owners (each basket
// has its own), a key's token grows from one holder to the next, every
// basket is taken, and nothing is left held.
func TestProcessorBasketsNeverShareAKey(t *testing.T) {
	rdb := newClient(t)
	_, prefix := newLocker(t, rdb)
	ctx := ctxTimeout(t, time.Minute)
	ownerCtx := batchlock.ContextWithOwner(ctx, "one-owner-for-all")
	const (
		replicas = 3
		baskets  = 150
		skus     = 12
	)
	var mu sync.Mutex
	inUse := map[string]string{} // SKU: the basket holding it
	lastToken := map[string]int64{}
	var violations []string
	taken := 0
	var wg sync.WaitGroup
	for r := range replicas {
		c := peerOf(t, rdb, prefix)
		p, err := batchlock.NewProcessor[string](c, 8)
		require.NoError(t, err)
		rng := rand.New(rand.NewPCG(uint64(r), 9))
		for i := range baskets {
			var keys []string
			for range 1 + rng.IntN(4) {
				keys = append(keys, fmt.Sprintf("{space}sku:%02d", rng.IntN(skus)))
			}
			require.NoError(t, p.Add(fmt.Sprintf("r%d-%d", r, i), batchlock.Basket{Keys: keys}))
		}
		var done sync.WaitGroup
		for range 2 {
			done.Go(func() {
				for {
					tick, err := p.Next(ownerCtx)
					if err != nil {
						assert.ErrorIs(t, err, batchlock.ErrClosed)
						return
					}
					mu.Lock()
					for _, b := range tick.Baskets {
						for _, k := range b.Lock.Keys() {
							if holder, ok := inUse[k]; ok {
								violations = append(violations, fmt.Sprintf("%s held by %s and %s", k, holder, b.Item))
							}
							inUse[k] = b.Item
							if tok := b.Lock.Token(k); tok <= lastToken[k] {
								violations = append(violations, fmt.Sprintf("%s token %d after %d", k, tok, lastToken[k]))
							}
							lastToken[k] = b.Lock.Token(k)
						}
					}
					mu.Unlock()
					time.Sleep(time.Millisecond) // the tick's work
					mu.Lock()
					for _, b := range tick.Baskets {
						for _, k := range b.Lock.Keys() {
							delete(inUse, k)
						}
					}
					taken += len(tick.Baskets)
					left := c.Stats().Pending
					mu.Unlock()
					assert.NoError(t, tick.Done(ctx))
					if left == 0 {
						_, err := p.Close(ctx)
						assert.NoError(t, err)
					}
				}
			})
		}
		wg.Go(done.Wait)
	}
	wg.Wait()
	assert.Empty(t, violations[:min(len(violations), 10)], "%d violations in all", len(violations))
	assert.Equal(t, replicas*baskets, taken, "every basket taken")
	assert.Empty(t, lockKeysUnder(t, rdb, prefix))
}

// Close while a tick is out and baskets wait: it takes no more ticks, hands
// back the baskets not taken, and once its context ends releases the tick
// still out, told as released, not lost; nothing is left held. Add and Next
// then say ErrClosed.
func TestProcessorCloseHandsBackAndReleases(t *testing.T) {
	rdb := newClient(t)
	prefix := testPrefix(t)
	var mu sync.Mutex
	told := map[string]int{}
	c, err := batchlock.New(rdb, batchlock.WithPrefix(prefix), batchlock.WithObserver(func(e batchlock.Event) {
		mu.Lock()
		told[e.Kind]++
		mu.Unlock()
	}))
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })
	p, err := batchlock.NewProcessor[int](c, 1)
	require.NoError(t, err)
	ctx := ctxTimeout(t, 30*time.Second)
	for i := range 3 {
		require.NoError(t, p.Add(i, batchlock.Basket{Keys: spread(6, fmt.Sprintf("close-%d", i))}))
	}
	tick, err := p.Next(ctx)
	require.NoError(t, err)
	require.Len(t, tick.Baskets, 1)
	assert.Len(t, lockKeysUnder(t, rdb, prefix), 6)

	short, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	left, err := p.Close(short)
	require.NoError(t, err)
	assert.Equal(t, []int{1, 2}, left, "the baskets not taken, in arrival order")
	assert.Empty(t, lockKeysUnder(t, rdb, prefix), "the tick still out was released")
	assert.Error(t, tick.Baskets[0].Lock.Err(), "its lock ended")
	assert.NoError(t, tick.Done(ctx), "a Done after Close does nothing")
	mu.Lock()
	assert.Zero(t, told[batchlock.EventLost], "a lock Close released is no loss")
	mu.Unlock()
	assert.ErrorIs(t, p.Add(9, batchlock.Basket{Keys: []string{"x"}}), batchlock.ErrClosed)
	_, err = p.Next(ctx)
	assert.ErrorIs(t, err, batchlock.ErrClosed)
}

// Each basket holds its keys as it asked, whatever the others of its tick
// asked: another Client's reader joins a key a basket reads and is refused
// one a basket of the same keys writes. And a Processor on a Client made
// after another's Close takes the same keys at once: nothing of the first
// is left.
func TestProcessorBasketsKeepTheirModes(t *testing.T) {
	rdb := newClient(t)
	c, prefix := newLocker(t, rdb)
	reader := peerOf(t, rdb, prefix)
	ctx := ctxTimeout(t, 30*time.Second)
	p, err := batchlock.NewProcessor[string](c, 0)
	require.NoError(t, err)
	require.NoError(t, p.Add("reads", batchlock.Basket{Keys: []string{"{m}sku:1"}, Shared: []string{"{m}promo"}}))
	require.NoError(t, p.Add("writes", batchlock.Basket{Keys: []string{"{m}sku:2", "{m}promo"}}))
	first, err := p.Next(ctx)
	require.NoError(t, err)
	require.Len(t, first.Baskets, 1, "the writer waits for the reader")
	r, err := reader.TryLock(ctx, []string{"{m}other"}, batchlock.WithShared("{m}promo"))
	require.NoError(t, err, "a reader joins the key the basket reads")
	require.NoError(t, r.Unlock(ctx))
	require.NoError(t, first.Done(ctx))
	second, err := p.Next(ctx)
	require.NoError(t, err)
	require.Equal(t, "writes", second.Baskets[0].Item)
	_, err = reader.TryLock(ctx, []string{"{m}other"}, batchlock.WithShared("{m}promo"))
	require.ErrorIs(t, err, batchlock.ErrNotObtained, "a reader is refused the key the basket writes")
	// A Close whose context has ended lets go of the tick at once.
	ended, cancel := context.WithCancel(ctx)
	cancel()
	left, err := p.Close(ended)
	require.NoError(t, err)
	assert.Empty(t, left)
	require.NoError(t, second.Done(ctx), "a Done after Close does nothing")
	assert.Empty(t, lockKeysUnder(t, rdb, prefix), "Close released the tick out")
	require.NoError(t, c.Close())

	again := peerOf(t, rdb, prefix)
	p2, err := batchlock.NewProcessor[string](again, 0)
	require.NoError(t, err)
	require.NoError(t, p2.Add("again", batchlock.Basket{Keys: []string{"{m}sku:2", "{m}promo"}}))
	tick, err := p2.Next(ctx)
	require.NoError(t, err)
	assert.Len(t, tick.Baskets, 1)
	require.NoError(t, tick.Done(ctx))
	_, err = p2.Close(ctx)
	require.NoError(t, err)
}

// keySpaces are the ways a test lays out its keys: spread over the masters,
// or every key in one slot (a hash tag before it).
var keySpaces = []struct{ name, tag string }{{"spread", ""}, {"one slot", "{shop}"}}

// A big basket among three other replicas' small ones, each on one of its
// keys, is admitted within a bounded number of their ticks, spread over
// the masters or in one slot: refused in Redis again and again, it waits
// in its keys' queues, which their ticks do not pass.
func TestProcessorBigBasketAmongSmallOnes(t *testing.T) {
	for _, tc := range keySpaces {
		t.Run(tc.name, func(t *testing.T) {
			rdb := newClient(t)
			c, prefix := newLocker(t, rdb)
			keys := make([]string, 20)
			for i := range keys {
				keys[i] = fmt.Sprintf("%ssku:%d", tc.tag, i)
			}
			ctx := ctxTimeout(t, time.Minute)
			othersCtx, stop := context.WithCancel(ctx)
			var others sync.WaitGroup
			var ticks atomic.Int64
			for r := range 3 {
				peer := peerOf(t, rdb, prefix)
				small, err := batchlock.NewProcessor[int](peer, 0)
				require.NoError(t, err)
				others.Go(func() {
					defer func() { _, _ = small.Close(context.Background()) }()
					rng := rand.New(rand.NewPCG(uint64(r), 1))
					for {
						for peer.Stats().Pending < 32 {
							require.NoError(t, small.Add(0, batchlock.Basket{Keys: []string{keys[rng.IntN(len(keys))]}}))
						}
						tick, err := small.Next(othersCtx)
						if err != nil {
							return
						}
						time.Sleep(5 * time.Millisecond) // the tick's work
						require.NoError(t, tick.Done(ctx))
						ticks.Add(1)
					}
				})
			}
			require.Eventually(t, func() bool { return ticks.Load() >= 20 }, 30*time.Second, time.Millisecond, "the others keep every key busy")
			ticks.Store(0)
			big, err := batchlock.NewProcessor[string](c, 0)
			require.NoError(t, err)
			require.NoError(t, big.Add("big", batchlock.Basket{Keys: keys}))
			tick, err := big.Next(ctx)
			stop()
			others.Wait()
			require.NoError(t, err, "the big basket was admitted")
			t.Logf("admitted after %d ticks of the others, %v, %+v", ticks.Load(), tick.Baskets[0].Waited, c.Stats())
			assert.Less(t, ticks.Load(), int64(2000), "admitted within a bounded number of the others' ticks")
			require.NoError(t, tick.Done(ctx))
			_, err = big.Close(ctx)
			require.NoError(t, err)
		})
	}
}

// Three replicas take a steady flow of baskets while one of them stalls
// 3 s holding its tick's keys (as a paused process does): the others wait
// for those keys, never hold a key another basket holds, and once the
// stall ends every replica drains what came meanwhile.
func TestProcessorsRecoverFromAStall(t *testing.T) {
	for _, tc := range keySpaces {
		t.Run(tc.name, func(t *testing.T) {
			rdb := newClient(t)
			_, prefix := newLocker(t, rdb)
			ctx := ctxTimeout(t, time.Minute)
			var mu sync.Mutex
			holders := map[string]int{} // by key: the basket holding it
			enter := func(id int, keys []string) {
				mu.Lock()
				defer mu.Unlock()
				for _, k := range keys {
					if other, ok := holders[k]; ok {
						t.Errorf("%s held by baskets %d and %d at once", k, other, id)
					}
					holders[k] = id
				}
			}
			leave := func(keys []string) {
				mu.Lock()
				defer mu.Unlock()
				for _, k := range keys {
					delete(holders, k)
				}
			}
			const replicas, perReplica = 3, 400
			stalled := make(chan struct{})
			var wg sync.WaitGroup
			for r := range replicas {
				peer := peerOf(t, rdb, prefix)
				p, err := batchlock.NewProcessor[int](peer, 64)
				require.NoError(t, err)
				fed := make(chan struct{})
				wg.Go(func() { // the flow of baskets: 100 a second
					defer close(fed)
					rng := rand.New(rand.NewPCG(uint64(r), 2))
					for i := range perReplica {
						keys := make([]string, 1+rng.IntN(8))
						for j := range keys {
							keys[j] = fmt.Sprintf("%ssku:%d", tc.tag, rng.IntN(200))
						}
						require.NoError(t, p.Add(r*perReplica+i, batchlock.Basket{Keys: keys}))
						time.Sleep(10 * time.Millisecond) // the arrival rate
					}
				})
				wg.Go(func() {
					taken, didStall := 0, false
					for taken < perReplica {
						tick, err := p.Next(ctx)
						if !assert.NoError(t, err, "replica %d, %d taken, %+v", r, taken, peer.Stats()) {
							return
						}
						for _, b := range tick.Baskets {
							enter(b.Item, b.Lock.Keys())
						}
						if r == 0 && taken > perReplica/4 && !didStall {
							time.Sleep(3 * time.Second) // the stall, holding the tick
							close(stalled)
							didStall = true
						}
						for _, b := range tick.Baskets {
							leave(b.Lock.Keys())
						}
						require.NoError(t, tick.Done(ctx))
						taken += len(tick.Baskets)
					}
					<-fed
					assert.Zero(t, peer.Stats().Pending)
					_, err := p.Close(ctx)
					assert.NoError(t, err)
				})
			}
			wg.Wait()
			select {
			case <-stalled:
			default:
				t.Fatal("replica 0 never stalled")
			}
			assert.Empty(t, lockKeysUnder(t, rdb, prefix))
		})
	}
}

// A tick whose Done fails (its master frozen past Done's context) is let go
// by the Processor as soon as the master answers again, not at the end of
// its lease: another replica takes its keys long before then, and Close
// leaves nothing held.
func TestProcessorLetsGoOfATickWhoseDoneFailed(t *testing.T) {
	cl := newCluster(t)
	rdb := cl.Client()
	t.Cleanup(func() { _ = rdb.Close() })
	const lease = time.Minute
	c, prefix := newLocker(t, rdb, batchlock.WithLease(lease))
	other := peerOf(t, rdb, prefix)
	ctx := ctxTimeout(t, time.Minute)
	keys := []string{"{frozen}sku:1", "{frozen}sku:2", "{frozen}sku:3"}
	master, err := cl.MasterOfSlot(ctx, hashtag.Slot(prefix+keys[0]))
	require.NoError(t, err)

	p, err := batchlock.NewProcessor[int](c, 0)
	require.NoError(t, err)
	require.NoError(t, p.Add(1, batchlock.Basket{Keys: keys}))
	tick, err := p.Next(ctx)
	require.NoError(t, err)
	require.Len(t, tick.Baskets, 1)

	require.NoError(t, cl.Freeze(ctx, master.Addr))
	doneCtx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	err = tick.Done(doneCtx)
	cancel()
	require.NoError(t, cl.Thaw(ctx, master.Addr))
	require.Error(t, err, "Done met a frozen master")

	// Well within the lease: its keys go as soon as the master answers.
	require.Eventually(t, func() bool {
		l, err := other.TryLock(ctx, keys)
		if err != nil {
			return false
		}
		require.NoError(t, l.Unlock(ctx))
		return true
	}, lease/4, 20*time.Millisecond, "another replica takes the keys of the tick whose Done failed")
	left, err := p.Close(ctx)
	require.NoError(t, err)
	assert.Empty(t, left)
	assert.Empty(t, lockKeysUnder(t, rdb, prefix))
}
