package cluster_test

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/batchlock/batchlock/batchlock"
	"github.com/batchlock/batchlock/hashtag"
	"github.com/batchlock/batchlock/internal/owner"
	"github.com/batchlock/batchlock/localcluster"
)

// The soak: random load and random faults on a six-node cluster of its own,
// judged on the process's monotonic clock. make soak runs it (SOAK=10m by
// default); make test runs a short one. SEED replays a schedule: the same
// faults in the same order, and the same choices by every worker (their
// timing, and so the interleaving, still varies).
const (
	envSoak     = "SOAK"
	envSeed     = "SEED"
	envReplicas = "SOAK_REPLICAS"

	defaultSoak = time.Minute
)

// soak is one run: its cluster, its clients, and what it saw.
type soak struct {
	t        *testing.T
	cl       *localcluster.Cluster
	seed     uint64
	prefix   string
	keys     []string
	deadline time.Time
	maxTTL   time.Duration // the longest fixed lease the load asks for

	rdbs []*redis.ClusterClient
	// link is the network of the last of rdbs, through a proxy per node:
	// the nemesis cuts it off from a master, one way or both, slows it and
	// throttles it; the long holders do not use it.
	link *clientNet

	mu       sync.Mutex
	clients  []*soakClient
	sections []soakSection
	faults   []faultEvent
	ops      map[string]int
	outcomes map[string]int
	injected map[string]int
	problems []string     // violations seen while running
	refusals []refusal    // fenced writes refused while their writer believed it held the key
	register *fencedStore // the storage the sections write to
	hist     *history     // every lock returned and its release, for porcupine
	clock    *wallClock   // the host's wall clock against the monotonic one
	// clockExcused are, by key, the overlaps the wall clock made (see
	// judge): the key's history is not held against porcupine's verdict
	// either.
	clockExcused map[string][]string
	// clockCut are the owners whose lease an overlap the wall clock made
	// cut short (the earlier holder's).
	clockCut map[string]bool
	locks    sync.WaitGroup

	replicas     int                           // replicas per master
	admin        *batchlock.Client             // reads locks for the checks; never replaced
	every        []*batchlock.Client           // every Client of the load, replaced ones too
	cancelAt     map[string]context.CancelFunc // by owner: calls to end at their next conflict
	holderKeys   []string                      // the long holders' keys
	holderLosses []holderLoss
	checks       chan struct{} // failed calls being checked
	checked      int
	failedCalls  []failedCall // checked, and found holding keys
	counted      soakCounted  // what the counted workers did
}

// soakClient is one batchlock Client of the run and the lease of its
// renewed locks; Clients are closed and replaced while calls run.
type soakClient struct {
	c     *batchlock.Client
	lease time.Duration
}

