package localcluster

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"strconv"
)

// replAuth is what a replica authenticates to its master with
// (masteruser, masterauth; "" for none).
type replAuth struct{ user, pass string }

// pausedUser is the user a paused replica authenticates as. No such user
// exists, so its master refuses every reconnection with WRONGPASS, whatever
// the master's own password settings.
const pausedUser = "localcluster-paused-replica"

// PauseReplication cuts the replica at replicaAddr off from its master:
// it stays that master's replica in every node's view and keeps what it
// has, but receives nothing written from the moment PauseReplication
// returns until [Cluster.ResumeReplication] or [Cluster.Restart]. The
// master's other replicas go on acknowledging writes, so WAIT counts them
// and not this one. It returns once the replica's link is down and its
// master no longer lists it. Pausing a paused replica does nothing.
//
// Freeze cannot make a replica lag: a frozen node's kernel still accepts
// what its master sends, and the node applies it the moment it thaws. So
// the replica's credentials are replaced (CONFIG SET masteruser and
// masterauth to a user that does not exist) before its link is closed
// (CLIENT KILL TYPE master): the replica retries every second and its
// master refuses each attempt. Its own log says so ("Unable to AUTH to
// MASTER"). While it lasts, WaitReady waits, and Failover does not wait
// for it (it follows a new master in the cluster's view only). Works on
// every backend. Without a deadline on ctx it gives up after a minute.
func (c *Cluster) PauseReplication(ctx context.Context, replicaAddr string) error {
	m, err := c.member(replicaAddr)
	if err != nil {
		return err
	}
	c.replMu.Lock()
	defer c.replMu.Unlock()
	if c.pausedAuth(m) != nil {
		return nil
	}
	ctx, cancel := defaultTimeout(ctx, waitTimeout)
	defer cancel()
	role, err := c.replicaRole(ctx, replicaAddr)
	if err != nil {
		return err
	}
	if role.state == "" {
		return fmt.Errorf("localcluster: %s is not a replica", replicaAddr)
	}
	reply, err := c.Do(ctx, replicaAddr, "CONFIG", "GET", "masteruser", "masterauth")
	if err != nil {
		return err
	}
	saved := parseReplAuth(reply)
	if _, err := c.Do(ctx, replicaAddr, "CONFIG", "SET", "masteruser", pausedUser, "masterauth", pausedUser); err != nil {
		return err
	}
	c.setPaused(m, &saved)
	c.logf("localcluster: replication of %s from %s paused", replicaAddr, role.master)
	err = waitFor(ctx, replicaAddr+" cut off from "+role.master, func(ctx context.Context) error {
		r, err := c.replicaRole(ctx, replicaAddr)
		if err != nil {
			return err
		}
		switch r.state {
		case "connected", "sync":
			// Set up before the credentials changed; close it.
			if _, err := c.Do(ctx, replicaAddr, "CLIENT", "KILL", "TYPE", "master"); err != nil {
				return err
			}
			return errors.New("closed its replication link")
		case "connect", "connecting":
			// Not yet authenticated: the next attempt uses pausedUser.
		default: // "handshake" may have authenticated with the old credentials
			return fmt.Errorf("replication link in state %q", r.state)
		}
		repl, err := c.Do(ctx, r.master, "INFO", "replication")
		if err != nil {
			return err
		}
		if st, ok := listedReplicas(parseInfo(fmt.Sprint(repl)))[replicaAddr]; ok {
			return fmt.Errorf("%s still lists it, in state %s", r.master, st)
		}
		return nil
	})
	if err != nil {
		return errors.Join(err, c.resume(context.WithoutCancel(ctx), m, false))
	}
	return nil
}

// ResumeReplication ends a [Cluster.PauseReplication] of the node at
// addr: it gets its replication credentials back and reconnects by itself
// within about a second, catching up from its master's backlog or with a
// full resynchronisation. It returns once the node's link to its master
// is up again, or at once if the node is a master by then (promoted, as
// by [Cluster.PromoteLagging]). A node not paused is left alone. Works on
// every backend. Without a deadline on ctx it gives up after a minute.
func (c *Cluster) ResumeReplication(ctx context.Context, addr string) error {
	m, err := c.member(addr)
	if err != nil {
		return err
	}
	c.replMu.Lock()
	defer c.replMu.Unlock()
	ctx, cancel := defaultTimeout(ctx, waitTimeout)
	defer cancel()
	return c.resume(ctx, m, true)
}

// resume restores m's credentials, if paused, and with wait returns once
// its link is up or it is a master.
func (c *Cluster) resume(ctx context.Context, m *member, wait bool) error {
	saved := c.pausedAuth(m)
	if saved == nil {
		return nil
	}
	if _, err := c.Do(ctx, m.addr, "CONFIG", "SET", "masteruser", saved.user, "masterauth", saved.pass); err != nil {
		return err
	}
	c.setPaused(m, nil)
	c.logf("localcluster: replication of %s resumed", m.addr)
	if !wait {
		return nil
	}
	return waitFor(ctx, m.addr+" replicating again", func(ctx context.Context) error {
		r, err := c.replicaRole(ctx, m.addr)
		if err != nil {
			return err
		}
		if r.state != "" && r.state != "connected" {
			return fmt.Errorf("replication link in state %q", r.state)
		}
		return nil
	})
}

