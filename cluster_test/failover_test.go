package cluster_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"

	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/batchlock/batchlock/batchlock"
	"github.com/batchlock/batchlock/hashtag"
	"github.com/batchlock/batchlock/localcluster"
)

// The failover that loses a lock, made deterministic: the master's only
// replica is down while A locks, so nothing replicates A's lock; the master
// is frozen so that the replica, restarted empty, cannot resync; the replica
// takes over, and B asks for the same keys. Without WithReplicas both hold
// them (the limit the docs state); with it, A's lock is refused up front.
func TestLostLockFailover(t *testing.T) {
	cl := newCluster(t)
	ctx := ctxTimeout(t, 2*time.Minute)
	masters, err := cl.Masters(ctx)
	require.NoError(t, err)

	for i, tc := range []struct {
		name     string
		replicas bool
	}{
		{"without WithReplicas a second client gets the key", false},
		{"with WithReplicas the first lock is refused", true},
	} {
		// Each half breaks a different master, so the second does not depend
		// on how the first left its pair.
		master := masters[i]
		t.Run(tc.name, func(t *testing.T) {
			rdbA, rdbB := cl.Client(), cl.Client()
			t.Cleanup(func() { _ = rdbA.Close(); _ = rdbB.Close() })
			prefix := testPrefix(t)
			a, err := batchlock.New(rdbA, batchlock.WithPrefix(prefix))
			require.NoError(t, err)
			t.Cleanup(func() { _ = a.Close() })
			b, err := batchlock.New(rdbB, batchlock.WithPrefix(prefix))
			require.NoError(t, err)
			t.Cleanup(func() { _ = b.Close() })
			keys := keysOn(t, master, prefix, "lost", 8)

			// Scripts cached and topology known on both clients, so that
			// what follows fails only for the reasons staged here.
			for _, c := range []*batchlock.Client{a, b} {
				l, err := c.TryLock(ctx, keys)
				require.NoError(t, err)
				require.NoError(t, l.Unlock(ctx))
			}

			replica, err := cl.ReplicaOf(ctx, master.Addr)
			require.NoError(t, err)
			require.NoError(t, cl.Kill(ctx, replica.Addr))

			var opts []batchlock.LockOption
			if tc.replicas {
				opts = append(opts, batchlock.WithReplicas(1, 300*time.Millisecond))
			}
			lockA, errA := a.TryLock(ctx, keys, opts...)
			if tc.replicas {
				require.ErrorIs(t, errA, batchlock.ErrNoReplicas, "no replica can acknowledge")
				require.ErrorIs(t, errA, batchlock.ErrNotObtained)
				assert.Empty(t, lockKeysUnder(t, rdbA, prefix), "the unacknowledged lock is rolled back")
			} else {
				require.NoError(t, errA, "without WithReplicas nothing waits for the replica")
				t.Cleanup(func() { _ = lockA.Unlock(context.Background()) })
				assert.Len(t, lockKeysUnder(t, rdbA, prefix), len(keys))
			}

			// Frozen, the master cannot feed the restarted replica: the
			// replica comes back empty (no persistence) and stays so.
			require.NoError(t, cl.Freeze(ctx, master.Addr))
			thawed := false
			thaw := func() {
				if !thawed {
					thawed = true
					// Also a clean-up, when the test's context is done.
					ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
					defer cancel()
					require.NoError(t, cl.Thaw(ctx, master.Addr))
					require.NoError(t, cl.WaitReady(ctx))
				}
			}
			t.Cleanup(thaw)
			require.NoError(t, cl.Restart(ctx, replica.Addr))
			promoted, err := cl.Failover(ctx, master.Addr, localcluster.Takeover())
			require.NoError(t, err)
			require.Equal(t, replica.Addr, promoted)
			n, err := cl.Do(ctx, promoted, "DBSIZE")
			require.NoError(t, err)
			require.EqualValues(t, 0, n, "the promoted replica has none of the old master's data")

			lockB, errB := b.TryLock(ctx, keys)
			require.NoError(t, errB, "the new master has no trace of A's lock")
			t.Cleanup(func() { _ = lockB.Unlock(context.Background()) })
			if tc.replicas {
				assert.Nil(t, lockA, "A holds nothing: B is the only holder")
			} else {
				// Two holders: the documented limit of asynchronous replication.
				require.NoError(t, lockA.Err(), "A was never told it lost the keys")
				require.NoError(t, lockB.Err())
				// The slot's fencing counter was lost with the lock, so B's
				// tokens do not even outrank A's: downstream fencing cannot
				// tell the stale holder either.
				for _, k := range keys {
					t.Logf("key %s: token of A %d, of B %d", k, lockA.Token(k), lockB.Token(k))
				}
			}
			thaw()
		})
	}
}

