package main

import (
	"bytes"
	"encoding/json"
	"github.com/batchlock/batchlock/cmd/batchlock/internal/cli"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/batchlock/batchlock/batchlock"
)

func TestPlural(t *testing.T) {
	for _, tc := range []struct {
		n    int
		noun string
		want string
	}{
		{0, "lock", "0 locks"},
		{1, "lock", "1 lock"},
		{2, "lock", "2 locks"},
		{1, "key", "1 key"},
		{3, "key", "3 keys"},
		{1, "hold", "1 hold"},
		{-1, "unit", "-1 units"},
		{1, "SKU", "1 SKU"},
		{500, "SKU", "500 SKUs"},
	} {
		assert.Equal(t, tc.want, cli.Plural(tc.n, tc.noun))
	}
	assert.Equal(t, "1 unit", cli.Plural(int64(1), "unit"), "int64 counts too")
	assert.Equal(t, "7 units", cli.Plural(int64(7), "unit"))
}

func sampleHeld() []batchlock.HeldKey {
	return []batchlock.HeldKey{
		{Key: "promo:1", Shared: true, Holders: []string{"a", "b"}, Holds: 2, Waiting: 1,
			Lease: 1500*time.Millisecond + 400*time.Microsecond, Token: 42, Master: "127.0.0.1:7000"},
		{Key: "sku:1", Holders: []string{"c"}, Holds: 1, Lease: 29 * time.Second, Token: 7, Master: "127.0.0.1:7001"},
		{Key: "sku:hot", Counted: true, Holders: []string{"d", "e"}, Units: map[string]int64{"d": 3, "e": 1}, Capacity: 10, Free: 6, Holds: 2,
			Lease: 29 * time.Second, Token: 9, Master: "127.0.0.1:7002"},
	}
}

// inspect's table names its columns as batchlock.HeldKey names its fields,
// shows the lease as a Go duration, and counts the locks.
func TestInspectTable(t *testing.T) {
	var b bytes.Buffer
	require.NoError(t, writeLocks(&b, sampleHeld(), "p:", "*"))
	lines := strings.Split(strings.TrimSuffix(b.String(), "\n"), "\n")
	require.Len(t, lines, 5, b.String())
	assert.Equal(t, []string{"KEY", "MODE", "HOLDERS", "HOLDS", "WAITING", "LEASE", "TOKEN", "MASTER"}, strings.Fields(lines[0]))
	assert.Equal(t, []string{"promo:1", "shared", "a,b", "2", "1", "1.5s", "42", "127.0.0.1:7000"}, strings.Fields(lines[1]))
	assert.Equal(t, []string{"sku:1", "exclusive", "c", "1", "0", "29s", "7", "127.0.0.1:7001"}, strings.Fields(lines[2]))
	assert.Equal(t, []string{"sku:hot", "counted", "d=3,e=1", "2", "0", "29s", "9", "127.0.0.1:7002"}, strings.Fields(lines[3]))
	assert.Equal(t, "3 locks", lines[4])
	assert.NotContains(t, b.String(), "FENCE")
	assert.NotContains(t, b.String(), "OWNERS")

	b.Reset()
	require.NoError(t, writeLocks(&b, sampleHeld()[1:2], "p:", "*"))
	assert.True(t, strings.HasSuffix(b.String(), "\n1 lock\n"), b.String())

	b.Reset()
	require.NoError(t, writeLocks(&b, nil, "p:", "sku:*"))
	assert.Equal(t, "no locks held (prefix \"p:\", pattern \"sku:*\")\n", b.String())
}

// inspect --json names its fields after batchlock.HeldKey's, in the
// command's snake case: lease_ms and token, not ttl_ms and fence.
func TestInspectJSON(t *testing.T) {
	var b bytes.Buffer
	require.NoError(t, cli.WriteJSON(&b, asJSON(sampleHeld())))
	var got []map[string]any
	require.NoError(t, json.Unmarshal(b.Bytes(), &got))
	require.Len(t, got, 3)
	assert.Equal(t, []string{"holders", "holds", "key", "lease_ms", "master", "mode", "owner", "token", "waiting"},
		slices.Sorted(maps.Keys(got[0])))
	assert.Equal(t, 1500.0, got[0]["lease_ms"])
	assert.Equal(t, 42.0, got[0]["token"])
	assert.Equal(t, "shared", got[0]["mode"])
	assert.Equal(t, "127.0.0.1:7000", got[0]["master"])
	assert.Equal(t, 29000.0, got[1]["lease_ms"])
	assert.Equal(t, "exclusive", got[1]["mode"])
	assert.Equal(t, "counted", got[2]["mode"])
	assert.Equal(t, map[string]any{"d": 3.0, "e": 1.0}, got[2]["units"])
	assert.Equal(t, 10.0, got[2]["capacity"])
	assert.Equal(t, 6.0, got[2]["free"])
	assert.NotContains(t, got[1], "capacity", "only a counted key has one")
}
