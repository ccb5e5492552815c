package bench

import (
	"context"
	"sync"
)

// LeastBusy is one library used through several Clients, each on a cluster
// client of its own, as separate processes would use it. The order
// workload gives no worker an identity, so each Lock goes to the Client
// with the fewest locks in flight (the lowest index among equals) and
// stays counted there until its Unlock: w workers on k Clients keep w/k
// locks in flight on each when k divides w, 16 workers on 16 Clients one
// each.
type LeastBusy struct {
	name    string
	clients []Locker

	mu       sync.Mutex
	inFlight []int // by client: Lock calls begun and not unlocked or failed
}

// NewLeastBusy returns the Locker over clients, at least one.
func NewLeastBusy(name string, clients []Locker) *LeastBusy {
	return &LeastBusy{name: name, clients: clients, inFlight: make([]int, len(clients))}
}

func (b *LeastBusy) Name() string { return b.name }

// Commands are the first client's: all are the same library.
func (b *LeastBusy) Commands() []string { return b.clients[0].Commands() }

// Clients is the number of Clients the locks are spread over.
func (b *LeastBusy) Clients() int { return len(b.clients) }

// ScriptsSent sums what the Clients sent.
func (b *LeastBusy) ScriptsSent() ScriptsSent {
	var sum ScriptsSent
	for _, c := range b.clients {
		if s, ok := c.(scriptSender); ok {
			sum = sum.plus(s.ScriptsSent())
		}
	}
	return sum
}

func (b *LeastBusy) Lock(ctx context.Context, keys []string) (Held, error) {
	i := b.take()
	h, err := b.clients[i].Lock(ctx, keys)
	if err != nil {
		b.giveBack(i)
		return nil, err
	}
	return leastBusyHeld{Held: h, b: b, client: i}, nil
}

// take counts a lock in flight on the least busy client, and returns it.
func (b *LeastBusy) take() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	least := 0
	for i, n := range b.inFlight {
		if n < b.inFlight[least] {
			least = i
		}
	}
	b.inFlight[least]++
	return least
}

func (b *LeastBusy) giveBack(client int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.inFlight[client]--
}

type leastBusyHeld struct {
	Held
	b      *LeastBusy
	client int
}

// Unlock releases the lock, then counts it off its client: until the
// release is done, the client still has it in flight.
func (h leastBusyHeld) Unlock(ctx context.Context) error {
	defer h.b.giveBack(h.client)
	return h.Held.Unlock(ctx)
}
