package routing

import (
	"context"
	"errors"
	"sync"

	"github.com/redis/go-redis/v9"
)

// nodes finds the client of a node by its address, for the calls that go
// where a redirection pointed: the cluster client's own node clients, known
// from its map of slots, which is read again only when an address is not in
// it; and, for a node the map does not list (a master that serves no slot
// yet, as the target of a first migration to it), a client of its own,
// opened with the cluster client's settings and closed by close. Once
// closed, it opens none: a call that follows a redirection to such a node
// then fails with errNodesClosed.
type nodes struct {
	rdb *redis.ClusterClient
	// shards calls fn with each of the cluster client's master clients.
	shards func(ctx context.Context, fn func(context.Context, *redis.Client) error) error

	mu     sync.Mutex
	known  map[string]*redis.Client // the cluster client's node clients
	own    map[string]*redis.Client // opened here
	closed bool
}

// errNodesClosed says that a call after Close was redirected to a node the
// cluster client does not list: no client is opened for it any more.
var errNodesClosed = errors.New("closed: no connection is opened to a node the cluster's map does not list")

func (n *nodes) at(ctx context.Context, addr string) (*redis.Client, error) {
	n.mu.Lock()
	node := n.known[addr]
	if node == nil {
		node = n.own[addr]
	}
	n.mu.Unlock()
	if node != nil {
		return node, nil
	}
	found := map[string]*redis.Client{}
	var mu sync.Mutex
	if err := n.shards(ctx, func(_ context.Context, c *redis.Client) error {
		mu.Lock()
		found[c.Options().Addr] = c
		mu.Unlock()
		return nil
	}); err != nil {
		return nil, err
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	n.known = found
	if node := found[addr]; node != nil {
		return node, nil
	}
	if n.closed {
		return nil, errNodesClosed
	}
	if n.own == nil {
		n.own = map[string]*redis.Client{}
	}
	if node := n.own[addr]; node != nil {
		return node, nil
	}
	node = redis.NewClient(NodeOptions(n.rdb.Options(), addr))
	n.own[addr] = node
	return node, nil
}

// close closes the clients opened here.
func (n *nodes) close() error {
	n.mu.Lock()
	defer n.mu.Unlock()
	var errs []error
	for _, c := range n.own {
		errs = append(errs, c.Close())
	}
	n.own = nil
	n.closed = true
	return errors.Join(errs...)
}

// NodeOptions are the settings of a client of the node at addr, taken from
// the cluster client's, without retries of its own (batchlock retries).
func NodeOptions(opt *redis.ClusterOptions, addr string) *redis.Options {
	return &redis.Options{
		Addr:                         addr,
		ClientName:                   opt.ClientName,
		Dialer:                       opt.Dialer,
		OnConnect:                    opt.OnConnect,
		Protocol:                     opt.Protocol,
		Username:                     opt.Username,
		Password:                     opt.Password,
		CredentialsProvider:          opt.CredentialsProvider,
		CredentialsProviderContext:   opt.CredentialsProviderContext,
		StreamingCredentialsProvider: opt.StreamingCredentialsProvider,
		MaxRetries:                   -1,
		DialTimeout:                  opt.DialTimeout,
		ReadTimeout:                  opt.ReadTimeout,
		WriteTimeout:                 opt.WriteTimeout,
		ContextTimeoutEnabled:        opt.ContextTimeoutEnabled,
		PoolSize:                     opt.PoolSize,
		PoolTimeout:                  opt.PoolTimeout,
		TLSConfig:                    opt.TLSConfig,
		DisableIdentity:              opt.DisableIdentity,
		IdentitySuffix:               opt.IdentitySuffix,
	}
}
