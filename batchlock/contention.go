package batchlock

import (
	"context"
	"time"
)

// A batch's first attempt goes to every master at once: one round trip when
// nothing stands in the way. A refusal on one master makes the call give back
// what it took on the masters after it (it may keep nothing after the key it
// waits for) and take those again once that key is its own: two calls per
// master for nothing. So once a Client has been refused in Redis (by another
// process: its own locks meet at the gates first), its waiting calls ask one
// master at a time, in the global order, for a while: a round trip per master
// more when nothing stands in the way, and a conflict then costs the refused
// attempt alone.

// contendedFor is how long after a refusal in Redis a Client's waiting calls
// ask one master at a time.
const contendedFor = time.Second

// noteRefusal records that a call of c was refused in Redis at at (a time
// read from this process's clock, with its monotonic reading), as an offset
// from the Client's start on the monotonic clock: a step of the wall clock
// does not make the Client contended for longer or shorter.
func (c *Client) noteRefusal(at time.Time) { c.lastRefusal.Store(int64(at.Sub(c.started)) + 1) }

// contended reports whether c was refused in Redis within contendedFor.
func (c *Client) contended() bool {
	last := c.lastRefusal.Load()
	return last != 0 && time.Since(c.started)-time.Duration(last-1) < contendedFor
}

// masterRunEnd is the end of the run of groups, from groups[from] on, that
// the master of groups[from] serves, as the map of slots has it; a group
// whose master is unknown runs alone.
func (c *Client) masterRunEnd(ctx context.Context, groups []group, from int) int {
	first, err := c.runner.Master(ctx, groups[from].fenceKey)
	if err != nil {
		return from + 1
	}
	end := from + 1
	for ; end < len(groups); end++ {
		if groups[end].slot == groups[end-1].slot {
			continue
		}
		if addr, err := c.runner.Master(ctx, groups[end].fenceKey); err != nil || addr != first {
			break
		}
	}
	return end
}
