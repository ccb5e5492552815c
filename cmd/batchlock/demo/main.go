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

	"github.com/batchlock/batchlock/cmd/batchlock/internal/cli"
)

func main() { cli.Main(run) }

func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	return cli.RunCommand(ctx, "batchlock demo", demoCommand(), args, stdout, stderr)
}
