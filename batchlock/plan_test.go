package batchlock

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/batchlock/batchlock/hashtag"
)

// newOffline returns a Client whose redis client never connects: planning
// and validation need no server.
func newOffline(t *testing.T, cluster bool, opts ...Option) *Client {
	t.Helper()
	var rdb redis.UniversalClient
	if cluster {
		rdb = redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{"127.0.0.1:1"}})
	} else {
		rdb = redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})
	}
	t.Cleanup(func() { _ = rdb.Close() })
	c, err := New(rdb, opts...)
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })
	return c
}

func TestPlanGroupsBySlotInGlobalOrder(t *testing.T) {
	c := newOffline(t, true)
	keys := []string{"b", "a", "{t}2", "{t}1", "a", "c"}
	userKeys, groups, _, err := c.plan(keys, nil, nil)
	require.NoError(t, err)
	assert.ElementsMatch(t, []string{"a", "b", "c", "{t}1", "{t}2"}, userKeys, "deduplicated, in the groups' order")

	seen := 0
	for i, g := range groups {
		if i > 0 {
			assert.Greater(t, g.slot, groups[i-1].slot, "groups ascend by slot")
		}
		assert.Equal(t, "batchlock:fence:{"+hashtag.ForSlot(g.slot)+"}", g.fenceKey)
		assert.Equal(t, hashtag.Slot(g.fenceKey), g.slot)
		assert.Equal(t, hashtag.Slot(c.names.CancelMark(g.slot, "h:0")), g.slot)
		for _, k := range g.keys {
			assert.Equal(t, g.slot, hashtag.Slot(k))
		}
		assert.IsNonDecreasing(t, g.keys)
		seen += len(g.keys)
	}
	assert.Equal(t, 5, seen)
}

func TestPlanChunksLargeGroups(t *testing.T) {
	c := newOffline(t, true)
	var keys []string
	for i := 0; i < 3*maxGroupKeys+5; i++ {
		keys = append(keys, fmt.Sprintf("{hot}%05d", i))
	}
	_, groups, _, err := c.plan(keys, nil, nil)
	require.NoError(t, err)
	require.Len(t, groups, 4)
	for _, g := range groups[:3] {
		assert.Len(t, g.keys, maxGroupKeys)
	}
	assert.Len(t, groups[3].keys, 5)
	assert.Less(t, groups[0].keys[maxGroupKeys-1], groups[1].keys[0], "chunks keep key order")
}

func TestPlanSingleNodeIsOneGroup(t *testing.T) {
	c := newOffline(t, false, WithPrefix("p:"))
	_, groups, _, err := c.plan([]string{"z", "a", "{x}m", "a"}, nil, nil)
	require.NoError(t, err)
	require.Len(t, groups, 1)
	assert.Equal(t, []string{"p:a", "p:z", "p:{x}m"}, groups[0].keys)
}

