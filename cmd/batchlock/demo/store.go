package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"

	"github.com/batchlock/batchlock/batchlock"
	"github.com/batchlock/batchlock/examples/pgorders"
	"github.com/batchlock/batchlock/examples/pgserver"
	"github.com/batchlock/batchlock/orders"
)

// The stores the demo keeps its stock in (--store).
const (
	storeRedis    = "redis"
	storePostgres = "postgres"
)

// stockStore is where a demo run keeps its stock: hashes in the cluster, or
// rows in a throwaway PostgreSQL.
type stockStore interface {
	// locked returns the processor that takes orders under locks of
	// locker.
	locked(locker *batchlock.Client) orders.Processor
	// counted returns the processor that takes each order's lines in
	// units of their SKUs under locks of locker (--counted), every SKU's
	// capacity set from its stock, and the audit of the capacities
	// against the stock left.
	counted(ctx context.Context, locker *batchlock.Client) (orders.Processor, func(context.Context, *orders.Audit) error, error)
	// audit reads the stock back and checks it against the run.
	audit(ctx context.Context, res orders.Result) (orders.Audit, error)
	// describe says where the stock is, for the report.
	describe() string
	close(ctx context.Context) error
}

// openStore sets up the run's stock in the store --store names, under keys
// (and lock keys) starting with prefix.
func openStore(ctx context.Context, stderr io.Writer, o *demoOptions, rdb *redis.ClusterClient, prefix string) (stockStore, error) {
	skus := orders.Catalogue(o.skus)
	if o.store == storePostgres {
		return openPostgres(ctx, stderr, o, skus, prefix)
	}
	stock := orders.NewStock(rdb, prefix, skus, o.stock)
	if o.replicas > 0 {
		stock.RequireReplicas(o.replicas, replicaTimeout)
	}
	if err := stock.Setup(ctx); err != nil {
		return nil, err
	}
	return &redisStore{stock: stock, think: o.think, exclusive: o.exclusive}, nil
}

type redisStore struct {
	stock     *orders.Stock
	think     time.Duration
	exclusive bool // promotions locked exclusively
}

func (s *redisStore) locked(locker *batchlock.Client) orders.Processor {
	return &orders.Locked{Locker: locker, Stock: s.stock, Think: s.think, ExclusivePromos: s.exclusive}
}

func (s *redisStore) counted(ctx context.Context, locker *batchlock.Client) (orders.Processor, func(context.Context, *orders.Audit) error, error) {
	s.stock.WriteConcurrently()
	if err := s.stock.SetCapacities(ctx, locker, ""); err != nil {
		return nil, nil, err
	}
	check := func(ctx context.Context, a *orders.Audit) error { return s.stock.AuditCapacities(ctx, locker, "", a) }
	return &orders.Counted{Locker: locker, Stock: s.stock, Think: s.think}, check, nil
}

func (s *redisStore) audit(ctx context.Context, res orders.Result) (orders.Audit, error) {
	return s.stock.Audit(ctx, res.SoldBySKU)
}

func (s *redisStore) describe() string { return "redis: a hash per SKU in the cluster" }

func (s *redisStore) close(ctx context.Context) error { return s.stock.Cleanup(ctx) }

// postgresStore is a throwaway PostgreSQL server holding the stock.
type postgresStore struct {
	server  *pgserver.Server
	db      *pgxpool.Pool
	store   *pgorders.Store
	think   time.Duration
	version string
}

func openPostgres(ctx context.Context, stderr io.Writer, o *demoOptions, skus []string, prefix string) (*postgresStore, error) {
	began := time.Now()
	fmt.Fprintln(stderr, "starting a throwaway PostgreSQL server...")
	server, err := pgserver.Start(ctx)
	if err != nil {
		return nil, fmt.Errorf("cannot start a throwaway PostgreSQL: %w", err)
	}
	s := &postgresStore{server: server, think: o.think}
	if err := s.setUp(ctx, o, skus, prefix); err != nil {
		return nil, errors.Join(err, s.close(ctx))
	}
	fmt.Fprintf(stderr, "PostgreSQL %s ready in %v\n", s.version, time.Since(began).Round(time.Millisecond))
	return s, nil
}

func (s *postgresStore) setUp(ctx context.Context, o *demoOptions, skus []string, prefix string) error {
	cfg, err := pgxpool.ParseConfig(s.server.URL())
	if err != nil {
		return err
	}
	// A connection per worker: an order that waited for one while holding
	// its lock would spend its lease (pgxpool's default is four).
	cfg.MaxConns = int32(o.workers) + 2
	if s.db, err = pgxpool.NewWithConfig(ctx, cfg); err != nil {
		return fmt.Errorf("connecting to PostgreSQL: %w", err)
	}
	// "15.18 (Debian 15.18-0+deb12u1)": the number says enough.
	if err := s.db.QueryRow(ctx, "SELECT split_part(current_setting('server_version'), ' ', 1)").Scan(&s.version); err != nil {
		return fmt.Errorf("connecting to PostgreSQL: %w", err)
	}
	s.store = pgorders.NewStore(s.db, prefix)
	return s.store.Setup(ctx, skus, o.stock)
}

func (s *postgresStore) locked(locker *batchlock.Client) orders.Processor {
	return s.processor(locker)
}

func (s *postgresStore) counted(ctx context.Context, locker *batchlock.Client) (orders.Processor, func(context.Context, *orders.Audit) error, error) {
	if err := s.store.SetCapacities(ctx, locker); err != nil {
		return nil, nil, err
	}
	p := s.processor(locker)
	p.Counted = true
	check := func(ctx context.Context, a *orders.Audit) error { return s.store.AuditCapacities(ctx, locker, a) }
	return p, check, nil
}

// processor is the run's pgorders.Processor on locker, its think inside
// each order's transaction.
func (s *postgresStore) processor(locker *batchlock.Client) *pgorders.Processor {
	p := &pgorders.Processor{Locker: locker, Store: s.store}
	if s.think > 0 {
		// The work of a real processor between its writes and its commit,
		// inside the transaction.
		p.Work = func(ctx context.Context, _ *batchlock.Lock, _ orders.Order) error {
			select {
			case <-time.After(s.think):
				return nil
			case <-ctx.Done():
				return context.Cause(ctx)
			}
		}
	}
	return p
}

func (s *postgresStore) audit(ctx context.Context, res orders.Result) (orders.Audit, error) {
	return s.store.Audit(ctx, res)
}

func (s *postgresStore) describe() string {
	return fmt.Sprintf("postgresql %s: a row per SKU, throwaway server at %s", s.version, s.server.Addr())
}

// close removes the server, data and all.
func (s *postgresStore) close(context.Context) error {
	if s.db != nil {
		s.db.Close()
	}
	return s.server.Close()
}