func TestSoak(t *testing.T) {
	duration := defaultSoak
	if v := os.Getenv(envSoak); v != "" {
		d, err := time.ParseDuration(v)
		require.NoError(t, err, "%s=%q", envSoak, v)
		duration = d
	}
	seed := randomSeed()
	if v := os.Getenv(envSeed); v != "" {
		s, err := strconv.ParseUint(v, 10, 64)
		require.NoError(t, err, "%s=%q", envSeed, v)
		seed = s
	}
	replicas := 1
	if v := os.Getenv(envReplicas); v != "" {
		n, err := strconv.Atoi(v)
		require.NoError(t, err, "%s=%q", envReplicas, v)
		replicas = n
	}
	cl := newCluster(t, localcluster.WithReplicasPerMaster(replicas))
	s := newSoak(t, cl, seed, duration)
	s.replicas = replicas
	s.say("seed %d (replay with SEED=%d), %v on the %s backend, %d replicas per master, %d keys, %d clients, %d holder clients of %d locks",
		seed, seed, duration, cl.Backend(), replicas, len(s.keys), len(s.clients), holderClients, holderLocks)

	s.setUpCounted()
	stopClock := s.clock.follow()
	stopHolders := s.startHolders()
	started := time.Now()
	var wg sync.WaitGroup
	for w := range soakWorkers {
		wg.Go(func() { s.worker(w) })
	}
	for i := range soakProcessors {
		wg.Go(func() { s.processor(i) })
	}
	for i := range soakCountedWorkers {
		wg.Go(func() { s.countedWorker(i) })
	}
	wg.Go(s.restock)
	wg.Go(s.replaceClients)
	s.nemesis()
	wg.Wait()
	stopHolders()
	s.closeAll()
	stopClock()

	leftovers := s.leftovers()
	violations, exceptions, overlapped := s.judge()
	countedViolations, countedExcused := s.judgeCounted(started)
	violations, exceptions = append(violations, countedViolations...), exceptions+countedExcused
	s.mu.Lock()
	stuck, stuckExcused := s.judgeRollbacks()
	s.mu.Unlock()
	leftovers = append(leftovers, stuck...)
	s.report(exceptions, overlapped, stuckExcused)
	for _, v := range violations[:min(len(violations), 30)] {
		s.say("violation: %s", v)
	}
	linearizable := s.checkHistory()
	violations = append(violations, linearizable...)
	for _, k := range leftovers[:min(len(leftovers), 10)] {
		s.say("leftover: %s", s.describeKey(k))
	}
	s.say("%d operations, %d faults, %d violations, %d leftovers", s.total(s.ops), s.total(s.injected), len(violations), len(leftovers))
	if len(violations) > 0 || len(leftovers) > 0 {
		t.Fail()
	}
}

// soakGroups are keys whose history porcupine checks together, unsplit, for
// a batch's all-or-nothing: hot keys, and lines of one order.
var soakGroups = [][]string{
	{"sku:0", "sku:1", "sku:2", "sku:3"},
	{"sku:4", "sku:5", "sku:6"},
	{"{order-0}:line:0", "{order-0}:line:1", "{order-0}:line:2", "{order-0}:line:3"},
	{"{order-1}:line:0", "{order-1}:line:1"},
}

// checkHistory has porcupine check the run's history (see history_test.go),
// with a failover op for each fault that lost a master, over the keys of the
// slots it served. It says the verdict beside the soak's own, and returns
// the partitions found not linearizable as violations; when there are some,
// the history and visualizations of the first are written out for a replay.
func (s *soak) checkHistory() []string {
	s.mu.Lock()
	h := &history{Seed: s.hist.Seed, Began: s.hist.Began, Capacity: s.hist.Capacity, Ops: slices.Clone(s.hist.Ops)}
	h.addFailovers(s.prefix, s.faults)
	s.mu.Unlock()
	dir := ""
	v := h.check(soakGroups, "")
	if len(v.illegal) > 0 {
		dir = os.TempDir()
		path := filepath.Join(dir, fmt.Sprintf("soak-history-%d.json", s.seed))
		if err := h.save(path); err == nil {
			v = h.check(soakGroups, dir)
			s.say("history written to %s (replay: SOAK_HISTORY=%s go test -run TestHistoryReplay); visualizations: %v", path, path, v.files)
		}
	}
	s.say("%v", v)
	var out []string
	for i, p := range v.illegal {
		if s.clockMade(v.illegalKeys[i], h.Ops) {
			s.say("%s: not linearizable, as the wall clock made it (see above)", p)
			continue
		}
		out = append(out, "not linearizable: "+p)
	}
	for _, p := range out[:min(len(out), 10)] {
		s.say("violation: %s", p)
	}
	return out
}

// addFailovers adds a failover op for each fault that lost a master, over
// every key of the history in the slots it served: the keys the history
// holds, not the soak's list of keys, which leaves out the promotions.
func (h *history) addFailovers(prefix string, faults []faultEvent) {
	held := map[string]bool{}
	for _, op := range h.Ops {
		for _, k := range op.Keys {
			held[k] = true
		}
	}
	for _, ev := range faults {
		if ev.slots == nil {
			continue
		}
		var keys []string
		for _, k := range slices.Sorted(maps.Keys(held)) {
			slot := hashtag.Slot(prefix + k)
			if slices.ContainsFunc(ev.slots, func(r [2]int) bool { return slot >= r[0] && slot <= r[1] }) {
				keys = append(keys, k)
			}
		}
		h.Ops = append(h.Ops, historyOp{Kind: opFailover, Keys: keys, Call: h.at(ev.at.Add(-excusable)), Return: h.at(ev.until)})
	}
}

