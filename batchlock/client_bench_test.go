package batchlock

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/batchlock/batchlock/internal/wire/wiretest"
)

// The client's own cost of a lock and unlock, of a tick of TryEach (256
// baskets, UnlockEach), and of a Processor's tick in a closed loop of big
// baskets that mostly meet (the demo's: 1 to 200 of 2000 keys; an
// observer listens, as a user's metrics do), on one redis-server: with
// -cpuprofile and -benchmem, where the time and the allocations of a call
// go.
//
//	go test -run '^$' -bench BenchmarkClient -benchmem ./batchlock
func BenchmarkClient(b *testing.B) {
	c, err := New(wiretest.ServerClient(b), WithObserver(func(Event) {}))
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	for _, n := range []int{1, 100} {
		keys := make([]string, n)
		for i := range keys {
			keys[i] = fmt.Sprintf("bench:client:%d", i)
		}
		b.Run(fmt.Sprintf("keys=%d", n), func(b *testing.B) {
			for b.Loop() {
				l, err := c.Lock(b.Context(), keys, WithTTL(10*time.Second))
				if err != nil {
					b.Fatal(err)
				}
				if err := l.Unlock(b.Context()); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
	baskets := make([][]string, 256)
	for i := range baskets {
		for j := range 1 + i%40 {
			baskets[i] = append(baskets[i], fmt.Sprintf("bench:sku:%d", (i*41+j*7)%2000))
		}
	}
	b.Run("tick=256", func(b *testing.B) {
		for b.Loop() {
			locks, err := c.TryEach(b.Context(), baskets, WithTTL(10*time.Second))
			if err != nil {
				b.Fatal(err)
			}
			if err := c.UnlockEach(b.Context(), locks); err != nil {
				b.Fatal(err)
			}
		}
	})
}

func BenchmarkProcessor(b *testing.B) {
	c, err := New(wiretest.ServerClient(b), WithObserver(func(Event) {}))
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	p, err := NewProcessor[int](c, 0)
	if err != nil {
		b.Fatal(err)
	}
	defer p.Close(context.Background())
	rng := rand.New(rand.NewPCG(1, 2))
	baskets := make([]Basket, 512)
	for i := range baskets {
		for range 1 + rng.IntN(200) {
			baskets[i].Keys = append(baskets[i].Keys, fmt.Sprintf("bench:sku:%d", rng.IntN(2000)))
		}
		if err := p.Add(i, baskets[i]); err != nil {
			b.Fatal(err)
		}
	}
	b.Run("closed,tick=256,keys=1-200", func(b *testing.B) {
		taken := 0
		for b.Loop() {
			tick, err := p.Next(b.Context())
			if err != nil {
				b.Fatal(err)
			}
			if err := tick.Done(b.Context()); err != nil {
				b.Fatal(err)
			}
			for _, t := range tick.Baskets {
				taken++
				if err := p.Add(t.Item, baskets[t.Item]); err != nil {
					b.Fatal(err)
				}
			}
		}
		b.ReportMetric(float64(taken)/float64(b.N), "baskets/op")
	})
}
