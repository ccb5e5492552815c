// Command batchlock demonstrates and operates batchlock locks on a Redis
// Cluster: "batchlock demo" processes SKU orders with and without locks
// and audits the stock, "batchlock inspect" lists held locks,
// "batchlock unlock --force" releases locks by hand, and "batchlock check"
// checks a cluster and the client settings before use. Run "batchlock help"
// for usage.
//
// A flag not given is read from the environment: --addrs from
// BATCHLOCK_CLUSTER_ADDRS, and --prefix (of inspect, unlock and check) from
// BATCHLOCK_PREFIX, else "batchlock:".
//
// Exit codes: 0 success; 1 a runtime failure or a failed audit; 2 a usage
// error, reported in one line on stderr that says where the usage is
// ("batchlock unlock: no KEY to unlock; see batchlock unlock -h").
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/redis/go-redis/v9"
)

func main() {
	// go-redis logs dial failures and retries itself; the command reports
	// errors once, and keeps stderr for its progress.
	redis.SetLogger(quiet{})
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

type quiet struct{}

func (quiet) Printf(context.Context, string, ...any) {}
