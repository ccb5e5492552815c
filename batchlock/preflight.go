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
	"github.com/batchlock/batchlock/internal/routing"
	"github.com/batchlock/batchlock/internal/wire"
)

// The checks of Preflight, in the order each master has them, then those
// across the masters and of the client.
const (
	checkVersion        = "server version"
	checkScripts        = "cross-slot scripts"
	checkPubSub         = "sharded pub/sub"
	checkEviction       = "maxmemory-policy"
	checkClientEviction = "client eviction" // a warning
	checkState          = "cluster state"
	checkReplicas       = "replicas online"
	checkDurability     = "fence durability" // a warning
	checkClocks         = "clocks"
	checkOneCluster     = "one cluster" // the seeds', on a cluster
	checkClientOpts     = "client settings"
)

// CheckResult is one check of Preflight: on one master, or across them or
// on the client (Node empty). Err is nil when it passed, and names the
// setting otherwise; Warning marks an Err that is a risk to know of rather
// than a fault, which Check passes.
type CheckResult struct {
	Check   string
	Node    string
	Err     error
	Warning bool
	// Found is what the check read, where it names something: the
	// server and its version ("valkey 8.1.1", "redis 7.0.15").
	Found string
}

// Check runs Preflight and returns nil when every check passed or only
// warned, else every failure joined, each naming its node and check: a
// readiness probe.
func (c *Client) Check(ctx context.Context) error {
	results, err := c.Preflight(ctx)
	if err != nil {
		return err
	}
	var errs []error
	for _, r := range results {
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

// Preflight checks, on every master, what batchlock relies on: "server
// version" (Redis 7.0 or newer, or Valkey), "cross-slot scripts", "sharded
// pub/sub", "maxmemory-policy" noeviction, "client eviction" and "fence
// durability" (warnings), "cluster state", "replicas online" (as
// WithReplicas asks); then "clocks" (within 500ms), "one cluster" (the
// seeds) and "client settings" (go-redis's). It returns a result per check
// and master, by address, or the error that kept it from checking
// (ErrClosed, a bad context). It sends reads, a script reading two keys, a
// message.
func (c *Client) Preflight(ctx context.Context) ([]CheckResult, error) {
	ctx, end, err := c.begin(ctx)
	if err != nil {
		return nil, err
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
		server, err := serverVersion(ctx, node)
		results = append(results, CheckResult{Check: checkVersion, Node: addr, Err: err, Found: server})
		add(checkScripts, c.scriptsOK(ctx, node, tags))
		add(checkPubSub, node.SPublish(ctx, c.names.CheckKey(tags[0]), "check").Err())
		add(checkEviction, or(configErr, func() error { return evictionOK(config) }))
		warn(checkClientEviction, or(configErr, func() error { return clientEvictionOK(ctx, node, config) }))
		add(checkState, stateOK(ctx, node, c.deployment.isCluster()))
		add(checkReplicas, replicasOK(ctx, node, c.cfg.ack.Replicas))
		warn(checkDurability, or(configErr, func() error { return durabilityOK(config) }))
		sent := time.Now()
		now, err := node.Time(ctx).Result()
		if err != nil {
			add(checkClocks, err)
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
		results = append(results, CheckResult{Check: checkState, Err: fmt.Errorf("reaching every master: %w", reached)})
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
		if spread := last.offset - first.offset; spread > clockBound {
			err = fmt.Errorf("%s is %v ahead of %s (at most %v)", last.node, spread.Round(time.Millisecond), first.node, clockBound)
		}
		results = append(results, CheckResult{Check: checkClocks, Err: err})
	}
	if c.deployment.isCluster() {
		results = append(results, CheckResult{Check: checkOneCluster, Err: c.deployment.oneCluster(ctx)})
	}
	return append(results, CheckResult{Check: checkClientOpts, Err: c.clientOptionsOK()}), nil
}

// serverVersion names the node's server and version, and fails below
// Redis 7.0 or what calls itself compatible with it (Valkey's
// redis_version).
func serverVersion(ctx context.Context, node *redis.Client) (string, error) {
	info, err := node.Info(ctx, "server").Result()
	if err != nil {
		return "", err
	}
	compatible := infoField(info, "redis_version")
	server, version := "redis", compatible
	if name := infoField(info, "server_name"); name != "" {
		server = name
		if v := infoField(info, name+"_version"); v != "" {
			version = v
		}
	}
	found := server + " " + version
	major, _, _ := strings.Cut(compatible, ".")
	if n, err := strconv.Atoi(major); err != nil || n < 7 {
		return found, fmt.Errorf("redis_version %q: batchlock needs 7.0 or newer (script flags, sharded pub/sub)", compatible)
	}
	return found, nil
}

// scriptsOK runs, with no key declared as batchlock's scripts do, a
// script that reads a key in each of two slots the node serves.
func (c *Client) scriptsOK(ctx context.Context, node *redis.Client, tags [2]string) error {
	keys := []any{c.names.CheckKey(tags[0]), c.names.CheckKey(tags[1])}
	n, err := node.Eval(ctx, wire.Shebang+"return redis.call('EXISTS', ARGV[1]) + redis.call('EXISTS', ARGV[2])", nil, keys...).Int()
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

func evictionOK(config map[string]string) error {
	switch policy := config["maxmemory-policy"]; {
	case policy == "noeviction":
		return nil
	case strings.HasPrefix(policy, "volatile-"):
		return fmt.Errorf("%q evicts lock keys, which have a TTL: set noeviction", policy)
	default:
		return fmt.Errorf("%q evicts lock keys and fencing counters (tokens restart): set noeviction", policy)
	}
}

// clientEvictionOK warns when the server may evict node's connections:
// maxmemory-clients is set and a connection of node's pool (so of the
// Client's, made with the same OnConnect) is not kept from it.
func clientEvictionOK(ctx context.Context, node *redis.Client, config map[string]string) error {
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
	return fmt.Errorf("maxmemory-clients %s may evict the connections waiters listen on: start from ClusterOptions, whose OnConnect keeps them (CLIENT NO-EVICT on)", limit)
}

// durabilityOK warns when a restart can take node's fencing counters
// back: without the append-only file, a restarted master holds what its
// last snapshot had, or nothing.
func durabilityOK(config map[string]string) error {
	if config["appendonly"] != "no" {
		return nil
	}
	return errors.New("appendonly no: a master restarted before a replica takes over comes back without the fencing counters' latest values (and its replicas resync from it), so tokens repeat; set appendonly yes, or never restart a master in place")
}

// stateOK checks, on a cluster, that the cluster state is ok, and on a
// single node that it is not a cluster node (every lock would fail on it).
func stateOK(ctx context.Context, node *redis.Client, cluster bool) error {
	if !cluster {
		info, err := node.Info(ctx, "cluster").Result()
		if err != nil {
			return err
		}
		if infoField(info, "cluster_enabled") == "1" {
			return fmt.Errorf("cluster_enabled:1 behind a *redis.Client: every lock would fail; %w", routing.ErrClusterNode)
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

// replicasOK counts the replicas online of the master node against
// want, the Client's WithReplicas default.
func replicasOK(ctx context.Context, node *redis.Client, want int) error {
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

func (c *Client) clientOptionsOK() error {
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
