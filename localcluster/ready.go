package localcluster

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"strings"
	"time"
)

// pollEvery is how often conditions are re-checked: short, since every
// check is a handful of loopback round trips.
const pollEvery = 50 * time.Millisecond

// readiness says what "settled" means for one wait.
type readiness struct {
	// all requires every node to answer; otherwise nodes that do not
	// answer (frozen, killed) are left out of every check.
	all bool
	// nodes is how many nodes every view must list.
	nodes int
	// exempt are replicas whose link is left unchecked (paused on
	// purpose); only without all.
	exempt map[string]bool
	// replicas requires every master to have a linked replica, and every
	// master to count each of its replicas online; only with all, since a
	// master whose replica is frozen may have none.
	replicas bool
}

// check returns nil when the snapshot shows a settled cluster, otherwise
// the first reason it does not.
func (r readiness) check(s snapshot) error {
	if r.all && len(s.unreachable) > 0 {
		return fmt.Errorf("%v not answering", s.unreachable)
	}
	if len(s.views) == 0 {
		return errors.New("no node answering")
	}
	answering := map[string]bool{}
	for _, v := range s.views {
		answering[v.addr] = true
	}
	first := s.views[0]
	for _, v := range s.views {
		if st := v.info["cluster_state"]; st != "ok" {
			return fmt.Errorf("%s: cluster_state %q", v.addr, st)
		}
		if r.nodes > 0 && len(v.entries) != r.nodes {
			return fmt.Errorf("%s knows %d nodes, want %d", v.addr, len(v.entries), r.nodes)
		}
		if _, ok := v.self(); !ok {
			return fmt.Errorf("%s: no myself entry", v.addr)
		}
		for _, e := range v.entries {
			if e.HasFlag("handshake") || e.HasFlag("noaddr") {
				return fmt.Errorf("%s sees %s as %v", v.addr, e.Addr, e.Flags)
			}
			if e.Failing() && (r.all || answering[e.Addr]) {
				return fmt.Errorf("%s sees %s as %v", v.addr, e.Addr, e.Flags)
			}
		}
		if !sameRoles(first.entries, v.entries) {
			return fmt.Errorf("%s and %s disagree on the topology", first.addr, v.addr)
		}
		if err := v.shardsAgree(func(addr string) bool { return r.all || answering[addr] }); err != nil {
			return err
		}
	}
	if err := coverage(first.entries); err != nil {
		return err
	}
	return r.checkReplication(s, answering)
}

func (r readiness) checkReplication(s snapshot, answering map[string]bool) error {
	entries := s.views[0].entries
	byID := map[string]entry{}
	for _, e := range entries {
		byID[e.ID] = e
	}
	linked := map[string]bool{} // master ID -> has a linked replica
	for _, v := range s.views {
		self, _ := v.self()
		if self.Master || (!r.all && r.exempt[v.addr]) {
			continue
		}
		m, ok := byID[self.MasterID]
		if !ok {
			return fmt.Errorf("%s replicates unknown node %s", v.addr, self.MasterID)
		}
		if v.repl["role"] != "slave" || v.repl["master_link_status"] != "up" {
			return fmt.Errorf("%s: replication link to %s not up", v.addr, m.Addr)
		}
		if net.JoinHostPort(v.repl["master_host"], v.repl["master_port"]) != m.Addr {
			return fmt.Errorf("%s replicates %s:%s, cluster says %s", v.addr, v.repl["master_host"], v.repl["master_port"], m.Addr)
		}
		linked[m.ID] = true
	}
	if !r.replicas || !r.all {
		return nil // a master whose replica is down may have none
	}
	for _, e := range entries {
		if e.Master && len(e.Slots) > 0 && answering[e.Addr] && !linked[e.ID] {
			return fmt.Errorf("master %s has no linked replica", e.Addr)
		}
	}
	// Each replica's side says its link is up; the master's side must
	// count it online too, or WAIT would not count it yet.
	for _, v := range s.views {
		self, _ := v.self()
		if !self.Master || len(self.Slots) == 0 {
			continue
		}
		listed := listedReplicas(v.repl)
		for _, e := range entries {
			if !e.Master && e.MasterID == self.ID && listed[e.Addr] != "online" {
				return fmt.Errorf("%s: replica %s not online", v.addr, e.Addr)
			}
		}
	}
	return nil
}

// listedReplicas reads the slaveN lines of a master's INFO replication
// ("ip=127.0.0.1,port=20004,state=online,offset=...") into the state of
// each replica by address.
func listedReplicas(repl map[string]string) map[string]string {
	out := map[string]string{}
	for k, v := range repl {
		n, ok := strings.CutPrefix(k, "slave")
		if !ok || n == "" || strings.Trim(n, "0123456789") != "" {
			continue // slave_repl_offset and the like
		}
		f := map[string]string{}
		for kv := range strings.SplitSeq(v, ",") {
			name, val, _ := strings.Cut(kv, "=")
			f[name] = val
		}
		out[net.JoinHostPort(f["ip"], f["port"])] = f["state"]
	}
	return out
}

// sameRoles reports whether two views agree on every node's role,
// address and slots.
func sameRoles(a, b []entry) bool {
	roles := func(es []entry) []string {
		out := make([]string, len(es))
		for i, e := range es {
			out[i] = e.role()
		}
		slices.Sort(out)
		return out
	}
	return slices.Equal(roles(a), roles(b))
}

// coverage checks that masters serve every slot exactly once.
func coverage(es []entry) error {
	var owner [SlotCount]string
	for _, e := range es {
		if !e.Master {
			continue
		}
		for _, r := range e.Slots {
			for s := r[0]; s <= r[1] && s < SlotCount; s++ {
				if owner[s] != "" {
					return fmt.Errorf("slot %d served by %s and %s", s, owner[s], e.Addr)
				}
				owner[s] = e.Addr
			}
		}
	}
	for s, o := range owner {
		if o == "" {
			return fmt.Errorf("slot %d not served", s)
		}
	}
	return nil
}

// waitFor polls cond until it returns nil or ctx ends; the error then
// carries cond's last complaint.
func waitFor(ctx context.Context, what string, cond func(context.Context) error) error {
	t := time.NewTicker(pollEvery)
	defer t.Stop()
	for {
		err := cond(ctx)
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("localcluster: %s: %v: %w", what, err, ctx.Err())
		case <-t.C:
		}
	}
}

// defaultTimeout bounds a wait whose context has no deadline, so a broken
// cluster fails a test instead of hanging it.
func defaultTimeout(ctx context.Context, d time.Duration) (context.Context, context.CancelFunc) {
	if _, ok := ctx.Deadline(); ok {
		return context.WithCancel(ctx)
	}
	return context.WithTimeout(ctx, d)
}

// shardsAgree, on a server whose nodes keep a shard ID, requires every
// replica that counts (a frozen or killed one may not) to be in its
// master's shard in the view. Until they are, a node
// restarted may find its nodes.conf naming a replica in a shard of its own:
// Valkey 8.1.1 then refuses to start ("corrupted cluster config file",
// valkey-io/valkey#2090).
func (v view) shardsAgree(counts func(addr string) bool) error {
	if v.shardOf == nil {
		return nil
	}
	for _, e := range v.entries {
		if e.Master || e.MasterID == "" || !counts(e.Addr) {
			continue
		}
		shard, ok := v.shardOf[e.ID]
		if master, mok := v.shardOf[e.MasterID]; !ok || !mok || shard != master {
			return fmt.Errorf("%s: replica %s not yet in the shard of its master", v.addr, e.Addr)
		}
	}
	return nil
}
