package cluster_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/batchlock/batchlock/batchlock"
	"github.com/batchlock/batchlock/localcluster"
	"github.com/batchlock/batchlock/redlock"
)

// redlockNodes is five independent Redis nodes, one go-redis client each,
// and a key prefix of the test's own.
type redlockNodes struct {
	singles *localcluster.Singles
	addrs   []string
	rdbs    []redis.UniversalClient
	prefix  string
}

// startRedlockNodes starts five single nodes for the test; they are closed
// at its end.
func startRedlockNodes(t *testing.T) *redlockNodes {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), clusterStartTimeout)
	defer cancel()
	s, err := localcluster.StartSingles(ctx, 5, localcluster.WithLogf(t.Logf))
	if err != nil {
		unavailable(t, err)
	}
	t.Cleanup(func() {
		if err := s.Close(); err != nil {
			t.Errorf("closing the nodes: %v", err)
		}
	})
	n := &redlockNodes{singles: s, addrs: s.Addrs(), prefix: testPrefix(t)}
	for _, addr := range n.addrs {
		// Short timeouts bounded by the context, so that requests to a
		// frozen or dead node give up soon.
		rdb := redis.NewClient(&redis.Options{
			Addr:                     addr,
			DialTimeout:              200 * time.Millisecond,
			ReadTimeout:              500 * time.Millisecond,
			WriteTimeout:             500 * time.Millisecond,
			ContextTimeoutEnabled:    true,
			MaxRetries:               -1, // batchlock's calls have their own retry layer
			DialerRetries:            2,
			DialerRetryTimeout:       50 * time.Millisecond,
			PoolTimeout:              time.Second,
			DisableIdentity:          true,
			MaintNotificationsConfig: &maintnotifications.Config{Mode: maintnotifications.ModeDisabled},
		})
		t.Cleanup(func() { _ = rdb.Close() })
		n.rdbs = append(n.rdbs, rdb)
	}
	return n
}

// client returns a redlock Client on the five nodes with the test's prefix,
// closed at the end of the test (before the nodes are restored, since
// cleanups run last-registered first: register faults' restoration after).
func (n *redlockNodes) client(t *testing.T, opts ...redlock.Option) *redlock.Client {
	t.Helper()
	c, err := redlock.New(n.rdbs, append([]redlock.Option{redlock.WithClientOptions(batchlock.WithPrefix(n.prefix))}, opts...)...)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, c.Close()) })
	return c
}

// freeze suspends nodes, and thaws them at the end of the test, before the
// Client closes, so that requests still waiting on them finish at once.
func (n *redlockNodes) freeze(t *testing.T, idx ...int) {
	t.Helper()
	for _, i := range idx {
		require.NoError(t, n.singles.Freeze(ctxTimeout(t, 10*time.Second), n.addrs[i]))
		t.Cleanup(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			require.NoError(t, n.singles.Thaw(ctx, n.addrs[i]))
		})
	}
}

// kill ends nodes, and restarts them (empty) at the end of the test.
func (n *redlockNodes) kill(t *testing.T, idx ...int) {
	t.Helper()
	for _, i := range idx {
		require.NoError(t, n.singles.Kill(ctxTimeout(t, 10*time.Second), n.addrs[i]))
		t.Cleanup(func() {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			require.NoError(t, n.singles.Restart(ctx, n.addrs[i]))
		})
	}
}

// held lists the lock keys (without prefix) present on node i, fencing
// counters and cancellation sets left out.
func (n *redlockNodes) held(t *testing.T, i int) []string {
	t.Helper()
	v, err := n.singles.Do(ctxTimeout(t, 5*time.Second), n.addrs[i], "KEYS", n.prefix+"*")
	require.NoError(t, err)
	var keys []string
	for _, k := range v.([]any) {
		rest := strings.TrimPrefix(k.(string), n.prefix)
		if !strings.HasPrefix(rest, "fence:{") && !strings.HasPrefix(rest, "cancel:{") {
			keys = append(keys, rest)
		}
	}
	slices.Sort(keys)
	return keys
}

// requireHeldExactly checks that each listed node holds exactly keys.
func (n *redlockNodes) requireHeldExactly(t *testing.T, nodes []int, keys []string) {
	t.Helper()
	want := slices.Sorted(slices.Values(keys))
	for _, i := range nodes {
		require.Equal(t, want, n.held(t, i), "lock keys on node %d", i)
	}
}

