package localcluster

import (
	"os"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestNodeConfigFile(t *testing.T) {
	conf := nodeConfig{Port: 21000, Dir: "/tmp/a dir", LogFile: "/tmp/a dir/redis.log", Cluster: true}.file()
	for _, line := range []string{
		"port 21000",
		"bind 127.0.0.1",
		"cluster-enabled yes",
		"cluster-node-timeout 2000",
		"cluster-announce-ip 127.0.0.1",
		"cluster-allow-replica-migration no",
		"cluster-replica-validity-factor 0",
		"enable-debug-command local",
		"repl-diskless-sync yes",
		"repl-diskless-sync-delay 0",
		"appendonly no",
		`save ""`,
		`dir "/tmp/a dir"`,
		`logfile "/tmp/a dir/redis.log"`,
	} {
		assert.Contains(t, strings.Split(conf, "\n"), line)
	}
	assert.NotContains(t, conf, "0.0.0.0")
}

func TestNodeConfigArgs(t *testing.T) {
	args := nodeConfig{Port: 21000, Dir: "/data"}.args()
	assert.Equal(t, 0, len(args)%2, "flag/value pairs")
	pairs := map[string]string{}
	for i := 0; i < len(args); i += 2 {
		assert.True(t, strings.HasPrefix(args[i], "--"), args[i])
		pairs[args[i]] = args[i+1]
	}
	assert.Equal(t, "21000", pairs["--port"])
	assert.Equal(t, "", pairs["--save"], "redis-server reads an empty argument as \"\"")
	assert.Equal(t, "", pairs["--logfile"])
	assert.Equal(t, "/data", pairs["--dir"])
	assert.NotContains(t, pairs, "--cluster-enabled", "a single node is not in cluster mode")
}

func TestQuoteConf(t *testing.T) {
	for in, want := range map[string]string{
		"plain":   "plain",
		"":        `""`,
		"a b":     `"a b"`,
		`a"b`:     `"a\"b"`,
		`a\b`:     `"a\\b"`,
		"tab\tnl": `"tab\tnl"`,
	} {
		assert.Equal(t, want, quoteConf(in), "quoteConf(%q)", in)
	}
}

func TestComposeConfigMatchesNodes(t *testing.T) {
	b, err := os.ReadFile("../docker/redis-node.conf")
	require.NoError(t, err)
	var compose []string
	for line := range strings.Lines(string(b)) {
		if line = strings.TrimSpace(line); line != "" && !strings.HasPrefix(line, "#") {
			compose = append(compose, line)
		}
	}
	var ours []string
	for line := range strings.Lines(nodeConfig{Dir: "/data", Cluster: true}.file()) {
		if !strings.HasPrefix(line, "port ") {
			ours = append(ours, strings.TrimSpace(line))
		}
	}
	assert.ElementsMatch(t, ours, compose, "docker/redis-node.conf must configure nodes as localcluster does")
}
