package cluster_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strconv"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/batchlock/batchlock/hashtag"
	"github.com/batchlock/batchlock/localcluster"
)

// The soak's nemesis: one fault at a time, on a random schedule, each
// followed by recovery (every node answering, every slot served, replicas
// in sync) before the next.

// faultEvent is one injected fault. slots are those of a master that lost
// its role to a replica during [at, until]: locks taken there without
// WithReplicas may have been lost then, the documented exception.
type faultEvent struct {
	kind   string
	at     time.Time
	until  time.Time
	slots  [][2]int
	served [][2]int // the slots of the master the fault was made on
}

// nemesisFault is a fault: its name, its weight in the schedule, and how it
// is made on a master (and its replica) chosen at random.
type nemesisFault struct {
	name   string
	weight int
	inject func(ctx context.Context, rng *rand.Rand, master, replica localcluster.Node) (masterLost bool, err error)
	link   bool // on the link of the soak's proxied Client (onLink)
}

func (s *soak) faultKinds() []nemesisFault {
	cl := s.cl
	return []nemesisFault{
		{name: "master DEBUG SLEEP", weight: 3, inject: func(ctx context.Context, rng *rand.Rand, m, _ localcluster.Node) (bool, error) {
			d := time.Duration(10+rng.IntN(490)) * time.Millisecond
			_, err := cl.Do(ctx, m.Addr, "DEBUG", "SLEEP", strconv.FormatFloat(d.Seconds(), 'f', 3, 64))
			return false, err
		}},
		{name: "master DEBUG SLEEP past the read timeout during a TryEach", weight: 2, inject: func(ctx context.Context, rng *rand.Rand, m, _ localcluster.Node) (bool, error) {
			// Past the Clients' read timeout and short of the cluster's
			// node timeout: calls to the master are sent again while the
			// first ones wait unread in its buffer, to run when it wakes.
			d := cl.ClientOptions().ReadTimeout + time.Duration(100+rng.IntN(500))*time.Millisecond
			return false, s.sleepDuringATick(ctx, rng, m.Addr, d)
		}},
		{name: "master frozen briefly", weight: 2, inject: func(ctx context.Context, rng *rand.Rand, m, _ localcluster.Node) (bool, error) {
			return false, s.frozenFor(ctx, m.Addr, time.Duration(100+rng.IntN(1100))*time.Millisecond)
		}},
		{name: "replica frozen", weight: 2, inject: func(ctx context.Context, rng *rand.Rand, _, r localcluster.Node) (bool, error) {
			return false, s.frozenFor(ctx, r.Addr, time.Duration(200+rng.IntN(2800))*time.Millisecond)
		}},
		{name: "master frozen until failed over", weight: 1, inject: func(ctx context.Context, _ *rand.Rand, m, r localcluster.Node) (bool, error) {
			if err := cl.Freeze(ctx, m.Addr); err != nil {
				return false, err
			}
			err := s.waitPromoted(ctx, m)
			return true, joinErr(err, cl.Thaw(ctx, m.Addr))
		}},
		{name: "master killed and restarted", weight: 1, inject: func(ctx context.Context, _ *rand.Rand, m, r localcluster.Node) (bool, error) {
			if err := cl.Kill(ctx, m.Addr); err != nil {
				return false, err
			}
			// Restarted only once its replica took over: without
			// persistence a master restarted sooner comes back empty.
			err := s.waitPromoted(ctx, m)
			return true, joinErr(err, cl.Restart(ctx, m.Addr))
		}},
		{name: "replica killed and restarted", weight: 1, inject: func(ctx context.Context, _ *rand.Rand, _, r localcluster.Node) (bool, error) {
			if err := cl.Kill(ctx, r.Addr); err != nil {
				return false, err
			}
			return false, cl.Restart(ctx, r.Addr)
		}},
		{name: "failover FORCE", weight: 1, inject: func(ctx context.Context, _ *rand.Rand, m, _ localcluster.Node) (bool, error) {
			_, err := cl.Failover(ctx, m.Addr)
			return true, err
		}},
		{name: "failover TAKEOVER", weight: 1, inject: func(ctx context.Context, _ *rand.Rand, m, _ localcluster.Node) (bool, error) {
			_, err := cl.Failover(ctx, m.Addr, localcluster.Takeover())
			return true, err
		}},
		{name: "slot migrated", weight: 2, inject: func(ctx context.Context, rng *rand.Rand, m, _ localcluster.Node) (bool, error) {
			slot, to, err := s.slotToMove(ctx, rng)
			if err != nil {
				return false, err
			}
			return false, cl.MigrateSlot(ctx, slot, to.Addr)
		}},
		{name: "slot left half-migrated", weight: 2, inject: func(ctx context.Context, rng *rand.Rand, _, _ localcluster.Node) (bool, error) {
			slot, to, err := s.slotToMove(ctx, rng)
			if err != nil {
				return false, err
			}
			from, err := cl.MasterOfSlot(ctx, slot)
			if err != nil {
				return false, err
			}
			if _, err := cl.Do(ctx, to.Addr, "CLUSTER", "SETSLOT", slot, "IMPORTING", from.ID); err != nil {
				return false, err
			}
			if _, err := cl.Do(ctx, from.Addr, "CLUSTER", "SETSLOT", slot, "MIGRATING", to.ID); err != nil {
				return false, err
			}
			time.Sleep(time.Duration(500+rng.IntN(2500)) * time.Millisecond) // the half-done state is the fault
			return false, cl.MigrateSlot(ctx, slot, to.Addr)
		}},
		{name: "slot migrated key by key", weight: 3, inject: func(ctx context.Context, rng *rand.Rand, _, _ localcluster.Node) (bool, error) {
			slot, to, err := s.slotToMove(ctx, rng)
			if err != nil {
				return false, err
			}
			return false, s.migrateKeyByKey(ctx, rng, slot, to)
		}},
		{name: "space's slot moved again and again under its processors", weight: 2, inject: func(ctx context.Context, rng *rand.Rand, _, _ localcluster.Node) (bool, error) {
			return false, s.moveSpace(ctx, rng)
		}},
		{name: "normal connections killed", weight: 2, inject: func(ctx context.Context, _ *rand.Rand, m, _ localcluster.Node) (bool, error) {
			_, err := cl.Do(ctx, m.Addr, "CLIENT", "KILL", "TYPE", "normal")
			return false, err
		}},
		{name: "pub/sub connections killed", weight: 2, inject: func(ctx context.Context, _ *rand.Rand, m, _ localcluster.Node) (bool, error) {
			_, err := cl.Do(ctx, m.Addr, "CLIENT", "KILL", "TYPE", "pubsub")
			return false, err
		}},
		{name: "replica link cut", weight: 2, inject: func(ctx context.Context, _ *rand.Rand, m, _ localcluster.Node) (bool, error) {
			_, err := cl.Do(ctx, m.Addr, "CLIENT", "KILL", "TYPE", "replica")
			return false, err
		}},
		{name: "waiter process killed, or frozen past its grant", weight: 3, inject: func(ctx context.Context, rng *rand.Rand, _, _ localcluster.Node) (bool, error) {
			return false, s.killWaiter(rng)
		}},
		s.onLink("a Client cut off from a master", 2, func(_ *rand.Rand, m localcluster.Node) (func(), error) {
			return s.link.cut(m.Addr, upstream, downstream)
		}),
		s.onLink("a Client's requests to a master lost", 1, func(_ *rand.Rand, m localcluster.Node) (func(), error) {
			return s.link.cut(m.Addr, upstream)
		}),
		s.onLink("a Client's replies from a master lost", 1, func(_ *rand.Rand, m localcluster.Node) (func(), error) {
			return s.link.cut(m.Addr, downstream)
		}),
		s.onLink("a Client's link to a master slow", 2, func(rng *rand.Rand, m localcluster.Node) (func(), error) {
			return s.link.slow(m.Addr, "latency", 20+rng.IntN(400))
		}),
		s.onLink("a Client's link to a master throttled", 1, func(rng *rand.Rand, m localcluster.Node) (func(), error) {
			return s.link.slow(m.Addr, "bandwidth", 5+rng.IntN(100)) // KB/s
		}),
	}
}