// A Lock that waits keeps the groups it already took alive, however its wait
// is cut up: by release messages, or by a poll cap shorter than a third of
// the lease (the defaults, 1s and 30s, are such a pair). Otherwise they expire
// in Redis while it waits, another client takes them, and the waiting Lock
// still returns as if it held them: two holders with no fault at all. In the
// fault suite this showed as overlapping sections, and as Do calls failing
// with "not held" while no loss had been reported.
func TestWaitingLockKeepsTheKeysItTook(t *testing.T) {
	rdb := newClient(t)
	const lease = 300 * time.Millisecond
	waiter, prefix := newLocker(t, rdb, batchlock.WithLease(lease), batchlock.WithPollInterval(20*time.Millisecond))
	other, err := batchlock.New(rdb, batchlock.WithPrefix(prefix))
	require.NoError(t, err)
	t.Cleanup(func() { _ = other.Close() })
	ctx := ctxTimeout(t, 30*time.Second)

	// Groups are taken in slot order: the waiter takes first, then waits
	// for second.
	keys := spread(2, "keepalive")
	if hashtag.Slot(prefix+keys[0]) > hashtag.Slot(prefix+keys[1]) {
		keys[0], keys[1] = keys[1], keys[0]
	}
	require.NotEqual(t, hashtag.Slot(prefix+keys[0]), hashtag.Slot(prefix+keys[1]))
	first, second := keys[0], keys[1]

	blocker, err := other.Lock(ctx, []string{second})
	require.NoError(t, err)
	type result struct {
		l   *batchlock.Lock
		err error
	}
	got := make(chan result, 1)
	go func() {
		l, err := waiter.Lock(ctx, keys)
		got <- result{l, err}
	}()
	require.Eventually(t, func() bool { return rdb.Exists(ctx, prefix+first).Val() == 1 }, 5*time.Second, 5*time.Millisecond,
		"the waiter takes the first key")
	assert.Never(t, func() bool { return rdb.Exists(ctx, prefix+first).Val() == 0 }, 4*lease, 10*time.Millisecond,
		"the key the waiter took stays held while it waits for the other")

	thief, err := other.TryLock(ctx, []string{first})
	if err == nil {
		t.Cleanup(func() { _ = thief.Unlock(context.Background()) })
	}
	assert.ErrorIs(t, err, batchlock.ErrNotObtained, "nobody else can take a key the waiter holds")
	require.NoError(t, blocker.Unlock(ctx))
	r := <-got
	require.NoError(t, r.err)
	assert.Equal(t, []string{r.l.Owner()}, holderOf(t, waiter, first).Holders, "the waiter, now holding both keys, holds %s in Redis", first)
	assert.NoError(t, r.l.Unlock(ctx), "the waiter's unlock finds every key still held")
}

// Settings of the fault suite: short enough that a lost lock frees its keys
// within the test, long enough that a loaded two-core machine keeps renewing.
const (
	faultLease = 1500 * time.Millisecond
	// faultAckWait stays below the client's ReadTimeout (1s): a longer
	// WAIT is cut by the read timeout and retried until the call's context
	// ends (see the replica-down case), which would hide ErrNoReplicas.
	faultAckWait  = 500 * time.Millisecond
	faultWorkers  = 6
	faultKeys     = 60
	faultCallTime = 4 * time.Second
	// afterFault is how many orders must succeed once the fault is over.
	afterFault = 10
)

