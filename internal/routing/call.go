package routing

import (
	"context"
	"time"

	"github.com/redis/go-redis/v9"
)

// Call is one script evaluation and, once sent, its outcome.
type Call struct {
	Slot int      // the slot of Route, for messages
	Keys []string // the keys declared to the server; none lets the script run on any master
	Args []any
	// Route is a key whose master receives the call (Keys[0] when empty),
	// unless Addr names the node.
	Route string
	// Addr, when set, is the node the call goes to: where a redirection
	// pointed. Asking sends ASKING before the call, for a node importing
	// the slot of Keys[0].
	Addr   string
	Asking bool

	Reply *redis.Cmd // the reply or error of the last attempt
	Acks  int64      // replicas that acknowledged it, when asked; -1 when unknown

	step string // its batch's Step
}

// Describe explains err, which the call met, in the words of its batch's
// Step (see the function Describe): for a Read that finds its reply wrong.
func (c *Call) Describe(ctx context.Context, err error) *Error { return Describe(ctx, c.step, c, err) }

// route is the key whose master receives c.
func (c *Call) route() string {
	if c.Route != "" {
		return c.Route
	}
	return c.Keys[0]
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
