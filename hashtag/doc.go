// Package hashtag computes Redis Cluster hash slots and groups keys by slot.
//
// It has no dependency on Redis. What it guarantees:
//
//   - [CRC16] is CRC16-CCITT (XMODEM: polynomial 0x1021, initial value 0, no reflection), the
//     checksum Redis Cluster uses.
//   - [Slot] returns the slot Redis itself computes for a key (keyHashSlot in cluster.c), including
//     the hash-tag rule: if the key contains a '{', and a '}' follows that first '{', and at least
//     one byte lies between them, only those bytes are hashed; otherwise the whole key is. Keys are
//     treated as bytes, not as UTF-8. Slot does not allocate.
//   - [ForSlot] returns, for every slot, a tag of at most three ASCII letters and digits that hashes
//     to it. The mapping is fixed: batchlock names keys after it in Redis, so it will not change
//     between versions.
//   - [GroupBySlot] removes duplicate keys and returns one group per slot, in ascending slot order,
//     with the keys of each group in ascending byte order.
package hashtag
