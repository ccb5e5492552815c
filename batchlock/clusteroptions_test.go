package batchlock

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

// The settings batchlock relies on: calls end with their context, and no
// per-node retries stack on batchlock's own; each call returns a copy.
func TestClusterOptions(t *testing.T) {
	opts := ClusterOptions("127.0.0.1:7000", "127.0.0.1:7001")
	assert.Equal(t, []string{"127.0.0.1:7000", "127.0.0.1:7001"}, opts.Addrs)
	assert.True(t, opts.ContextTimeoutEnabled)
	assert.Zero(t, opts.MaxRetries, "no per-node retries")
	assert.Zero(t, opts.ClusterStateReloadInterval, "go-redis's minute: no reloads on a timer to cut at Close")
	opts.ReadTimeout = 0
	assert.NotZero(t, ClusterOptions().ReadTimeout, "a fresh copy each call")
}
