package cluster_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/batchlock/batchlock/batchlock"
	"github.com/batchlock/batchlock/localcluster"
)

// redisLog captures go-redis's log lines for the rest of a test.
type redisLog struct {
	mu    sync.Mutex
	lines []string
}

func (l *redisLog) Printf(_ context.Context, format string, args ...any) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.lines = append(l.lines, fmt.Sprintf(format, args...))
}

func (l *redisLog) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.Join(l.lines, "\n")
}

// captureRedisLog sends go-redis's log to the returned capture until the
// test ends (the suite's tests run one at a time).
func captureRedisLog(t *testing.T) *redisLog {
	logs := &redisLog{}
	redis.SetLogger(logs)
	t.Cleanup(func() { redis.SetLogger(verboseRedisLogger{}) })
	return logs
}

// clusterSlotsServed counts the CLUSTER SLOTS the cluster's nodes served so
// far: each one is a load of a client's map of slots.
func clusterSlotsServed(ctx context.Context, t *testing.T, cl *localcluster.Cluster) int {
	total := 0
	for _, addr := range cl.Addrs() {
		info, err := cl.Do(ctx, addr, "INFO", "commandstats")
		require.NoError(t, err)
		for line := range strings.Lines(fmt.Sprint(info)) {
			if stats, ok := strings.CutPrefix(strings.TrimSpace(line), "cmdstat_cluster|slots:"); ok {
				var calls int
				_, err := fmt.Sscanf(stats, "calls=%d,", &calls)
				require.NoError(t, err, stats)
				total += calls
			}
		}
	}
	return total
}

// go-redis prints nothing across lock, wait, hand-off, loss and Close,
// repeated, with the clients' lives longer than a second. It printed
// "Unexpected conn[N] state changed by hook to CLOSED, closing it" when a
// cluster client was closed while a topology reload of its own ran in the
// background; ClusterOptions once asked for one whenever the map was a
// second old. Now a client loads the map when it starts and when a call
// meets a redirection or fails, so a quiet cluster sees one CLUSTER SLOTS
// per client, and nothing runs behind a Close.
func TestNoStrayLogLines(t *testing.T) {
	cl := newCluster(t)
	ctx := t.Context()
	logs := captureRedisLog(t)
	prefix := testPrefix(t)
	const rounds = 3
	slotsBefore := clusterSlotsServed(ctx, t, cl)
	for round := range rounds {
		rdbA, rdbB := cl.Client(), cl.Client()
		a, err := batchlock.New(rdbA, batchlock.WithPrefix(prefix), batchlock.WithLease(400*time.Millisecond))
		require.NoError(t, err)
		queued := make(chan struct{}, 1)
		b, err := batchlock.New(rdbB, batchlock.WithPrefix(prefix), batchlock.WithLease(400*time.Millisecond),
			batchlock.WithObserver(func(e batchlock.Event) {
				if e.Kind == batchlock.EventQueued {
					select {
					case queued <- struct{}{}:
					default:
					}
				}
			}))
		require.NoError(t, err)

		keys := spread(8, fmt.Sprint("quiet", round))
		held, err := a.Lock(ctx, keys)
		require.NoError(t, err)
		obtained := make(chan *batchlock.Lock, 1)
		go func() {
			lock, err := b.Lock(ctx, keys[:3])
			assert.NoError(t, err)
			obtained <- lock
		}()
		<-queued
		// Renewals for longer than a second, past any reload interval.
		time.Sleep(1200 * time.Millisecond)
		require.NoError(t, held.Unlock(ctx))
		handed := <-obtained
		require.NotNil(t, handed)

		_, err = a.ForceUnlock(ctx, keys[:3]...)
		require.NoError(t, err)
		<-handed.Context().Done()
		require.ErrorIs(t, handed.Err(), batchlock.ErrLockLost)

		atClose, err := a.Lock(ctx, keys[5:])
		require.NoError(t, err)
		require.NoError(t, b.Close())
		require.NoError(t, a.Close())
		<-atClose.Context().Done()
		require.ErrorIs(t, atClose.Err(), batchlock.ErrClosed)
		require.NoError(t, rdbB.Close())
		require.NoError(t, rdbA.Close())
	}
	assert.Empty(t, logs.String(), "go-redis's log")
	assert.LessOrEqual(t, clusterSlotsServed(ctx, t, cl)-slotsBefore, 2*rounds,
		"CLUSTER SLOTS beyond each client's first: topology reloads in the background")
}
