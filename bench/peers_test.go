package bench

import (
	"context"
	"fmt"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/batchlock/batchlock/localcluster"
)

// The cluster is started by the first benchmark that needs one, so that
// unit tests run without Redis, and is shared by all of them.
var (
	clusterOnce sync.Once
	cluster     *localcluster.Cluster
	suite       *Suite
	clusterErr  error
)

func TestMain(m *testing.M) {
	code := m.Run()
	if suite != nil {
		if err := suite.Close(); err != nil {
			fmt.Fprintln(os.Stderr, err)
		}
	}
	if cluster != nil {
		if err := cluster.Close(); err != nil {
			fmt.Fprintln(os.Stderr, err)
		}
	}
	os.Exit(code)
}

// benchSuite returns the suite on BATCHLOCK_CLUSTER_ADDRS or a throwaway
// cluster; a benchmark that cannot have one fails rather than skips.
func benchSuite(b *testing.B) *Suite {
	clusterOnce.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		if cluster, clusterErr = localcluster.Start(ctx); clusterErr != nil {
			return
		}
		suite, clusterErr = NewSuite(cluster.ClientOptions)
	})
	if clusterErr != nil {
		b.Fatal(clusterErr)
	}
	return suite
}

// BenchmarkLockUnlock is the latency workload, one library and size at a
// time: lock N keys spread over all masters, unlock them.
func BenchmarkLockUnlock(b *testing.B) {
	for _, n := range []int{1, 10, 100, 1000} {
		for _, name := range []string{NameBatchlock, NameFloor, NameFencedFloor, NameRedsyncSeq, NameRedsyncPar, NameRedislockSeq, NameRedislockPar,
			NameOneSlot, NameFloorOneSlot, NameFencedFloorOneSlot} {
			b.Run(fmt.Sprintf("lib=%s/keys=%d", name, n), func(b *testing.B) {
				l := lockerNamed(b, benchSuite(b).Lockers, name)
				keys := Keys("bench:"+name, n)
				ctx := b.Context()
				for b.Loop() {
					if err := LockUnlock(ctx, l, keys); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}

// BenchmarkHandoff reports the median delay from a holder's unlock to its
// waiter's lock; ns/op is mostly the holder's random hold time.
func BenchmarkHandoff(b *testing.B) {
	for _, name := range []string{NameBatchlock, NameBatchlockPoll, NameRedsyncSeq, NameRedislockSeq} {
		b.Run("lib="+name, func(b *testing.B) {
			var pair HandoffPair
			for _, p := range benchSuite(b).Handoff {
				if p.Name == name {
					pair = p
				}
			}
			result := HandoffResult{Library: name}
			for i := 0; b.Loop(); i++ {
				d, phases, err := handoff(b.Context(), pair, fmt.Sprintf("bench:handoff:test:%s:%d", name, i))
				if err != nil {
					b.Fatal(err)
				}
				result.Samples = append(result.Samples, d)
				if phases.Notice > 0 {
					result.Phases = append(result.Phases, phases)
				}
			}
			s := Summarize(result.Samples)
			ms := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
			b.ReportMetric(ms(s.Median), "handoff-median-ms")
			b.ReportMetric(ms(s.P99), "handoff-p99-ms")
			if ph, ok := result.phaseMedians(); ok {
				b.ReportMetric(ms(ph.Notice), "notice-median-ms")
				b.ReportMetric(ms(ph.Resume), "resume-median-ms")
			}
		})
	}
}

func lockerNamed(b *testing.B, ls []Locker, name string) Locker {
	for _, l := range ls {
		if l.Name() == name {
			return l
		}
	}
	b.Fatalf("no locker %q", name)
	return nil
}
