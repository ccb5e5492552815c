// The tests here run against a real PostgreSQL (a throwaway server from
// pgserver) and a real six-node Redis Cluster (localcluster, on the backend
// the environment picks). Without either they skip loudly, except with
// CI=true, where they fail.
package pgorders_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/batchlock/batchlock/batchlock"
	"github.com/batchlock/batchlock/examples/pgorders"
	"github.com/batchlock/batchlock/examples/pgserver"
	"github.com/batchlock/batchlock/localcluster"
	"github.com/batchlock/batchlock/orders"
)

// startTimeout covers building the docker image of the cluster on first use.
const startTimeout = 3 * time.Minute

var shared struct {
	pgOnce  sync.Once
	pg      *pgserver.Server
	pgErr   error
	rdOnce  sync.Once
	cluster *localcluster.Cluster
	rdErr   error
}

func TestMain(m *testing.M) {
	// Dial errors while a cluster starts would bury a failure's output.
	redis.SetLogger(quietRedis{})
	code := m.Run()
	if shared.cluster != nil {
		if err := shared.cluster.Close(); err != nil {
			fmt.Fprintf(os.Stderr, "pgorders: closing the cluster: %v\n", err)
			code = 1
		}
	}
	if shared.pg != nil {
		if err := shared.pg.Close(); err != nil {
			fmt.Fprintf(os.Stderr, "pgorders: closing PostgreSQL: %v\n", err)
			code = 1
		}
	}
	if err := findLeaks(5 * time.Second); err != nil {
		fmt.Fprintf(os.Stderr, "pgorders: goroutines leaked: %v\n", err)
		code = 1
	}
	os.Exit(code)
}

// findLeaks reports goroutines still running once every client and pool is
// closed, giving those that wind down on their own some time.
func findLeaks(patience time.Duration) error {
	deadline := time.Now().Add(patience)
	for {
		err := goleak.Find()
		if err == nil || time.Now().After(deadline) {
			return err
		}
	}
}

type quietRedis struct{}

func (quietRedis) Printf(context.Context, string, ...any) {}

// unavailable skips the test, or fails it under CI, where a missing server
// must never pass silently.
func unavailable(tb testing.TB, what string, err error) {
	tb.Helper()
	if os.Getenv("CI") == "true" {
		tb.Fatalf("no %s (CI=true, so this fails): %v", what, err)
	}
	tb.Skipf("SKIPPED, no %s: %v", what, err)
}

func postgres(tb testing.TB) *pgserver.Server {
	tb.Helper()
	shared.pgOnce.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
		defer cancel()
		shared.pg, shared.pgErr = pgserver.Start(ctx)
	})
	if shared.pgErr != nil {
		unavailable(tb, "PostgreSQL", shared.pgErr)
	}
	return shared.pg
}

func cluster(tb testing.TB) *localcluster.Cluster {
	tb.Helper()
	shared.rdOnce.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
		defer cancel()
		shared.cluster, shared.rdErr = localcluster.Start(ctx)
	})
	if shared.rdErr != nil {
		unavailable(tb, "Redis Cluster", shared.rdErr)
	}
	return shared.cluster
}

// fixture is one test's database, stock and lock client.
type fixture struct {
	db     *pgxpool.Pool
	store  *pgorders.Store
	locker *batchlock.Client
}

// newFixture creates a database of the test's own with skus SKUs of units
// each, and a lock client on the shared cluster with opts.
func newFixture(t *testing.T, skus int, units int64, opts ...batchlock.Option) *fixture {
	t.Helper()
	pg, c := postgres(t), cluster(t)
	id := make([]byte, 4)
	_, _ = rand.Read(id)
	run := hex.EncodeToString(id)
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	url, err := pg.CreateDatabase(ctx, "test_"+run)
	require.NoError(t, err)
	cfg, err := pgxpool.ParseConfig(url)
	require.NoError(t, err)
	// A connection per worker: an order waiting for one would spend its
	// lease (the default pool has four).
	cfg.MaxConns = 16
	db, err := pgxpool.NewWithConfig(ctx, cfg)
	require.NoError(t, err)
	t.Cleanup(db.Close)
	store := pgorders.NewStore(db, "pgorders-test:"+run+":")
	require.NoError(t, store.Setup(ctx, orders.Catalogue(skus), units))

	rdb := c.Client()
	t.Cleanup(func() { _ = rdb.Close() })
	locker, err := batchlock.New(rdb, opts...)
	require.NoError(t, err)
	t.Cleanup(func() { _ = locker.Close() })
	return &fixture{db: db, store: store, locker: locker}
}

// stockRow is a stock row as the database holds it.
type stockRow struct{ units, fence, writes int64 }

func (f *fixture) row(t *testing.T, sku string) stockRow {
	t.Helper()
	var r stockRow
	require.NoError(t, f.db.QueryRow(t.Context(), `SELECT units, fence, writes FROM stock WHERE sku = $1`, sku).
		Scan(&r.units, &r.fence, &r.writes))
	return r
}

func (f *fixture) count(t *testing.T, table string) int {
	t.Helper()
	var n int
	require.NoError(t, f.db.QueryRow(t.Context(), `SELECT count(*) FROM `+table).Scan(&n))
	return n
}

// resultOf is what a run that accepted exactly these orders returns, for
// the audit.
func resultOf(accepted ...orders.Order) orders.Result {
	res := orders.Result{Accepted: len(accepted), SoldBySKU: map[string]int64{}}
	for _, o := range accepted {
		for _, l := range o.Lines {
			res.SoldBySKU[l.SKU] += l.Qty
		}
	}
	return res
}

func tokens(l *batchlock.Lock, s *pgorders.Store, o orders.Order) []int64 {
	out := make([]int64, len(o.Lines))
	for i, line := range o.Lines {
		out[i] = l.Token(s.Key(line.SKU))
	}
	return out
}