func (c *Cluster) pausedAuth(m *member) *replAuth {
	c.mu.Lock()
	defer c.mu.Unlock()
	return m.paused
}

// pausedAddrs returns the addresses of the paused nodes.
func (c *Cluster) pausedAddrs() map[string]bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := map[string]bool{}
	for _, m := range c.members {
		if m.paused != nil {
			out[m.addr] = true
		}
	}
	return out
}

func (c *Cluster) setPaused(m *member, a *replAuth) {
	c.mu.Lock()
	m.paused = a
	c.mu.Unlock()
}

// WaitReplicated returns once the replica at replicaAddr has applied
// everything the master at masterAddr had written when it was called (its
// slave_repl_offset reached the master's master_repl_offset), so that a
// failover then loses none of it. Without a deadline on ctx it gives up
// after a minute.
func (c *Cluster) WaitReplicated(ctx context.Context, masterAddr, replicaAddr string) error {
	ctx, cancel := defaultTimeout(ctx, waitTimeout)
	defer cancel()
	want, err := c.replOffset(ctx, masterAddr, "master_repl_offset")
	if err != nil {
		return err
	}
	return waitFor(ctx, replicaAddr+" caught up with "+masterAddr, func(ctx context.Context) error {
		got, err := c.replOffset(ctx, replicaAddr, "slave_repl_offset")
		if err != nil {
			return err
		}
		if got < want {
			return fmt.Errorf("replication offset %d of %d", got, want)
		}
		return nil
	})
}

// replOffset reads the replication offset field of INFO replication on the
// node at addr.
func (c *Cluster) replOffset(ctx context.Context, addr, field string) (int64, error) {
	reply, err := c.Do(ctx, addr, "INFO", "replication")
	if err != nil {
		return 0, err
	}
	v, ok := parseInfo(fmt.Sprint(reply))[field]
	if !ok {
		return 0, fmt.Errorf("localcluster: %s: no %s in INFO replication", addr, field)
	}
	return strconv.ParseInt(v, 10, 64)
}

// role is what ROLE says of a replica: its master's address and the state
// of its link (connect, connecting, handshake, sync, connected); state
// is "" for a master.
type role struct{ master, state string }

func (c *Cluster) replicaRole(ctx context.Context, addr string) (role, error) {
	reply, err := c.Do(ctx, addr, "ROLE")
	if err != nil {
		return role{}, err
	}
	r, _ := reply.([]any)
	if len(r) == 0 {
		return role{}, fmt.Errorf("localcluster: %s: unexpected ROLE reply %v", addr, reply)
	}
	if fmt.Sprint(r[0]) != "slave" {
		return role{}, nil
	}
	if len(r) < 4 {
		return role{}, fmt.Errorf("localcluster: %s: unexpected ROLE reply %v", addr, reply)
	}
	return role{master: net.JoinHostPort(fmt.Sprint(r[1]), fmt.Sprint(r[2])), state: fmt.Sprint(r[3])}, nil
}

// parseReplAuth reads the reply of CONFIG GET masteruser masterauth.
func parseReplAuth(reply any) replAuth {
	var a replAuth
	kv, _ := reply.([]any)
	for i := 0; i+1 < len(kv); i += 2 {
		switch fmt.Sprint(kv[i]) {
		case "masteruser":
			a.user = fmt.Sprint(kv[i+1])
		case "masterauth":
			a.pass = fmt.Sprint(kv[i+1])
		}
	}
	return a
}

// PromoteLagging stages the loss of an acknowledged write: it makes the
// replica at replicaAddr, one of the master at masterAddr's, take over
// that master's slots without what write wrote. It pauses the replica's
// replication ([Cluster.PauseReplication]), calls write, which writes
// through masterAddr and may WAIT for the master's other replicas (WAIT
// must run on the connection that wrote: with two replicas, WAIT 1
// returns 1), then has the paused replica take over (CLUSTER FAILOVER
// TAKEOVER: no vote, no catching up) and resumes its replication. If
// write fails, nothing is promoted and its error is returned.
//
// It returns once [Cluster.Failover] does: the promoted replica serves
// the slots and has none of write's writes, and the old master and the
// other replicas, whose history went past it, replicate it after a full
// resynchronisation, so they lose those writes too. Works on every
// backend. Without a deadline on ctx it gives up after two minutes.
func (c *Cluster) PromoteLagging(ctx context.Context, masterAddr, replicaAddr string, write func(ctx context.Context) error) error {
	ctx, cancel := defaultTimeout(ctx, 2*waitTimeout)
	defer cancel()
	rs, err := c.ReplicasOf(ctx, masterAddr)
	if err != nil {
		return err
	}
	if !slices.ContainsFunc(rs, func(n Node) bool { return n.Addr == replicaAddr }) {
		return fmt.Errorf("localcluster: %s is not a replica of %s", replicaAddr, masterAddr)
	}
	if err := c.PauseReplication(ctx, replicaAddr); err != nil {
		return err
	}
	if err := write(ctx); err != nil {
		return errors.Join(err, c.ResumeReplication(ctx, replicaAddr))
	}
	_, err = c.Failover(ctx, masterAddr, Promote(replicaAddr), Takeover())
	return errors.Join(err, c.ResumeReplication(ctx, replicaAddr))
}
