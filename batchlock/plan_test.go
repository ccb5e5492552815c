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
	userKeys, groups, err := c.plan(keys)
	require.NoError(t, err)
	assert.Equal(t, []string{"a", "b", "c", "{t}1", "{t}2"}, userKeys)

	seen := 0
	for i, g := range groups {
		if i > 0 {
			assert.Greater(t, g.slot, groups[i-1].slot, "groups ascend by slot")
		}
		assert.Equal(t, "batchlock:fence:{"+hashtag.ForSlot(g.slot)+"}", g.fenceKey)
		assert.Equal(t, hashtag.Slot(g.fenceKey), g.slot)
		assert.Equal(t, hashtag.Slot(g.cancelKey("h:0")), g.slot)
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
	_, groups, err := c.plan(keys)
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
	_, groups, err := c.plan([]string{"z", "a", "{x}m", "a"})
	require.NoError(t, err)
	require.Len(t, groups, 1)
	assert.Equal(t, []string{"p:a", "p:z", "p:{x}m"}, groups[0].keys)
}

func TestPlanRejectsBadKeys(t *testing.T) {
	c := newOffline(t, true)
	for _, tc := range []struct {
		name string
		keys []string
		want string
	}{
		{"nil", nil, "no keys"},
		{"empty list", []string{}, "no keys"},
		{"empty key", []string{"a", "b", ""}, "key 2 is empty"},
		{"fence name", []string{"fence:{abc}"}, "reserved"},
		{"cancel name", []string{"cancel:{abc}"}, "reserved"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, _, err := c.plan(tc.keys)
			require.ErrorIs(t, err, ErrInvalid)
			assert.Contains(t, err.Error(), tc.want)
		})
	}
}

func TestNewRejectsBadOptions(t *testing.T) {
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})
	defer rdb.Close()
	for _, tc := range []struct {
		name string
		rdb  redis.UniversalClient
		opts []Option
		want string
	}{
		{"nil client", nil, nil, "nil redis client"},
		{"typed nil", (*redis.Client)(nil), nil, "nil redis client"},
		{"ring", &redis.Ring{}, nil, "unsupported redis client"},
		{"brace prefix", rdb, []Option{WithPrefix("a{")}, "must not contain"},
		{"closing brace prefix", rdb, []Option{WithPrefix("a}")}, "must not contain"},
		{"zero lease", rdb, []Option{WithLease(0)}, "lease"},
		{"tiny lease", rdb, []Option{WithLease(time.Millisecond)}, "too short"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := New(tc.rdb, tc.opts...)
			require.ErrorIs(t, err, ErrInvalid)
			assert.Contains(t, err.Error(), tc.want)
		})
	}
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

func TestEscapeGlob(t *testing.T) {
	assert.Equal(t, `a\*b\?c\[d\]e\\f:`, escapeGlob(`a*b?c[d]e\f:`))
	assert.Equal(t, "batchlock:", escapeGlob("batchlock:"))
}
