package batchlock

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// ClockBound is how far apart the masters' clocks (TIME, less half the
// round trip) may be for Check to pass: leases are measured by each master's
// clock, and the watchdog keeps a sixth of a lease in hand.
const ClockBound = 500 * time.Millisecond

// The checks Preflight runs, as CheckResult.Check names them.
const (
	CheckVersion  = "redis version"
	CheckScripts  = "cross-slot scripts"
	CheckPubSub   = "sharded pub/sub"
	CheckEviction = "maxmemory-policy"
	// CheckClientEviction warns when the server may evict the Client's
	// connections (maxmemory-clients set, CLIENT NO-EVICT off): a waiter
	// would miss its hand-off until it polls.
	CheckClientEviction = "client eviction"
	CheckState          = "cluster state"
	CheckReplicas       = "replicas online"
	// CheckDurability warns when a restart of the master can take its
	// fencing counters back (appendonly no), so that tokens repeat.
	CheckDurability = "fence durability"
	CheckClocks     = "clocks"
	CheckClientOpts = "client settings"
)

// CheckResult is one check of Preflight: on one master, or on the client
// (Node empty). Err is nil when it passed, and names the setting otherwise.
// Warning marks an Err that is a risk to know of rather than a fault: Check
// passes it.
type CheckResult struct {
	Check   string
	Node    string
	Err     error
	Warning bool
}

// Check runs Preflight and returns nil when every check passed or only
// warned, or every problem joined in one error, each naming its node and
// setting. It sends
// only reads, a script that reads two keys and a message on a channel of
// the Client's prefix; an operator's tool or a readiness probe.
func (c *Client) Check(ctx context.Context) error {
	var errs []error
	for _, r := range c.Preflight(ctx) {
		if r.Err != nil && !r.Warning {
			if r.Node != "" {
				errs = append(errs, fmt.Errorf("batchlock: check: %s: %s: %w", r.Node, r.Check, inner(r.Err)))
			} else {
				errs = append(errs, fmt.Errorf("batchlock: check: %s: %w", r.Check, inner(r.Err)))
			}
		}
	}
	return errors.Join(errs...)
}

// Preflight checks, on every master, what batchlock relies on: Redis 7.0 or
// newer; a script touching keys of two slots with no key declared
// (allow-cross-slot-keys) and SPUBLISH work; maxmemory-policy is noeviction
// (a volatile-* policy evicts lock keys, which have a TTL; an allkeys-* one
// fencing counters too, which restarts tokens); the cluster state is ok;
// each master has at least the replicas online that the Client's
// WithReplicas default asks for; the masters' clocks agree within
// ClockBound. And on the client: no go-redis per-node retries (MaxRetries),
// which would stack on batchlock's own past a call's context, and
// ContextTimeoutEnabled on, without which a call outlives its context. On a
// single node, the cluster state check fails when the node is a cluster
// node (a *redis.Client pointed at one node of a cluster). Two checks only
// warn: client eviction (maxmemory-clients set while the Client's
// connections are not kept from it: see NoEvictOnConnect) and fence
// durability (appendonly no: a master that restarts comes back without its
// fencing counters, or with a snapshot's, and its replicas resync from it
// unless one took over first). It returns one
// result per check and master: the masters by address, each with its checks
// in that order, then the clocks, then the client's settings. The client
// checked is this Client's go-redis client. On a closed Client it returns
// one result, whose Err is ErrClosed.
func (c *Client) Preflight(ctx context.Context) []CheckResult {
	ctx, end, err := c.begin(ctx)
	if err != nil {
		return []CheckResult{{Check: CheckClientOpts, Err: err}}
	}
	defer end()
	type clock struct {
		node   string
		offset time.Duration
	}
	var (
		mu     sync.Mutex
		byNode = map[string][]CheckResult{}
		clocks []clock
	)
	check := func(node *redis.Client) error {
		addr := node.Options().Addr
		var results []CheckResult
		add := func(name string, err error) {
			results = append(results, CheckResult{Check: name, Node: addr, Err: err})
		}
		warn := func(name string, err error) {
			results = append(results, CheckResult{Check: name, Node: addr, Err: err, Warning: err != nil})
		}
		tags := c.slotTags(ctx, addr)
		config, configErr := readConfig(ctx, node)
		add(CheckVersion, checkVersion(ctx, node))
		add(CheckScripts, c.checkScripts(ctx, node, tags))
		add(CheckPubSub, node.SPublish(ctx, c.names.CheckKey(tags[0]), "check").Err())
		add(CheckEviction, or(configErr, func() error { return checkEviction(config) }))
		warn(CheckClientEviction, or(configErr, func() error { return checkClientEviction(ctx, node, config) }))
		add(CheckState, checkState(ctx, node, c.deployment.isCluster()))
		add(CheckReplicas, checkReplicas(ctx, node, c.cfg.ack.Replicas))
		warn(CheckDurability, or(configErr, func() error { return checkDurability(config) }))
		sent := time.Now()
		now, err := node.Time(ctx).Result()
		if err != nil {
			add(CheckClocks, err)
		}
		rtt := time.Since(sent)
		mu.Lock()
		defer mu.Unlock()
		byNode[addr] = results
		if err == nil {
			clocks = append(clocks, clock{addr, now.Sub(sent.Add(rtt / 2))})
		}
		return nil
	}
	reached := c.deployment.forEachMaster(ctx, func(ctx context.Context, node *redis.Client) error { return check(node) })
	var results []CheckResult
	for _, addr := range slices.Sorted(maps.Keys(byNode)) {
		results = append(results, byNode[addr]...)
	}
	if reached != nil {
		results = append(results, CheckResult{Check: CheckState, Err: fmt.Errorf("reaching every master: %w", reached)})
	}
	slices.SortFunc(clocks, func(a, b clock) int { return strings.Compare(a.node, b.node) })
	if len(clocks) > 0 {
		first, last := clocks[0], clocks[0]
		for _, k := range clocks {
			if k.offset < first.offset {
				first = k
			}
			if k.offset > last.offset {
				last = k
			}
		}
		var err error
		if spread := last.offset - first.offset; spread > ClockBound {
			err = fmt.Errorf("%s is %v ahead of %s (at most %v)", last.node, spread.Round(time.Millisecond), first.node, ClockBound)
		}
		results = append(results, CheckResult{Check: CheckClocks, Err: err})
	}
	return append(results, CheckResult{Check: CheckClientOpts, Err: c.checkClientOptions()})
}