// faultLoad is the locking load of the fault cases: workers run Do on random
// baskets of keys until stopped, and record their critical sections for the
// checker. It writes no stock (the order workload, with its audit, is
// package orders, run by the demo tests); what it checks is the lock itself.
type faultLoad struct {
	t      *testing.T
	cl     *localcluster.Cluster
	rdbs   []*redis.ClusterClient
	lks    []*batchlock.Client
	prefix string
	keys   []string
	chk    checker
	stop   chan struct{}
	wg     sync.WaitGroup

	mu        sync.Mutex
	lost      map[string]bool // owners whose lock was reported lost (EventLost)
	calls     []doCall
	faultOver time.Time // zero while the fault lasts
	succeeded int       // orders that succeeded and began after faultOver
	noTokens  int       // sections whose tokens could not all be read
}

// doCall is the outcome of one Do.
type doCall struct {
	owner string
	ran   bool // fn ran: the keys were held
	err   error
}

// newFaultLoad starts the workers on a cluster of the test's own; extra keys
// join the spread ones.
func newFaultLoad(t *testing.T, cl *localcluster.Cluster, extra ...string) *faultLoad {
	o := &faultLoad{
		t:      t,
		cl:     cl,
		prefix: testPrefix(t),
		keys:   append(spread(faultKeys-len(extra), "order"), extra...),
		stop:   make(chan struct{}),
		lost:   map[string]bool{},
	}
	observe := func(e batchlock.Event) {
		if e.Kind == batchlock.EventLost {
			o.mu.Lock()
			o.lost[e.Owner] = true
			o.mu.Unlock()
		}
	}
	// Two processes' worth of clients, so that locks also meet across
	// connection pools and watchdogs.
	for range 2 {
		rdb := cl.Client()
		t.Cleanup(func() { _ = rdb.Close() })
		// Waiters that poll often keep the queues short: under this much
		// contention a 1s poll cap makes chains of waiters crawl, and the
		// test would see few orders.
		lk, err := batchlock.New(rdb, batchlock.WithPrefix(o.prefix), batchlock.WithLease(faultLease),
			batchlock.WithReplicas(1, faultAckWait), batchlock.WithObserver(observe),
			batchlock.WithPollInterval(100*time.Millisecond))
		require.NoError(t, err)
		t.Cleanup(func() { _ = lk.Close() })
		o.rdbs, o.lks = append(o.rdbs, rdb), append(o.lks, lk)
	}
	for w := range faultWorkers {
		o.wg.Add(1)
		go o.work(w)
	}
	t.Cleanup(o.halt) // also when the test fails half way
	return o
}

func (o *faultLoad) work(w int) {
	defer o.wg.Done()
	rng := rand.New(rand.NewPCG(uint64(w), uint64(time.Now().UnixNano())))
	lk := o.lks[w%len(o.lks)]
	for n := 0; ; n++ {
		select {
		case <-o.stop:
			return
		default:
		}
		basket := o.basket(rng, 3+rng.IntN(18))
		hold := time.Duration(2+rng.IntN(14)) * time.Millisecond
		if w == 0 && n%2 == 0 {
			// Held over renewals, up to about a lease, so that faults meet
			// held locks and not only short ones; few keys and every other
			// call only, so that the others are not all stuck behind it.
			basket = o.basket(rng, 3)
			hold = time.Duration(300+rng.IntN(1200)) * time.Millisecond
		}
		owner := fmt.Sprintf("w%d-%d", w, n)
		ctx, cancel := context.WithTimeout(o.t.Context(), faultCallTime)
		began := time.Now()
		ran := false
		err := lk.Do(ctx, basket, func(ctx context.Context) error {
			ran = true
			start := time.Now()
			// A lost lock's section ends when the holder is told, even when
			// this function notices only later (a token read stuck on a
			// failing node): the promise is to tell it before anyone else
			// can take the keys.
			var told sync.Mutex
			var lostAt time.Time
			stopWatch := context.AfterFunc(ctx, func() {
				if errors.Is(context.Cause(ctx), batchlock.ErrLockLost) {
					told.Lock()
					lostAt = time.Now()
					told.Unlock()
				}
			})
			defer stopWatch()
			tokens := o.tokens(ctx, lk, owner, basket)
			t := time.NewTimer(hold)
			select {
			case <-t.C:
			case <-ctx.Done():
				t.Stop()
			}
			end := time.Now()
			told.Lock()
			if !lostAt.IsZero() && lostAt.Before(end) {
				end = lostAt
			}
			told.Unlock()
			o.chk.record(section{Owner: owner, Keys: basket, Tokens: tokens, Start: start, End: end})
			if len(tokens) < len(basket) {
				o.mu.Lock()
				o.noTokens++
				o.mu.Unlock()
			}
			return nil
		}, batchlock.WithOwner(owner))
		cancel()
		o.mu.Lock()
		o.calls = append(o.calls, doCall{owner: owner, ran: ran, err: err})
		if err == nil && !o.faultOver.IsZero() && began.After(o.faultOver) {
			o.succeeded++
		}
		o.mu.Unlock()
	}
}