var allFive = []int{0, 1, 2, 3, 4}

func TestRedlockWorksWithTwoNodesDown(t *testing.T) {
	for _, fault := range []string{"frozen", "killed"} {
		t.Run(fault, func(t *testing.T) {
			n := startRedlockNodes(t)
			c := n.client(t)
			if fault == "frozen" {
				n.freeze(t, 1, 3)
			} else {
				n.kill(t, 1, 3)
			}
			live := []int{0, 2, 4}
			ctx := ctxTimeout(t, 30*time.Second)

			a, err := c.TryLock(ctx, []string{"sku:1", "sku:2", "sku:3"})
			require.NoError(t, err)
			assert.Positive(t, a.Validity())
			tokens := a.Tokens("sku:2")
			for i, tok := range tokens {
				if slices.Contains(live, i) {
					assert.Positive(t, tok, "token of node %d, which granted the lock", i)
				} else {
					assert.Zero(t, tok, "token of node %d, which is down", i)
				}
			}

			b, err := c.Lock(ctx, []string{"sku:4", "sku:5"})
			require.NoError(t, err)
			n.requireHeldExactly(t, live, []string{"sku:1", "sku:2", "sku:3", "sku:4", "sku:5"})

			// The keys really are taken: another owner is refused.
			_, err = c.TryLock(ctx, []string{"sku:3", "sku:4"})
			var conflict *batchlock.ConflictError
			require.ErrorAs(t, err, &conflict)
			assert.Equal(t, []string{"sku:3", "sku:4"}, conflict.Keys)

			require.NoError(t, a.Unlock(ctx))
			require.NoError(t, b.Unlock(ctx))
			n.requireHeldExactly(t, live, nil)
		})
	}
}

func TestRedlockRefusesWithThreeNodesDown(t *testing.T) {
	for _, fault := range []string{"frozen", "killed"} {
		t.Run(fault, func(t *testing.T) {
			n := startRedlockNodes(t)
			c := n.client(t)
			if fault == "frozen" {
				n.freeze(t, 0, 2, 3)
			} else {
				n.kill(t, 0, 2, 3)
			}
			live := []int{1, 4}
			keys := spread(20, "down")

			_, err := c.TryLock(ctxTimeout(t, 30*time.Second), keys)
			require.ErrorIs(t, err, batchlock.ErrNotObtained)
			require.NotErrorAs(t, err, new(*batchlock.ConflictError), "nobody else holds the keys")
			require.ErrorContains(t, err, "granted by 2 of 5 deployments, 3 needed")
			n.requireHeldExactly(t, live, nil)

			ctx, cancel := context.WithTimeout(t.Context(), 700*time.Millisecond)
			defer cancel()
			_, err = c.Lock(ctx, keys)
			require.ErrorIs(t, err, batchlock.ErrNotObtained)
			require.ErrorIs(t, err, context.DeadlineExceeded)
			n.requireHeldExactly(t, live, nil)
		})
	}
}

func TestRedlockReleasesReachEveryNode(t *testing.T) {
	n := startRedlockNodes(t)
	c := n.client(t)
	other := n.client(t)
	ctx := ctxTimeout(t, 30*time.Second)
	keys := spread(30, "all")

	l, err := c.TryLock(ctx, keys)
	require.NoError(t, err)
	n.requireHeldExactly(t, allFive, keys)
	for i, tok := range l.Tokens(keys[0]) {
		assert.Positive(t, tok, "token of node %d", i)
	}

	// Another client is refused with the union of the conflicts, and leaves
	// nothing of its own behind.
	_, err = other.TryLock(ctx, []string{keys[5], keys[7], "free"})
	var conflict *batchlock.ConflictError
	require.ErrorAs(t, err, &conflict)
	assert.Equal(t, slices.Sorted(slices.Values([]string{keys[5], keys[7]})), conflict.Keys)
	n.requireHeldExactly(t, allFive, keys)

	require.NoError(t, l.Unlock(ctx))
	n.requireHeldExactly(t, allFive, nil)
	require.ErrorIs(t, l.Err(), batchlock.ErrNotHeld)
	require.ErrorIs(t, l.Unlock(ctx), batchlock.ErrNotHeld, "a second Unlock")

	// Do releases too; inside it, the same keys are reentrant on every node.
	err = c.Do(ctx, keys, func(ctx context.Context) error {
		inner, err := c.TryLock(ctx, keys[:3])
		if err != nil {
			return fmt.Errorf("reentrant TryLock: %w", err)
		}
		n.requireHeldExactly(t, allFive, keys)
		return inner.Unlock(ctx)
	})
	require.NoError(t, err)
	n.requireHeldExactly(t, allFive, nil)
}