// clockMade reports whether keys, a partition porcupine found illegal,
// hold one where the judge found an overlap that the wall clock made, or
// one that ops show held by an owner whose lease the clock cut short on
// another key: the clock ends every key of a lock early alike, and the
// judge sees no overlap of readers that porcupine does (a reader joining a
// key that lost its other reader's hold).
func (s *soak) clockMade(keys []string, ops []historyOp) bool {
	if slices.ContainsFunc(keys, func(key string) bool { return len(s.clockExcused[key]) > 0 }) {
		return true
	}
	return slices.ContainsFunc(ops, func(op historyOp) bool {
		return s.clockCut[op.Owner] && slices.ContainsFunc(op.Keys, func(k string) bool { return slices.Contains(keys, k) })
	})
}

func randomSeed() uint64 {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return binary.LittleEndian.Uint64(b[:]) % 1_000_000_000
}

const (
	soakWorkers = 16
	soakClients = 3
	soakKeys    = 1500
	soakOrders  = 60 // keys sharing a hash tag, ten lines each
	// soakSpaceKeys are in one slot, {space}: half the batch processors'
	// baskets are drawn from them, so that the replicas meet in one
	// script call, and the nemesis moves that slot under them.
	soakSpaceKeys = 200
	soakSpace     = "{space}"
)

func newSoak(t *testing.T, cl *localcluster.Cluster, seed uint64, duration time.Duration) *soak {
	s := &soak{
		t: t, cl: cl, seed: seed, prefix: testPrefix(t),
		deadline: time.Now().Add(duration),
		// A short soak keeps its leases short, so that what a fault
		// strands is gone soon after the run.
		maxTTL:       min(2*time.Minute, max(3*time.Second, duration/10)),
		ops:          map[string]int{},
		outcomes:     map[string]int{},
		injected:     map[string]int{},
		register:     &fencedStore{last: map[string]storeWrite{}},
		hist:         &history{Seed: seed, Began: time.Now(), Capacity: soakCapacity},
		clock:        newWallClock(),
		clockExcused: map[string][]string{}, clockCut: map[string]bool{},
		cancelAt: map[string]context.CancelFunc{},
		checks:   make(chan struct{}, maxChecks),
	}
	for i := range soakKeys {
		s.keys = append(s.keys, fmt.Sprintf("sku:%d", i))
	}
	for o := range soakOrders {
		for line := range 10 {
			s.keys = append(s.keys, fmt.Sprintf("{order-%d}:line:%d", o, line))
		}
	}
	for i := range soakSpaceKeys {
		s.keys = append(s.keys, fmt.Sprintf("%s:sku:%d", soakSpace, i))
	}
	s.link = newClientNet(t)
	for i := range soakClients {
		opts := cl.ClientOptions()
		if i == soakClients-1 {
			opts = s.link.options(opts)
		}
		rdb := redis.NewClusterClient(opts)
		t.Cleanup(func() { _ = rdb.Close() })
		s.rdbs = append(s.rdbs, rdb)
	}
	for i := range soakClients {
		s.clients = append(s.clients, s.newClient(i))
	}
	admin, err := batchlock.New(s.rdbs[0], batchlock.WithPrefix(s.prefix))
	require.NoError(t, err)
	t.Cleanup(func() { _ = admin.Close() })
	s.admin = admin
	return s
}

// soakLeases are the leases of renewed locks, one per Client in turn.
var soakLeases = []time.Duration{300 * time.Millisecond, time.Second, 3 * time.Second}

