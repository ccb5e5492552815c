package cluster_test

import (
	"fmt"
	"sort"
	"testing"
	"time"

	"github.com/batchlock/batchlock/batchlock"
)

// BenchmarkLockUnlock locks and unlocks N keys spread over every master.
//
//	go test -run '^$' -bench LockUnlock -benchmem ./cluster_test/
func BenchmarkLockUnlock(b *testing.B) {
	rdb := newClient(b)
	c, _ := newLocker(b, rdb)
	ctx := b.Context()
	for _, n := range []int{1, 10, 100, 1000} {
		keys := spread(n, fmt.Sprint("bench", n))
		b.Run(fmt.Sprintf("keys=%d", n), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				l, err := c.TryLock(ctx, keys, batchlock.WithTTL(10*time.Second))
				if err != nil {
					b.Fatal(err)
				}
				if err := l.Unlock(ctx); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkHandoff measures the delay from a holder's Unlock to a waiter
// holding the lock: woken by pub/sub, and by polling alone.
//
//	go test -run '^$' -bench Handoff ./cluster_test/
func BenchmarkHandoff(b *testing.B) {
	for _, mode := range []struct {
		name string
		opts []batchlock.Option
	}{
		{"pubsub", nil},
		{"polling", []batchlock.Option{batchlock.WithoutPubSub(), batchlock.WithPollInterval(100 * time.Millisecond)}},
	} {
		b.Run(mode.name, func(b *testing.B) {
			rdb := newClient(b)
			c, _ := newLocker(b, rdb, mode.opts...)
			ctx := b.Context()
			keys := spread(10, "handoff")
			var delays []time.Duration
			for b.Loop() {
				holder, err := c.Lock(ctx, keys, batchlock.WithTTL(10*time.Second))
				if err != nil {
					b.Fatal(err)
				}
				got := make(chan time.Time, 1)
				waiting := make(chan struct{})
				go func() {
					close(waiting)
					l, err := c.Lock(ctx, keys, batchlock.WithTTL(10*time.Second))
					if err != nil {
						b.Error(err)
						got <- time.Time{}
						return
					}
					got <- time.Now()
					_ = l.Unlock(ctx)
				}()
				<-waiting
				time.Sleep(5 * time.Millisecond) // let the waiter block: this is the scenario measured, not synchronisation
				released := time.Now()
				if err := holder.Unlock(ctx); err != nil {
					b.Fatal(err)
				}
				delays = append(delays, (<-got).Sub(released))
			}
			sort.Slice(delays, func(i, j int) bool { return delays[i] < delays[j] })
			b.ReportMetric(float64(delays[len(delays)/2].Microseconds()), "p50-µs")
			b.ReportMetric(float64(delays[len(delays)*99/100].Microseconds()), "p99-µs")
		})
	}
}
