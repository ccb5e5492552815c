// Command batchlock operates batchlock locks on a Redis Cluster:
// "batchlock inspect" lists held locks, "batchlock unlock --force" releases
// locks by hand, and "batchlock check" checks a cluster and the client
// settings before use. Run "batchlock help" for usage. Its module brings
// only go-redis and batchlock with it; the demo is a command of its own
// (cmd/batchlock/demo).
//
// A flag not given is read from the environment: --addrs from
// BATCHLOCK_CLUSTER_ADDRS, and --prefix from BATCHLOCK_PREFIX, else
// "batchlock:".
//
// Exit codes: 0 success; 1 a runtime failure; 2 a usage error, reported in
// one line on stderr that says where the usage is ("batchlock unlock: no
// KEY to unlock; see batchlock unlock -h").
package main

import (
	"context"
	"io"

	"github.com/batchlock/batchlock/cmd/batchlock/internal/cli"
)

const usage = `batchlock locks many keys at once on Redis Cluster.

Usage:
  batchlock inspect [flags]          list the locks held in a cluster
  batchlock unlock  --force [flags] KEY...
                                     release locks by hand (an operator's last resort)
  batchlock check   [flags]          preflight: does the cluster and client suit batchlock
  batchlock help [COMMAND]           show this, or a command's flags

Environment (a flag, when given, wins):
  BATCHLOCK_CLUSTER_ADDRS  cluster seeds, host:port[,host:port...], for --addrs
  BATCHLOCK_PREFIX         lock key prefix, for --prefix (default batchlock:)

The demo, which processes SKU orders under batch locks and audits the
stock, is a command of its own: go -C cmd/batchlock/demo run . -h

Exit codes: 0 success, 1 failure, 2 usage error (reported in one line on
stderr).
`

// program is the command line: its commands.
var program = cli.Program{Name: "batchlock", Usage: usage,
	Commands: []cli.Command{inspectCommand(), unlockCommand(), checkCommand()}}

func main() { cli.Main(run) }

func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	return program.Run(ctx, args, stdout, stderr)
}
