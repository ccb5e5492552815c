# batchlock

Lock many keys at once on Redis Cluster — an order's hundreds of SKUs across every shard — in about
one round trip per master: all of them or none, reentrant, deadlock-free, with fencing tokens,
automatic lease renewal, prompt wake-up of waiters and a clear signal when a lock is lost.

{{example "ExampleClient_Do"}}

**A basket per call, or a batch per call?** `Do` (or `Lock`) per order suits orders handled one at a time
on many goroutines: each call waits for its busy SKUs, in arrival order. Orders pulled in batches, by
replicas, go through a `Processor`: each `Next` locks the oldest baskets that are free with one `TryEach`
(one round trip per master for the tick), a busy basket goes before every younger one, and keys of one
hash tag make the replicas meet in one script call ([examples/batchprocessor](examples/batchprocessor/main.go)).

{{example "ExampleProcessor" from "p, err :="}}

**Words used here.** A *lock* (`*Lock`) is a batch of keys held by one *owner*, with a *hold* and a
lease on each key; a key taken fresh gets a new fencing *token*; a refused call waits in the key's
*queue*, and the release that frees the key *grants* it to the first waiter. A *basket* is one order's keys.

## Using it

`go get github.com/batchlock/batchlock` (Go 1.26, Redis 7.0+ or Valkey 8.1+: a cluster, or one node) and import
`github.com/batchlock/batchlock/batchlock`; go-redis is the one module it brings. Build the go-redis client
from `batchlock.ClusterOptions(addrs...)`: with go-redis's defaults a call can outlive its context and a
failover takes tens of seconds ([why](docs/operators.md#the-client-side)). `locks.Check(ctx)` (or
`batchlock check`) reports settings that break the guarantees. One Client per process.

- *Is a batch capped?* Not for `Lock`, `TryLock` and `Do`; a `TryEach` takes at most 65,536 keys.
- *Must my data sit with the lock keys?* No. Lock keys are separate keys, `prefix + key`; your stock can
  live in other keys, another Redis or a SQL database. The fencing token ties the two together.
- *Which lease?* The watchdog lease (`WithLease`, default 30 s) is how long a dead holder's keys stay
  held, and a third of it how soon a loss is noticed. A fixed `WithTTL` lease is for work of known length.
- *One token per lock?* No, one per key (keys of a slot taken by one call share it): store them per key.
- *Owners?* Fresh per call by default (`host:pid:` and a random part). `WithOwner("order-42")` makes two
  processes that handle order 42 at once **both** hold its keys: use an id unique to the holder.

**Fencing tokens.** A holder paused past its lease (a GC pause, a stalled VM) may write after the next
owner took its keys. A key's token grows with each new owner; storage that keeps the largest token it saw
per key refuses the stale write. Inside `Do`, `LockFromContext` gives the lock:

{{example "take"}}

{{example "ExampleLockFromContext" from "skus :="}}

In a pipeline `EVALSHA` has no fallback to `EVAL`: load the script on every master first (`take.Load`).
**Stock in a SQL database?** Lock first, then run one transaction on `l.Context()` whose `UPDATE`s are
fenced by `l.Token(sku)`: [docs/sql.md](docs/sql.md), `examples/pgorders`.

**Counted stock: a flash sale's hot SKU.** An exclusive lock serves one order of a SKU at a time. A
counted key is held by any number of orders at once, each for its units, while they fit the key's
capacity (its stock on hand, which you set with `SetCapacity` or `AddCapacity`): `WithUnits` asks for
units beside exclusive and shared keys, all or nothing across masters, and `Consume` turns them into a
sale as it releases them, once however often it is sent.

{{example "ExampleWithUnits" from "if err := locks.SetCapacity"}}

A request waits in the key's queue, where small ones do not pass a big one; one for more than the capacity
fails at once with `ErrOverCapacity` (sold out). A `Processor` takes units (`Basket.Units`, `ConsumeEach`).

**Errors: which to retry.** `WithWait(d)` bounds only the wait, not the work: past `d` the call fails
holding nothing, with a `*ConflictError` naming the keys it waited for when it met held ones. Every error
says `batchlock:` once, at its start, and matches each sentinel it wraps; test them in this order:

{{example "retryable"}}

## Quick start

```sh
make demo   # an order processor on a throwaway six-node cluster; audits that nothing is oversold
make test   # lint, unit tests, the integration suite on a real six-node cluster (docker and process backends)
```

On Debian both install what is missing with apt (as root), or say what to; docker pulls nothing.

`make demo` lets 32 workers process 5000 orders of 1 to 200 SKUs, each locking its basket with one `Do`
and decrementing every line with a fenced write; an audit proves that nothing was oversold and prints
throughput, lock waits and `audit PASSED`. `DEMO_FLAGS="--batch 256"` runs it as a batch processor (a
`Processor`, ticks of 256 orders), `DEMO_FLAGS="--batch 256 --processors 4"` as four replicas whose keys
share the hash tag `{shop}`; `--no-lock` shows the oversell the lock prevents, `--store=postgres` keeps the
stock in PostgreSQL, `--chaos` fails a master over mid-run, `--flash 0.3 --counted` runs a flash sale in
units; `go -C cmd/batchlock/demo run . -h` lists every flag.

## Guarantees

All or nothing to the caller, never a lock past its lease, no deadlock, waiters served in order, loss
reported, fencing tokens that only grow, nothing outliving `Close`: each is stated once, with its limits,
in [docs/design.md](docs/design.md#what-is-guaranteed); [docs/faults.md](docs/faults.md) names its tests.

## Observability, redlock, data in Redis

batchlock never logs. `WithObserver(fn)` hands `fn` every event (acquired, with a `Processor` basket's wait from
`Add`; conflict, a refused `TryEach` basket's too; queued, handed off, renewed, lost, released, failed);
`batchlockotel.Observer(meterProvider)`, `batchlockotel.Gauges(mp, client)` (its Processors' backlog
included) and `batchlockotel.UnitsGauges(mp, client, keys...)` make
OpenTelemetry metrics of them, `batchlockslog.Observer(logger)` logs them with `log/slog`.

`redlock.New(clients)` takes the same batch lock on N independent deployments and holds it while a
majority does, for when a lock lost to one deployment's failover is not acceptable.

A lock key is `prefix + key`; user keys starting with `fence:{`, `cancel:{` or `units:{` are refused
([data in Redis](docs/design.md#data-in-redis)). All clients of a prefix must share one layout
([upgrading](docs/operators.md#upgrading)).

## Running against your own cluster

```sh
make cluster-up                     # six nodes on 127.0.0.1:7000-7005 with docker compose
export BATCHLOCK_CLUSTER_ADDRS=127.0.0.1:7000,127.0.0.1:7001,127.0.0.1:7002
go -C cmd/batchlock/demo run . --addrs $BATCHLOCK_CLUSTER_ADDRS
go -C cmd/batchlock run . inspect --addrs $BATCHLOCK_CLUSTER_ADDRS   # held keys: owners, Lease, Token
go -C cmd/batchlock run . check --addrs $BATCHLOCK_CLUSTER_ADDRS     # the Redis side and client settings
make test-external                  # the suite against it (tests that break nodes skip)
make cluster-down
```

`batchlock unlock --force KEY...` is an operator's release; give the command your Clients' prefix with
`--prefix` or `BATCHLOCK_PREFIX`. [docs/operators.md](docs/operators.md): the Redis side (eviction,
persistence, replicas, clocks, ACL), reading `inspect`, `check` and the metrics, sizing.

## Tests, speed and docs

`make test` is what CI runs ([what](docs/faults.md#how-the-tests-run)): all on Redis 7.0, the core on Valkey
8.1 and Redis 8.0 ([servers](docs/operators.md#servers); `BATCHLOCK_SERVER=valkey-8.1 make test`: all on one).
`make bench` measures batchlock against redsync, redislock and the least a lock must do ([bench.md](docs/bench.md),
[speed.md](docs/speed.md), [scale.md](docs/scale.md)). `make readme` writes this README from `README.md.tpl`.

## Layout and modules

The library (`batchlock/`, `hashtag/`, `redlock/`, `batchlockslog/`, `internal/`) is one lean module that
takes go-redis and nothing else into a program's module graph. Everything that needs more is a module of its
own, tied to it by `replace` directives (not a `go.work`): `orders/` (the order workload of the demo, the
bench and the suite), `localcluster/` (throwaway clusters and fault injection), `cluster_test/` (the
integration suite and the soak), `cmd/batchlock/` (the operator's command) and its `demo/`, `examples/`,
`batchlockotel/` and `bench/`. Run a module's commands from its directory or with `go -C dir`; `make lint`
runs gofmt, `go vet` and staticcheck on every module.
