package localcluster

import (
	"errors"
	"math/rand/v2"
	"net"
	"strconv"
	"sync"
)

const (
	// Nodes listen on a port in [portLow, portHigh] and on port+busOffset
	// for the cluster bus. The bus ports then stay below Linux's default
	// ephemeral range (32768+), so outgoing connections cannot take them.
	portLow   = 20000
	portHigh  = 22767
	busOffset = 10000
)

// portPicker hands out ports whose client and bus ports are both free.
// Picks start at a random place so that concurrent test binaries rarely
// try the same ports; ports handed out in this process are remembered so
// that clusters started side by side never share one.
type portPicker struct {
	mu    sync.Mutex
	used  map[int]bool
	free  func(port int) bool
	start func(n int) int
}

var ports = &portPicker{used: map[int]bool{}, free: portFree, start: rand.IntN}

func (p *portPicker) pick() (int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	span := portHigh - portLow + 1
	first := p.start(span)
	for i := range span {
		port := portLow + (first+i)%span
		if p.used[port] || !p.free(port) || !p.free(port+busOffset) {
			continue
		}
		p.used[port] = true
		return port, nil
	}
	return 0, errors.New("localcluster: no free port pair in " +
		strconv.Itoa(portLow) + "-" + strconv.Itoa(portHigh))
}

func (p *portPicker) release(port int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.used, port)
}

func portFree(port int) bool {
	l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
	if err != nil {
		return false
	}
	return l.Close() == nil
}
