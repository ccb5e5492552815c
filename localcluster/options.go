package localcluster

import "errors"

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
	backend Backend
	logf    func(format string, args ...any)
	image   string
}

func newConfig(opts []Option) config {
	c := config{logf: func(string, ...any) {}}
	for _, o := range opts {
		o.apply(&c)
	}
	return c
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

// FailoverOption configures [Cluster.Failover].
type FailoverOption interface{ applyFailover(*failoverConfig) }

type failoverConfig struct{ mode string }

type failoverFunc func(*failoverConfig)

func (f failoverFunc) applyFailover(c *failoverConfig) { f(c) }

// Takeover makes the replica take over without any agreement from other
// masters (CLUSTER FAILOVER TAKEOVER), so it works while a majority is
// unreachable. Default: FORCE, which needs a majority of masters to vote.
func Takeover() FailoverOption {
	return failoverFunc(func(c *failoverConfig) { c.mode = "TAKEOVER" })
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
