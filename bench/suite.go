package bench

import (
	"errors"
	"slices"
	"sync/atomic"
	"time"

	"github.com/batchlock/batchlock/batchlock"
	"github.com/redis/go-redis/v9"
)

// Names of the libraries and modes, as benchmarks and key prefixes use them.
const (
	NameBatchlock     = "batchlock"
	NameBatchlockPoll = "batchlock-polling"
	NameRedsyncSeq    = "redsync-seq"
	NameRedsyncPar    = "redsync-par"
	NameRedislockSeq  = "redislock-seq"
	NameRedislockPar  = "redislock-par"
	NameFloor         = "floor"
	NameFencedFloor   = "fenced-floor"
	NameLockFloor     = "lock-floor"
	NameCeiling       = "ceiling"
	// The contention workload's reference, and batchlock through several
	// Clients (LeastBusy).
	NameFencedFloorProcessor = "fenced-floor-processor"
	NameLockFloorProcessor   = "lock-floor-processor"
	NameBatchlock4Clients    = "batchlock-4-clients"
	NameBatchlock16Clients   = "batchlock-16-clients"
	// OneSlotSuffix ends the name of a locker whose keys are all in one
	// slot (OneSlot).
	OneSlotSuffix          = "-one-slot"
	NameOneSlot            = NameBatchlock + OneSlotSuffix
	NameFloorOneSlot       = NameFloor + OneSlotSuffix
	NameFencedFloorOneSlot = NameFencedFloor + OneSlotSuffix
	NameLockFloorOneSlot   = NameLockFloor + OneSlotSuffix
	// The shared-keys comparison: batchlock with the orders' promotions
	// taken shared, and exclusively.
	NameSharedPromos    = "batchlock-promos-shared"
	NameExclusivePromos = "batchlock-promos-exclusive"
	// The batch workload's processors.
	NameBatchFloorProcessor  = "batch-floor-processor"
	NameCrossFloorProcessor  = "cross-process-floor-processor"
	NameTryEachProcessor     = "batchlock-tryeach"
	NameTryLockLoopProcessor = "batchlock-trylock-loop"
	// The same with every lock key in one slot (OneSlotTag): the
	// processors' locks co-located, the stock still spread.
	NameCrossFloorOneSlot = NameCrossFloorProcessor + OneSlotSuffix
	NameTryEachOneSlot    = NameTryEachProcessor + OneSlotSuffix
	// The moves and failover loads': the same Processor, its space's slot
	// moving, its master failed over gracefully, and killed.
	NameTryEachOneSlotMoved      = NameTryEachOneSlot + "-moved"
	NameTryEachOneSlotFailedOver = NameTryEachOneSlot + "-failed-over"
	NameTryEachOneSlotKilled     = NameTryEachOneSlot + "-killed"
	// The sale workload's: the reference, and the Processor taking units.
	NameDecrementFloor     = "decrement-floor"
	NameCountedProcessor   = "batchlock-counted"
	NameCountedOneSlot     = NameCountedProcessor + OneSlotSuffix
	NameDecrementFloorLoop = "decrement-floor-per-basket"
	NameHoldFloor          = "hold-floor"
	NameHoldFloorLoop      = "hold-floor-per-basket"
	NameCountedLoop        = "batchlock-counted-per-basket"
)

