package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"

	"github.com/batchlock/batchlock/batchlock"
	"github.com/batchlock/batchlock/internal/wire"
)

// connectTimeout bounds the first contact with a cluster.
const connectTimeout = 2 * time.Second

// The environment variables that give the seeds when --addrs is not given
// (as the test harness, localcluster, reads them), and the lock key prefix
// when --prefix is not given.
const (
	EnvClusterAddrs = "BATCHLOCK_CLUSTER_ADDRS"
	envPrefix       = "BATCHLOCK_PREFIX"
)

// ClusterFlags are the flags of a command that works on the locks of a
// running cluster: --addrs and --prefix.
type ClusterFlags struct {
	addrs  string
	prefix prefixFlag
}

// Define defines --addrs and --prefix on fs.
func (f *ClusterFlags) Define(fs *flag.FlagSet) {
	fs.StringVar(&f.addrs, "addrs", "", "cluster seeds, comma-separated (default $"+EnvClusterAddrs+")")
	fs.Var(&f.prefix, "prefix", "lock key `prefix`, as given to batchlock.WithPrefix (default $"+envPrefix+", else "+string(wire.DefaultPrefix)+")")
}

// Open returns a batchlock Client, with the prefix and opts, on the
// cluster, as openLocks does, and what closes it and its cluster client.
func (f *ClusterFlags) Open(ctx context.Context, opts ...batchlock.Option) (*batchlock.Client, func() error, error) {
	prefix, from := f.prefix.resolve()
	locks, closeAll, err := openLocks(ctx, f.addrs, prefix, opts...)
	var ue *UsageError
	if from != "" && errors.As(err, &ue) && errors.Is(err, batchlock.ErrInvalid) {
		return nil, nil, Usagef("%s: %s", from, ue.Msg)
	}
	return locks, closeAll, err
}

// Prefix is the lock key prefix the flags say (see prefixFlag).
func (f *ClusterFlags) Prefix() string {
	prefix, _ := f.prefix.resolve()
	return prefix
}

// prefixFlag is --prefix: given (even empty), it wins; else
// $BATCHLOCK_PREFIX, when set and not empty; else batchlock's default, "batchlock:".
type prefixFlag struct {
	value string
	set   bool
}

func (p *prefixFlag) String() string { return p.value }

func (p *prefixFlag) Set(s string) error {
	p.value, p.set = s, true
	return nil
}

// resolve returns the prefix, and "$BATCHLOCK_PREFIX" when it comes from
// there.
func (p *prefixFlag) resolve() (prefix, from string) {
	if p.set {
		return p.value, ""
	}
	if env := os.Getenv(envPrefix); env != "" {
		return env, "$" + envPrefix
	}
	return string(wire.DefaultPrefix), ""
}

// parseAddrs splits a comma-separated list of host:port seeds.
func parseAddrs(list string) ([]string, error) {
	var addrs []string
	for a := range strings.SplitSeq(list, ",") {
		a = strings.TrimSpace(a)
		if a == "" {
			continue
		}
		host, port, err := net.SplitHostPort(a)
		if err != nil {
			return nil, Usagef("bad address %q: want host:port, such as 127.0.0.1:7000", a)
		}
		if host == "" {
			return nil, Usagef("bad address %q: no host", a)
		}
		if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
			return nil, Usagef("bad address %q: port %q is not a number from 1 to 65535", a, port)
		}
		addrs = append(addrs, a)
	}
	if len(addrs) == 0 {
		return nil, Usagef("no address in %q: want host:port[,host:port...]", list)
	}
	return addrs, nil
}

// RequireLoopback refuses addresses that are not this machine's: the demo
// writes thousands of keys and is meant for a local cluster.
func RequireLoopback(addrs []string) error {
	for _, a := range addrs {
		host, _, _ := net.SplitHostPort(a)
		if host == "localhost" {
			continue
		}
		if ip := net.ParseIP(host); ip == nil || !ip.IsLoopback() {
			return Usagef("%s is not a loopback address: the demo only runs against a cluster on this machine (127.0.0.1, ::1, localhost)", a)
		}
	}
	return nil
}