func (s *soak) newClient(i int) *soakClient {
	lease := soakLeases[i%len(soakLeases)]
	c, err := batchlock.New(s.rdbs[i%len(s.rdbs)], batchlock.WithPrefix(s.prefix), batchlock.WithLease(lease),
		batchlock.WithObserver(s.observe))
	require.NoError(s.t, err)
	s.mu.Lock()
	s.every = append(s.every, c)
	s.mu.Unlock()
	return &soakClient{c: c, lease: lease}
}

// eachOwners starts the owners the soak's Clients make themselves: those of
// the baskets of TryEach and the Processors (every other call names its
// owner).
var eachOwners = owner.Process()

// observe ends the calls marked to end at their next conflict, right when
// the conflict is found: what comes next is a rollback (TryLock), a
// give-back of keys taken out of order, or a wait (Lock). And it has the
// keys of every TryEach basket that failed (refused, or its call failed)
// checked once the rollback bound has passed.
func (s *soak) observe(e batchlock.Event) {
	refused := e.Kind == batchlock.EventConflict && e.Err != nil // a TryEach basket's
	if (refused || e.Kind == batchlock.EventFailed) && strings.HasPrefix(e.Owner, eachOwners) {
		s.checkRolledBack(e.Owner, slices.Clone(e.Keys), time.Now())
	}
	if e.Kind != batchlock.EventConflict || refused {
		return
	}
	s.mu.Lock()
	cancel := s.cancelAt[e.Owner]
	delete(s.cancelAt, e.Owner)
	if cancel != nil {
		s.injected["call ended at its conflict"]++
	}
	s.mu.Unlock()
	if cancel != nil {
		cancel()
	}
}

// say prints a line of the soak's report on standard output, where make soak
// picks it up.
func (s *soak) say(format string, args ...any) {
	fmt.Printf("soak: "+format+"\n", args...)
}

func (s *soak) count(m map[string]int, key string) {
	s.mu.Lock()
	m[key]++
	s.mu.Unlock()
}

func (s *soak) problem(format string, args ...any) {
	s.mu.Lock()
	s.problems = append(s.problems, fmt.Sprintf(format, args...))
	s.mu.Unlock()
}

func (s *soak) total(m map[string]int) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, v := range m {
		n += v
	}
	return n
}

func (s *soak) running() bool { return time.Now().Before(s.deadline) }

// closeAll closes every Client once the load and the faults are over, and
// waits for every lock handed out to end (each within its lease).
func (s *soak) closeAll() {
	require.NoError(s.t, s.cl.WaitReady(ctxTimeout(s.t, 2*time.Minute)))
	s.mu.Lock()
	clients := slices.Clone(s.clients)
	s.mu.Unlock()
	for _, sc := range clients {
		require.NoError(s.t, sc.c.Close())
	}
	done := make(chan struct{})
	go func() { s.locks.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(s.maxTTL + time.Minute):
		s.problem("locks still not ended %v after the run", s.maxTTL+time.Minute)
	}
	// Every lock ended: no Client keeps a gate.
	s.mu.Lock()
	defer s.mu.Unlock()
	var localWaits uint64
	for _, c := range s.every {
		st := c.Stats()
		if st.Gated > 0 {
			s.problems = append(s.problems, fmt.Sprintf("a Client keeps %d gates once all its locks ended", st.Gated))
		}
		localWaits += st.LocalWaits
	}
	if localWaits == 0 {
		s.problems = append(s.problems, "no call waited at an in-process gate: the soak did not try them")
	}
}

// leftovers waits, up to the longest lease, for every lock key and cancel
// mark to go, and returns those that stay. Only the fencing counters and
// capacities may.
func (s *soak) leftovers() []string {
	var left []string
	deadline := time.Now().Add(s.maxTTL + 10*time.Second)
	for {
		left = s.bookkeeping()
		if len(left) == 0 || time.Now().After(deadline) {
			return left
		}
		time.Sleep(100 * time.Millisecond) // the keys expire on the servers' clocks; nothing to wait on
	}
}

