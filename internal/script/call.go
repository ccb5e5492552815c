package script

import (
	"time"

	"github.com/redis/go-redis/v9"
)

// Call is one script evaluation and, once sent, its outcome.
type Call struct {
	Slot int      // the slot of Keys, for messages
	Keys []string // Keys[0] routes the call
	Args []any

	Reply *redis.Cmd // the reply or error of the last attempt
	Acks  int64      // replicas that acknowledged it, when asked; -1 when unknown
	Ran   bool       // some attempt may have run the script
}

// Ack asks for replica acknowledgement: WAIT Replicas Timeout after a
// master's calls. The zero Ack asks for none.
type Ack struct {
	Replicas int
	Timeout  time.Duration
}

// Acknowledged reports whether enough replicas acknowledged c.
func (a Ack) Acknowledged(c *Call) bool {
	return a.Replicas <= 0 || c.Acks >= int64(a.Replicas)
}
