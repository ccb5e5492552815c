package batchlock

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// envScriptRedis names a redis-server (host:port on loopback, not a cluster)
// for the tests that run the scripts themselves; without it they start one.
const envScriptRedis = "BATCHLOCK_SCRIPT_REDIS"

// scriptServer is the one redis-server of the package's script tests,
// started by the first test that needs it and stopped by TestMain.
var scriptServer struct {
	once sync.Once
	addr string
	cmd  *exec.Cmd
	err  error
}

func TestMain(m *testing.M) {
	code := m.Run()
	if cmd := scriptServer.cmd; cmd != nil {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	}
	os.Exit(code)
}

// serverClient returns a client of the script tests' redis-server, emptied,
// closed at the end of the test. Without a server the test skips, and under
// CI=true it fails.
func serverClient(t *testing.T) *redis.Client {
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
	path, err := exec.LookPath("redis-server")
	if err != nil {
		scriptServer.err = err
		return
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		scriptServer.err = err
		return
	}
	port := l.Addr().(*net.TCPAddr).Port
	_ = l.Close()
	cmd := exec.Command(path, "--port", fmt.Sprint(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no")
	cmd.Dir = os.TempDir()
	if err := cmd.Start(); err != nil {
		scriptServer.err = err
		return
	}
	scriptServer.cmd = cmd
	scriptServer.addr = fmt.Sprintf("127.0.0.1:%d", port)
	rdb := redis.NewClient(&redis.Options{Addr: scriptServer.addr})
	defer rdb.Close()
	for deadline := time.Now().Add(10 * time.Second); ; {
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		err := rdb.Ping(ctx).Err()
		cancel()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			scriptServer.err = fmt.Errorf("redis-server on port %d does not answer: %w", port, err)
			return
		}
		time.Sleep(10 * time.Millisecond) // polling a server that is starting
	}
}
