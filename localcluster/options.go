package localcluster

import (
	"errors"
	"fmt"
	"os"
)

// Backend is how the nodes of a cluster are run.
type Backend string

const (
	// Docker runs each node in a container on the host network.
	Docker Backend = "docker"
	// Process runs each node as a redis-server child process.
	Process Backend = "process"
	// External uses an existing cluster named by BATCHLOCK_CLUSTER_ADDRS;
	// nodes cannot be frozen, killed or restarted.
	External Backend = "external"
)

// Environment variables that choose the backend; see [Start].
const (
	EnvClusterAddrs = "BATCHLOCK_CLUSTER_ADDRS"
	EnvBackend      = "BATCHLOCK_BACKEND"
)

var (
	// ErrNoBackend means no cluster can be started here.
	ErrNoBackend = errors.New("localcluster: no way to start a Redis Cluster: start a Docker daemon, " +
		"or install redis-server (apt-get install redis-server), " +
		"or set " + EnvClusterAddrs + " to the loopback addresses of a running cluster")
	// ErrUnsupported is returned by fault injection on the external backend.
	ErrUnsupported = errors.New("localcluster: not supported on the external backend")
)

// Option configures [Start] and [StartSingles].
type Option interface{ apply(*config) }

type optionFunc func(*config)

func (f optionFunc) apply(c *config) { f(c) }

type config struct {
	backend  Backend
	logf     func(format string, args ...any)
	image    string
	masters  int
	replicas int // per master
	server   Server
}

func newConfig(opts []Option) config {
	c := config{logf: func(string, ...any) {}, masters: 3, replicas: 1, server: Server(os.Getenv(EnvServer))}
	if c.server == "" {
		c.server = Redis70
	}
	for _, o := range opts {
		o.apply(&c)
	}
	return c
}

// check refuses settings no cluster can be built with, before anything
// starts.
func (c config) check() error {
	if c.replicas < 1 {
		return fmt.Errorf("localcluster: WithReplicasPerMaster(%d): need at least one replica per master", c.replicas)
	}
	if c.masters < 3 {
		return fmt.Errorf("localcluster: WithMasters(%d): need at least three masters, a majority to fail one over", c.masters)
	}
	return checkServer(c.server)
}

// WithBackend forces a backend. Default: BATCHLOCK_BACKEND if set, else
// docker when a daemon answers, else process when redis-server is on PATH.
// BATCHLOCK_CLUSTER_ADDRS, when set, wins over this option.
func WithBackend(b Backend) Option {
	return optionFunc(func(c *config) { c.backend = b })
}

// WithLogf receives progress messages (nodes started, image built, ready).
// Default: no logging.
func WithLogf(f func(format string, args ...any)) Option {
	return optionFunc(func(c *config) {
		if f != nil {
			c.logf = f
		}
	})
}

// WithImage sets the docker backend's image; it must contain redis-server
// on PATH and a writable working directory. Default: redis:7.0 when present
// locally, else batchlock/redis:7-local, built from the host's redis-server
// when missing.
func WithImage(ref string) Option {
	return optionFunc(func(c *config) { c.image = ref })
}

// WithReplicasPerMaster gives each master n replicas, so that a test can
// make one replica lag while another acknowledges writes, or promote a
// chosen one. With m masters (three, or [WithMasters]) [Start] then builds
// m+mn nodes with a fixed pairing: node mk+i (k = 1..n) replicates node i,
// so with three masters and n = 2 nodes 3 and 6 replicate node 0, 4 and 7
// node 1, 5 and 8 node 2. [Create] takes the first len(addrs)/(n+1)
// addresses as masters, paired the same way. Default 1 (six nodes). n < 1
// makes Start and Create return an error before starting anything.
// StartSingles and the external backend, whose topology is what it is,
// ignore it.
func WithReplicasPerMaster(n int) Option {
	return optionFunc(func(c *config) { c.replicas = n })
}

// WithMasters makes [Start] build a cluster of n masters sharing the slots
// evenly, each with its replicas (see [WithReplicasPerMaster]): what a
// bench of a growing cluster needs. n < 3 makes Start and Create return
// an error before starting anything; otherwise Create takes its masters
// from its addresses, and StartSingles and the external backend ignore it.
// Default 3.
func WithMasters(n int) Option {
	return optionFunc(func(c *config) { c.masters = n })
}

// FailoverOption configures [Cluster.Failover].
type FailoverOption interface{ applyFailover(*failoverConfig) }

type failoverConfig struct {
	mode    string
	promote string // replica address; "" for ReplicaOf's choice
}

type failoverFunc func(*failoverConfig)

func (f failoverFunc) applyFailover(c *failoverConfig) { f(c) }

// Takeover makes the replica take over without any agreement from other
// masters (CLUSTER FAILOVER TAKEOVER), so it works while a majority is
// unreachable. Default: FORCE, which needs a majority of masters to vote.
func Takeover() FailoverOption {
	return failoverFunc(func(c *failoverConfig) { c.mode = "TAKEOVER" })
}

// Graceful makes the failover the manual one (CLUSTER FAILOVER with no
// option): the master stops taking writes until its replica has every
// write it made, then the replica takes over, so nothing is lost.
func Graceful() FailoverOption {
	return failoverFunc(func(c *failoverConfig) { c.mode = "" })
}

// Promote chooses which replica of the master takes over: the one at
// replicaAddr, which must be a replica of that master when Failover is
// called. Default: the one [Cluster.ReplicaOf] returns.
func Promote(replicaAddr string) FailoverOption {
	return failoverFunc(func(c *failoverConfig) { c.promote = replicaAddr })
}

// chooseBackend applies the documented order. Probes are functions so the
// rule can be tested without Docker or redis-server.
func chooseBackend(cfg config, getenv func(string) string, dockerUp, processOK func() bool) (Backend, error) {
	if getenv(EnvClusterAddrs) != "" {
		return External, nil
	}
	b := cfg.backend
	if b == "" {
		b = Backend(getenv(EnvBackend))
	}
	switch b {
	case External:
		return "", errors.New("localcluster: external backend needs " + EnvClusterAddrs)
	case Docker, Process:
		return b, nil
	case "":
	default:
		return "", errors.New("localcluster: unknown backend " + string(b) + " (want docker or process)")
	}
	if dockerUp() {
		return Docker, nil
	}
	if processOK() {
		return Process, nil
	}
	return "", ErrNoBackend
}