func TestRedlockValidityShrinksWithTimeSpent(t *testing.T) {
	n := startRedlockNodes(t)
	const lease, timeout = 2 * time.Second, 300 * time.Millisecond
	c := n.client(t, redlock.WithDeploymentTimeout(timeout))
	ctx := ctxTimeout(t, 30*time.Second)
	// A first lock pays for one-time set-up (connections, scripts), which
	// the drift allowance is not meant to absorb.
	warm, err := c.TryLock(ctx, []string{"a", "b"})
	require.NoError(t, err)
	require.NoError(t, warm.Unlock(ctx))
	n.freeze(t, 4)

	before := time.Now()
	l, err := c.TryLock(ctx, []string{"a", "b"}, batchlock.WithTTL(lease))
	took := time.Since(before)
	require.NoError(t, err)
	// The attempt waited the whole timeout for the frozen node, and the
	// lease of the others ran meanwhile.
	assert.LessOrEqual(t, l.Validity(), lease-timeout)
	// Every lease started after before and the attempt ended before took:
	// no more than that, and the drift allowance, is missing.
	drift := time.Duration(float64(lease+took)*0.01) + 2*time.Millisecond
	assert.GreaterOrEqual(t, l.Validity(), lease-took-drift)
	assert.Zero(t, l.Tokens("a")[4], "the frozen node did not grant the lock")
	require.NoError(t, l.Unlock(ctx))
}

func TestRedlockLostWhenAMajorityDies(t *testing.T) {
	const lease = 600 * time.Millisecond
	n := startRedlockNodes(t)
	c := n.client(t, redlock.WithClientOptions(batchlock.WithLease(lease)))
	ctx := ctxTimeout(t, 30*time.Second)
	keys := []string{"x", "y", "z"}

	l, err := c.Lock(ctx, keys)
	require.NoError(t, err)
	n.kill(t, 0, 1, 2)
	select {
	case <-l.Done():
	case <-time.After(10 * lease):
		t.Fatal("the lock was not reported lost with three of five nodes dead")
	}
	require.ErrorIs(t, l.Err(), batchlock.ErrLockLost)
	// What the two live nodes still held is released, not renewed.
	require.Eventually(t, func() bool { return len(n.held(t, 3))+len(n.held(t, 4)) == 0 },
		5*time.Second, 10*time.Millisecond, "the minority's keys were not released")
	require.ErrorIs(t, l.Unlock(ctx), batchlock.ErrNotHeld)
}

func TestRedlockDoCancelsWhenTheLockIsLost(t *testing.T) {
	const lease = 600 * time.Millisecond
	n := startRedlockNodes(t)
	c := n.client(t, redlock.WithClientOptions(batchlock.WithLease(lease)))

	err := c.Do(ctxTimeout(t, 30*time.Second), []string{"x"}, func(ctx context.Context) error {
		n.kill(t, 1, 2, 4)
		select {
		case <-ctx.Done():
			return context.Cause(ctx)
		case <-time.After(10 * lease):
			return errors.New("fn's context was not cancelled")
		}
	})
	require.ErrorIs(t, err, batchlock.ErrLockLost)
}

