package cluster_test

import (
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/batchlock/batchlock/batchlock"
)

// admissionBasket is an item of the suite's admissions: its keys.
type admissionBasket []string

func basketKeys(b admissionBasket) []string { return b }

// A basket another processor's Client refused tick after tick keeps its
// turn across processes: it waits for the key in its queue, and while it
// waits, a third processor sending fresh baskets over its keys at every tick
// never gets them; the first tick after the holder's release hands the
// basket out. Meanwhile it holds only keys before the one it waits for, and
// a place in that key's queue.
func TestAdmissionKeepsItsTurnAcrossProcesses(t *testing.T) {
	cl := sharedCluster(t)
	rdb := newClient(t)
	processor, prefix := newLocker(t, rdb)
	holder := peerOf(t, newClient(t), prefix)
	other := peerOf(t, newClient(t), prefix)
	ctx := ctxTimeout(t, 30*time.Second)
	keys, _ := keysOnMasters(t, cl, prefix, "adm-turn", 3, 1)
	inSlotOrder(prefix, keys)
	waited := keys[1]
	held, err := holder.Lock(ctx, []string{waited})
	require.NoError(t, err)

	a := batchlock.NewAdmission(processor, basketKeys)
	t.Cleanup(func() { a.Close() })
	got, err := a.Tick(ctx, []admissionBasket{keys})
	require.NoError(t, err)
	require.Empty(t, got)
	// Refused at every tick, it waits for the key in its queue.
	require.Eventually(t, func() bool {
		got, err := a.Tick(ctx, nil)
		require.NoError(t, err)
		require.Empty(t, got)
		return processor.Stats().Waiting == 1
	}, 10*time.Second, time.Millisecond)
	waitQueued(ctx, t, holder, waited, 1)
	assert.Equal(t, []string{keys[0], waited}, heldBy(t, holder, keys...), "it holds the key before the one it waits for, and none after")

	// A third processor keeps sending fresh baskets over the keys.
	stop := make(chan struct{})
	var tookIt atomic.Bool
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			select {
			case <-stop:
				return
			case <-time.After(5 * time.Millisecond): // a processor's tick
			}
			locks, err := other.TryEach(ctx, [][]string{{waited}, slices.Clone(keys)})
			if err != nil {
				continue
			}
			for _, l := range locks {
				if l != nil {
					tookIt.Store(true)
				}
			}
			_ = other.UnlockEach(ctx, locks)
		}
	})
	require.NoError(t, held.Unlock(ctx))
	var admitted []batchlock.Admitted[admissionBasket]
	require.Eventually(t, func() bool {
		got, err := a.Tick(ctx, nil)
		require.NoError(t, err)
		admitted = append(admitted, got...)
		return len(admitted) > 0
	}, 10*time.Second, 5*time.Millisecond, "the first tick after the release hands it out")
	close(stop)
	wg.Wait()
	assert.False(t, tookIt.Load(), "no fresh basket of another processor overtook it")
	l := admitted[0].Lock
	assert.Equal(t, keys, l.Keys())
	assert.Greater(t, l.Token(waited), held.Token(waited), "handed on by the release, with a newer token")
	require.NoError(t, processor.UnlockEach(ctx, []*batchlock.Lock{l}))
	assert.Empty(t, lockKeysUnder(t, rdb, prefix))
}

// A processor killed while a basket of its admission waits leaves nothing
// for long: its place in the queue lapses within seconds (it polled once a
// second), and the key it held before the one it waited for goes at the
// end of its lease (2s here), so another processor gets the whole basket.
func TestAdmissionOfAKilledProcessorLapses(t *testing.T) {
	cl := sharedCluster(t)
	rdb := newClient(t)
	holder, prefix := newLocker(t, rdb)
	ctx := ctxTimeout(t, 30*time.Second)
	keys, _ := keysOnMasters(t, cl, prefix, "adm-killed", 2, 1)
	inSlotOrder(prefix, keys)
	held, err := holder.Lock(ctx, keys[1:])
	require.NoError(t, err)

	cmd, err := startWaiter(waiterSpec{Addrs: cl.Addrs(), Prefix: prefix, Keys: keys, Admission: true, TTL: 2 * time.Second})
	require.NoError(t, err)
	waitQueued(ctx, t, holder, keys[1], 1)
	require.NoError(t, cmd.Process.Kill())
	_ = cmd.Wait()
	require.NoError(t, held.Unlock(ctx))

	next := peerOf(t, newClient(t), prefix)
	b := batchlock.NewAdmission(next, basketKeys)
	t.Cleanup(func() { b.Close() })
	admitted, err := b.Tick(ctx, []admissionBasket{keys})
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		got, err := b.Tick(ctx, nil)
		require.NoError(t, err)
		admitted = append(admitted, got...)
		return len(admitted) > 0
	}, 15*time.Second, 10*time.Millisecond, "the dead processor's place and keys lapse")
	require.NoError(t, next.UnlockEach(ctx, []*batchlock.Lock{admitted[0].Lock}))
	assert.Empty(t, lockKeysUnder(t, rdb, prefix))
}
