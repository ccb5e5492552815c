package main

import (
	"bytes"
	"github.com/batchlock/batchlock/cmd/batchlock/internal/cli"
	"testing"

	"github.com/stretchr/testify/assert"
)

// runCLI runs the command line and returns its exit code, stdout and
// stderr.
func runCLI(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	var out, errOut bytes.Buffer
	code := run(t.Context(), args, &out, &errOut)
	return code, out.String(), errOut.String()
}

func TestHelp(t *testing.T) {
	for _, args := range [][]string{{"help"}, {"-h"}, {"--help"}} {
		code, out, errOut := runCLI(t, args...)
		assert.Equal(t, cli.ExitOK, code, args)
		assert.Equal(t, usage, out, args)
		assert.Contains(t, out, "batchlock unlock  --force", args)
		assert.Contains(t, out, "BATCHLOCK_CLUSTER_ADDRS  cluster seeds", args)
		assert.Contains(t, out, "BATCHLOCK_PREFIX         lock key prefix", args)
		assert.Contains(t, out, "go -C cmd/batchlock/demo run .", args, "says where the demo went")
		assert.Empty(t, errOut, args)
	}
	for _, tc := range []struct {
		args []string
		want []string
	}{
		{[]string{"help", "inspect"}, []string{"Usage: batchlock inspect", "-pattern string", "-prefix prefix",
			"(default $BATCHLOCK_PREFIX, else batchlock:)", "(default $BATCHLOCK_CLUSTER_ADDRS)", "TOKEN (the fencing"}},
		{[]string{"inspect", "-h"}, []string{"Usage: batchlock inspect", "-json"}},
		{[]string{"unlock", "--help"}, []string{"Usage: batchlock unlock", "-force", "$BATCHLOCK_PREFIX"}},
		{[]string{"check", "-h"}, []string{"Usage: batchlock check", "-replicas int", "$BATCHLOCK_PREFIX"}},
	} {
		code, out, errOut := runCLI(t, tc.args...)
		assert.Equal(t, cli.ExitOK, code, tc.args)
		for _, w := range tc.want {
			assert.Contains(t, out, w, tc.args)
		}
		assert.Empty(t, errOut, tc.args)
	}
}

// Every usage error is one line on stderr, "batchlock[ COMMAND]: problem;
// see ...", nothing on stdout, and exit code 2.
func TestUsageErrors(t *testing.T) {
	t.Setenv("BATCHLOCK_CLUSTER_ADDRS", "")
	t.Setenv("BATCHLOCK_PREFIX", "")
	const commands = "(one of inspect, unlock, check)"
	for _, tc := range []struct {
		args []string
		want string // the whole line, without its newline
	}{
		{nil, "batchlock: no command given " + commands + "; see batchlock help"},
		{[]string{"frobnicate"}, `batchlock: unknown command "frobnicate" (want one of inspect, unlock, check); see batchlock help`},
		{[]string{"help", "frobnicate"}, `batchlock: unknown command "frobnicate" (want one of inspect, unlock, check); see batchlock help`},
		{[]string{"inspect", "-x"}, "batchlock inspect: flag provided but not defined: -x; see batchlock inspect -h"},
		{[]string{"check", "--replicas", "two"}, `batchlock check: invalid value "two" for flag -replicas: parse error; see batchlock check -h`},
		{[]string{"inspect"}, "batchlock inspect: no cluster: pass --addrs host:port[,host:port...] or set $BATCHLOCK_CLUSTER_ADDRS; see batchlock inspect -h"},
		{[]string{"check"}, "batchlock check: no cluster: pass --addrs host:port[,host:port...] or set $BATCHLOCK_CLUSTER_ADDRS; see batchlock check -h"},
		{[]string{"check", "--replicas", "-1"}, "batchlock check: --replicas -1 must not be negative; see batchlock check -h"},
		{[]string{"inspect", "--addrs", "127.0.0.1:1", "--prefix", "a{b"},
			`batchlock inspect: batchlock: invalid argument: prefix "a{b" must not contain { or }: it would change the slot of every key; see batchlock inspect -h`},
		{[]string{"inspect", "extra"}, `batchlock inspect: unexpected argument "extra"; see batchlock inspect -h`},
		{[]string{"unlock", "--addrs", "127.0.0.1:1", "k"},
			"batchlock unlock: unlock releases locks that other processes hold: pass --force to confirm; see batchlock unlock -h"},
		{[]string{"unlock", "--force"}, "batchlock unlock: no KEY to unlock; see batchlock unlock -h"},
	} {
		code, out, errOut := runCLI(t, tc.args...)
		assert.Equal(t, cli.ExitUsage, code, "%v: stderr %s", tc.args, errOut)
		assert.Equal(t, tc.want+"\n", errOut, "%v: one line on stderr", tc.args)
		assert.Empty(t, out, "%v: nothing on stdout", tc.args)
	}
}

