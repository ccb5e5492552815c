package hashtag

import (
	"fmt"
	"sync"
)

// The order of this alphabet and of the search below fixes which tag each slot gets; changing
// either renames keys that batchlock has already written to Redis.
const tagAlphabet = "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"

// slotTags is built on first use, not at init, so that programs that never call ForSlot do not pay
// for it.
var slotTags = sync.OnceValue(func() *[SlotCount]string {
	var tags [SlotCount]string
	missing := SlotCount
	// Lengths are searched in increasing order, so each slot gets one of its shortest tags; within a
	// length, the first in alphabet order.
	base := len(tagAlphabet)
	for n, count := 1, base; missing > 0; n, count = n+1, count*base {
		buf := make([]byte, n)
		for v := 0; v < count && missing > 0; v++ {
			for i, x := n-1, v; i >= 0; i, x = i-1, x/base {
				buf[i] = tagAlphabet[x%base]
			}
			if s := crc16(buf) & (SlotCount - 1); tags[s] == "" {
				tags[s] = string(buf)
				missing--
			}
		}
	}
	return &tags
})

// ForSlot returns a short tag s, made of ASCII letters and digits, with Slot("{"+s+"}") == slot.
// Its tags are at most three bytes long, and the same slot always gets the same tag. Like an index
// expression, ForSlot panics if slot is outside [0, SlotCount).
func ForSlot(slot int) string {
	if slot < 0 || slot >= SlotCount {
		panic(fmt.Sprintf("hashtag: slot %d out of range [0, %d)", slot, SlotCount))
	}
	return slotTags()[slot]
}
