package wiretest

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// envScriptRedis names a redis-server (host:port on loopback, not a cluster)
// for the tests that run the scripts themselves; without it they start one.
const envScriptRedis = "BATCHLOCK_SCRIPT_REDIS"

// scriptServer is the one redis-server of a test binary, started by the
// first test that needs it and stopped by Main.
var scriptServer struct {
	once sync.Once
	addr string
	cmd  *exec.Cmd
	err  error
}

// Main runs a package's tests, then stops the redis-server they shared:
// the TestMain of a package that calls ServerClient.
func Main(m *testing.M) {
	code := m.Run()
	if cmd := scriptServer.cmd; cmd != nil {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	}
	os.Exit(code)
}

// ServerClient returns a client of the script tests' redis-server, emptied,
// closed at the end of the test. Without a server the test skips, and under
// CI=true it fails.
func ServerClient(t testing.TB) *redis.Client {
	t.Helper()
	scriptServer.once.Do(startScriptServer)
	if scriptServer.err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("no redis-server for the script tests (CI=true, so this fails): %v", scriptServer.err)
		}
		t.Skipf("SKIPPED, no redis-server for the script tests: %v", scriptServer.err)
	}
	rdb := redis.NewClient(&redis.Options{Addr: scriptServer.addr, MaxRetries: -1})
	t.Cleanup(func() { _ = rdb.Close() })
	if err := rdb.FlushAll(t.Context()).Err(); err != nil {
		t.Fatalf("emptying %s: %v", scriptServer.addr, err)
	}
	return rdb
}

func startScriptServer() {
	if addr := os.Getenv(envScriptRedis); addr != "" {
		scriptServer.addr = addr
		return
	}
	scriptServer.addr, scriptServer.cmd, scriptServer.err = StartRedisServer()
}

// StartRedisServer starts a redis-server on a free loopback port with args
// added, and waits until it answers.
func StartRedisServer(args ...string) (string, *exec.Cmd, error) {
	return StartRedisServerUnder(nil, args...)
}

// StartRedisServerUnder is StartRedisServer with the server run by the
// command wrapper (valgrind, say), which gets the server's path and
// arguments after its own.
func StartRedisServerUnder(wrapper []string, args ...string) (string, *exec.Cmd, error) {
	path, err := exec.LookPath("redis-server")
	if err != nil {
		return "", nil, err
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", nil, err
	}
	port := l.Addr().(*net.TCPAddr).Port
	_ = l.Close()
	argv := slices.Concat(wrapper, []string{path, "--port", fmt.Sprint(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"})
	cmd := exec.Command(argv[0], append(argv[1:], args...)...)
	cmd.Dir = os.TempDir()
	if err := cmd.Start(); err != nil {
		return "", nil, err
	}
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	rdb := redis.NewClient(&redis.Options{Addr: addr})
	defer rdb.Close()
	for deadline := time.Now().Add(30 * time.Second); ; {
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		err := rdb.Ping(ctx).Err()
		cancel()
		if err == nil {
			return addr, cmd, nil
		}
		if time.Now().After(deadline) {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
			return "", nil, fmt.Errorf("redis-server on port %d does not answer: %w", port, err)
		}
		time.Sleep(10 * time.Millisecond) // polling a server that is starting
	}
}

// HalfClusterNode starts a cluster-enabled redis-server of the test's own
// that serves slots 0 to 8191 only: keys of the other half are moved keys
// to its scripts. Without redis-server the test skips, and under CI=true it
// fails.
func HalfClusterNode(t testing.TB) *redis.Client {
	t.Helper()
	dir := t.TempDir()
	addr, cmd, err := StartRedisServer("--cluster-enabled", "yes", "--cluster-config-file", dir+"/nodes.conf",
		"--cluster-require-full-coverage", "no", "--dir", dir)
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("no redis-server for the script tests (CI=true, so this fails): %v", err)
		}
		t.Skipf("SKIPPED, no redis-server for the script tests: %v", err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	rdb := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1})
	t.Cleanup(func() { _ = rdb.Close() })
	ctx := t.Context()
	if err := rdb.Do(ctx, "CLUSTER", "ADDSLOTSRANGE", 0, 8191).Err(); err != nil {
		t.Fatalf("assigning slots: %v", err)
	}
	for deadline := time.Now().Add(10 * time.Second); ; {
		info, err := rdb.ClusterInfo(ctx).Result()
		if err == nil && strings.Contains(info, "cluster_state:ok") {
			return rdb
		}
		if time.Now().After(deadline) {
			t.Fatalf("the node's cluster state is not ok: %q %v", info, err)
		}
		time.Sleep(10 * time.Millisecond) // polling the node's state
	}
}
