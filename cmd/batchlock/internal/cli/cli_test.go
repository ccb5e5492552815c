package cli

import (
	"flag"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

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
// when not empty, else batchlock's default.
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
			fs := newFlagSet("test")
			var f ClusterFlags
			f.Define(fs)
			_, err := parseInterleaved(fs, tc.args)
			require.NoError(t, err)
			prefix, from := f.prefix.resolve()
			assert.Equal(t, tc.want, prefix)
			assert.Equal(t, tc.wantFrom, from)
			assert.Equal(t, tc.want, f.Prefix())
		})
	}
}

func TestParseInterleaved(t *testing.T) {
	fs := newFlagSet("unlock")
	var f ClusterFlags
	f.Define(fs)
	force := fs.Bool("force", false, "")
	keys, err := parseInterleaved(fs, []string{"k1", "--force", "k2", "--prefix", "p:", "k3"})
	require.NoError(t, err)
	assert.Equal(t, []string{"k1", "k2", "k3"}, keys)
	assert.True(t, *force)
	assert.Equal(t, "p:", f.Prefix())

	fs = flag.NewFlagSet("unlock", flag.ContinueOnError)
	force = fs.Bool("force", false, "")
	keys, err = parseInterleaved(fs, []string{"k1", "--", "--force", "-x"})
	require.NoError(t, err)
	assert.Equal(t, []string{"k1", "--force", "-x"}, keys, "after --, everything is a key")
	assert.False(t, *force)
}

func TestParseAddrs(t *testing.T) {
	addrs, err := parseAddrs(" 127.0.0.1:7000, localhost:7001,[::1]:7002,")
	require.NoError(t, err)
	assert.Equal(t, []string{"127.0.0.1:7000", "localhost:7001", "[::1]:7002"}, addrs)
	assert.NoError(t, RequireLoopback(addrs))
	assert.Error(t, RequireLoopback([]string{"redis.example.com:6379"}))
}
