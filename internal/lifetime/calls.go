package lifetime

import "sync"

// Calls counts a client's calls in flight, and the work they leave running,
// so that Close can refuse new calls and wait for the running ones.
type Calls struct {
	mu     sync.Mutex
	closed bool
	wg     sync.WaitGroup
}

// Enter counts n new calls, or reports false once closed.
func (c *Calls) Enter(n int) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return false
	}
	c.wg.Add(n)
	return true
}

// Join counts work started by a call that is counted itself (such as a
// rollback it leaves running), closed or not.
func (c *Calls) Join() { c.wg.Add(1) }

// Leave ends one call or piece of work.
func (c *Calls) Leave() { c.wg.Done() }

// Close refuses later calls, and reports whether this call closed.
func (c *Calls) Close() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return false
	}
	c.closed = true
	return true
}

// Wait waits until every call and piece of work counted has left.
func (c *Calls) Wait() { c.wg.Wait() }
