package cluster_test

import (
	"context"
	"fmt"
	"net"
	"strings"
	"sync"
	"testing"

	"github.com/Shopify/toxiproxy/v2"
	"github.com/redis/go-redis/v9"
	"github.com/rs/zerolog"
)

// clientNet is one test client's own network to the cluster: a TCP proxy
// (toxiproxy, in this process) per node, and a go-redis Dialer that sends
// every connection to a node through that node's proxy. Its faults touch
// this client alone: a partition between it and one master leaves the other
// clients and the cluster's own links (bus, replication) as they are. A
// proxy is made on the first dial of a node, so nodes promoted or learned
// later are covered too.
type clientNet struct {
	server *toxiproxy.ApiServer
	dialer net.Dialer

	mu      sync.Mutex
	proxies map[string]*toxiproxy.Proxy // by node address
	closed  bool
}

func newClientNet(tb testing.TB) *clientNet {
	tb.Helper()
	zerolog.SetGlobalLevel(zerolog.Disabled) // the bandwidth toxic logs through the global logger
	n := &clientNet{
		server:  toxiproxy.NewServer(toxiproxy.NewMetricsContainer(nil), zerolog.Nop()),
		proxies: map[string]*toxiproxy.Proxy{},
	}
	tb.Cleanup(n.close)
	return n
}

// options returns opts, its dials sent through n.
func (n *clientNet) options(opts *redis.ClusterOptions) *redis.ClusterOptions {
	opts.Dialer = n.dial
	return opts
}

func (n *clientNet) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	p, err := n.proxy(addr)
	if err != nil {
		return nil, err
	}
	return n.dialer.DialContext(ctx, network, p.Listen)
}

// proxy returns the proxy of the node at addr, made and started on first use.
// Only loopback nodes are proxied.
func (n *clientNet) proxy(addr string) (*toxiproxy.Proxy, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.closed {
		return nil, fmt.Errorf("clientNet: closed")
	}
	if p := n.proxies[addr]; p != nil {
		return p, nil
	}
	if !strings.HasPrefix(addr, "127.0.0.1:") {
		return nil, fmt.Errorf("clientNet: %s is not a loopback address", addr)
	}
	p := toxiproxy.NewProxy(n.server, "node-"+addr, "127.0.0.1:0", addr)
	if err := n.server.Collection.Add(p, true); err != nil {
		return nil, err
	}
	n.proxies[addr] = p
	return p, nil
}

// Link faults, as toxics on one node's proxy. Upstream is from the client to
// the node, downstream back.
const (
	upstream   = "upstream"
	downstream = "downstream"
)

// cut drops what flows one way (stream) on the link to addr, keeping the
// connections open: with both streams, a partition; downstream alone, a
// half-open link whose requests run but whose replies never come. heal
// removes it (the proxy then closes the connections it held).
func (n *clientNet) cut(addr string, streams ...string) (heal func(), err error) {
	var toxics []string
	for _, stream := range streams {
		name := "cut-" + stream
		toxics = append(toxics, name)
		if err := n.addToxic(addr, name, "timeout", stream, `{"timeout":0}`); err != nil {
			return nil, err
		}
	}
	return func() { n.removeToxics(addr, toxics...) }, nil
}

// slow adds latency (ms) to every reply from addr, or limits its rate
// (KB/s) when kind is "bandwidth".
func (n *clientNet) slow(addr, kind string, amount int) (heal func(), err error) {
	attrs := fmt.Sprintf(`{"latency":%d}`, amount)
	if kind == "bandwidth" {
		attrs = fmt.Sprintf(`{"rate":%d}`, amount)
	}
	if err := n.addToxic(addr, kind, kind, downstream, attrs); err != nil {
		return nil, err
	}
	return func() { n.removeToxics(addr, kind) }, nil
}

func (n *clientNet) addToxic(addr, name, kind, stream, attributes string) error {
	p, err := n.proxy(addr)
	if err != nil {
		return err
	}
	_, err = p.Toxics.AddToxicJson(strings.NewReader(fmt.Sprintf(
		`{"name":%q,"type":%q,"stream":%q,"toxicity":1,"attributes":%s}`, name, kind, stream, attributes)))
	return err
}

func (n *clientNet) removeToxics(addr string, names ...string) {
	p, err := n.proxy(addr)
	if err != nil {
		return
	}
	for _, name := range names {
		_ = p.Toxics.RemoveToxic(context.Background(), name)
	}
}

func (n *clientNet) close() {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.closed = true
	_ = n.server.Collection.Clear()
}
