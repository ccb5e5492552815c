package hashtag_test

import (
	"strings"
	"testing"

	"github.com/batchlock/batchlock/hashtag"
)

func TestCRC16(t *testing.T) {
	tests := []struct {
		in   string
		want uint16
	}{
		{"", 0},
		// The check value of CRC16/XMODEM, quoted in the Redis Cluster specification.
		{"123456789", 0x31C3},
	}
	for _, tt := range tests {
		if got := hashtag.CRC16([]byte(tt.in)); got != tt.want {
			t.Errorf("CRC16(%q) = %#04x, want %#04x", tt.in, got, tt.want)
		}
	}
}

// The expected slots were obtained from redis-server 7.0.15 with CLUSTER KEYSLOT.
func TestSlot(t *testing.T) {
	tests := []struct {
		name string
		key  string
		want int
	}{
		{"plain", "foo", 12182},
		{"plain bar", "bar", 5061},
		{"check value", "123456789", 12739},
		{"tag following", "{user1000}.following", 3443},
		{"tag followers", "{user1000}.followers", 3443},
		{"tag alone", "user1000", 3443},
		{"empty tag then tag: whole key", "foo{}{bar}", 8363},
		{"nested: hashes {bar", "foo{{bar}}zap", 4015},
		{"two tags: first wins", "foo{bar}{zap}", 5061},
		{"empty key", "", 0},
		{"empty tag", "{}", 15257},
		{"empty tag at end", "x{}", 2608},
		{"double braces: hashes {a", "{{a}}", 10276},
		{"unclosed then closed: hashes {a", "{{a}", 10276},
		{"unclosed", "{a", 10276},
		{"close before open", "}{", 12793},
		{"close only", "a}", 5921},
		{"close before tag", "a}{b}", 3300},
		{"close before tag 2", "}{a}", 15495},
		{"tag in middle", "a{b}c", 3300},
		{"tag a", "{a}", 15495},
		{"lone open", "{", 4092},
		{"lone close", "}", 12090},
		{"two opens", "{{", 7007},
		{"two closes", "}}", 4415},
		{"tag is a brace", "{{}}", 4092},
		{"empty tag, extra close", "{}}", 14790},
		{"utf-8", "héllo", 11061},
		{"utf-8 tag", "{héllo}x", 11061},
		{"cjk", "日本語", 12788},
		{"cjk tag", "{日本}語", 10949},
		{"emoji", "😀{😀}", 2959},
		{"binary", "\x00\xff", 7920},
		{"nul tag", "{\x00}a", 0},
		{"high bytes", "\xff{\xfe}", 3793},
		{"long", strings.Repeat("a", 100000), 12528},
		{"long tag", "{" + strings.Repeat("t", 70000) + "}z", 16287},
		{"long tag alone", strings.Repeat("t", 70000), 16287},
		{"many opens", strings.Repeat("{", 5000) + "x}" + strings.Repeat("y", 5000), 13129},
		{"many opens, unclosed", strings.Repeat("{", 5000) + "x", 11576},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := hashtag.Slot(tt.key); got != tt.want {
				t.Errorf("Slot(%.40q) = %d, want %d", tt.key, got, tt.want)
			}
		})
	}
}

func TestTag(t *testing.T) {
	tests := []struct {
		key    string
		want   string
		wantOK bool
	}{
		{"", "", false},
		{"foo", "", false},
		{"{}", "", false},
		{"foo{}{bar}", "", false},
		{"{a", "", false},
		{"a}", "", false},
		{"}{", "", false},
		{"{{a}}", "{a", true},
		{"foo{{bar}}zap", "{bar", true},
		{"foo{bar}{zap}", "bar", true},
		{"a}{b}", "b", true},
		{"{user1000}.following", "user1000", true},
		{"{日本}語", "日本", true},
		{"{\x00}", "\x00", true},
	}
	for _, tt := range tests {
		got, ok := hashtag.Tag(tt.key)
		if got != tt.want || ok != tt.wantOK {
			t.Errorf("Tag(%q) = %q, %v; want %q, %v", tt.key, got, ok, tt.want, tt.wantOK)
		}
	}
}

func TestSlotDoesNotAllocate(t *testing.T) {
	keys := []string{"", "foo", "{user1000}.following", "foo{}{bar}", strings.Repeat("k", 1000)}
	for _, k := range keys {
		if n := testing.AllocsPerRun(100, func() { hashtag.Slot(k) }); n != 0 {
			t.Errorf("Slot(%.20q) allocates %v times", k, n)
		}
		if n := testing.AllocsPerRun(100, func() { hashtag.Tag(k) }); n != 0 {
			t.Errorf("Tag(%.20q) allocates %v times", k, n)
		}
	}
}

var sink int

func BenchmarkSlot(b *testing.B) {
	for _, k := range []string{"batchlock:sku:1234567", "batchlock:{order:42}:sku:1234567"} {
		b.Run(k, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				sink += hashtag.Slot(k)
			}
		})
	}
}