// sleepDuringATick makes the master at addr sleep for d (DEBUG SLEEP, on a
// connection of its own that waits for the reply) and, once it sleeps,
// runs a batch processor's tick, whose TryEach has baskets on every master.
func (s *soak) sleepDuringATick(ctx context.Context, rng *rand.Rand, addr string, d time.Duration) error {
	node := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1, ReadTimeout: d + 10*time.Second, DisableIdentity: true})
	defer node.Close()
	slept := make(chan error, 1)
	go func() { slept <- node.Do(ctx, "DEBUG", "SLEEP", strconv.FormatFloat(d.Seconds(), 'f', 3, 64)).Err() }()
	for {
		pctx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
		_, err := s.cl.Do(pctx, addr, "PING")
		cancel()
		if err != nil {
			break // asleep
		}
		select {
		case err := <-slept:
			return fmt.Errorf("slept before a PING saw it: %v", err)
		default:
		}
	}
	s.operateEach(rng)
	return <-slept
}

// onLink is a fault on the link of the soak's proxied Client (soak.link)
// to a master, made by inject and healed after a while.
func (s *soak) onLink(name string, weight int, inject func(rng *rand.Rand, master localcluster.Node) (heal func(), err error)) nemesisFault {
	return nemesisFault{name: name, weight: weight, link: true,
		inject: func(_ context.Context, rng *rand.Rand, m, _ localcluster.Node) (bool, error) {
			heal, err := inject(rng, m)
			if err != nil {
				return false, err
			}
			time.Sleep(time.Duration(300+rng.IntN(2700)) * time.Millisecond)
			heal()
			return false, nil
		}}
}

