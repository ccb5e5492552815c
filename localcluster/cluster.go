package localcluster

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/batchlock/batchlock/batchlock"
	"github.com/redis/go-redis/v9"
)

const (
	// startTimeout bounds Start when its context has no deadline; building
	// the docker image the first time is the slow part.
	startTimeout = 3 * time.Minute
	// waitTimeout bounds the other waits when their context has no deadline.
	waitTimeout = time.Minute
)

// Cluster is a running Redis Cluster. Its methods are safe for concurrent
// use.
type Cluster struct {
	backend  Backend
	server   Server // "" on the external backend
	id       string
	logf     func(format string, args ...any)
	launcher launcher // nil on the external backend

	mu      sync.Mutex
	members []*member // fixed after start: masters first, then their replicas
	clients map[string]*redis.Client
	closed  bool

	// replMu runs PauseReplication and ResumeReplication one at a time.
	replMu sync.Mutex
}

// member is one node this package runs (or, on the external backend, knows).
type member struct {
	addr   string
	port   int
	srv    server // nil on the external backend
	frozen bool   // by Freeze, until Thaw, Kill or Restart
	killed bool   // by Kill, until Restart
	// paused holds the replication credentials PauseReplication replaced,
	// until ResumeReplication or Restart; nil when not paused.
	paused *replAuth
}

// Start starts a cluster of three masters ([WithMasters] sets another
// number, m), each with one replica (node i+m replicates node i; six nodes)
// or with the number [WithReplicasPerMaster] asks for (node mk+i
// replicates node i), and returns once it is ready
// (see [Cluster.WaitReady]). Close it when done.
//
// The backend is, in order: External when BATCHLOCK_CLUSTER_ADDRS lists
// seeds of a running cluster (comma-separated, loopback only); the one
// given by [WithBackend]; the one named by BATCHLOCK_BACKEND (docker or
// process); Docker when a daemon answers; Process when redis-server is on
// PATH. Otherwise Start returns an error matching [ErrNoBackend], as it
// does when the chosen backend cannot run here.
//
// Without a deadline on ctx, Start gives up after three minutes.
func Start(ctx context.Context, opts ...Option) (*Cluster, error) {
	cfg := newConfig(opts)
	if err := cfg.check(); err != nil {
		return nil, err
	}
	b, err := chooseBackend(cfg, os.Getenv, func() bool { return dockerUp(ctx, cfg.logf) }, redisServerOnPath)
	if err != nil {
		return nil, err
	}
	ctx, cancel := defaultTimeout(ctx, startTimeout)
	defer cancel()
	began := time.Now()
	if b == External {
		return startExternal(ctx, cfg)
	}
	c := newCluster(b, cfg)
	if c.launcher, err = newLauncher(ctx, b, c.id, cfg); err != nil {
		return nil, err
	}
	if err := c.launchAll(ctx, cfg.masters*(1+cfg.replicas), true); err != nil {
		return nil, errors.Join(err, c.Close())
	}
	addrs := c.Addrs()
	if err := c.create(ctx, addrs[:cfg.masters], addrs[cfg.masters:]); err != nil {
		return nil, errors.Join(err, c.Close())
	}
	c.logf("localcluster: %s cluster %s ready in %v: %v", b, c.id, time.Since(began).Round(time.Millisecond), addrs)
	return c, nil
}

func newCluster(b Backend, cfg config) *Cluster {
	server := cfg.server
	if b == External {
		server = ""
	}
	return &Cluster{
		backend: b,
		server:  server,
		id:      fmt.Sprintf("%08x", rand.Uint32()),
		logf:    cfg.logf,
		clients: map[string]*redis.Client{},
	}
}

func newLauncher(ctx context.Context, b Backend, id string, cfg config) (launcher, error) {
	if b == Docker {
		return newDockerLauncher(ctx, id, cfg)
	}
	return newProcessLauncher(ctx, id, cfg)
}

func redisServerOnPath() bool {
	_, err := exec.LookPath("redis-server")
	return err == nil
}

