package main

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// runCLI runs the command line and returns its exit code, stdout and
// stderr.
func runCLI(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	var out, errOut bytes.Buffer
	code := run(context.Background(), args, &out, &errOut)
	return code, out.String(), errOut.String()
}

func TestHelp(t *testing.T) {
	for _, args := range [][]string{{"help"}, {"-h"}, {"--help"}} {
		code, out, errOut := runCLI(t, args...)
		assert.Equal(t, exitOK, code, args)
		assert.Contains(t, out, "batchlock demo", args)
		assert.Contains(t, out, "batchlock unlock  --force", args)
		assert.Empty(t, errOut, args)
	}
	code, out, _ := runCLI(t, "help", "inspect")
	assert.Equal(t, exitOK, code)
	assert.Contains(t, out, "-pattern string")

	code, out, _ = runCLI(t, "demo", "-h")
	assert.Equal(t, exitOK, code)
	assert.Contains(t, out, "-no-lock")
	assert.Contains(t, out, "(default 2000)", "the --skus default")
}

func TestUsageErrors(t *testing.T) {
	t.Setenv("BATCHLOCK_CLUSTER_ADDRS", "")
	for _, tc := range []struct {
		args []string
		want string
	}{
		{nil, "Usage:"},
		{[]string{"frobnicate"}, `unknown command "frobnicate"`},
		{[]string{"help", "frobnicate"}, `unknown command "frobnicate"`},
		{[]string{"demo", "--bogus"}, "flag provided but not defined: -bogus"},
		{[]string{"demo", "--skus", "many"}, `invalid value "many" for flag -skus`},
		{[]string{"demo", "--skus", "0"}, "--skus 0: need at least 1"},
		{[]string{"demo", "--workers", "0"}, "--workers 0: want 1 to 1024"},
		{[]string{"demo", "--hot", "30", "--skus", "20"}, "--hot 30: want 0 to --skus (20)"},
		{[]string{"demo", "--think", "-1s"}, "--think -1s must not be negative"},
		{[]string{"demo", "leftover"}, `unexpected argument "leftover"`},
		{[]string{"demo", "--store", "mysql"}, `--store "mysql": want redis or postgres`},
		{[]string{"demo", "--store", "postgres", "--no-lock"}, "--no-lock runs on --store=redis only"},
		{[]string{"demo", "--chaos", "--addrs", "127.0.0.1:7000"}, "--chaos needs the throwaway cluster"},
		{[]string{"demo", "--addrs", "nonsense"}, `bad address "nonsense": want host:port`},
		{[]string{"demo", "--addrs", ":7000"}, `bad address ":7000": no host`},
		{[]string{"demo", "--addrs", "127.0.0.1:99999"}, `port "99999" is not a number from 1 to 65535`},
		{[]string{"demo", "--addrs", "127.0.0.1:x"}, `port "x" is not a number`},
		{[]string{"demo", "--addrs", ","}, `no address in ","`},
		{[]string{"demo", "--addrs", "10.1.2.3:7000"}, "10.1.2.3:7000 is not a loopback address"},
		{[]string{"inspect"}, "no cluster: pass --addrs host:port"},
		{[]string{"inspect", "--addrs", "127.0.0.1:1", "--prefix", "a{b"}, `prefix "a{b" must not contain { or }`},
		{[]string{"inspect", "extra"}, `unexpected argument "extra"`},
		{[]string{"unlock", "--addrs", "127.0.0.1:1", "k"}, "pass --force to confirm"},
		{[]string{"unlock", "--force"}, "no KEY to unlock"},
	} {
		code, out, errOut := runCLI(t, tc.args...)
		assert.Equal(t, exitUsage, code, "%v: stderr %s", tc.args, errOut)
		assert.Contains(t, errOut, tc.want, tc.args)
		assert.Empty(t, out, "%v: nothing on stdout", tc.args)
	}
}

func TestUsageErrorShowsCommandFlags(t *testing.T) {
	code, _, errOut := runCLI(t, "demo", "--bogus")
	require.Equal(t, exitUsage, code)
	assert.True(t, strings.HasPrefix(errOut, "batchlock demo: flag provided but not defined: -bogus\n"), errOut)
	assert.Contains(t, errOut, "-max-basket int")
}

func TestChaosRefusesExternalClusterFromEnv(t *testing.T) {
	t.Setenv("BATCHLOCK_CLUSTER_ADDRS", "127.0.0.1:7000")
	code, _, errOut := runCLI(t, "demo", "--chaos")
	assert.Equal(t, exitUsage, code)
	assert.Contains(t, errOut, "$BATCHLOCK_CLUSTER_ADDRS is set")
}

func TestUnreachableCluster(t *testing.T) {
	t.Setenv("BATCHLOCK_CLUSTER_ADDRS", "")
	// Port 1 on loopback refuses at once.
	for _, args := range [][]string{
		{"inspect", "--addrs", "127.0.0.1:1"},
		{"unlock", "--force", "--addrs", "127.0.0.1:1", "k"},
		{"demo", "--addrs", "127.0.0.1:1"},
	} {
		code, out, errOut := runCLI(t, args...)
		assert.Equal(t, exitFailure, code, args)
		assert.Contains(t, errOut, "cannot reach Redis Cluster at 127.0.0.1:1: ", args)
		assert.Contains(t, errOut, "connection refused", args)
		assert.Empty(t, out, args)
	}
}

func TestAddrsFromEnv(t *testing.T) {
	t.Setenv("BATCHLOCK_CLUSTER_ADDRS", "127.0.0.1:1")
	code, _, errOut := runCLI(t, "inspect")
	assert.Equal(t, exitFailure, code)
	assert.Contains(t, errOut, "cannot reach Redis Cluster at 127.0.0.1:1")

	t.Setenv("BATCHLOCK_CLUSTER_ADDRS", "garbage")
	code, _, errOut = runCLI(t, "inspect")
	assert.Equal(t, exitUsage, code)
	assert.Contains(t, errOut, `$BATCHLOCK_CLUSTER_ADDRS: bad address "garbage"`)
}

func TestParseInterleaved(t *testing.T) {
	fs := newFlagSet("unlock")
	o := unlockCommand().flags(fs).(*unlockOptions)
	keys, err := parseInterleaved(fs, []string{"k1", "--force", "k2", "--prefix", "p:", "k3"})
	require.NoError(t, err)
	assert.Equal(t, []string{"k1", "k2", "k3"}, keys)
	assert.True(t, o.force)
	assert.Equal(t, "p:", o.prefix)

	fs = newFlagSet("unlock")
	o = unlockCommand().flags(fs).(*unlockOptions)
	keys, err = parseInterleaved(fs, []string{"k1", "--", "--force", "-x"})
	require.NoError(t, err)
	assert.Equal(t, []string{"k1", "--force", "-x"}, keys, "after --, everything is a key")
	assert.False(t, o.force)
}

func TestParseAddrs(t *testing.T) {
	addrs, err := parseAddrs(" 127.0.0.1:7000, localhost:7001,[::1]:7002,")
	require.NoError(t, err)
	assert.Equal(t, []string{"127.0.0.1:7000", "localhost:7001", "[::1]:7002"}, addrs)
	assert.NoError(t, requireLoopback(addrs))
	assert.Error(t, requireLoopback([]string{"redis.example.com:6379"}))
}
