package batchlock

import (
	"fmt"
	"testing"
	"time"

	"github.com/batchlock/batchlock/internal/wire/wiretest"
)

// The client's own cost of a lock and unlock, and of a batch processor's
// tick (TryEach of 256 baskets, UnlockEach), on one
// redis-server: with -cpuprofile and -benchmem, where the time and the
// allocations of a call go.
//
//	go test -run '^$' -bench BenchmarkClient -benchmem ./batchlock
func BenchmarkClient(b *testing.B) {
	c, err := New(wiretest.ServerClient(b))
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
