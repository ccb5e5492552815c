package hashtag

import "strings"

// SlotCount is the number of hash slots in a Redis Cluster.
const SlotCount = 16384

var crcTable = func() (t [256]uint16) {
	for i := range t {
		c := uint16(i) << 8
		for range 8 {
			if c&0x8000 != 0 {
				c = c<<1 ^ 0x1021
			} else {
				c <<= 1
			}
		}
		t[i] = c
	}
	return t
}()

// CRC16 returns the CRC16-CCITT (XMODEM) checksum of b, as Redis Cluster computes it.
func CRC16(b []byte) uint16 {
	return crc16(b)
}

// crc16 is generic so that Slot can hash a string without copying it into a []byte.
func crc16[T ~string | ~[]byte](b T) uint16 {
	var c uint16
	for i := 0; i < len(b); i++ {
		c = c<<8 ^ crcTable[byte(c>>8)^b[i]]
	}
	return c
}

// Slot returns the Redis Cluster hash slot of key, in [0, SlotCount).
func Slot(key string) int {
	if t, ok := Tag(key); ok {
		key = t
	}
	return int(crc16(key) & (SlotCount - 1))
}

// Tag returns the part of key that Redis hashes and true when key has a non-empty hash tag: the
// bytes between the first '{' and the first '}' after it. Otherwise it returns "" and false, and
// Redis hashes the whole key. Like Redis, Tag does not look further: "a{}{b}" has no tag.
func Tag(key string) (string, bool) {
	open := strings.IndexByte(key, '{')
	if open < 0 {
		return "", false
	}
	rest := key[open+1:]
	if n := strings.IndexByte(rest, '}'); n > 0 {
		return rest[:n], true
	}
	return "", false
}