// basket picks n distinct keys.
func (o *faultLoad) basket(rng *rand.Rand, n int) []string {
	perm := rng.Perm(len(o.keys))[:n]
	out := make([]string, len(perm))
	for i, j := range perm {
		out[i] = o.keys[j]
	}
	return out
}

// tokens reads the fencing token of each key from Redis, through the admin
// API, keeping only those of keys held by this holder: a read that failed, or
// that reached a stale master during the fault, proves nothing.
func (o *faultLoad) tokens(ctx context.Context, lk *batchlock.Client, owner string, keys []string) map[string]int64 {
	out := make(map[string]int64, len(keys))
	held, err := lk.Inspect(ctx, keys...)
	if err != nil {
		return out
	}
	for _, h := range held {
		if slices.Equal(h.Holders, []string{owner}) {
			out[h.Key] = h.Token
		}
	}
	return out
}

// successes counts orders that succeeded, all of them or only those that
// began after the fault.
func (o *faultLoad) successes(afterFault bool) int {
	o.mu.Lock()
	defer o.mu.Unlock()
	if afterFault {
		return o.succeeded
	}
	n := 0
	for _, c := range o.calls {
		if c.err == nil {
			n++
		}
	}
	return n
}

// errorsLike counts calls whose error wraps target.
func (o *faultLoad) errorsLike(target error) int {
	o.mu.Lock()
	defer o.mu.Unlock()
	n := 0
	for _, c := range o.calls {
		if errors.Is(c.err, target) {
			n++
		}
	}
	return n
}

// warmUp waits for the workload to run: scripts cached, topology known.
func (o *faultLoad) warmUp() {
	require.Eventually(o.t, func() bool { return o.successes(false) >= 10 }, 20*time.Second, 20*time.Millisecond,
		"the workload runs before the fault")
}

// faultDone marks the end of the fault and waits for orders to succeed again.
func (o *faultLoad) faultDone() {
	o.mu.Lock()
	o.faultOver = time.Now()
	o.mu.Unlock()
	require.Eventually(o.t, func() bool { return o.successes(true) >= afterFault }, 30*time.Second, 20*time.Millisecond,
		"orders succeed again after the fault")
}

// halt stops the workers and waits for them; calls in flight end within
// faultCallTime plus their unlock.
func (o *faultLoad) halt() {
	select {
	case <-o.stop:
	default:
		close(o.stop)
	}
	o.wg.Wait()
}

