package localcluster

import (
	"net"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestPortPickerNeedsBothPortsFree(t *testing.T) {
	free := map[int]bool{
		portLow + 5: true, // its bus port is taken
		portLow + 7: true, portLow + 7 + busOffset: true,
		portLow + 9: true, portLow + 9 + busOffset: true,
	}
	p := &portPicker{used: map[int]bool{}, free: func(port int) bool { return free[port] }, start: func(int) int { return 0 }}
	a, err := p.pick()
	require.NoError(t, err)
	assert.Equal(t, portLow+7, a)
	b, err := p.pick()
	require.NoError(t, err)
	assert.Equal(t, portLow+9, b, "a port handed out is not handed out again")
	_, err = p.pick()
	assert.Error(t, err, "no free pair left")
	p.release(a)
	c, err := p.pick()
	require.NoError(t, err)
	assert.Equal(t, a, c, "a released port can be picked again")
}

func TestPortPickerWrapsAround(t *testing.T) {
	p := &portPicker{
		used:  map[int]bool{},
		free:  func(port int) bool { return port == portLow || port == portLow+busOffset },
		start: func(n int) int { return n - 1 },
	}
	port, err := p.pick()
	require.NoError(t, err)
	assert.Equal(t, portLow, port)
}

func TestPortFree(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer l.Close()
	assert.False(t, portFree(l.Addr().(*net.TCPAddr).Port))

	port, err := ports.pick()
	require.NoError(t, err)
	defer ports.release(port)
	assert.True(t, port >= portLow && port <= portHigh)
	assert.True(t, portFree(port) && portFree(port+busOffset), "picked ports are free")
}