func TestPlanRejectsBadKeys(t *testing.T) {
	c := newOffline(t, true)
	for _, tc := range []struct {
		name   string
		keys   []string
		shared []string
		units  map[string]int64
		want   string
	}{
		{"nil", nil, nil, nil, "no keys"},
		{"empty list", []string{}, []string{}, map[string]int64{}, "no keys"},
		{"empty key", []string{"a", "b", ""}, nil, nil, "key 2 must not be empty"},
		{"fence name", []string{"fence:{abc}"}, nil, nil, "reserved"},
		{"cancel name", []string{"cancel:{abc}"}, nil, nil, "reserved"},
		{"capacity name", []string{"units:{abc}:sku"}, nil, nil, "reserved"},
		{"empty shared key", []string{"a"}, []string{"b", ""}, nil, "shared key 1 must not be empty"},
		{"reserved shared key", nil, []string{"fence:{abc}"}, nil, "shared key"},
		{"empty counted key", nil, nil, map[string]int64{"": 1}, "counted key 0 must not be empty"},
		{"reserved counted key", nil, nil, map[string]int64{"a": 1, "units:{x}:a": 1}, `counted key "units:{x}:a"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, _, _, err := c.plan(tc.keys, tc.shared, tc.units)
			require.ErrorIs(t, err, ErrInvalid)
			assert.Contains(t, err.Error(), tc.want)
		})
	}
}

func TestNewRejectsBadOptions(t *testing.T) {
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})
	defer rdb.Close()
	noAddrs := redis.NewClusterClient(ClusterOptions())
	defer noAddrs.Close()
	for _, tc := range []struct {
		name string
		rdb  redis.UniversalClient
		opts []Option
		want string
	}{
		{"nil client", nil, nil, "nil redis client"},
		{"typed nil", (*redis.Client)(nil), nil, "nil redis client"},
		{"ring", &redis.Ring{}, nil, "unsupported redis client"},
		{"cluster client of no address", noAddrs, nil, "cluster client has no address"},
		{"empty prefix", rdb, []Option{WithPrefix("")}, "prefix must not be empty"},
		{"brace prefix", rdb, []Option{WithPrefix("a{")}, "must not contain"},
		{"closing brace prefix", rdb, []Option{WithPrefix("a}")}, "must not contain"},
		{"zero lease", rdb, []Option{WithLease(0)}, "lease"},
		{"tiny lease", rdb, []Option{WithLease(time.Millisecond)}, "must be at least 3ms"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := New(tc.rdb, tc.opts...)
			require.ErrorIs(t, err, ErrInvalid)
			assert.Contains(t, err.Error(), tc.want)
		})
	}
}

func TestPlanMarksSharedKeys(t *testing.T) {
	for _, cluster := range []bool{true, false} {
		c := newOffline(t, cluster)
		// "b" is given both ways: exclusive wins. No exclusive keys is fine.
		userKeys, groups, _, err := c.plan([]string{"b", "{t}1"}, []string{"a", "b", "{t}2", "a"}, nil)
		require.NoError(t, err)
		assert.ElementsMatch(t, []string{"a", "b", "{t}1", "{t}2"}, userKeys)
		modes := map[string]byte{}
		for _, g := range groups {
			require.Len(t, g.modes, len(g.keys))
			for i, k := range g.keys {
				modes[c.names.UserKey(k)] = g.modes[i]
			}
		}
		assert.Equal(t, map[string]byte{"a": 's', "b": 'x', "{t}1": 'x', "{t}2": 's'}, modes, "cluster %v", cluster)

		_, groups, _, err = c.plan(nil, []string{"x"}, nil)
		require.NoError(t, err)
		assert.Equal(t, []byte("s"), groups[0].modes)
		_, groups, _, err = c.plan([]string{"x"}, nil, nil)
		require.NoError(t, err)
		assert.Nil(t, groups[0].modes, "all exclusive sends no modes")
	}
}

func TestSplitKeepsModes(t *testing.T) {
	c := newOffline(t, true)
	_, groups, _, err := c.plan([]string{"{t}1", "{t}3"}, []string{"{t}2"}, nil)
	require.NoError(t, err)
	l := &Lock{groups: groups}
	l.split(0, 1)
	require.Len(t, l.groups, 2)
	assert.Equal(t, []byte("x"), l.groups[0].modes)
	assert.Equal(t, []byte("sx"), l.groups[1].modes)
	assert.Equal(t, []string{"batchlock:{t}2", "batchlock:{t}3"}, l.groups[1].keys)
}

func TestLockOptionValidation(t *testing.T) {
	for _, tc := range []struct {
		name string
		opts []LockOption
		ok   bool
	}{
		{"defaults", nil, true},
		{"ttl", []LockOption{WithTTL(time.Second)}, true},
		{"zero ttl", []LockOption{WithTTL(0)}, false},
		{"sub-millisecond ttl", []LockOption{WithTTL(time.Microsecond)}, false},
		{"owner", []LockOption{WithOwner("o")}, true},
		{"empty owner", []LockOption{WithOwner("")}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var lc lockConfig
			for _, o := range tc.opts {
				o.applyLock(&lc)
			}
			err := lc.validate()
			if tc.ok {
				assert.NoError(t, err)
			} else {
				assert.ErrorIs(t, err, ErrInvalid)
			}
		})
	}
}

func TestConflictError(t *testing.T) {
	err := error(&ConflictError{Keys: []string{"a", "b", "c", "d", "e", "f", "g"}})
	assert.ErrorIs(t, err, ErrNotObtained)
	assert.NotErrorIs(t, err, ErrLockLost)
	assert.Equal(t, `batchlock: not obtained: held by another owner: "a", "b", "c", "d", "e" and 2 more`, err.Error())
	var ce *ConflictError
	require.True(t, errors.As(fmt.Errorf("wrapped: %w", err), &ce))
	assert.Len(t, ce.Keys, 7)
}
