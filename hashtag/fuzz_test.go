package hashtag_test

import (
	"strings"
	"testing"

	"github.com/batchlock/batchlock/hashtag"
)

// referenceSlot follows keyHashSlot in Redis's cluster.c line by line, with a bitwise CRC, so that
// it shares no code or technique with the package.
func referenceSlot(key []byte) int {
	s := 0
	for s < len(key) && key[s] != '{' {
		s++
	}
	if s < len(key) {
		e := s + 1
		for e < len(key) && key[e] != '}' {
			e++
		}
		if e < len(key) && e != s+1 {
			key = key[s+1 : e]
		}
	}
	var crc uint16
	for _, b := range key {
		crc ^= uint16(b) << 8
		for range 8 {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
	}
	return int(crc % 16384)
}

func FuzzSlot(f *testing.F) {
	for _, k := range []string{
		"", "foo", "{user1000}.following", "foo{}{bar}", "foo{{bar}}zap", "foo{bar}{zap}",
		"{}", "{{a}}", "}{", "{a", "a}", "a}{b}", "日本語", "\x00\xff", "{\x00}",
	} {
		f.Add(k)
	}
	f.Fuzz(func(t *testing.T, key string) {
		got := hashtag.Slot(key)
		if want := referenceSlot([]byte(key)); got != want {
			t.Fatalf("Slot(%q) = %d, reference says %d", key, got, want)
		}
		if tag, ok := hashtag.Tag(key); ok {
			open := strings.IndexByte(key, '{')
			if tag == "" || strings.Contains(tag, "}") || !strings.HasPrefix(key[open:], "{"+tag+"}") {
				t.Fatalf("Tag(%q) = %q, which is not the text after the first '{'", key, tag)
			}
			if c := int(hashtag.CRC16([]byte(tag)) % hashtag.SlotCount); got != c {
				t.Fatalf("Slot(%q) = %d but CRC16 of its tag %q gives %d", key, got, tag, c)
			}
		} else if c := int(hashtag.CRC16([]byte(key)) % hashtag.SlotCount); got != c {
			t.Fatalf("Slot(%q) = %d but Tag finds no tag and CRC16 of the key gives %d", key, got, c)
		}
	})
}