// A bad prefix from the environment is a usage error that says where it
// came from; a --prefix given overrides it.
func TestPrefixFromEnvReachesTheClient(t *testing.T) {
	t.Setenv("BATCHLOCK_CLUSTER_ADDRS", "")
	t.Setenv("BATCHLOCK_PREFIX", "a{b")
	for _, c := range []string{"inspect", "check"} {
		code, _, errOut := runCLI(t, c, "--addrs", "127.0.0.1:1")
		assert.Equal(t, cli.ExitUsage, code, c)
		assert.Equal(t, "batchlock "+c+`: $BATCHLOCK_PREFIX: batchlock: invalid argument: prefix "a{b" must not contain { or }: `+
			"it would change the slot of every key; see batchlock "+c+" -h\n", errOut, c)
	}
	code, _, errOut := runCLI(t, "unlock", "--force", "--addrs", "127.0.0.1:1", "k")
	assert.Equal(t, cli.ExitUsage, code)
	assert.Contains(t, errOut, "$BATCHLOCK_PREFIX: ")

	// The flag wins: the client is made, and port 1 refuses.
	code, _, errOut = runCLI(t, "inspect", "--addrs", "127.0.0.1:1", "--prefix", "ok:")
	assert.Equal(t, cli.ExitFailure, code, errOut)
	assert.Contains(t, errOut, "cannot reach Redis Cluster at 127.0.0.1:1")
}

func TestUnreachableCluster(t *testing.T) {
	t.Setenv("BATCHLOCK_CLUSTER_ADDRS", "")
	t.Setenv("BATCHLOCK_PREFIX", "")
	// Port 1 on loopback refuses at once.
	for _, args := range [][]string{
		{"inspect", "--addrs", "127.0.0.1:1"},
		{"unlock", "--force", "--addrs", "127.0.0.1:1", "k"},
	} {
		code, out, errOut := runCLI(t, args...)
		assert.Equal(t, cli.ExitFailure, code, args)
		assert.Contains(t, errOut, "cannot reach Redis Cluster at 127.0.0.1:1: ", args)
		assert.Contains(t, errOut, "connection refused", args)
		assert.Empty(t, out, args)
	}
}

func TestAddrsFromEnv(t *testing.T) {
	t.Setenv("BATCHLOCK_PREFIX", "")
	t.Setenv("BATCHLOCK_CLUSTER_ADDRS", "127.0.0.1:1")
	code, _, errOut := runCLI(t, "inspect")
	assert.Equal(t, cli.ExitFailure, code)
	assert.Contains(t, errOut, "cannot reach Redis Cluster at 127.0.0.1:1")

	t.Setenv("BATCHLOCK_CLUSTER_ADDRS", "garbage")
	code, _, errOut = runCLI(t, "inspect")
	assert.Equal(t, cli.ExitUsage, code)
	assert.Contains(t, errOut, `$BATCHLOCK_CLUSTER_ADDRS: bad address "garbage"`)
}