// AddrsFromFlagOrEnv returns the --addrs seeds, else those of
// $BATCHLOCK_CLUSTER_ADDRS.
func AddrsFromFlagOrEnv(flagValue string) ([]string, error) {
	if flagValue != "" {
		return parseAddrs(flagValue)
	}
	if env := os.Getenv(EnvClusterAddrs); env != "" {
		addrs, err := parseAddrs(env)
		if err != nil {
			return nil, Usagef("$%s: %s", EnvClusterAddrs, err)
		}
		return addrs, nil
	}
	return nil, Usagef("no cluster: pass --addrs host:port[,host:port...] or set $%s", EnvClusterAddrs)
}

// Connect returns a client of the cluster at addrs once a seed and every
// master answer.
func Connect(ctx context.Context, addrs []string) (*redis.ClusterClient, error) {
	rdb := redis.NewClusterClient(batchlock.ClusterOptions(addrs...))
	if err := reach(ctx, addrs, rdb); err != nil {
		return nil, errors.Join(err, rdb.Close())
	}
	return rdb, nil
}

// reach returns once a seed and every master of rdb answer, or says which
// could not be reached.
func reach(ctx context.Context, addrs []string, rdb *redis.ClusterClient) error {
	if err := probeSeeds(ctx, addrs); err != nil {
		return fmt.Errorf("cannot reach Redis Cluster at %s: %w", strings.Join(addrs, ","), err)
	}
	if err := Ping(ctx, rdb); err != nil {
		return fmt.Errorf("cannot reach every master of the Redis Cluster at %s: %w", strings.Join(addrs, ","), err)
	}
	return nil
}

// probeSeeds asks each seed, once and without retries, whether it is a
// cluster node, until one is: a cluster client would retry until its
// deadline and report only that, not why.
func probeSeeds(ctx context.Context, addrs []string) error {
	ctx, cancel := context.WithTimeout(ctx, connectTimeout)
	defer cancel()
	var errs []error
	for _, a := range addrs {
		c := redis.NewClient(&redis.Options{
			Addr:                     a,
			DialTimeout:              connectTimeout,
			ReadTimeout:              connectTimeout,
			ContextTimeoutEnabled:    true,
			MaxRetries:               -1,
			DialerRetries:            1,
			DisableIdentity:          true,
			MaintNotificationsConfig: &maintnotifications.Config{Mode: maintnotifications.ModeDisabled},
		})
		err := c.ClusterInfo(ctx).Err()
		_ = c.Close()
		if err == nil {
			return nil
		}
		if strings.Contains(err.Error(), "cluster support disabled") {
			err = fmt.Errorf("%s is a Redis server without cluster mode: %w", a, err)
		}
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// Ping checks that every master answers, within connectTimeout.
func Ping(ctx context.Context, rdb *redis.ClusterClient) error {
	ctx, cancel := context.WithTimeout(ctx, connectTimeout)
	defer cancel()
	return rdb.ForEachMaster(ctx, func(ctx context.Context, node *redis.Client) error {
		return node.Ping(ctx).Err()
	})
}

// openLocks returns a batchlock Client, with prefix, on the cluster at the
// seeds of --addrs or $BATCHLOCK_CLUSTER_ADDRS, once a seed and every master
// answer. A missing seed, or a prefix batchlock refuses, is a usage error
// found before anything is sent.
func openLocks(ctx context.Context, addrsFlag, prefix string, opts ...batchlock.Option) (*batchlock.Client, func() error, error) {
	addrs, err := AddrsFromFlagOrEnv(addrsFlag)
	if err != nil {
		return nil, nil, err
	}
	rdb := redis.NewClusterClient(batchlock.ClusterOptions(addrs...)) // connects on first use
	locks, err := batchlock.New(rdb, append([]batchlock.Option{batchlock.WithPrefix(prefix)}, opts...)...)
	if err != nil {
		return nil, nil, errors.Join(&UsageError{Msg: err.Error(), Err: err}, rdb.Close())
	}
	closeAll := func() error { return errors.Join(locks.Close(), rdb.Close()) }
	if err := reach(ctx, addrs, rdb); err != nil {
		return nil, nil, errors.Join(err, closeAll())
	}
	return locks, closeAll, nil
}
