package localcluster

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"time"
)

// fault returns the member at addr, or ErrUnsupported on the external
// backend.
func (c *Cluster) fault(addr string) (*member, error) {
	m, err := c.member(addr)
	if err != nil {
		return nil, err
	}
	if m.srv == nil {
		return nil, ErrUnsupported
	}
	return m, nil
}

// Freeze suspends the node at addr (SIGSTOP, docker pause): its sockets
// stay open but it answers nothing, as a node stuck in a long GC pause or
// a partitioned host would. After about two seconds the other nodes flag
// it failing, and a frozen master's replica takes over.
func (c *Cluster) Freeze(ctx context.Context, addr string) error {
	m, err := c.fault(addr)
	if err != nil {
		return err
	}
	if err := m.srv.freeze(ctx); err != nil {
		return fmt.Errorf("localcluster: freeze %s: %w", addr, err)
	}
	c.setFrozen(m, true)
	return nil
}

// Thaw resumes a node suspended by Freeze. Call WaitReady to let the
// cluster settle.
func (c *Cluster) Thaw(ctx context.Context, addr string) error {
	m, err := c.fault(addr)
	if err != nil {
		return err
	}
	if err := m.srv.thaw(ctx); err != nil {
		return fmt.Errorf("localcluster: thaw %s: %w", addr, err)
	}
	c.setFrozen(m, false)
	return nil
}

func (c *Cluster) setFrozen(m *member, frozen bool) {
	c.mu.Lock()
	m.frozen = frozen
	c.mu.Unlock()
}

func (c *Cluster) setKilled(m *member, killed bool) {
	c.mu.Lock()
	m.killed = killed
	m.frozen = false
	if !killed {
		m.paused = nil // started again with its original settings
	}
	c.mu.Unlock()
}

// Kill ends the node at addr at once (SIGKILL), as a crash would; its
// data directory, and so its nodes.conf, is kept for Restart.
func (c *Cluster) Kill(ctx context.Context, addr string) error {
	m, err := c.fault(addr)
	if err != nil {
		return err
	}
	if err := m.srv.kill(ctx); err != nil {
		return fmt.Errorf("localcluster: kill %s: %w", addr, err)
	}
	c.setKilled(m, true)
	return nil
}

// Restart starts the node at addr again on the same port, killing it
// first if it runs. It rejoins the cluster with its nodes.conf (same ID;
// a master that lost its slots meanwhile comes back as a replica) and
// with the settings it started with, which ends a [Cluster.PauseReplication].
// Restart returns once it answers PING: call WaitReady to let the cluster
// settle.
func (c *Cluster) Restart(ctx context.Context, addr string) error {
	m, err := c.fault(addr)
	if err != nil {
		return err
	}
	ctx, cancel := defaultTimeout(ctx, waitTimeout)
	defer cancel()
	if err := m.srv.kill(ctx); err != nil {
		return fmt.Errorf("localcluster: restart %s: %w", addr, err)
	}
	c.setKilled(m, true)
	if err := m.srv.start(ctx); err != nil {
		return fmt.Errorf("localcluster: restart %s: %w", addr, err)
	}
	if err := c.waitAnswering(ctx, m); err != nil {
		return err
	}
	c.setKilled(m, false)
	return nil
}

// Failover promotes a replica of the master at masterAddr ([Promote]
// chooses which) with CLUSTER FAILOVER FORCE (TAKEOVER with [Takeover])
// and returns the replica's address once it serves the old master's slots
// in the view of every answering node, those nodes report
// cluster_state:ok and agree on the topology, and their replicas are
// linked (nodes that do not answer, such as a frozen old master, and
// replicas paused by [Cluster.PauseReplication] are left out). So the
// master's other replicas, and the old master if it answers, replicate
// the new master by then. Works on every backend. Without a
// deadline on ctx it gives up after a minute.
func (c *Cluster) Failover(ctx context.Context, masterAddr string, opts ...FailoverOption) (string, error) {
	cfg := failoverConfig{mode: "FORCE"}
	for _, o := range opts {
		o.applyFailover(&cfg)
	}
	ctx, cancel := defaultTimeout(ctx, waitTimeout)
	defer cancel()
	replica, err := c.failoverTarget(ctx, masterAddr, cfg.promote)
	if err != nil {
		return "", err
	}
	master, err := c.Masters(ctx)
	if err != nil {
		return "", err
	}
	i := slices.IndexFunc(master, func(n Node) bool { return n.Addr == masterAddr })
	if i < 0 {
		return "", fmt.Errorf("localcluster: %s serves no slots", masterAddr)
	}
	slots := master[i].Slots
	c.logf("localcluster: failover %s -> %s (%s)", masterAddr, replica.Addr, cmp.Or(cfg.mode, "graceful"))

	ready := c.readiness(false)
	ready.exempt = c.pausedAddrs()
	var asked time.Time
	err = waitFor(ctx, "failover of "+masterAddr+" to "+replica.Addr, func(ctx context.Context) error {
		s := c.snapshot(ctx)
		// A FORCE election can fail (masters refuse a second vote within
		// twice the node timeout); ask again after that.
		if !promoted(s, replica.Addr) && time.Since(asked) > failoverRetry {
			args := []any{"CLUSTER", "FAILOVER"}
			if cfg.mode != "" {
				args = append(args, cfg.mode)
			}
			if _, err := c.Do(ctx, replica.Addr, args...); err != nil {
				return err
			}
			asked = time.Now()
			return errors.New("failover requested")
		}
		for _, v := range s.views {
			for _, e := range v.entries {
				if e.Addr == replica.Addr && (!e.Master || !slices.Equal(e.Slots, slots)) {
					return fmt.Errorf("%s does not see %s serving %v yet", v.addr, replica.Addr, slots)
				}
			}
		}
		return ready.check(s)
	})
	if err != nil {
		return "", err
	}
	return replica.Addr, nil
}

// failoverTarget returns the replica at promote, or ReplicaOf's choice.
func (c *Cluster) failoverTarget(ctx context.Context, masterAddr, promote string) (Node, error) {
	if promote == "" {
		return c.ReplicaOf(ctx, masterAddr)
	}
	rs, err := c.ReplicasOf(ctx, masterAddr)
	if err != nil {
		return Node{}, err
	}
	if i := slices.IndexFunc(rs, func(n Node) bool { return n.Addr == promote }); i >= 0 {
		return rs[i], nil
	}
	return Node{}, fmt.Errorf("localcluster: %s is not a replica of %s", promote, masterAddr)
}

// promoted reports whether the node at addr answered and says it is a master.
func promoted(s snapshot, addr string) bool {
	for _, v := range s.views {
		if v.addr == addr {
			self, _ := v.self()
			return self.Master
		}
	}
	return false
}

// failoverRetry is twice cluster-node-timeout plus a margin.
const failoverRetry = 5 * time.Second
