package main

import (
	"bytes"
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/batchlock/batchlock/cmd/batchlock/internal/cli"
)

// runDemoCLI runs the demo's command line and returns its exit code, stdout
// and stderr.
func runDemoCLI(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	var out, errOut bytes.Buffer
	code := run(t.Context(), args, &out, &errOut)
	return code, out.String(), errOut.String()
}

func TestHelp(t *testing.T) {
	code, out, errOut := runDemoCLI(t, "-h")
	assert.Equal(t, cli.ExitOK, code)
	for _, w := range []string{"Usage: batchlock demo", "-no-lock", "(default 2000)"} {
		assert.Contains(t, out, w)
	}
	assert.Empty(t, errOut)
}

// Every usage error is one line on stderr, "batchlock demo: problem; see
// batchlock demo -h", nothing on stdout, and exit code 2.
func TestUsageErrors(t *testing.T) {
	t.Setenv("BATCHLOCK_CLUSTER_ADDRS", "")
	for _, tc := range []struct {
		args []string
		want string // the whole line, without its newline
	}{
		{[]string{"--bogus"}, "flag provided but not defined: -bogus"},
		{[]string{"--skus", "many"}, `invalid value "many" for flag -skus: parse error`},
		{[]string{"--skus"}, "flag needs an argument: -skus"},
		{[]string{"--skus", "0"}, "--skus 0: need at least 1"},
		{[]string{"--workers", "0"}, "--workers 0: want 1 to 1024"},
		{[]string{"--hot", "30", "--skus", "20"}, "--hot 30: want 0 to --skus (20)"},
		{[]string{"--think", "-1s"}, "--think -1s must not be negative"},
		{[]string{"--processors", "4"}, "--processors runs batch processors: it needs --batch"},
		{[]string{"--batch", "64", "--processors", "0"}, "--processors 0: want 1 to 64"},
		{[]string{"leftover"}, `unexpected argument "leftover"`},
		{[]string{"--store", "mysql"}, `--store "mysql": want redis or postgres`},
		{[]string{"--counted", "--exclusive-promos"}, "--counted locks SKUs in units: it needs a lock and shared promotions"},
		{[]string{"--store", "postgres", "--no-lock"}, "--no-lock runs on --store=redis only: its oversell is that of the Redis read-then-write"},
		{[]string{"--chaos", "--addrs", "127.0.0.1:7000"}, "--chaos needs the throwaway cluster: it fails a master over, which it cannot do to a cluster given by --addrs"},
		{[]string{"--addrs", "nonsense"}, `bad address "nonsense": want host:port, such as 127.0.0.1:7000`},
		{[]string{"--addrs", ":7000"}, `bad address ":7000": no host`},
		{[]string{"--addrs", "127.0.0.1:99999"}, `bad address "127.0.0.1:99999": port "99999" is not a number from 1 to 65535`},
		{[]string{"--addrs", "127.0.0.1:x"}, `bad address "127.0.0.1:x": port "x" is not a number from 1 to 65535`},
		{[]string{"--addrs", ","}, `no address in ",": want host:port[,host:port...]`},
		{[]string{"--addrs", "10.1.2.3:7000"}, "10.1.2.3:7000 is not a loopback address: the demo only runs against a cluster on this machine (127.0.0.1, ::1, localhost)"},
	} {
		code, out, errOut := runDemoCLI(t, tc.args...)
		assert.Equal(t, cli.ExitUsage, code, "%v: stderr %s", tc.args, errOut)
		assert.Equal(t, "batchlock demo: "+tc.want+"; see batchlock demo -h\n", errOut, "%v: one line on stderr", tc.args)
		assert.Empty(t, out, "%v: nothing on stdout", tc.args)
	}
}

func TestChaosRefusesExternalClusterFromEnv(t *testing.T) {
	t.Setenv("BATCHLOCK_CLUSTER_ADDRS", "127.0.0.1:7000")
	code, _, errOut := runDemoCLI(t, "--chaos")
	assert.Equal(t, cli.ExitUsage, code)
	assert.Contains(t, errOut, "$BATCHLOCK_CLUSTER_ADDRS is set")
}

func TestUnreachableCluster(t *testing.T) {
	t.Setenv("BATCHLOCK_CLUSTER_ADDRS", "")
	code, out, errOut := runDemoCLI(t, "--addrs", "127.0.0.1:1")
	assert.Equal(t, cli.ExitFailure, code)
	assert.Contains(t, errOut, "cannot reach Redis Cluster at 127.0.0.1:1: ")
	assert.Contains(t, errOut, "connection refused")
	assert.Empty(t, out)
}
