// Package owner carries a lock owner id in a context, for batchlock's
// ContextWithOwner and for redlock, which gives the locks it takes through
// several Clients one owner; and says when an owner asked for more than it
// holds.
package owner

import (
	"context"
	"errors"
	"os"
	"strconv"
	"sync"
)

// Process is how the owner ids a Client makes start, "host:pid:", so that
// tools show which process holds a key; read once, when first needed.
var Process = sync.OnceValue(func() string {
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "unknown-host"
	}
	return host + ":" + strconv.Itoa(os.Getpid()) + ":"
})

// ErrUpgrade is wrapped, with batchlock.ErrInvalid, by the refusal of a key
// asked for exclusively, or for more units, that its owner holds shared or
// in units: redlock gives up on it, as every deployment would refuse it.
var ErrUpgrade = errors.New("held shared or in units by this owner, asked for more")

type key struct{}

// NewContext returns ctx carrying the owner id.
func NewContext(ctx context.Context, id string) context.Context {
	return context.WithValue(ctx, key{}, id)
}

// FromContext returns the owner id ctx carries, if it carries one.
func FromContext(ctx context.Context) (string, bool) {
	id, ok := ctx.Value(key{}).(string)
	return id, ok
}
