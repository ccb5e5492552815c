package batchlock

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/batchlock/batchlock/hashtag"
	"github.com/batchlock/batchlock/internal/script"
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
				errs = append(errs, onePrefix(fmt.Errorf("batchlock: check: %s: %s: %w", r.Node, r.Check, r.Err)))
			} else {
				errs = append(errs, onePrefix(fmt.Errorf("batchlock: check: %s: %w", r.Check, r.Err)))
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
// checked is this Client's go-redis client.
func (c *Client) Preflight(ctx context.Context) []CheckResult {
	if err := checkContext(ctx); err != nil {
		return []CheckResult{{Check: CheckClientOpts, Err: err}}
	}
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
		add(CheckPubSub, node.SPublish(ctx, c.cfg.prefix+"check:{"+tags[0]+"}", "check").Err())
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

func checkVersion(ctx context.Context, node *redis.Client) error {
	info, err := node.Info(ctx, "server").Result()
	if err != nil {
		return err
	}
	version := infoField(info, "redis_version")
	major, _, _ := strings.Cut(version, ".")
	if n, err := strconv.Atoi(major); err != nil || n < 7 {
		return fmt.Errorf("redis_version %q: batchlock needs 7.0 or newer (script flags, sharded pub/sub)", version)
	}
	return nil
}

// checkScripts runs, with no key declared as batchlock's scripts do, a
// script that reads a key in each of two slots the node serves.
func (c *Client) checkScripts(ctx context.Context, node *redis.Client, tags [2]string) error {
	keys := []any{c.cfg.prefix + "check:{" + tags[0] + "}", c.cfg.prefix + "check:{" + tags[1] + "}"}
	n, err := node.Eval(ctx, shebang+"return redis.call('EXISTS', ARGV[1]) + redis.call('EXISTS', ARGV[2])", nil, keys...).Int()
	if err != nil {
		return err
	}
	if n != 0 {
		return fmt.Errorf("the check keys %v exist", keys)
	}
	return nil
}

// slotTags returns the hash tags of two slots that the master at addr
// serves, found in one pass over the slots; on one node, of slots 0 and 1.
func (c *Client) slotTags(ctx context.Context, addr string) [2]string {
	tags := [2]string{hashtag.ForSlot(0), hashtag.ForSlot(1)}
	if !c.deployment.isCluster() {
		return tags
	}
	found := 0
	for slot := 0; slot < hashtag.SlotCount && found < len(tags); slot++ {
		tag := hashtag.ForSlot(slot)
		if node, err := c.deployment.masterOf(ctx, "{"+tag+"}"); err == nil && node.Options().Addr == addr {
			tags[found] = tag
			found++
		}
	}
	return tags
}

// checkedConfig are the settings the checks read, in one CONFIG GET.
var checkedConfig = []any{"CONFIG", "GET", "maxmemory-policy", "maxmemory-clients", "appendonly"}

// readConfig reads checkedConfig from node; its error is each check's that
// needs a setting.
func readConfig(ctx context.Context, node *redis.Client) (map[string]string, error) {
	cmd := redis.NewMapStringStringCmd(ctx, checkedConfig...)
	if err := node.Process(ctx, cmd); err != nil {
		return nil, fmt.Errorf("reading it: %w", err)
	}
	return cmd.Val(), nil
}

// or is err when it is set, else check's verdict.
func or(err error, check func() error) error {
	if err != nil {
		return err
	}
	return check()
}

func checkEviction(config map[string]string) error {
	switch policy := config["maxmemory-policy"]; {
	case policy == "noeviction":
		return nil
	case strings.HasPrefix(policy, "volatile-"):
		return fmt.Errorf("%q evicts lock keys, which have a TTL: set noeviction", policy)
	default:
		return fmt.Errorf("%q evicts lock keys and fencing counters (tokens restart): set noeviction", policy)
	}
}

// checkClientEviction warns when the server may evict node's connections:
// maxmemory-clients is set and a connection of node's pool (so of the
// Client's, made with the same OnConnect) is not kept from it.
func checkClientEviction(ctx context.Context, node *redis.Client, config map[string]string) error {
	limit := config["maxmemory-clients"]
	if limit == "" || limit == "0" {
		return nil
	}
	info, err := node.ClientInfo(ctx).Result()
	if err != nil {
		return err
	}
	if info.Flags&redis.ClientNoEvict != 0 {
		return nil
	}
	return fmt.Errorf("maxmemory-clients %s may evict the connections waiters listen on: set OnConnect to batchlock.NoEvictOnConnect (ClusterOptions does)", limit)
}

// checkDurability warns when a restart can take node's fencing counters
// back: without the append-only file, a restarted master holds what its
// last snapshot had, or nothing.
func checkDurability(config map[string]string) error {
	if config["appendonly"] != "no" {
		return nil
	}
	return errors.New("appendonly no: a master restarted before a replica takes over comes back without the fencing counters' latest values (and its replicas resync from it), so tokens repeat; set appendonly yes, or never restart a master in place")
}

// checkState checks, on a cluster, that the cluster state is ok, and on a
// single node that it is not a cluster node (every lock would fail on it).
func checkState(ctx context.Context, node *redis.Client, cluster bool) error {
	if !cluster {
		info, err := node.Info(ctx, "cluster").Result()
		if err != nil {
			return err
		}
		if infoField(info, "cluster_enabled") == "1" {
			return fmt.Errorf("cluster_enabled:1 behind a *redis.Client: every lock would fail; %w", script.ErrClusterNode)
		}
		return nil
	}
	info, err := node.ClusterInfo(ctx).Result()
	if err != nil {
		return err
	}
	if state := infoField(info, "cluster_state"); state != "ok" {
		return fmt.Errorf("cluster_state:%s", state)
	}
	return nil
}

// checkReplicas counts the replicas online of the master node against
// want, the Client's WithReplicas default.
func checkReplicas(ctx context.Context, node *redis.Client, want int) error {
	info, err := node.Info(ctx, "replication").Result()
	if err != nil {
		return err
	}
	online := 0
	for line := range strings.SplitSeq(info, "\n") {
		if strings.HasPrefix(line, "slave") && strings.Contains(line, "state=online") {
			online++
		}
	}
	if online < want {
		return fmt.Errorf("%d online, WithReplicas asks for %d: every lock on this master would fail with ErrNoReplicas", online, want)
	}
	return nil
}

func (c *Client) checkClientOptions() error {
	retries, timeouts := c.deployment.settings()
	var errs []error
	if retries > 0 {
		errs = append(errs, fmt.Errorf("MaxRetries %d: go-redis's retries stack on batchlock's own; leave it unset on a ClusterClient, -1 on a Client", retries))
	}
	if !timeouts {
		errs = append(errs, errors.New("ContextTimeoutEnabled is off: a call waits for its reply past its context (see ClusterOptions)"))
	}
	return errors.Join(errs...)
}

// infoField returns the value of name in an INFO reply.
func infoField(info, name string) string {
	for line := range strings.SplitSeq(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), name+":"); ok {
			return v
		}
	}
	return ""
}