// verify stops the workers and checks what users care about.
func (o *faultLoad) verify() {
	t := o.t
	o.halt()
	o.summary()

	o.chk.requireClean(t)
	o.mu.Lock()
	sections, noTokens := o.chk.count(), o.noTokens
	o.mu.Unlock()
	assert.Less(t, noTokens, sections/2+1, "tokens were read for most sections, so the token check means something")

	// Every Do whose function ran says the lock was lost exactly when the
	// lock reported it, and no lock went missing unreported (found not held
	// at unlock without a loss); a Do that never held the keys has nothing
	// to report.
	o.mu.Lock()
	for _, c := range o.calls {
		if c.ran {
			assert.Equal(t, o.lost[c.owner], errors.Is(c.err, batchlock.ErrLockLost),
				"Do of %s: loss reported %v, error %v", c.owner, o.lost[c.owner], c.err)
			assert.False(t, errors.Is(c.err, batchlock.ErrNotHeld) && !errors.Is(c.err, batchlock.ErrLockLost),
				"Do of %s lost keys without being told: %v", c.owner, c.err)
		} else {
			assert.False(t, o.lost[c.owner], "Do of %s never held its keys yet reported a loss", c.owner)
		}
	}
	o.mu.Unlock()

	// Locks lost during the fault may stay in Redis until their lease runs out.
	require.NoError(t, o.cl.WaitReady(ctxTimeout(t, time.Minute)))
	admin := o.rdbs[0]
	require.Eventually(t, func() bool { return len(lockKeysUnder(t, admin, o.prefix)) == 0 },
		4*faultLease+5*time.Second, 50*time.Millisecond, "nothing is left held once the workers stopped")

	// A fresh lock of every key works again within seconds.
	ctx := ctxTimeout(t, 30*time.Second)
	var last error
	require.Eventually(t, func() bool {
		l, err := o.lks[1].TryLock(ctx, o.keys)
		if last = err; err != nil {
			return false
		}
		last = l.Unlock(ctx)
		return last == nil
	}, 15*time.Second, 100*time.Millisecond, "every key can be locked again (last error: %v)", &last)
}

// summary logs how the calls went, for whoever reads a failure.
func (o *faultLoad) summary() {
	o.mu.Lock()
	defer o.mu.Unlock()
	count := map[string]int{}
	for _, c := range o.calls {
		switch {
		case c.err == nil:
			count["ok"]++
		case errors.Is(c.err, batchlock.ErrLockLost) && c.ran:
			count["lost while held"]++
		case errors.Is(c.err, batchlock.ErrLockLost):
			count["lost while waiting"]++
		case errors.Is(c.err, batchlock.ErrNoReplicas):
			count["no replicas"]++
		case errors.Is(c.err, context.DeadlineExceeded):
			count["deadline"]++
		case errors.Is(c.err, batchlock.ErrNotObtained):
			count["not obtained"]++
		default:
			count["other"]++
			if count["other"] <= 3 {
				o.t.Logf("other error: %v", c.err)
			}
		}
	}
	o.t.Logf("%d calls: %v; %d sections, %d without all tokens, %d locks reported lost",
		len(o.calls), count, o.chk.count(), o.noTokens, len(o.lost))
}

