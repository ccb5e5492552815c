package routing

import (
	"sync/atomic"

	"github.com/redis/go-redis/v9"
)

// MaxCallKeys bounds the keys one call carries, so that no script blocks a
// master for long, whatever the size of a batch or of a watchdog round.
const MaxCallKeys = 1024

// Part is one unit of a routed batch: keys of one slot that a call carries
// whole (the keys of a slot taken together, or one key released).
type Part struct {
	Slot int
	// Route is a key of the slot: it finds the slot's master, and it is
	// declared on the calls that follow a redirection, for the server to
	// check where the slot is.
	Route string
	Keys  int // counted against MaxCallKeys
}

// Batch is one script run over parts.
type Batch struct {
	Step   string // names the call in errors, such as "release"
	Script *redis.Script
	Parts  []Part
	// Ordered keeps the parts of a call consecutive in the order given, for
	// a script that takes them in that order.
	Ordered bool
	// Follow sends the parts a node found elsewhere to the node importing
	// their slot, with ASKING, rather than wait for the slot to settle. Only
	// for scripts that touch nothing but the keys of their parts: the node
	// that found them elsewhere no longer has them, so the importing node
	// is where they are.
	Follow bool
	Ack    Ack
	// Args returns the arguments of a call that carries parts (indices into
	// Parts, ascending).
	Args func(parts []int) []any
	// Read takes the reply of a call that ran, and returns the parts it
	// found elsewhere, to be sent again, or the error the reply means for
	// all of the call's parts.
	Read func(c *Call, parts []int) (elsewhere []int, err error)
	// Sent, when set, counts the calls sent, every attempt's.
	Sent *atomic.Uint64
	// Settled, when set, has the masters asked apart: the parts of each
	// master (as the map of slots has them when Route starts) are sent and
	// retried on their own, concurrently, and Settled is called with them
	// and the results as soon as theirs are final, while other masters'
	// may still run; it reads only the results of its parts. Args and Read
	// may then be called from several goroutines at once.
	Settled func(parts []int, results []Result)
}

// Result is what became of one part.
type Result struct {
	// Err is nil once a call carrying the part ran and Read took its reply
	// without error (unless Read found the part elsewhere until the retries
	// gave up).
	Err error
	// Unknown says that an attempt carrying the part may have run without
	// its reply being read: it may have changed the part, also when a later
	// attempt's reply was read.
	Unknown bool
}