// launchAll starts n nodes in parallel: container starts are slow enough
// for this to matter.
func (c *Cluster) launchAll(ctx context.Context, n int, cluster bool) error {
	members := make([]*member, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() { members[i], errs[i] = c.launch(ctx, cluster) })
	}
	wg.Wait()
	c.mu.Lock()
	for _, m := range members {
		if m != nil {
			c.members = append(c.members, m)
		}
	}
	c.mu.Unlock()
	return errors.Join(errs...)
}

// launchAttempts bounds retries of a node whose port was taken between
// the check and redis-server's bind.
const launchAttempts = 4

func (c *Cluster) launch(ctx context.Context, cluster bool) (*member, error) {
	var last error
	for range launchAttempts {
		port, err := ports.pick()
		if err != nil {
			return nil, err
		}
		m := &member{addr: fmt.Sprintf("127.0.0.1:%d", port), port: port}
		m.srv, err = c.launcher.launch(ctx, port, cluster)
		if err == nil {
			if err = c.waitAnswering(ctx, m); err == nil {
				return m, nil
			}
		}
		last = err
		if m.srv != nil {
			last = errors.Join(last, m.srv.remove(context.WithoutCancel(ctx)))
		}
		c.dropClient(m.addr)
		ports.release(port)
		if ctx.Err() != nil {
			break
		}
		c.logf("localcluster: node on port %d failed, trying another port: %v", port, err)
	}
	return nil, last
}

// waitAnswering polls PING until the node answers, failing early with the
// node's log when its server has exited (a taken port, a bad config).
func (c *Cluster) waitAnswering(ctx context.Context, m *member) error {
	cl, err := c.node(m.addr)
	if err != nil {
		return err
	}
	var dialer net.Dialer
	return waitFor(ctx, m.addr+" answering PING", func(ctx context.Context) error {
		pctx, cancel := context.WithTimeout(ctx, observeTimeout)
		defer cancel()
		// A plain connect first: failed dials through the client would be
		// logged and, past its pool size, would make it refuse to dial
		// for a second.
		conn, err := dialer.DialContext(pctx, "tcp", m.addr)
		if err == nil {
			_ = conn.Close()
			err = cl.Ping(pctx).Err()
		}
		if err == nil {
			return nil
		}
		if m.srv != nil {
			if up, ierr := m.srv.running(ctx); ierr == nil && !up {
				return fmt.Errorf("%w: server exited: %s", errExited, m.srv.logTail(ctx))
			}
		}
		return err
	})
}

var errExited = errors.New("localcluster: server exited")

// Backend returns the backend running the cluster.
func (c *Cluster) Backend() Backend { return c.backend }

// Server returns the server its nodes run (see [WithServer]); "" on the
// external backend, whose servers are what they are.
func (c *Cluster) Server() Server { return c.server }

// ID returns a short random name of this cluster, used in its temporary
// directory and as the value of its containers' batchlock.localcluster.id
// label.
func (c *Cluster) ID() string { return c.id }

// Addrs returns every node's address, "127.0.0.1:port", in the order of
// the pairing at start: the three masters, then the first replica of each
// in the same order, then the second, and so on (node 3k+i replicated
// node i). Failovers change roles, not this order.
func (c *Cluster) Addrs() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make([]string, len(c.members))
	for i, m := range c.members {
		out[i] = m.addr
	}
	return out
}

// ClientOptions returns batchlock.ClusterOptions for this cluster: settings
// that recover within about a second after a failover or restart.
func (c *Cluster) ClientOptions() *redis.ClusterOptions {
	return batchlock.ClusterOptions(c.Addrs()...)
}

// Client returns a new cluster client with [Cluster.ClientOptions]; the
// caller closes it.
func (c *Cluster) Client() *redis.ClusterClient {
	return redis.NewClusterClient(c.ClientOptions())
}

// Do sends one command to the node at addr over a direct connection,
// without retries or redirections, and returns its reply (RESP2: strings,
// integers and slices). A nil reply is returned as redis.Nil.
func (c *Cluster) Do(ctx context.Context, addr string, args ...any) (any, error) {
	cl, err := c.node(addr)
	if err != nil {
		return nil, err
	}
	v, err := cl.Do(ctx, args...).Result()
	if err != nil && !errors.Is(err, redis.Nil) {
		return v, fmt.Errorf("localcluster: %s: %v: %w", addr, args, err)
	}
	return v, err
}

