package wire

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestOwnerEscaping(t *testing.T) {
	for _, owner := range []string{"plain-id_1.x:y/z", "a b", "a,b=c@d*e%f", "*", "#", "#12", "%41", "ü", "a\tb", "a\nb\r", "\x00\x7f", "ü x"} {
		field := EscapeOwner(owner)
		assert.NotRegexp(t, `[\x00-\x20\x7f]`, field)
		assert.NotContains(t, field, ",")
		assert.NotContains(t, field, "=")
		assert.NotContains(t, field, "@")
		assert.NotEqual(t, SharedOwner, field)
		assert.NotContains(t, field, CountedOwner, "no owner field reads as a counted key's")
		assert.Equal(t, owner, UnescapeOwner(field), "round trip of %q", owner)
	}
	assert.Equal(t, "plain", EscapeOwner("plain"), "ordinary ids are stored as they are")
}

func TestParseSharedLock(t *testing.T) {
	now := time.UnixMilli(1000)
	s, ok := ParseLock("7 h:w@2000=w=fence:{x},h:r@2000s=r=fence:{x},h:old@500p=o=fence:{x} h:1=2000=b%20b,h:2=3000g=a,h:3=900=c,h:4=2000=a *", now)
	require.True(t, ok)
	assert.True(t, s.Shared)
	assert.Equal(t, []string{"a", "b b"}, s.Holders, "live holders, a grant's too, sorted, once each")
	assert.Equal(t, 3, s.Holds)
	assert.Equal(t, 2, s.Waiting)
	assert.Equal(t, int64(7), s.Token)

	s, ok = ParseLock("9 - h:1=2000,h:2=2000 o%20x", now)
	require.True(t, ok)
	assert.False(t, s.Shared)
	assert.Equal(t, "o x", s.Owner)
	assert.Equal(t, []string{"o x"}, s.Holders)
	assert.Equal(t, 2, s.Holds)
}

func TestEscapeGlob(t *testing.T) {
	assert.Equal(t, `a\*b\?c\[d\]e\\f:`, escapeGlob(`a*b?c[d]e\f:`))
	assert.Equal(t, "batchlock:", escapeGlob("batchlock:"))
}
