package cluster_test

import (
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/batchlock/batchlock/batchlock"
)

// A basket refused on one master leaves nothing held on the others: what it
// took there is given back in one more call per master, and the call costs
// one acquire per master for all its baskets; UnlockEach one release per
// master.
func TestTryEachRefusedOnOneMasterLeavesNothing(t *testing.T) {
	cl := sharedCluster(t)
	rdb := newClient(t)
	c, prefix := newLocker(t, rdb)
	other := peerOf(t, rdb, prefix)
	ctx := ctxTimeout(t, 30*time.Second)
	keys, _ := keysOnMasters(t, cl, prefix, "each-refused", 2, 2)
	onA, onB := keys[:2], keys[2:]
	busy, err := other.Lock(ctx, onB[:1])
	require.NoError(t, err)

	before := c.Stats()
	locks, err := c.TryEach(ctx, [][]string{{onA[0], onB[0]}, {onA[1]}, {onB[1]}})
	require.NoError(t, err)
	require.Nil(t, locks[0], "refused on B")
	require.NotNil(t, locks[1])
	require.NotNil(t, locks[2])
	after := c.Stats()
	assert.EqualValues(t, 2, after.Acquires-before.Acquires, "one acquire per master for every basket")
	assert.EqualValues(t, 1, after.Releases-before.Releases, "one give-back, on A only")
	assert.Equal(t, []string{onA[1], onB[0], onB[1]}, heldBy(t, c, keys...), "nothing of the refused basket is held (B0 is the other's)")

	require.NoError(t, c.UnlockEach(ctx, locks))
	assert.EqualValues(t, 2, c.Stats().Releases-after.Releases, "one release per master for every lock")
	require.NoError(t, busy.Unlock(ctx))
	assert.Empty(t, lockKeysUnder(t, rdb, prefix))
}

// heldBy returns, sorted, the keys among keys that are held now.
func heldBy(t *testing.T, c *batchlock.Client, keys ...string) []string {
	t.Helper()
	var out []string
	for _, h := range heldKeys(t, c, keys...) {
		if len(h.Holders) > 0 {
			out = append(out, h.Key)
		}
	}
	return out
}

// Four Clients (processes) race ticks of baskets over a few hot SKUs with
// TryEach and UnlockEach, two of them putting their refused baskets first
// in the next tick: no SKU is ever in two sections at once, a key's token
// only grows from one section to the next, and nothing is left held.
func TestTryEachTicksRace(t *testing.T) {
	rdb := newClient(t)
	_, prefix := newLocker(t, rdb)
	ctx := ctxTimeout(t, time.Minute)
	const (
		clients = 4
		ticks   = 40
		skus    = 60
	)
	var mu sync.Mutex
	inUse := map[string]string{} // SKU: the owner in its section
	lastToken := map[string]int64{}
	var violations []string
	var taken, refused int
	var wg sync.WaitGroup
	for w := range clients {
		c := peerOf(t, rdb, prefix)
		rng := rand.New(rand.NewPCG(uint64(w), 7))
		carries := w%2 == 0
		wg.Go(func() {
			var carry [][]string
			for range ticks {
				baskets := carry
				for len(baskets) < 32 {
					var basket []string
					for range 1 + rng.IntN(6) {
						basket = append(basket, fmt.Sprintf("sku:%02d", rng.IntN(skus)))
					}
					baskets = append(baskets, basket)
				}
				locks, err := c.TryEach(ctx, baskets)
				if !assert.NoError(t, err) {
					return
				}
				carry = nil
				mu.Lock()
				for i, l := range locks {
					if l == nil {
						refused++
						if carries && len(carry) < 8 {
							carry = append(carry, baskets[i])
						}
						continue
					}
					taken++
					for _, k := range l.Keys() {
						if holder, ok := inUse[k]; ok {
							violations = append(violations, fmt.Sprintf("%s held by %s and %s", k, holder, l.Owner()))
						}
						inUse[k] = l.Owner()
						if tok := l.Token(k); tok <= lastToken[k] {
							violations = append(violations, fmt.Sprintf("%s token %d after %d", k, tok, lastToken[k]))
						}
						lastToken[k] = l.Token(k)
					}
				}
				mu.Unlock()
				time.Sleep(time.Millisecond) // the section: stock read and written
				mu.Lock()
				for _, l := range locks {
					if l != nil {
						for _, k := range l.Keys() {
							delete(inUse, k)
						}
					}
				}
				mu.Unlock()
				assert.NoError(t, c.UnlockEach(ctx, locks))
			}
			assert.NoError(t, c.Close())
		})
	}
	wg.Wait()
	assert.Empty(t, violations)
	assert.Positive(t, taken)
	assert.Positive(t, refused, "the SKUs are hot enough to meet")
	t.Logf("%d baskets taken, %d refused", taken, refused)
	assert.Empty(t, lockKeysUnder(t, rdb, prefix))
}

// A master that sleeps past the client's read timeout while a TryEach call
// is on it: the call is sent again, and each run after the first finds the
// keys the first took for the same baskets. A basket free but for that is
// taken; one refused by another Client's key on another master holds
// nothing once the call returns, there or on the sleeping master.
func TestTryEachRidesOutALostReply(t *testing.T) {
	cl := sharedCluster(t)
	opts := cl.ClientOptions()
	opts.ReadTimeout = 150 * time.Millisecond
	rdb := redis.NewClusterClient(opts)
	t.Cleanup(func() { _ = rdb.Close() })
	c, prefix := newLocker(t, rdb)
	other := peerOf(t, newClient(t), prefix)
	ctx := ctxTimeout(t, 30*time.Second)
	keys, masters := keysOnMasters(t, cl, prefix, "each-lost", 2, 2)
	onA, onB := keys[:2], keys[2:]
	busy, err := other.Lock(ctx, onB[:1])
	require.NoError(t, err)
	// A call before, so that each master knows the script by its digest:
	// a call it does not know fails without running.
	warm, err := c.TryEach(ctx, [][]string{{onA[1]}})
	require.NoError(t, err)
	require.NoError(t, c.UnlockEach(ctx, warm))

	slept := sleepNode(t, cl, masters[0].Addr, 800*time.Millisecond)
	before := c.Stats()
	locks, err := c.TryEach(ctx, [][]string{{onA[0]}, {onA[1], onB[0]}})
	require.NoError(t, err)
	require.NoError(t, <-slept)
	assert.Greater(t, c.Stats().Acquires-before.Acquires, uint64(2), "the call to the sleeping master was sent again")
	require.NotNil(t, locks[0], "taken: the keys found were its own")
	assert.Nil(t, locks[1], "refused by the other Client")
	assert.Positive(t, locks[0].Token(onA[0]))
	assert.Equal(t, []string{onA[0], onB[0]}, heldBy(t, c, keys...), "nothing of the refused basket is held")
	assert.Greater(t, time.Until(locks[0].ValidUntil()), 15*time.Second)

	require.NoError(t, c.UnlockEach(ctx, locks))
	require.NoError(t, busy.Unlock(ctx))
	assert.Empty(t, lockKeysUnder(t, rdb, prefix))
}