// node returns the pooled direct client of addr.
func (c *Cluster) node(addr string) (*redis.Client, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return nil, errClosed
	}
	if cl, ok := c.clients[addr]; ok {
		return cl, nil
	}
	if err := checkLoopback(addr); err != nil {
		return nil, err
	}
	cl := redis.NewClient(&redis.Options{
		Addr:                  addr,
		Protocol:              2,
		DialTimeout:           observeTimeout,
		ReadTimeout:           observeTimeout,
		WriteTimeout:          observeTimeout,
		ContextTimeoutEnabled: true,
		MaxRetries:            -1,
		DialerRetries:         1,
		PoolSize:              4,
		DisableIdentity:       true,
	})
	c.clients[addr] = cl
	return cl, nil
}

func (c *Cluster) dropClient(addr string) {
	c.mu.Lock()
	cl := c.clients[addr]
	delete(c.clients, addr)
	c.mu.Unlock()
	if cl != nil {
		_ = cl.Close()
	}
}

var errClosed = errors.New("localcluster: cluster closed")

func (c *Cluster) member(addr string) (*member, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return nil, errClosed
	}
	for _, m := range c.members {
		if m.addr == addr {
			return m, nil
		}
	}
	return nil, fmt.Errorf("localcluster: %s is not a node of this cluster", addr)
}

// readiness is what WaitReady requires of this cluster.
func (c *Cluster) readiness(all bool) readiness {
	return readiness{all: all, nodes: len(c.Addrs()), replicas: c.backend != External}
}

// WaitReady polls until every node answers and reports cluster_state:ok,
// all nodes agree on roles and slots, all 16384 slots are served, no node
// is flagged failing, and every replica's link to its master is up. On
// the docker and process backends every master must also have a replica
// and list each of its replicas online, so a replica cut off by
// [Cluster.PauseReplication] keeps it waiting. Without a deadline on ctx
// it gives up after a minute.
func (c *Cluster) WaitReady(ctx context.Context) error {
	ctx, cancel := defaultTimeout(ctx, waitTimeout)
	defer cancel()
	r := c.readiness(true)
	silent := map[string]time.Time{}
	return waitFor(ctx, "waiting for the cluster to be ready", func(ctx context.Context) error {
		s := c.snapshot(ctx)
		if c.server == Redis80 {
			c.restartHung(ctx, s.unreachable, silent)
		}
		return r.check(s)
	})
}

// hungAfter is how long a running node that is neither frozen nor killed
// may go silent before WaitReady takes it for hung (see restartHung).
const hungAfter = 5 * time.Second

// restartHung restarts the nodes of unreachable that have been silent,
// neither frozen nor killed, for hungAfter since WaitReady first saw them
// so (silent). Redis 8.0's clusterNodeGetMaster follows replicaof links
// with no bound, and a master thawed after its replica took over can see
// that replica's replicaof point back at itself: it spins there for ever,
// answering nothing (Valkey bounds the walk since 8.0). A restart, as an
// operator would do, brings it back as a replica.
func (c *Cluster) restartHung(ctx context.Context, unreachable []string, silent map[string]time.Time) {
	now := time.Now()
	for addr := range silent {
		if !slices.Contains(unreachable, addr) {
			delete(silent, addr)
		}
	}
	for _, addr := range unreachable {
		m, err := c.fault(addr)
		c.mu.Lock()
		quiet := err == nil && !m.frozen && !m.killed
		c.mu.Unlock()
		since, seen := silent[addr]
		switch {
		case !quiet:
			delete(silent, addr)
		case !seen:
			silent[addr] = now
		case now.Sub(since) >= hungAfter:
			c.logf("localcluster: %s: %s silent for %v though running: restarting it (its replicaof loop)", c.server, addr, now.Sub(since).Round(time.Millisecond))
			if err := c.Restart(ctx, addr); err != nil {
				c.logf("localcluster: %v", err)
			}
			delete(silent, addr)
		}
	}
}