// Two clients contend for overlapping keys while a node is killed and,
// after the longest lease (a delayed restart, as the package documentation
// asks), restarted: no key may ever have two holders.
func TestRedlockNeverTwoHoldersAcrossANodeKill(t *testing.T) {
	const lease = time.Second
	n := startRedlockNodes(t)
	clients := []*redlock.Client{
		n.client(t, redlock.WithClientOptions(batchlock.WithLease(lease))),
		n.client(t, redlock.WithClientOptions(batchlock.WithLease(lease))),
	}
	pool := spread(6, "contended")
	var chk checker
	var failures sync.Map // unexpected errors, by message

	stop := make(chan struct{})
	var wg sync.WaitGroup
	for w := range 4 {
		c := clients[w%2]
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				keys := pick(pool, 3)
				ctx, cancel := context.WithTimeout(t.Context(), 2*time.Second)
				l, err := c.Lock(ctx, keys)
				cancel()
				if err != nil {
					if !errors.Is(err, batchlock.ErrNotObtained) {
						failures.Store(err.Error(), true)
					}
					continue
				}
				s := section{Owner: l.Owner(), Keys: keys, Start: time.Now()}
				select {
				case <-time.After(time.Duration(1+rand.IntN(3)) * time.Millisecond):
				case <-l.Done():
				}
				s.End = time.Now()
				if err := l.Err(); err != nil {
					chk.report("%s lost its lock while holding it: %v", s.Owner, err)
				}
				chk.record(s)
				ctx, cancel = context.WithTimeout(t.Context(), 2*time.Second)
				// A lock granted by exactly a quorum that included the node
				// killed meanwhile cannot be released by a quorum: as
				// documented, the rest is freed when its lease runs out.
				if err := l.Unlock(ctx); err != nil && !strings.Contains(err.Error(), n.addrs[2]) {
					failures.Store("unlock: "+err.Error(), true)
				}
				cancel()
			}
		})
	}
	progress := func(what string) {
		t.Helper()
		before := chk.count()
		require.Eventually(t, func() bool { return chk.count() >= before+10 }, 20*time.Second, 5*time.Millisecond,
			"no progress %s", what)
	}

	progress("with every node up")
	killed := time.Now()
	require.NoError(t, n.singles.Kill(ctxTimeout(t, 10*time.Second), n.addrs[2]))
	progress("with a node dead")
	time.Sleep(lease - time.Since(killed)) // the restart's delay is the point of the test, not a synchronisation
	require.NoError(t, n.singles.Restart(ctxTimeout(t, time.Minute), n.addrs[2]))
	progress("after the restart")
	close(stop)
	wg.Wait()

	chk.requireClean(t)
	failures.Range(func(k, _ any) bool {
		t.Errorf("unexpected error: %v", k)
		return true
	})
	t.Logf("%d critical sections", chk.count())
}

// pick returns k distinct keys of pool at random.
func pick(pool []string, k int) []string {
	keys := slices.Clone(pool)
	rand.Shuffle(len(keys), func(i, j int) { keys[i], keys[j] = keys[j], keys[i] })
	return keys[:k]
}

// A majority of nodes that answer after the lease has run out grants
// nothing: the lock is refused rather than returned with no validity left.
func TestRedlockNoLockPastItsLease(t *testing.T) {
	n := startRedlockNodes(t)
	c := n.client(t, redlock.WithDeploymentTimeout(2*time.Second))
	ctx := ctxTimeout(t, 30*time.Second)
	keys := []string{"late:1", "late:2"}
	warm, err := c.TryLock(ctx, keys)
	require.NoError(t, err)
	require.NoError(t, warm.Unlock(ctx))

	var woke []<-chan error
	for _, i := range []int{0, 1, 2} {
		woke = append(woke, sleepNode(t, n.singles, n.addrs[i], 250*time.Millisecond))
	}
	l, err := c.TryLock(ctx, keys, batchlock.WithTTL(300*time.Millisecond))
	for _, w := range woke {
		require.NoError(t, <-w)
	}
	if err == nil {
		t.Fatalf("a lock was returned with %v of its 300ms lease left", l.Validity())
	}
	require.ErrorIs(t, err, batchlock.ErrNotObtained)
	require.Eventually(t, func() bool {
		for i := range n.addrs {
			if len(n.held(t, i)) > 0 {
				return false
			}
		}
		return true
	}, 10*time.Second, 10*time.Millisecond, "nothing is left held")
}

