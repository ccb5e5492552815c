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
// pairing: masters[i] serves the i-th share of the slots and replicas[i]
// replicates it. redis-cli --cluster create would pair them at random.
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
	for i, addr := range replicas {
		// REPLICATE fails until gossip has told the replica about its master.
		err := waitFor(ctx, addr+" replicating "+masters[i], func(ctx context.Context) error {
			_, err := c.Do(ctx, addr, "CLUSTER", "REPLICATE", ids[masters[i]])
			return err
		})
		if err != nil {
			return err
		}
	}
	return c.WaitReady(ctx)
}

// Create builds a cluster from fresh, empty cluster-enabled nodes on
// loopback, as Start does with its own: the first half of addrs become
// masters sharing the slots evenly, and addrs[n/2+i] replicates addrs[i].
// When the nodes already form a ready cluster, Create only checks that.
// It is how `make cluster-up` turns the compose file's six nodes into a
// cluster.
func Create(ctx context.Context, addrs []string, opts ...Option) error {
	if len(addrs) < 2 || len(addrs)%2 != 0 {
		return fmt.Errorf("localcluster: create needs an even number of nodes, got %d", len(addrs))
	}
	cfg := newConfig(opts)
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
	half := len(addrs) / 2
	return c.create(ctx, addrs[:half], addrs[half:])
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