// Nodes returns the current topology, asking every node. A node that
// answers describes itself; one that does not is described as most other
// nodes see it, with Connected false. Masters serving slots come first,
// ordered by first slot, then the others by address.
func (c *Cluster) Nodes(ctx context.Context) ([]Node, error) {
	s := c.snapshot(ctx)
	if len(s.views) == 0 {
		if err := ctx.Err(); err != nil {
			return nil, fmt.Errorf("localcluster: nodes: %w", err)
		}
		return nil, fmt.Errorf("localcluster: no node answers: %v", s.unreachable)
	}
	return s.nodes(), nil
}

// Masters returns the masters serving slots, ordered by first slot.
func (c *Cluster) Masters(ctx context.Context) ([]Node, error) {
	ns, err := c.Nodes(ctx)
	if err != nil {
		return nil, err
	}
	return slices.DeleteFunc(ns, func(n Node) bool { return !n.Master || len(n.Slots) == 0 }), nil
}

// MasterOfSlot returns the master serving slot.
func (c *Cluster) MasterOfSlot(ctx context.Context, slot int) (Node, error) {
	ms, err := c.Masters(ctx)
	if err != nil {
		return Node{}, err
	}
	for _, m := range ms {
		if m.ServesSlot(slot) {
			return m, nil
		}
	}
	return Node{}, fmt.Errorf("localcluster: no master serves slot %d", slot)
}

// ReplicasOf returns every replica of the master at masterAddr, as the
// cluster sees them (answering or not), sorted by address.
func (c *Cluster) ReplicasOf(ctx context.Context, masterAddr string) ([]Node, error) {
	ns, err := c.Nodes(ctx)
	if err != nil {
		return nil, err
	}
	return replicasIn(ns, masterAddr)
}

func replicasIn(ns []Node, masterAddr string) ([]Node, error) {
	i := slices.IndexFunc(ns, func(n Node) bool { return n.Addr == masterAddr })
	if i < 0 {
		return nil, fmt.Errorf("localcluster: %s is not in the cluster", masterAddr)
	}
	if !ns[i].Master {
		return nil, fmt.Errorf("localcluster: %s is not a master", masterAddr)
	}
	var found []Node
	for _, n := range ns {
		if !n.Master && n.MasterID == ns[i].ID {
			found = append(found, n)
		}
	}
	if len(found) == 0 {
		return nil, fmt.Errorf("localcluster: master %s has no replica", masterAddr)
	}
	slices.SortFunc(found, func(a, b Node) int { return strings.Compare(a.Addr, b.Addr) })
	return found, nil
}

// ReplicaOf returns one replica of the master at masterAddr: the first of
// [Cluster.ReplicasOf] that answers and is not flagged failing, else the
// first. With one replica per master it is that replica.
func (c *Cluster) ReplicaOf(ctx context.Context, masterAddr string) (Node, error) {
	found, err := c.ReplicasOf(ctx, masterAddr)
	if err != nil {
		return Node{}, err
	}
	if j := slices.IndexFunc(found, func(n Node) bool { return n.Connected && !n.Failing() }); j >= 0 {
		return found[j], nil
	}
	return found[0], nil
}

// Close stops every node and removes everything the cluster created:
// processes, containers, temporary directories. On the external backend
// it only closes connections. Calling it again returns nil.
func (c *Cluster) Close() error {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil
	}
	c.closed = true
	members, clients := c.members, c.clients
	c.clients = nil
	c.mu.Unlock()

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	errs := make([]error, len(members))
	var wg sync.WaitGroup
	for i, m := range members {
		if m.srv == nil {
			continue
		}
		wg.Go(func() {
			errs[i] = m.srv.remove(ctx)
			ports.release(m.port)
		})
	}
	wg.Wait()
	for _, cl := range clients {
		errs = append(errs, cl.Close())
	}
	if c.launcher != nil {
		errs = append(errs, c.launcher.close())
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("localcluster: close: %w", err)
	}
	return nil
}