var labels = map[string]string{
	NameBatchlock:          "batchlock",
	NameBatchlockPoll:      "batchlock, polling (WithoutPubSub)",
	NameRedsyncSeq:         "redsync sequential",
	NameRedsyncPar:         "redsync goroutine per key",
	NameRedislockSeq:       "redislock sequential",
	NameRedislockPar:       "redislock goroutine per key",
	NameOneSlot:            "batchlock, all keys in one slot",
	NameFloor:              "floor: SET PX per key, then DEL, one script call per master",
	NameFencedFloor:        "fenced floor: per slot an INCRBY of its counter, SET PX per key, then DEL, one script call per master",
	NameLockFloor:          "lock floor: per slot an INCR of its counter, SET NX PX of an owned value per key, then an owner-checked DEL, one script call per master",
	NameFloorOneSlot:       "floor, all keys in one slot",
	NameFencedFloorOneSlot: "fenced floor, all keys in one slot",
	NameLockFloorOneSlot:   "lock floor, all keys in one slot",
	NameCeiling:            "ceiling: a sorted sync.Mutex per SKU, in process",
	NameSharedPromos:       "batchlock, promotions shared (WithShared)",
	NameExclusivePromos:    "batchlock, promotions exclusive",
	// The contention workload's own.
	NameFencedFloorProcessor: "fenced-floor processor: the ceiling plus the fenced floor's Redis work per basket",
	NameLockFloorProcessor:   "lock-floor processor: the ceiling plus the lock floor's Redis work per basket",
	NameBatchlock4Clients:    "batchlock, 4 Clients (at 16 workers, 4 each)",
	NameBatchlock16Clients:   "batchlock, 16 Clients (at 16 workers, one each: the cross-process case)",
	// The batch workload's own.
	NameBatchFloorProcessor:      "batch-floor processor: admission in process, then the lock floor's Redis work for every admitted key, one call per master",
	NameCrossFloorProcessor:      "cross-process floor: admission among a processor's own baskets, then per master one call taking each basket's keys there, give-backs, one release",
	NameTryEachProcessor:         "batchlock Processor: one TryEach per tick, a refused basket offered again once a key that refused it may be free",
	NameTryLockLoopProcessor:     "batchlock TryLock per basket on 16 goroutines, then Unlock",
	NameCrossFloorOneSlot:        "cross-process floor, every lock key in one slot (the co-located floor)",
	NameTryEachOneSlot:           "batchlock Processor, every lock key in one slot (one space)",
	NameTryEachOneSlotMoved:      "batchlock Processor in one space, its slot moved to the next master every 500 ms",
	NameTryEachOneSlotFailedOver: "batchlock Processor in one space, its master failed over (CLUSTER FAILOVER) a third into the turn",
	NameTryEachOneSlotKilled:     "batchlock Processor in one space, its master killed a third into the turn and restarted once its replica took over",
	// The sale workload's own.
	NameDecrementFloor:     "decrement floor: per master one call that checks and decrements each basket's counts there, all or none, and one giving back the parts of baskets refused elsewhere",
	NameCountedProcessor:   "batchlock Processor, each line in units of its SKU (counted holds), sold with the tick (ConsumeEach)",
	NameCountedOneSlot:     "batchlock Processor in units, every lock key in one slot (one space)",
	NameDecrementFloorLoop: "decrement floor per basket: each basket sold alone (a call per master it touches) on 16 goroutines",
	NameCountedLoop:        "batchlock per basket: Lock in units on 16 goroutines, then Consume each",
	NameHoldFloor:          "hold floor: the decrement floor's calls, each key's units kept as a hold (SET PX of a token from an INCRBY), and per master one call selling the tick's holds (DEL)",
	NameHoldFloorLoop:      "hold floor per basket: each basket taken and sold alone (the hold floor's calls per master it touches) on 16 goroutines",
}

// Label is the name a reader of the report sees.
func Label(name string) string {
	if l, ok := labels[name]; ok {
		return l
	}
	return name
}

// Suite is every library and mode the workloads compare, each on a cluster
// client of its own so that none inherits another's connections.
type Suite struct {
	// Lockers: batchlock first, the ratios' base, then the floor, the
	// fenced floor and the lock floor, then the peers in both modes, then
	// batchlock and the three floors with every key in one slot.
	Lockers []Locker
	// Handoff: waiters with pub/sub, polling, and the peers' retries.
	Handoff []HandoffPair
	// Orders: the fenced-floor processor, the contention workload's
	// reference, the lock-floor processor, the in-process ceiling, batchlock through one Client, 4
	// and 16, and the redsync-based processor.
	Orders []Locker
	// Promotions: batchlock, for the shared-keys comparison.
	Promotions SharedLocker
	// Batches: the batch-floor processor and the cross-process floor, the
	// batch workload's references, then batchlock's TryEach and TryLock-loop
	// processors, each with as
	// many processors (Clients) as DefaultBatch runs at most.
	Batches []BatchKind
	// Sales: the decrement floor, batchlock's Processor taking units and
	// taking the SKUs exclusively, then the per-basket forms of the floor
	// and of batchlock in units, then the hold floor and its per-basket
	// form; as many processors as Batches.
	Sales []BatchKind

	closers []func() error
}

