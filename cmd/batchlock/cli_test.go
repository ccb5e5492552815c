package main

import (
	"bytes"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
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
		assert.Equal(t, exitOK, code, args)
		assert.Equal(t, usage, out, args)
		assert.Contains(t, out, "batchlock unlock  --force", args)
		assert.Contains(t, out, "BATCHLOCK_CLUSTER_ADDRS  cluster seeds", args)
		assert.Contains(t, out, "BATCHLOCK_PREFIX         lock key prefix", args)
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
		{[]string{"demo", "-h"}, []string{"Usage: batchlock demo", "-no-lock", "(default 2000)"}},
	} {
		code, out, errOut := runCLI(t, tc.args...)
		assert.Equal(t, exitOK, code, tc.args)
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
	const commands = "(one of demo, inspect, unlock, check)"
	for _, tc := range []struct {
		args []string
		want string // the whole line, without its newline
	}{
		{nil, "batchlock: no command given " + commands + "; see batchlock help"},
		{[]string{"frobnicate"}, `batchlock: unknown command "frobnicate" (want one of demo, inspect, unlock, check); see batchlock help`},
		{[]string{"help", "frobnicate"}, `batchlock: unknown command "frobnicate" (want one of demo, inspect, unlock, check); see batchlock help`},
		{[]string{"demo", "--bogus"}, "batchlock demo: flag provided but not defined: -bogus; see batchlock demo -h"},
		{[]string{"inspect", "-x"}, "batchlock inspect: flag provided but not defined: -x; see batchlock inspect -h"},
		{[]string{"demo", "--skus", "many"}, `batchlock demo: invalid value "many" for flag -skus: parse error; see batchlock demo -h`},
		{[]string{"demo", "--skus"}, "batchlock demo: flag needs an argument: -skus; see batchlock demo -h"},
		{[]string{"check", "--replicas", "two"}, `batchlock check: invalid value "two" for flag -replicas: parse error; see batchlock check -h`},
		{[]string{"demo", "--skus", "0"}, "batchlock demo: --skus 0: need at least 1; see batchlock demo -h"},
		{[]string{"demo", "--workers", "0"}, "batchlock demo: --workers 0: want 1 to 1024; see batchlock demo -h"},
		{[]string{"demo", "--hot", "30", "--skus", "20"}, "batchlock demo: --hot 30: want 0 to --skus (20); see batchlock demo -h"},
		{[]string{"demo", "--think", "-1s"}, "batchlock demo: --think -1s must not be negative; see batchlock demo -h"},
		{[]string{"demo", "leftover"}, `batchlock demo: unexpected argument "leftover"; see batchlock demo -h`},
		{[]string{"demo", "--store", "mysql"}, `batchlock demo: --store "mysql": want redis or postgres; see batchlock demo -h`},
		{[]string{"demo", "--store", "postgres", "--no-lock"},
			"batchlock demo: --no-lock runs on --store=redis only: its oversell is that of the Redis read-then-write; see batchlock demo -h"},
		{[]string{"demo", "--chaos", "--addrs", "127.0.0.1:7000"},
			"batchlock demo: --chaos needs the throwaway cluster: it fails a master over, which it cannot do to a cluster given by --addrs; see batchlock demo -h"},
		{[]string{"demo", "--addrs", "nonsense"}, `batchlock demo: bad address "nonsense": want host:port, such as 127.0.0.1:7000; see batchlock demo -h`},
		{[]string{"demo", "--addrs", ":7000"}, `batchlock demo: bad address ":7000": no host; see batchlock demo -h`},
		{[]string{"demo", "--addrs", "127.0.0.1:99999"}, `batchlock demo: bad address "127.0.0.1:99999": port "99999" is not a number from 1 to 65535; see batchlock demo -h`},
		{[]string{"demo", "--addrs", "127.0.0.1:x"}, `batchlock demo: bad address "127.0.0.1:x": port "x" is not a number from 1 to 65535; see batchlock demo -h`},
		{[]string{"demo", "--addrs", ","}, `batchlock demo: no address in ",": want host:port[,host:port...]; see batchlock demo -h`},
		{[]string{"demo", "--addrs", "10.1.2.3:7000"},
			"batchlock demo: 10.1.2.3:7000 is not a loopback address: the demo only runs against a cluster on this machine (127.0.0.1, ::1, localhost); see batchlock demo -h"},
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
		assert.Equal(t, exitUsage, code, "%v: stderr %s", tc.args, errOut)
		assert.Equal(t, tc.want+"\n", errOut, "%v: one line on stderr", tc.args)
		assert.Empty(t, out, "%v: nothing on stdout", tc.args)
	}
}