// TestFaultsKeepMutualExclusion runs the order workload through one fault per
// case, each on a cluster of its own, and checks that no two holders were
// ever seen, tokens never went backwards, every loss was reported, nothing
// stays held and locking recovers.
func TestFaultsKeepMutualExclusion(t *testing.T) {
	t.Run("master frozen then taken over", func(t *testing.T) {
		cl := newCluster(t)
		ctx := ctxTimeout(t, 2*time.Minute)
		masters, err := cl.Masters(ctx)
		require.NoError(t, err)
		o := newFaultLoad(t, cl)
		o.warmUp()

		victim := masters[1].Addr
		require.NoError(t, cl.Freeze(ctx, victim))
		t.Cleanup(func() { _ = cl.Thaw(context.Background(), victim) })
		// Frozen for a while first, so that calls and renewals pile up on it.
		time.Sleep(time.Second)
		_, err = cl.Failover(ctx, victim, localcluster.Takeover())
		require.NoError(t, err)
		require.NoError(t, cl.Thaw(ctx, victim))
		require.NoError(t, cl.WaitReady(ctx))
		o.faultDone()
		o.verify()
	})

	t.Run("master killed and restarted", func(t *testing.T) {
		cl := newCluster(t)
		ctx := ctxTimeout(t, 2*time.Minute)
		masters, err := cl.Masters(ctx)
		require.NoError(t, err)
		victim := masters[2]
		replica, err := cl.ReplicaOf(ctx, victim.Addr)
		require.NoError(t, err)
		o := newFaultLoad(t, cl)
		o.warmUp()

		require.NoError(t, cl.Kill(ctx, victim.Addr))
		// Restarted only once its replica took over: without persistence a
		// master restarted before that comes back empty and wipes its
		// replica, which no lock can survive.
		require.Eventually(t, func() bool {
			m, err := cl.MasterOfSlot(ctx, victim.Slots[0][0])
			return err == nil && m.Addr == replica.Addr
		}, 30*time.Second, 50*time.Millisecond, "the replica takes over")
		require.NoError(t, cl.Restart(ctx, victim.Addr))
		require.NoError(t, cl.WaitReady(ctx))
		o.faultDone()
		o.verify()
	})

	t.Run("replica down", func(t *testing.T) {
		cl := newCluster(t)
		ctx := ctxTimeout(t, 2*time.Minute)
		masters, err := cl.Masters(ctx)
		require.NoError(t, err)
		replica, err := cl.ReplicaOf(ctx, masters[0].Addr)
		require.NoError(t, err)
		o := newFaultLoad(t, cl)
		o.warmUp()

		before := o.errorsLike(batchlock.ErrNoReplicas)
		require.NoError(t, cl.Kill(ctx, replica.Addr))
		require.Eventually(t, func() bool { return o.errorsLike(batchlock.ErrNoReplicas) >= before+3 }, 20*time.Second, 20*time.Millisecond,
			"locks on a master without its replica are refused with ErrNoReplicas")

		// WAIT blocks its connection for the whole ack timeout; with a
		// timeout longer than the client's ReadTimeout the read would give
		// up first. The call must still end with ErrNoReplicas soon after
		// the ack timeout, not retry the timed-out pipeline until its
		// context runs out.
		ackWait := cl.ClientOptions().ReadTimeout + 500*time.Millisecond
		keys := keysOn(t, masters[0], o.prefix, "ack", 3)
		callCtx, cancel := context.WithTimeout(ctx, 3*ackWait)
		began := time.Now()
		_, err = o.lks[0].TryLock(callCtx, keys, batchlock.WithReplicas(1, ackWait))
		cancel()
		assert.ErrorIs(t, err, batchlock.ErrNoReplicas, "an ack timeout longer than ReadTimeout still ends in ErrNoReplicas")
		assert.Less(t, time.Since(began), 2*ackWait, "the call ends soon after the ack timeout of %v", ackWait)

		require.NoError(t, cl.Restart(ctx, replica.Addr))
		require.NoError(t, cl.WaitReady(ctx))
		o.faultDone()
		o.verify()
	})

	t.Run("slot migrated", func(t *testing.T) {
		cl := newCluster(t)
		ctx := ctxTimeout(t, 2*time.Minute)
		masters, err := cl.Masters(ctx)
		require.NoError(t, err)
		// A fifth of the keys share one slot, so most baskets meet its move.
		slot := hashtag.Slot("{migrating}")
		tagged := make([]string, 12)
		for i := range tagged {
			tagged[i] = fmt.Sprintf("{migrating}:sku:%d", i)
		}
		from, err := cl.MasterOfSlot(ctx, slot)
		require.NoError(t, err)
		to := masters[(slices.IndexFunc(masters, func(n localcluster.Node) bool { return n.ID == from.ID })+1)%len(masters)]
		o := newFaultLoad(t, cl, tagged...)
		o.warmUp()

		// There and back, while batches are taken.
		require.NoError(t, cl.MigrateSlot(ctx, slot, to.Addr))
		require.NoError(t, cl.MigrateSlot(ctx, slot, from.Addr))
		require.NoError(t, cl.MigrateSlot(ctx, slot, to.Addr))
		now, err := cl.MasterOfSlot(ctx, slot)
		require.NoError(t, err)
		require.Equal(t, to.Addr, now.Addr)
		o.faultDone()
		o.verify()
	})

	t.Run("every node restarted in turn", func(t *testing.T) {
		cl := newCluster(t)
		ctx := ctxTimeout(t, 3*time.Minute)
		masters, err := cl.Masters(ctx)
		require.NoError(t, err)
		o := newFaultLoad(t, cl)
		o.warmUp()

		// Nodes keep no data on disk, so each pair keeps its data by
		// restarting the replica first (it resyncs), then failing the master
		// over to it and restarting the demoted master.
		for _, m := range masters {
			r, err := cl.ReplicaOf(ctx, m.Addr)
			require.NoError(t, err)
			require.NoError(t, cl.Kill(ctx, r.Addr))
			require.NoError(t, cl.Restart(ctx, r.Addr))
			require.NoError(t, cl.WaitReady(ctx))
			require.NoError(t, cl.WaitReplicated(ctx, m.Addr, r.Addr))
			promoted, err := cl.Failover(ctx, m.Addr)
			require.NoError(t, err)
			require.Equal(t, r.Addr, promoted)
			require.NoError(t, cl.Kill(ctx, m.Addr))
			require.NoError(t, cl.Restart(ctx, m.Addr))
			require.NoError(t, cl.WaitReady(ctx))
		}
		o.faultDone()
		o.verify()
	})
}

