package redlock

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/redis/go-redis/v9"

	"github.com/batchlock/batchlock/batchlock"
	"github.com/batchlock/batchlock/internal/lifetime"
)

// Client takes batch locks on a majority of independent deployments, through
// one batchlock Client per deployment. It is safe for concurrent use. Close
// it when done.
type Client struct {
	clients []*batchlock.Client
	cfg     config

	// late counts requests still running after their attempt gave up on
	// them (a frozen node), so that Close can wait for them.
	late lifetime.Calls
}

// New returns a Client that locks on the deployments rdbs: each a
// *redis.Client (a single node, or a Sentinel failover client) or a
// *redis.ClusterClient. They must be independent — a deployment given twice,
// or two clients of one server, would count twice towards a majority. An odd
// number is best: an even one tolerates no more failures than one fewer.
// The clients stay the caller's; Close does not close them.
func New(rdbs []redis.UniversalClient, opts ...Option) (*Client, error) {
	cfg := defaultConfig()
	for _, o := range opts {
		o.apply(&cfg)
	}
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	if len(rdbs) == 0 {
		return nil, invalid("no deployment")
	}
	c := &Client{cfg: cfg, clients: make([]*batchlock.Client, 0, len(rdbs))}
	for i, rdb := range rdbs {
		bc, err := batchlock.New(rdb, cfg.clientOpts...)
		if err != nil {
			return nil, errors.Join(fmt.Errorf("redlock: deployment %d: %w", i, err), c.closeClients())
		}
		c.clients = append(c.clients, bc)
		// batchlock.New accepted rdb, so it is a pointer and comparable.
		for j := range i {
			if rdbs[j] == rdb {
				return nil, errors.Join(invalid("deployments %d and %d are the same client", j, i), c.closeClients())
			}
		}
	}
	return c, nil
}

// Close waits for requests still running on slow deployments, then closes
// every deployment's batchlock Client: locks renewed by their watchdogs are
// lost (Done closes), and later calls fail with batchlock.ErrClosed. Unlock
// still works. Close is idempotent.
func (c *Client) Close() error {
	if !c.late.Close() {
		return nil
	}
	c.late.Wait()
	return c.closeClients()
}

func (c *Client) closeClients() error {
	var errs []error
	for _, bc := range c.clients {
		errs = append(errs, bc.Close())
	}
	return errors.Join(errs...)
}

// fanOut calls call for every deployment at once and returns, by deployment,
// what those that answered before ctx ended said; the others fail with ctx's
// cause. A call still running then finishes in the background, and late is
// given what it returned, so that nothing it took is left behind.
func fanOut[T any](ctx context.Context, c *Client, call func(context.Context, int) (T, error), late func(T, error)) ([]T, []error) {
	n := len(c.clients)
	vals, errs := make([]T, n), make([]error, n)
	if !c.late.Enter(n) {
		for i := range errs {
			errs[i] = batchlock.ErrClosed
		}
		return vals, errs
	}
	var (
		mu       sync.Mutex
		gaveUp   bool
		answered = make([]bool, n)
		left     = n
		all      = make(chan struct{})
	)
	for i := range n {
		go func() {
			defer c.late.Leave()
			v, err := call(ctx, i)
			mu.Lock()
			if gaveUp {
				mu.Unlock()
				late(v, err)
				return
			}
			vals[i], errs[i], answered[i] = v, err, true
			if left--; left == 0 {
				close(all)
			}
			mu.Unlock()
		}()
	}
	select {
	case <-all:
	case <-ctx.Done():
	}
	mu.Lock()
	defer mu.Unlock()
	gaveUp = true
	for i, ok := range answered {
		if !ok {
			errs[i] = context.Cause(ctx)
		}
	}
	return vals, errs
}

// each calls call for every non-nil lock at once and waits for all of them.
func each(locks []*batchlock.Lock, call func(int, *batchlock.Lock) error) []error {
	errs := make([]error, len(locks))
	var wg sync.WaitGroup
	for i, l := range locks {
		if l == nil {
			continue
		}
		wg.Go(func() { errs[i] = call(i, l) })
	}
	wg.Wait()
	return errs
}

// releaseAll unlocks every non-nil lock, even when ctx is done.
func releaseAll(ctx context.Context, locks []*batchlock.Lock) {
	ctx, cancel := lifetime.Detached(ctx)
	defer cancel()
	each(locks, func(_ int, l *batchlock.Lock) error { return l.Unlock(ctx) })
}
