package localcluster

import (
	"context"
	"errors"
	"os"
	"time"
)

// Singles is a set of independent Redis nodes, not in cluster mode, for
// algorithms that need several unrelated servers (Redlock). Nodes keep no
// data across Kill and Restart: persistence is off, as in the cluster.
type Singles struct{ c *Cluster }

// StartSingles starts n independent nodes on the backend chosen as for
// [Start], except that BATCHLOCK_CLUSTER_ADDRS is ignored: an external
// cluster cannot serve as single nodes. Close them when done.
func StartSingles(ctx context.Context, n int, opts ...Option) (*Singles, error) {
	if n < 1 {
		return nil, errors.New("localcluster: StartSingles needs at least one node")
	}
	cfg := newConfig(opts)
	getenv := func(k string) string {
		if k == EnvClusterAddrs {
			return ""
		}
		return os.Getenv(k)
	}
	b, err := chooseBackend(cfg, getenv, func() bool { return dockerUp(ctx, cfg.logf) }, redisServerOnPath)
	if err != nil {
		return nil, err
	}
	ctx, cancel := defaultTimeout(ctx, startTimeout)
	defer cancel()
	began := time.Now()
	c := newCluster(b, cfg)
	if c.launcher, err = newLauncher(ctx, b, c.id, cfg); err != nil {
		return nil, err
	}
	if err := c.launchAll(ctx, n, false); err != nil {
		return nil, errors.Join(err, c.Close())
	}
	c.logf("localcluster: %d %s single nodes ready in %v: %v", n, b, time.Since(began).Round(time.Millisecond), c.Addrs())
	return &Singles{c: c}, nil
}

// Backend returns the backend running the nodes.
func (s *Singles) Backend() Backend { return s.c.Backend() }

// ID returns the random name used in the nodes' directory and labels.
func (s *Singles) ID() string { return s.c.ID() }

// Addrs returns the nodes' addresses, "127.0.0.1:port".
func (s *Singles) Addrs() []string { return s.c.Addrs() }

// Do sends one command to the node at addr; see [Cluster.Do].
func (s *Singles) Do(ctx context.Context, addr string, args ...any) (any, error) {
	return s.c.Do(ctx, addr, args...)
}

// Freeze suspends the node at addr; see [Cluster.Freeze].
func (s *Singles) Freeze(ctx context.Context, addr string) error { return s.c.Freeze(ctx, addr) }

// Thaw resumes a frozen node.
func (s *Singles) Thaw(ctx context.Context, addr string) error { return s.c.Thaw(ctx, addr) }

// Kill ends the node at addr at once.
func (s *Singles) Kill(ctx context.Context, addr string) error { return s.c.Kill(ctx, addr) }

// Restart starts the node at addr again, empty, on the same port, killing
// it first if it runs, and returns once it answers PING.
func (s *Singles) Restart(ctx context.Context, addr string) error { return s.c.Restart(ctx, addr) }

// Close stops every node and removes what they left; calling it again
// returns nil.
func (s *Singles) Close() error { return s.c.Close() }
