package localcluster

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestKeySlotLikeRedis(t *testing.T) {
	// Values from CLUSTER KEYSLOT on Redis 7.0 and the cluster spec.
	for key, slot := range map[string]int{
		"123456789":     12739,
		"{a}":           15495,
		"{b}":           3300,
		"{b}:1":         3300,
		"x{b}y{c}":      3300,
		"foo{}{bar}":    keySlot("foo{}{bar}"),
		"foo{{bar}}zap": keySlot("{bar"),
		"":              0,
	} {
		assert.Equal(t, slot, keySlot(key), "slot of %q", key)
	}
	assert.NotEqual(t, keySlot("bar"), keySlot("foo{}{bar}"), "an empty tag hashes the whole key")
	assert.Equal(t, 0x31C3, int(crc16("123456789")), "CRC16-XMODEM check value")
}

func TestParseReplAuth(t *testing.T) {
	assert.Equal(t, replAuth{user: "u", pass: "p"}, parseReplAuth([]any{"masterauth", "p", "masteruser", "u"}))
	assert.Equal(t, replAuth{}, parseReplAuth([]any{"masteruser", "", "masterauth", ""}))
}