func (s *soak) bookkeeping() []string {
	ctx := ctxTimeout(s.t, 30*time.Second)
	var mu sync.Mutex
	var found []string
	require.NoError(s.t, s.rdbs[0].ForEachMaster(ctx, func(ctx context.Context, node *redis.Client) error {
		iter := node.Scan(ctx, 0, s.prefix+"*", 1000).Iterator()
		for iter.Next(ctx) {
			k := iter.Val()
			rest := k[len(s.prefix):]
			switch {
			case strings.HasPrefix(rest, "fence:{"), strings.HasPrefix(rest, "units:{"):
				continue // fencing counters and capacities are meant to stay
			case strings.HasPrefix(rest, "cancel:{") && strings.Contains(rest, "}:c:"):
				// A capacity change's mark goes on its own, a minute after
				// the change (its resends' window): one with no such expiry
				// is left over.
				if ttl, err := node.PTTL(ctx, k).Result(); err == nil && (ttl == -1 || ttl > time.Minute) {
					mu.Lock()
					found = append(found, k)
					mu.Unlock()
				}
				continue
			}
			mu.Lock()
			found = append(found, k)
			mu.Unlock()
		}
		return iter.Err()
	}))
	slices.Sort(found)
	return found
}

// describeKey is a leftover key with what it holds, for the report.
func (s *soak) describeKey(key string) string {
	if !strings.HasPrefix(key, s.prefix) {
		return key
	}
	ctx := ctxTimeout(s.t, 10*time.Second)
	v, err := s.rdbs[0].Get(ctx, key).Result()
	ttl := s.rdbs[0].PTTL(ctx, key).Val()
	if err != nil {
		return fmt.Sprintf("%s (%v)", key, err)
	}
	return fmt.Sprintf("%s = %q, expires in %v", key, v, ttl)
}

// report prints what ran and what was injected, by kind.
func (s *soak) report(exceptions, overlapped, stuckExcused int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.say("%d holder losses (%d excused by a stopping fault or the wall clock moving forward); %d failed calls checked after the rollback bound, %d holding keys then (%d excused by a stopping fault)",
		len(s.holderLosses), s.holdersExcused(), s.checked, len(s.failedCalls), stuckExcused)
	for _, loss := range s.holderLosses[:min(len(s.holderLosses), 5)] {
		s.say("holder loss: %s at %s: %v", loss.owner, loss.at.Format("15:04:05.000000"), loss.err)
	}
	s.say("operations: %s", describeCounts(s.ops))
	s.say("outcomes: %s", describeCounts(s.outcomes))
	s.say("faults: %s", describeCounts(s.injected))
	writes, refused := s.register.counts()
	withShared := 0
	for _, sec := range s.sections {
		if len(sec.Shared) > 0 {
			withShared++
		}
	}
	s.say("%d critical sections; %d fenced writes, %d refused as stale", len(s.sections), writes, refused)
	s.say("%d sections held keys shared; another owner's reader was inside on the same key %d times", withShared, overlapped)
	var localWaits, acquires uint64
	for _, c := range s.every {
		st := c.Stats()
		localWaits, acquires = localWaits+st.LocalWaits, acquires+st.Acquires
	}
	s.say("%d waits at a Client's in-process gates; %d acquire calls", localWaits, acquires)
	s.say("%d overlaps after a failover lost a lock taken without WithReplicas (documented, not violations)", exceptions)
	s.say("%v", s.clock)
	var made []string
	for _, key := range slices.Sorted(maps.Keys(s.clockExcused)) {
		made = append(made, s.clockExcused[key]...)
	}
	s.say("%d overlaps made by the wall clock moving forward (Redis expires keys by it: outside the contract, not violations)", len(made))
	for _, m := range made[:min(len(made), 10)] {
		s.say("made by the clock: %s", m)
	}
}

func describeCounts(m map[string]int) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = fmt.Sprintf("%s %d", k, m[k])
	}
	return strings.Join(parts, ", ")
}
