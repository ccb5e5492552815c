package batchlock

import (
	"testing"
	"time"

	"github.com/batchlock/batchlock/internal/routing"
	"github.com/batchlock/batchlock/internal/wire"
	"github.com/batchlock/batchlock/internal/wire/wiretest"
)

// defaultPrefix is the prefix of the tests' Clients.
const defaultPrefix = string(wire.DefaultPrefix)

// newFaked returns a Client whose scripts run against a wiretest.Fake of three
// masters (by slot range); waiting calls poll (there is no pub/sub).
func newFaked(t *testing.T, opts ...Option) (*Client, *wiretest.Fake) {
	t.Helper()
	c := newOffline(t, true, append([]Option{WithoutPubSub(), WithPollInterval(5 * time.Millisecond)}, opts...)...)
	f := wiretest.NewFake()
	c.runner = routing.NewWith(f, wiretest.FakeMaster, nil)
	return c, f
}