// Every attempt of a waiting Lock takes a fresh owner, unless the caller
// chose one: a later attempt must not join (and keep alive) holds an earlier
// one left on a slow node.
func TestRedlockFreshOwnerPerAttempt(t *testing.T) {
	n := startRedlockNodes(t)
	var mu sync.Mutex
	owners := map[string]bool{}
	c := n.client(t, redlock.WithClientOptions(batchlock.WithObserver(func(e batchlock.Event) {
		if e.Kind == batchlock.EventAcquired {
			mu.Lock()
			owners[e.Owner] = true
			mu.Unlock()
		}
	})))
	n.freeze(t, 0, 1, 2)
	for _, tc := range []struct {
		name string
		opts []batchlock.LockOption
		want func(t *testing.T, owners map[string]bool)
	}{
		{"owner chosen by redlock", nil, func(t *testing.T, owners map[string]bool) {
			assert.Greater(t, len(owners), 1, "attempts share one owner")
		}},
		{"owner chosen by the caller", []batchlock.LockOption{batchlock.WithOwner("order-7")}, func(t *testing.T, owners map[string]bool) {
			assert.Equal(t, map[string]bool{"order-7": true}, owners)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			mu.Lock()
			clear(owners)
			mu.Unlock()
			ctx, cancel := context.WithTimeout(t.Context(), 1500*time.Millisecond)
			defer cancel()
			_, err := c.Lock(ctx, []string{"attempts"}, tc.opts...)
			require.ErrorIs(t, err, batchlock.ErrNotObtained)
			mu.Lock()
			defer mu.Unlock()
			tc.want(t, owners)
		})
	}
}

// Redlock takes shared keys as batchlock does: two owners hold them at once
// on a majority, a writer is refused naming them, and an owner asking
// exclusively for a key it holds shared fails at once, without retrying
// until its context ends.
func TestRedlockSharedKeys(t *testing.T) {
	n := startRedlockNodes(t)
	c := n.client(t)
	ctx := ctxTimeout(t, 30*time.Second)
	a, err := c.TryLock(ctx, []string{"sku:1"}, batchlock.WithShared("promo:1"))
	require.NoError(t, err)
	b, err := c.Lock(ctx, nil, batchlock.WithShared("promo:1"), batchlock.WithOwner("reader"))
	require.NoError(t, err, "a second reader gets the key on a majority")

	_, err = c.TryLock(ctx, []string{"promo:1"})
	var conflict *batchlock.ConflictError
	require.ErrorAs(t, err, &conflict)
	assert.Equal(t, []string{"promo:1"}, conflict.Keys)

	_, err = c.Lock(ctx, []string{"promo:1"}, batchlock.WithOwner("reader"))
	require.ErrorIs(t, err, batchlock.ErrInvalid)
	assert.ErrorContains(t, err, "held shared or in units by this owner")
	require.NoError(t, ctx.Err(), "refused at once, not retried until the context ended")

	require.NoError(t, a.Unlock(ctx))
	require.NoError(t, b.Unlock(ctx))
	n.requireHeldExactly(t, []int{0, 1, 2, 3, 4}, nil)
}

// WithMaxHold caps a redlock lock as it caps a batchlock one, given per
// lock or through WithClientOptions as every lock's default: at the cap
// every deployment's lock ends and releases its keys, the lock is lost with
// a cause that says it was held for its longest hold, and the next owner takes the keys at once,
// long before the leases the watchdog kept renewing would run out.
func TestRedlockMaxHold(t *testing.T) {
	n := startRedlockNodes(t)
	ctx := ctxTimeout(t, 30*time.Second)
	for _, tc := range []struct {
		name     string
		client   []redlock.Option
		lockOpts []batchlock.LockOption
	}{
		{"per lock", nil, []batchlock.LockOption{batchlock.WithMaxHold(300 * time.Millisecond)}},
		{"the client's default", []redlock.Option{redlock.WithClientOptions(batchlock.WithMaxHold(300 * time.Millisecond))}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := n.client(t, append([]redlock.Option{redlock.WithClientOptions(batchlock.WithLease(5 * time.Second))}, tc.client...)...)
			keys := []string{"cap:" + tc.name + ":1", "cap:" + tc.name + ":2"}
			held, err := c.Lock(ctx, keys, tc.lockOpts...)
			require.NoError(t, err)
			select {
			case <-held.Done():
			case <-time.After(3 * time.Second):
				t.Fatal("the lock outlived its cap")
			}
			require.ErrorContains(t, held.Err(), "held for its longest hold")
			require.ErrorIs(t, held.Err(), batchlock.ErrLockLost)
			soon, cancel := context.WithTimeout(ctx, 2*time.Second) // the leases had 5s
			defer cancel()
			next, err := n.client(t).Lock(soon, keys)
			require.NoError(t, err, "the keys were released at the cap")
			require.NoError(t, next.Unlock(ctx))
		})
	}
}