// NewSuite builds the suite on clients made with options.
func NewSuite(options func() *redis.ClusterOptions) (*Suite, error) {
	s := &Suite{}
	client := func() *redis.ClusterClient {
		rdb := redis.NewClusterClient(options())
		s.closers = append(s.closers, rdb.Close)
		return rdb
	}
	newBatchlock := func(name string, opts ...batchlock.Option) (*Batchlock, error) {
		c, err := batchlock.New(client(), opts...)
		if err != nil {
			return nil, err
		}
		s.closers = append(s.closers, c.Close)
		return NewBatchlock(name, c), nil
	}
	// renewed is a Batchlock whose locks the watchdog renews, with a lease
	// of TTL.
	renewed := func(name string, opts ...batchlock.Option) (*Batchlock, error) {
		b, err := newBatchlock(name, append(opts, batchlock.WithLease(TTL))...)
		if err != nil {
			return nil, err
		}
		return NewRenewedBatchlock(name, b.c), nil
	}

	bl, err := newBatchlock(NameBatchlock)
	if err != nil {
		return nil, errors.Join(err, s.Close())
	}
	floor, fenced, lockFloor := NewFloor(client()), NewFencedFloor(client()), NewLockFloor(client())
	redsyncSeq, redislockSeq := NewRedsync(NameRedsyncSeq, client(), false), NewRedislock(NameRedislockSeq, client(), false)
	s.Lockers = []Locker{
		bl,
		floor,
		fenced,
		lockFloor,
		redsyncSeq,
		NewRedsync(NameRedsyncPar, client(), true),
		redislockSeq,
		NewRedislock(NameRedislockPar, client(), true),
		OneSlot{bl},
		OneSlot{floor},
		OneSlot{fenced},
		OneSlot{lockFloor},
	}
	processorFloor := NewFencedFloor(client())
	// batchlock through n Clients, each on a cluster client of its own, as
	// n processes would have it.
	newLeastBusy := func(name string, n int) (*LeastBusy, error) {
		clients := make([]Locker, n)
		for i := range clients {
			c, err := renewed(name)
			if err != nil {
				return nil, err
			}
			clients[i] = c
		}
		return NewLeastBusy(name, clients), nil
	}
	bl4, err := newLeastBusy(NameBatchlock4Clients, 4)
	if err != nil {
		return nil, errors.Join(err, s.Close())
	}
	bl16, err := newLeastBusy(NameBatchlock16Clients, 16)
	if err != nil {
		return nil, errors.Join(err, s.Close())
	}
	blOrders, err := renewed(NameBatchlock)
	if err != nil {
		return nil, errors.Join(err, s.Close())
	}
	s.Orders = []Locker{
		NewLayered(NameFencedFloorProcessor, NewCeiling(), processorFloor),
		NewLayered(NameLockFloorProcessor, NewCeiling(), NewLockFloor(client())),
		NewCeiling(),
		blOrders,
		bl4,
		bl16,
		redsyncSeq,
	}
	s.Promotions = blOrders

	processors := slices.Max(DefaultBatch.Processors)
	floors, crossFloors, crossOneSlot := make([]*Floor, processors), make([]*Floor, processors), make([]*Floor, processors)
	for i := range processors {
		floors[i], crossFloors[i], crossOneSlot[i] = NewLockFloor(client()), NewLockFloor(client()), NewLockFloor(client())
	}
	// A batchlock kind's processors each have a Client on a cluster client
	// of its own.
	var each, eachOneSlot, loop, counted, countedLoop []*batchlock.Client
	for _, k := range []struct {
		name    string
		clients *[]*batchlock.Client
	}{{NameTryEachProcessor, &each}, {NameTryEachOneSlot, &eachOneSlot}, {NameTryLockLoopProcessor, &loop}, {NameCountedProcessor, &counted},
		{NameCountedLoop, &countedLoop}} {
		for range processors {
			b, err := newBatchlock(k.name)
			if err != nil {
				return nil, errors.Join(err, s.Close())
			}
			*k.clients = append(*k.clients, b.c)
		}
	}
	s.Batches = []BatchKind{NewBatchFloorKind(floors), NewCrossFloorKind(crossFloors, ""), NewProcessorKind(each, DefaultBatch.Tick, ""),
		NewTryLockLoopKind(loop, DefaultBatch.LoopWorkers), NewCrossFloorKind(crossOneSlot, OneSlotSpace), NewProcessorKind(eachOneSlot, DefaultBatch.Tick, OneSlotSpace)}
	decrementFloors, decrementLoops := make([]*redis.ClusterClient, processors), make([]*redis.ClusterClient, processors)
	holdFloors, holdLoops := make([]*redis.ClusterClient, processors), make([]*redis.ClusterClient, processors)
	for i := range decrementFloors {
		decrementFloors[i], decrementLoops[i], holdFloors[i], holdLoops[i] = client(), client(), client(), client()
	}
	s.Sales = []BatchKind{NewDecrementFloorKind(decrementFloors, 0), NewCountedProcessorKind(counted, DefaultBatch.Tick, ""),
		NewProcessorKind(each, DefaultBatch.Tick, ""), NewDecrementFloorKind(decrementLoops, DefaultBatch.LoopWorkers),
		NewCountedLoopKind(countedLoop, DefaultBatch.LoopWorkers), NewHoldFloorKind(holdFloors, 0), NewHoldFloorKind(holdLoops, DefaultBatch.LoopWorkers)}

	var handedOff atomic.Int64
	waiter, err := renewed(NameBatchlock, batchlock.WithObserver(func(e batchlock.Event) {
		if e.Kind == batchlock.EventHandedOff {
			handedOff.Store(time.Now().UnixNano())
		}
	}))
	if err != nil {
		return nil, errors.Join(err, s.Close())
	}
	poller, err := newBatchlock(NameBatchlockPoll, batchlock.WithoutPubSub())
	if err != nil {
		return nil, errors.Join(err, s.Close())
	}
	s.Handoff = []HandoffPair{
		{Name: NameBatchlock, Holder: bl, Waiter: waiter, HandedOff: func() time.Time { return time.Unix(0, handedOff.Load()) }},
		{Name: NameBatchlockPoll, Holder: bl, Waiter: poller},
		{Name: NameRedsyncSeq, Holder: redsyncSeq, Waiter: NewRedsync(NameRedsyncSeq, client(), false)},
		{Name: NameRedislockSeq, Holder: redislockSeq, Waiter: NewRedislock(NameRedislockSeq, client(), false)},
	}
	return s, nil
}

// Close closes every client of the suite, batchlock clients before the
// Redis clients under them.
func (s *Suite) Close() error {
	var errs []error
	for i := len(s.closers) - 1; i >= 0; i-- {
		errs = append(errs, s.closers[i]())
	}
	return errors.Join(errs...)
}
