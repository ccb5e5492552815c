package redlock

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/batchlock/batchlock/batchlock"
	"github.com/batchlock/batchlock/internal/wire/wiretest"
)

// An attempt ends on an error every deployment would give again (bad
// input, an upgrade, a closed Client), not on one that another deployment
// may not give: a key held there, or a key with no capacity set there.
func TestFinalErrors(t *testing.T) {
	rdb := wiretest.ServerClient(t)
	c, err := batchlock.New(rdb, batchlock.WithPrefix(t.Name()+":"))
	require.NoError(t, err)
	defer c.Close()
	ctx := t.Context()

	_, noCapacity := c.TryLock(ctx, []string{"order"}, batchlock.WithUnits(map[string]int64{"sku": 1}))
	shared, err := c.TryLock(ctx, nil, batchlock.WithOwner("o"), batchlock.WithShared("k"))
	require.NoError(t, err)
	defer shared.Unlock(ctx)
	_, upgrade := c.TryLock(ctx, []string{"k"}, batchlock.WithOwner("o"))
	_, held := c.TryLock(ctx, []string{"k"}, batchlock.WithOwner("other"))
	_, bad := c.TryLock(ctx, []string{""})
	closedClient, err := batchlock.New(rdb, batchlock.WithPrefix(t.Name()+":"))
	require.NoError(t, err)
	require.NoError(t, closedClient.Close())
	_, closed := closedClient.TryLock(ctx, []string{"x"})

	for _, tc := range []struct {
		name  string
		err   error
		final bool
	}{
		{"no capacity set here", noCapacity, false},
		{"an upgrade", upgrade, true},
		{"held by another owner", held, false},
		{"bad input", bad, true},
		{"a closed Client", closed, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			require.Error(t, tc.err)
			assert.Equal(t, tc.final, final(tc.err), "%v", tc.err)
		})
	}
}