// linkFaults are the names of the faults on the link of the soak's proxied
// Client (onLink).
func (s *soak) linkFaults() map[string]bool {
	names := map[string]bool{}
	for _, f := range s.faultKinds() {
		if f.link {
			names[f.name] = true
		}
	}
	return names
}

// killWaiter starts a process that locks a few hot keys (or promotions),
// all shared or all exclusive, with a short lease, and after a moment kills
// it (SIGKILL), or freezes it (SIGSTOP) past a grant before it dies:
// a waiter that crashed while queued, or that was handed a key while
// frozen. Whatever it took or queued for must go by itself, without a
// rollback.
func (s *soak) killWaiter(rng *rand.Rand) error {
	spec := waiterSpec{Addrs: s.cl.Addrs(), Prefix: s.prefix, Shared: rng.IntN(2) == 0, TTL: 2 * time.Second}
	for range 1 + rng.IntN(4) {
		if rng.IntN(3) == 0 {
			spec.Keys = append(spec.Keys, fmt.Sprintf("promo:%d", rng.IntN(soakPromos)))
		} else {
			spec.Keys = append(spec.Keys, s.keys[rng.IntN(50)])
		}
	}
	cmd, err := startWaiter(spec)
	if err != nil {
		return err
	}
	defer func() { _ = cmd.Wait() }()
	time.Sleep(time.Duration(50+rng.IntN(1500)) * time.Millisecond) // the moment it dies is the fault
	if rng.IntN(3) == 0 {
		if err := cmd.Process.Signal(syscall.SIGSTOP); err != nil {
			return err
		}
		time.Sleep(3500 * time.Millisecond) // longer than a grant lasts
	}
	return cmd.Process.Kill()
}

func joinErr(a, b error) error {
	if a != nil {
		return a
	}
	return b
}

// nemesis injects faults until the deadline.
func (s *soak) nemesis() {
	rng := rand.New(rand.NewPCG(s.seed, 1<<32))
	kinds := s.faultKinds()
	total := 0
	for _, k := range kinds {
		total += k.weight
	}
	for {
		pause := time.Duration(300+rng.IntN(2700)) * time.Millisecond
		if time.Until(s.deadline) < pause {
			return
		}
		time.Sleep(pause) // the schedule itself: time between faults
		r := rng.IntN(total)
		var kind nemesisFault
		for _, k := range kinds {
			if r -= k.weight; r < 0 {
				kind = k
				break
			}
		}
		if err := s.injectOne(rng, kind); err != nil {
			s.t.Errorf("soak: fault %q: %v", kind.name, err)
			return
		}
	}
}

// injectOne makes one fault on a random master and waits for the cluster to
// recover from it.
func (s *soak) injectOne(rng *rand.Rand, kind nemesisFault) error {
	ctx, cancel := context.WithTimeout(s.t.Context(), 2*time.Minute)
	defer cancel()
	if err := s.cl.WaitReady(ctx); err != nil {
		return fmt.Errorf("not ready before: %w", err)
	}
	masters, err := s.cl.Masters(ctx)
	if err != nil {
		return err
	}
	m := masters[rng.IntN(len(masters))]
	r, err := s.cl.ReplicaOf(ctx, m.Addr)
	if err != nil {
		return err
	}
	ev := faultEvent{kind: kind.name, at: time.Now(), served: m.Slots}
	lost, err := kind.inject(ctx, rng, m, r)
	if err != nil {
		// Recorded all the same, for the judge.
		ev.until = time.Now()
		if lost {
			ev.slots = m.Slots
		}
		s.mu.Lock()
		s.faults = append(s.faults, ev)
		s.mu.Unlock()
		return err
	}
	if err := s.cl.WaitReady(ctx); err != nil {
		return fmt.Errorf("not ready after: %w", err)
	}
	ev.until = time.Now()
	if lost {
		ev.slots = m.Slots
	}
	s.t.Logf("soak: fault %q on %s from %s to %s", ev.kind, m.Addr, ev.at.Format("15:04:05.000000"), ev.until.Format("15:04:05.000000"))
	s.mu.Lock()
	s.faults = append(s.faults, ev)
	s.injected[kind.name]++
	s.mu.Unlock()
	return nil
}

