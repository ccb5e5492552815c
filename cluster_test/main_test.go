// Package cluster_test is the integration suite: it runs against a real
// six-node Redis Cluster from localcluster, on the backend the environment
// picks (BATCHLOCK_CLUSTER_ADDRS, BATCHLOCK_BACKEND, else docker, else
// process). Without any backend the tests skip loudly, except with
// CI=true, where they fail.
package cluster_test

import (
	"context"
	"fmt"
	"os"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"

	"github.com/batchlock/batchlock/localcluster"
)

// clusterStartTimeout covers building the docker image on first use.
const clusterStartTimeout = 3 * time.Minute

var shared struct {
	once    sync.Once
	cluster *localcluster.Cluster
	err     error
}

func TestMain(m *testing.M) {
	if spec := os.Getenv(waiterEnv); spec != "" {
		os.Exit(runWaiter(spec))
	}
	// Dial errors to killed nodes are expected here by the hundred; they
	// would bury a failure's own output.
	redis.SetLogger(verboseRedisLogger{})
	code := m.Run()
	if c := shared.cluster; c != nil {
		if err := c.Close(); err != nil {
			fmt.Fprintf(os.Stderr, "cluster_test: closing the shared cluster: %v\n", err)
			code = 1
		}
	}
	if err := findLeaks(5 * time.Second); err != nil {
		fmt.Fprintf(os.Stderr, "cluster_test: goroutines leaked: %v\n", err)
		code = 1
	}
	os.Exit(code)
}

// findLeaks reports goroutines still running once every client, lock and
// cluster should be closed. It keeps looking for a while: some goroutines
// wind down on their own, such as go-redis' dial probe (it sleeps a second)
// of a pool closed while its node was down. A toxic of the tests' own TCP
// proxies (toxiproxy, see clientNet) can stay blocked after its proxy
// closed, a leak of toxiproxy's, not of what is tested: those are let be.
func findLeaks(patience time.Duration) error {
	deadline := time.Now().Add(patience)
	for {
		err := goleak.Find(goleak.IgnoreAnyFunction("github.com/Shopify/toxiproxy/v2/toxics.(*ToxicStub).Run"))
		if err == nil || time.Now().After(deadline) {
			return err
		}
	}
}

// sharedCluster returns the package's cluster, started by the first test
// that asks and closed by TestMain. Tests on it must leave the topology as
// they found it; destructive tests use newCluster instead.
func sharedCluster(tb testing.TB) *localcluster.Cluster {
	tb.Helper()
	shared.once.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), clusterStartTimeout)
		defer cancel()
		began := time.Now()
		shared.cluster, shared.err = localcluster.Start(ctx, localcluster.WithLogf(verboseLogf))
		if shared.err != nil {
			fmt.Fprintf(os.Stderr, "\n!!! cluster_test: cannot start a Redis Cluster: %v\n\n", shared.err)
			return
		}
		fmt.Fprintf(os.Stderr, "cluster_test: shared cluster on the %s backend, started in %v: %v\n",
			shared.cluster.Backend(), time.Since(began).Round(time.Millisecond), shared.cluster.Addrs())
	})
	if shared.err != nil {
		unavailable(tb, shared.err)
	}
	return shared.cluster
}

// wantServer matches what Check's "server version" check finds on the
// shared cluster's nodes: the server localcluster started, at the version
// it names ("valkey 8.1.1" for valkey-8.1); on an external cluster, any
// server and version.
func wantServer(tb testing.TB) string {
	server, version, ok := strings.Cut(string(sharedCluster(tb).Server()), "-")
	if !ok {
		return `^\w+ \d+\.\d+\.\d+$`
	}
	return "^" + server + " " + regexp.QuoteMeta(version) + `\.\d+$`
}

// newClient returns a cluster client of the shared cluster with settings
// that recover fast after a failover, closed at the end of the test.
func newClient(tb testing.TB) *redis.ClusterClient {
	tb.Helper()
	rdb := sharedCluster(tb).Client()
	tb.Cleanup(func() { _ = rdb.Close() })
	return rdb
}

// newCluster starts a cluster of the test's own (with opts), for tests that
// break nodes, and closes it at the end of the test. On the external backend
// there is no cluster to spare, so such tests skip.
func newCluster(tb testing.TB, opts ...localcluster.Option) *localcluster.Cluster {
	tb.Helper()
	if os.Getenv(localcluster.EnvClusterAddrs) != "" {
		tb.Skipf("needs a cluster of its own; %s points at an external one", localcluster.EnvClusterAddrs)
	}
	ctx, cancel := context.WithTimeout(context.Background(), clusterStartTimeout)
	defer cancel()
	c, err := localcluster.Start(ctx, append([]localcluster.Option{localcluster.WithLogf(tb.Logf)}, opts...)...)
	if err != nil {
		unavailable(tb, err)
	}
	tb.Cleanup(func() {
		if err := c.Close(); err != nil {
			tb.Errorf("closing the test's cluster: %v", err)
		}
	})
	return c
}

// unavailable skips the test, or fails it under CI, where a missing
// cluster must never pass silently.
func unavailable(tb testing.TB, err error) {
	tb.Helper()
	if os.Getenv("CI") == "true" {
		tb.Fatalf("no Redis Cluster (CI=true, so this fails): %v", err)
	}
	tb.Skipf("SKIPPED, no Redis Cluster: %v", err)
}

func verboseLogf(format string, args ...any) {
	if testing.Verbose() {
		fmt.Fprintf(os.Stderr, format+"\n", args...)
	}
}

// verboseRedisLogger shows go-redis' own log lines with -v only.
type verboseRedisLogger struct{}

func (verboseRedisLogger) Printf(_ context.Context, format string, args ...any) {
	verboseLogf("redis: "+format, args...)
}