func TestOneLine(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"plain", "plain"},
		{"first\nsecond", "first; second"},
		{"first\r\nsecond\n", "first; second"},
		{"", ""},
	} {
		assert.Equal(t, tc.want, oneLine(tc.in), "%q", tc.in)
	}
}

// The prefix: --prefix when given (even empty), else $BATCHLOCK_PREFIX
// when not empty, else batchlock.DefaultPrefix.
func TestPrefixFlagOrEnv(t *testing.T) {
	for _, tc := range []struct {
		name     string
		env      string
		args     []string
		want     string
		wantFrom string
	}{
		{"neither", "", nil, "batchlock:", ""},
		{"env", "env:", nil, "env:", "$BATCHLOCK_PREFIX"},
		{"flag", "", []string{"--prefix", "flag:"}, "flag:", ""},
		{"the flag wins", "env:", []string{"--prefix", "flag:"}, "flag:", ""},
		{"an empty flag wins", "env:", []string{"--prefix="}, "", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv("BATCHLOCK_PREFIX", tc.env)
			for _, c := range []command{inspectCommand(), unlockCommand(), checkCommand()} {
				fs := newFlagSet(c.name)
				opts := c.flags(fs)
				_, err := parseInterleaved(fs, tc.args)
				require.NoError(t, err)
				var f *clusterFlags
				switch o := opts.(type) {
				case *inspectOptions:
					f = &o.clusterFlags
				case *unlockOptions:
					f = &o.clusterFlags
				case *checkOptions:
					f = &o.clusterFlags
				}
				require.NotNil(t, f, c.name)
				prefix, from := f.prefix.resolve()
				assert.Equal(t, tc.want, prefix, c.name)
				assert.Equal(t, tc.wantFrom, from, c.name)
			}
		})
	}
}

// A bad prefix from the environment is a usage error that says where it
// came from; a --prefix given overrides it.
func TestPrefixFromEnvReachesTheClient(t *testing.T) {
	t.Setenv("BATCHLOCK_CLUSTER_ADDRS", "")
	t.Setenv("BATCHLOCK_PREFIX", "a{b")
	for _, c := range []string{"inspect", "check"} {
		code, _, errOut := runCLI(t, c, "--addrs", "127.0.0.1:1")
		assert.Equal(t, exitUsage, code, c)
		assert.Equal(t, "batchlock "+c+`: $BATCHLOCK_PREFIX: batchlock: invalid argument: prefix "a{b" must not contain { or }: `+
			"it would change the slot of every key; see batchlock "+c+" -h\n", errOut, c)
	}
	code, _, errOut := runCLI(t, "unlock", "--force", "--addrs", "127.0.0.1:1", "k")
	assert.Equal(t, exitUsage, code)
	assert.Contains(t, errOut, "$BATCHLOCK_PREFIX: ")

	// The flag wins: the client is made, and port 1 refuses.
	code, _, errOut = runCLI(t, "inspect", "--addrs", "127.0.0.1:1", "--prefix", "ok:")
	assert.Equal(t, exitFailure, code, errOut)
	assert.Contains(t, errOut, "cannot reach Redis Cluster at 127.0.0.1:1")
}

func TestChaosRefusesExternalClusterFromEnv(t *testing.T) {
	t.Setenv("BATCHLOCK_CLUSTER_ADDRS", "127.0.0.1:7000")
	code, _, errOut := runCLI(t, "demo", "--chaos")
	assert.Equal(t, exitUsage, code)
	assert.Contains(t, errOut, "$BATCHLOCK_CLUSTER_ADDRS is set")
}

func TestUnreachableCluster(t *testing.T) {
	t.Setenv("BATCHLOCK_CLUSTER_ADDRS", "")
	t.Setenv("BATCHLOCK_PREFIX", "")
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
	t.Setenv("BATCHLOCK_PREFIX", "")
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
	prefix, _ := o.prefix.resolve()
	assert.Equal(t, "p:", prefix)

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
