package localcluster

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"strings"
)

// create turns fresh cluster-enabled nodes into a cluster with a fixed
// pairing: masters[i] serves the i-th share of the slots and replicas[j]
// replicates masters[j%len(masters)]. redis-cli --cluster create would
// pair them at random.
func (c *Cluster) create(ctx context.Context, masters, replicas []string) error {
	all := append(append([]string{}, masters...), replicas...)
	ids := make(map[string]string, len(all))
	for i, addr := range all {
		id, err := c.Do(ctx, addr, "CLUSTER", "MYID")
		if err != nil {
			return err
		}
		ids[addr] = fmt.Sprint(id)
		// Distinct epochs from the start spare the nodes a round of
		// epoch-collision resolution.
		if _, err := c.Do(ctx, addr, "CLUSTER", "SET-CONFIG-EPOCH", i+1); err != nil {
			return err
		}
	}
	for _, addr := range all[1:] {
		host, port, err := net.SplitHostPort(addr)
		if err != nil {
			return fmt.Errorf("localcluster: %w", err)
		}
		if _, err := c.Do(ctx, all[0], "CLUSTER", "MEET", host, port); err != nil {
			return err
		}
	}
	for i, r := range slotRanges(len(masters)) {
		if _, err := c.Do(ctx, masters[i], "CLUSTER", "ADDSLOTSRANGE", r[0], r[1]); err != nil {
			return err
		}
	}
	for j, addr := range replicas {
		master := masters[j%len(masters)]
		// REPLICATE fails until gossip has told the replica about its master.
		err := waitFor(ctx, addr+" replicating "+master, func(ctx context.Context) error {
			_, err := c.Do(ctx, addr, "CLUSTER", "REPLICATE", ids[master])
			return err
		})
		if err != nil {
			return err
		}
	}
	return c.WaitReady(ctx)
}

// Create builds a cluster from fresh, empty cluster-enabled nodes on
// loopback, as Start does with its own: with r replicas per master (1, or
// [WithReplicasPerMaster]), the first m = len(addrs)/(r+1) addresses
// become masters sharing the slots evenly, and addrs[k*m+i] (k = 1..r)
// replicates addrs[i]. When the nodes already form a ready cluster,
// Create only checks that. It is how `make cluster-up` turns the compose
// file's six nodes into a cluster.
func Create(ctx context.Context, addrs []string, opts ...Option) error {
	cfg := newConfig(opts)
	if err := cfg.check(); err != nil {
		return err
	}
	per := cfg.replicas + 1
	if len(addrs) < per || len(addrs)%per != 0 {
		return fmt.Errorf("localcluster: create with %d replicas per master needs a multiple of %d nodes, got %d",
			cfg.replicas, per, len(addrs))
	}
	ctx, cancel := defaultTimeout(ctx, waitTimeout)
	defer cancel()
	c := newCluster(External, cfg)
	defer c.Close()
	for _, a := range addrs {
		if err := checkLoopback(a); err != nil {
			return err
		}
		c.members = append(c.members, &member{addr: a})
	}
	for _, m := range c.members {
		if err := c.waitAnswering(ctx, m); err != nil { // just started by compose, maybe
			return err
		}
	}
	known, err := c.Do(ctx, addrs[0], "CLUSTER", "INFO")
	if err != nil {
		return err
	}
	if parseInfo(fmt.Sprint(known))["cluster_known_nodes"] != "1" {
		c.logf("localcluster: %s already in a cluster; waiting for it to be ready", addrs[0])
		return c.WaitReady(ctx)
	}
	m := len(addrs) / per
	return c.create(ctx, addrs[:m], addrs[m:])
}

// startExternal adopts the running cluster named by BATCHLOCK_CLUSTER_ADDRS.
func startExternal(ctx context.Context, cfg config) (*Cluster, error) {
	env := os.Getenv(EnvClusterAddrs)
	c := newCluster(External, cfg)
	var errs []error
	for seed := range strings.SplitSeq(env, ",") {
		if seed = strings.TrimSpace(seed); seed == "" {
			continue
		}
		if err := checkLoopback(seed); err != nil {
			return nil, errors.Join(err, c.Close())
		}
		reply, err := c.Do(ctx, seed, "CLUSTER", "NODES")
		if err != nil {
			errs = append(errs, err)
			continue
		}
		entries, err := parseClusterNodes(fmt.Sprint(reply))
		if err != nil {
			return nil, errors.Join(err, c.Close())
		}
		nodes := make([]Node, len(entries))
		for i, e := range entries {
			nodes[i] = e.Node
		}
		sortNodes(nodes)
		for _, n := range nodes {
			if err := checkLoopback(n.Addr); err != nil {
				return nil, errors.Join(fmt.Errorf("%w (node %s, listed by %s)", err, n.ID, seed), c.Close())
			}
			c.members = append(c.members, &member{addr: n.Addr})
		}
		if err := c.WaitReady(ctx); err != nil {
			return nil, errors.Join(err, c.Close())
		}
		c.logf("localcluster: using external cluster %v", c.Addrs())
		return c, nil
	}
	errs = append(errs, c.Close())
	return nil, fmt.Errorf("localcluster: no seed of %s=%q answers: %w", EnvClusterAddrs, env, errors.Join(errs...))
}

// checkLoopback refuses any address but a loopback one: tests must never
// send traffic anywhere else.
func checkLoopback(addr string) error {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("localcluster: bad address %q: %w", addr, err)
	}
	if host == "localhost" {
		return nil
	}
	if ip := net.ParseIP(host); ip != nil && ip.IsLoopback() {
		return nil
	}
	return fmt.Errorf("localcluster: %s is not a loopback address", addr)
}
