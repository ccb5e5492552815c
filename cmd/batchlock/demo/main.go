// Command demo is batchlock's demonstration: it processes SKU orders on a
// Redis Cluster under batch locks (or without, to show the oversell they
// prevent) and audits the stock. It starts a throwaway six-node cluster
// unless given one. Run it with -h for its flags; make demo runs it.
//
// It is a module of its own, apart from the operator's command
// (cmd/batchlock), because its throwaway clusters bring docker and
// testcontainers with them.
//
// Exit codes: 0 when the audit passes; 1 when it fails or the run could not
// complete; 2 a usage error, reported in one line on stderr.
package main

import (
	"context"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/redis/go-redis/v9"

	"github.com/batchlock/batchlock/cmd/batchlock/internal/cli"
)

func main() {
	// go-redis logs dial failures and retries itself; the demo reports
	// errors once, and keeps stderr for its progress.
	redis.SetLogger(quiet{})
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	return cli.RunCommand(ctx, "batchlock demo", demoCommand(), args, stdout, stderr)
}

type quiet struct{}

func (quiet) Printf(context.Context, string, ...any) {}