// A master frozen while a batch is being taken: the call fails with its
// context, and once the master thaws and runs the commands that waited in
// its socket buffers, in whatever order, nothing of the batch is held.
func TestFrozenMasterMidAcquireLeavesNothingHeld(t *testing.T) {
	cl := newCluster(t)
	rdb := cl.Client()
	t.Cleanup(func() { _ = rdb.Close() })
	c, prefix := newLocker(t, rdb)
	ctx := ctxTimeout(t, 60*time.Second)
	keys := spread(60, "frozen")

	// Warm up: scripts loaded, topology known.
	l, err := c.Lock(ctx, keys)
	require.NoError(t, err)
	require.NoError(t, l.Unlock(ctx))

	masters, err := cl.Masters(ctx)
	require.NoError(t, err)
	frozen := masters[1].Addr
	require.NoError(t, cl.Freeze(ctx, frozen))
	// The node stays frozen for less than cluster-node-timeout, so it comes
	// back as the same master and runs what it received meanwhile.
	thawed := make(chan error, 1)
	time.AfterFunc(1200*time.Millisecond, func() { thawed <- cl.Thaw(context.Background(), frozen) })

	short, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel()
	_, err = c.Lock(short, keys)
	require.Error(t, err, "a batch with keys on a frozen master cannot be taken")
	require.NoError(t, <-thawed)

	require.Eventually(t, func() bool { return len(lockKeysUnder(t, rdb, prefix)) == 0 }, 20*time.Second, 20*time.Millisecond,
		"nothing is left held once the frozen master thawed")
	require.NoError(t, cl.WaitReady(ctx))
	l, err = c.TryLock(ctx, keys)
	require.NoError(t, err, "the keys can be taken again")
	require.NoError(t, l.Unlock(ctx))
}

// A master failed over between calls: the promoted replica knows no scripts
// (NOSCRIPT) and the client's map of slots is stale (MOVED); locking goes on,
// and fencing tokens keep growing across the failover.
func TestLockingWorksAcrossFailover(t *testing.T) {
	cl := newCluster(t)
	rdb := cl.Client()
	t.Cleanup(func() { _ = rdb.Close() })
	c, prefix := newLocker(t, rdb)
	ctx := ctxTimeout(t, 90*time.Second)
	keys := spread(90, "failover")

	before, err := c.Lock(ctx, keys, batchlock.WithReplicas(1, 2*time.Second))
	require.NoError(t, err)
	tokens := map[string]int64{}
	for _, k := range keys {
		tokens[k] = before.Token(k)
	}
	require.NoError(t, before.Unlock(ctx))

	masters, err := cl.Masters(ctx)
	require.NoError(t, err)
	promoted, err := cl.Failover(ctx, masters[0].Addr)
	require.NoError(t, err)
	require.NotEqual(t, masters[0].Addr, promoted)

	after, err := c.Lock(ctx, keys)
	require.NoError(t, err, "locking works on the new topology")
	for _, k := range keys {
		assert.Greater(t, after.Token(k), tokens[k], "token of %s grows across the failover", k)
	}
	require.NoError(t, after.Unlock(ctx))
	assert.Empty(t, lockKeysUnder(t, rdb, prefix))
}
