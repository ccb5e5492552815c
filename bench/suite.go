package bench

import (
	"errors"

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
	NameOneSlot       = NameBatchlock + "-one-slot"
	NameFloor         = "floor"
	NameCeiling       = "ceiling"
	// The shared-keys comparison: batchlock with the orders' promotions
	// taken shared, and exclusively.
	NameSharedPromos    = "batchlock-promos-shared"
	NameExclusivePromos = "batchlock-promos-exclusive"
)

var labels = map[string]string{
	NameBatchlock:       "batchlock",
	NameBatchlockPoll:   "batchlock, polling (WithoutPubSub)",
	NameRedsyncSeq:      "redsync sequential",
	NameRedsyncPar:      "redsync goroutine per key",
	NameRedislockSeq:    "redislock sequential",
	NameRedislockPar:    "redislock goroutine per key",
	NameOneSlot:         "batchlock, all keys in one slot",
	NameFloor:           "floor: SET PX per key, then DEL, one script call per master",
	NameCeiling:         "ceiling: a sorted sync.Mutex per SKU, in process",
	NameSharedPromos:    "batchlock, promotions shared (WithShared)",
	NameExclusivePromos: "batchlock, promotions exclusive",
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
	// Lockers: batchlock first, the ratios' base, then the floor, then the
	// peers in both modes, then batchlock with every key in one slot.
	Lockers []Locker
	// Handoff: waiters with pub/sub, polling, and the peers' retries.
	Handoff []HandoffPair
	// Orders: batchlock, the in-process ceiling and the redsync-based
	// processor.
	Orders []Locker
	// Promotions: batchlock, for the shared-keys comparison.
	Promotions SharedLocker

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

	bl, err := newBatchlock(NameBatchlock)
	if err != nil {
		return nil, errors.Join(err, s.Close())
	}
	floor, err := NewFloor(client())
	if err != nil {
		return nil, errors.Join(err, s.Close())
	}
	s.Lockers = []Locker{
		bl,
		floor,
		NewRedsync(NameRedsyncSeq, client(), false),
		NewRedsync(NameRedsyncPar, client(), true),
		NewRedislock(NameRedislockSeq, client(), false),
		NewRedislock(NameRedislockPar, client(), true),
		OneSlot{bl},
	}
	s.Orders = []Locker{s.Lockers[0], NewCeiling(), s.Lockers[2]}
	s.Promotions = bl

	waiter, err := newBatchlock(NameBatchlock)
	if err != nil {
		return nil, errors.Join(err, s.Close())
	}
	poller, err := newBatchlock(NameBatchlockPoll, batchlock.WithoutPubSub())
	if err != nil {
		return nil, errors.Join(err, s.Close())
	}
	s.Handoff = []HandoffPair{
		{Name: NameBatchlock, Holder: s.Lockers[0], Waiter: waiter},
		{Name: NameBatchlockPoll, Holder: s.Lockers[0], Waiter: poller},
		{Name: NameRedsyncSeq, Holder: s.Lockers[2], Waiter: NewRedsync(NameRedsyncSeq, client(), false)},
		{Name: NameRedislockSeq, Holder: s.Lockers[4], Waiter: NewRedislock(NameRedislockSeq, client(), false)},
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
