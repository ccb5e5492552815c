package hashtag_test

import (
	"crypto/sha256"
	"fmt"
	"strings"
	"testing"

	"github.com/batchlock/batchlock/hashtag"
)

func TestForSlot(t *testing.T) {
	const maxLen = 3
	seen := make(map[string]int, hashtag.SlotCount)
	for s := range hashtag.SlotCount {
		tag := hashtag.ForSlot(s)
		if got := hashtag.Slot("{" + tag + "}"); got != s {
			t.Fatalf("ForSlot(%d) = %q, which hashes to %d", s, tag, got)
		}
		if len(tag) == 0 || len(tag) > maxLen {
			t.Fatalf("ForSlot(%d) = %q, want 1 to %d bytes", s, tag, maxLen)
		}
		if strings.Trim(tag, "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ") != "" {
			t.Fatalf("ForSlot(%d) = %q, want only ASCII letters and digits", s, tag)
		}
		if prev, dup := seen[tag]; dup {
			t.Fatalf("ForSlot(%d) = ForSlot(%d) = %q", s, prev, tag)
		}
		seen[tag] = s
	}
}

// Fence counter keys in Redis are named after ForSlot: a changed tag would silently restart a
// slot's fencing tokens from zero, so the whole table is pinned.
func TestForSlotIsStable(t *testing.T) {
	samples := map[int]string{0: "06S", 1: "Qi", 12182: "9Le", 16383: "6ZJ"}
	for s, want := range samples {
		if got := hashtag.ForSlot(s); got != want {
			t.Errorf("ForSlot(%d) = %q, want %q", s, got, want)
		}
	}
	h := sha256.New()
	for s := range hashtag.SlotCount {
		fmt.Fprintln(h, hashtag.ForSlot(s))
	}
	const want = "ac2cb77ec1cf05b8103adf52248189e256c6c229fe59b1358d1c733726e13713"
	if got := fmt.Sprintf("%x", h.Sum(nil)); got != want {
		t.Errorf("ForSlot table checksum = %s, want %s", got, want)
	}
}

func TestForSlotOutOfRange(t *testing.T) {
	for _, s := range []int{-1, hashtag.SlotCount, 1 << 40} {
		func() {
			defer func() {
				msg, _ := recover().(string)
				if !strings.Contains(msg, "out of range") {
					t.Errorf("ForSlot(%d) panicked with %q, want an out of range message", s, msg)
				}
			}()
			hashtag.ForSlot(s)
		}()
	}
}

func TestForSlotDoesNotAllocate(t *testing.T) {
	hashtag.ForSlot(0)
	if n := testing.AllocsPerRun(100, func() { hashtag.ForSlot(12345) }); n != 0 {
		t.Errorf("ForSlot allocates %v times", n)
	}
}
