package routing

import (
	"context"
	"testing"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Before close, a redirection to a node the cluster's map does not list gets
// a client of its own; after close, none is opened (nothing would close it).
func TestNoNodeClientOpenedAfterClose(t *testing.T) {
	rdb := redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{"127.0.0.1:1"}})
	t.Cleanup(func() { _ = rdb.Close() })
	n := &nodes{rdb: rdb, shards: func(context.Context, func(context.Context, *redis.Client) error) error {
		return nil // a map that lists no node
	}}
	node, err := n.at(t.Context(), "127.0.0.1:2")
	require.NoError(t, err)
	assert.Equal(t, "127.0.0.1:2", node.Options().Addr)
	require.NoError(t, n.close())

	_, err = n.at(t.Context(), "127.0.0.1:3")
	require.ErrorIs(t, err, errNodesClosed)
	assert.Empty(t, n.own, "no client opened after close")
}
