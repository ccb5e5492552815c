package localcluster

import (
	"strconv"
	"strings"
)

// nodeConfig is what differs between nodes; everything else is fixed so
// that both backends behave the same.
type nodeConfig struct {
	Port    int
	Dir     string // where nodes.conf lives; must survive a restart
	LogFile string // "" logs to stdout (docker collects it)
	Cluster bool
}

// directives returns the node's settings in redis.conf order.
func (n nodeConfig) directives() [][2]string {
	d := [][2]string{
		{"port", strconv.Itoa(n.Port)},
		{"bind", "127.0.0.1"},
		{"protected-mode", "no"},
		{"daemonize", "no"},
		{"dir", n.Dir},
		{"logfile", n.LogFile},
		{"appendonly", "no"},
		{"save", ""},
		{"enable-debug-command", "local"},
		{"repl-diskless-sync", "yes"},
		{"repl-diskless-sync-delay", "0"},
		{"repl-ping-replica-period", "1"},
	}
	if n.Cluster {
		d = append(d, [][2]string{
			{"cluster-enabled", "yes"},
			{"cluster-config-file", "nodes.conf"},
			// Fast failure detection, yet slow enough that a loaded
			// two-core machine does not flag healthy nodes.
			{"cluster-node-timeout", "2000"},
			{"cluster-announce-ip", "127.0.0.1"},
			// Keeps master i paired with replica i whatever tests do.
			{"cluster-allow-replica-migration", "no"},
			// Lets a forced failover promote a replica however stale.
			{"cluster-replica-validity-factor", "0"},
		}...)
	}
	return d
}

// file renders a redis.conf.
func (n nodeConfig) file() string {
	var b strings.Builder
	for _, kv := range n.directives() {
		b.WriteString(kv[0])
		b.WriteByte(' ')
		b.WriteString(quoteConf(kv[1]))
		b.WriteByte('\n')
	}
	return b.String()
}

// args renders command-line flags, for images without a shell or a config
// file. redis-server turns an empty argument into "" itself.
func (n nodeConfig) args() []string {
	var a []string
	for _, kv := range n.directives() {
		a = append(a, "--"+kv[0], kv[1])
	}
	return a
}

// quoteConf quotes a value the way redis.conf's parser (sdssplitargs)
// reads it back.
func quoteConf(v string) string {
	if v != "" && !strings.ContainsAny(v, " \t\r\n\"'\\") {
		return v
	}
	var b strings.Builder
	b.WriteByte('"')
	for _, r := range v {
		switch r {
		case '"', '\\':
			b.WriteByte('\\')
			b.WriteRune(r)
		case '\n':
			b.WriteString(`\n`)
		case '\r':
			b.WriteString(`\r`)
		case '\t':
			b.WriteString(`\t`)
		default:
			b.WriteRune(r)
		}
	}
	b.WriteByte('"')
	return b.String()
}