// frozenFor freezes the node at addr for d.
func (s *soak) frozenFor(ctx context.Context, addr string, d time.Duration) error {
	if err := s.cl.Freeze(ctx, addr); err != nil {
		return err
	}
	time.Sleep(d) // the freeze is the fault
	return s.cl.Thaw(ctx, addr)
}

// waitPromoted waits until a replica of m serves its slots: with two
// replicas, either may win the election.
func (s *soak) waitPromoted(ctx context.Context, m localcluster.Node) error {
	for {
		now, err := s.cl.MasterOfSlot(ctx, m.Slots[0][0])
		if err == nil && now.Addr != m.Addr {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("no replica took over from %s: %w", m.Addr, ctx.Err())
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// migrateKeyByKey moves slot to to the way a slow resharding does: its
// keys (lock keys, the fencing counter, cancel marks) one MIGRATE at a time
// with pauses, half of them, a longer pause half-way, then the rest; one
// time in four the migration is aborted half-way instead (the keys go
// back).
func (s *soak) migrateKeyByKey(ctx context.Context, rng *rand.Rand, slot int, to localcluster.Node) error {
	m, err := s.cl.BeginMigration(ctx, slot, to.Addr)
	if err != nil {
		return err
	}
	reply, err := s.cl.Do(ctx, m.From().Addr, "CLUSTER", "GETKEYSINSLOT", slot, 1000)
	if err != nil {
		return err
	}
	keys, _ := reply.([]any)
	for _, k := range keys[:(len(keys)+1)/2] {
		if err := m.Move(ctx, fmt.Sprint(k)); err != nil {
			return err
		}
		time.Sleep(time.Duration(10+rng.IntN(100)) * time.Millisecond) // the pace of the migration is the fault
	}
	time.Sleep(time.Duration(300+rng.IntN(2000)) * time.Millisecond) // the half-way state is the fault
	if rng.IntN(4) == 0 {
		s.count(s.injected, "slot migration aborted half-way")
		return m.Abort(ctx)
	}
	if err := m.MoveAll(ctx, time.Duration(10+rng.IntN(50))*time.Millisecond); err != nil {
		return err
	}
	return m.Finish(ctx)
}

// slotToMove picks the slot of a random key (half the time one of the long
// holders', which are held and renewed throughout) and a master that does
// not serve it.
func (s *soak) slotToMove(ctx context.Context, rng *rand.Rand) (int, localcluster.Node, error) {
	key := s.keys[rng.IntN(len(s.keys))]
	if len(s.holderKeys) > 0 && rng.IntN(2) == 0 {
		key = s.holderKeys[rng.IntN(len(s.holderKeys))]
	}
	slot := hashtag.Slot(s.prefix + key)
	to, err := s.otherMaster(ctx, rng, slot)
	return slot, to, err
}

// otherMaster picks a master that does not serve slot.
func (s *soak) otherMaster(ctx context.Context, rng *rand.Rand, slot int) (localcluster.Node, error) {
	masters, err := s.cl.Masters(ctx)
	if err != nil {
		return localcluster.Node{}, err
	}
	var others []localcluster.Node
	for _, m := range masters {
		if !m.ServesSlot(slot) {
			others = append(others, m)
		}
	}
	return others[rng.IntN(len(others))], nil
}

// moveSpace moves the slot of the batch processors' space, with every
// lock, queue and place in it, to another master 2 to 6 times, 200 to
// 700 ms apart, as a resharding that rebalances a busy slot does: each
// move whole (as redis-cli's resharding moves keys, in batches), or one
// time in four key by key.
func (s *soak) moveSpace(ctx context.Context, rng *rand.Rand) error {
	slot := hashtag.Slot(s.prefix + soakSpace)
	for n := 2 + rng.IntN(5); n > 0; n-- {
		to, err := s.otherMaster(ctx, rng, slot)
		if err != nil {
			return err
		}
		if rng.IntN(4) == 0 {
			err = s.migrateKeyByKey(ctx, rng, slot, to)
		} else {
			err = s.cl.MigrateSlot(ctx, slot, to.Addr)
		}
		if err != nil {
			return err
		}
		time.Sleep(time.Duration(200+rng.IntN(500)) * time.Millisecond) // the pace of the resharding is the fault
	}
	return nil
}
