package cluster_test

import (
	"context"
	"math/rand/v2"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/redis/go-redis/v9"

	"github.com/batchlock/batchlock/hashtag"
)

// TestHashtagParity checks hashtag.Slot against CLUSTER KEYSLOT on a real server, for edge cases,
// thousands of random keys, and every tag ForSlot hands out.
func TestHashtagParity(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	// Any one node answers CLUSTER KEYSLOT for any key; a node client keeps the cluster client's
	// routing out of the way of a command whose argument is not a key to route by.
	node, err := newClient(t).MasterForKey(ctx, "parity")
	if err != nil {
		t.Fatalf("finding a node: %v", err)
	}

	seed := uint64(time.Now().UnixNano())
	t.Logf("random keys from seed %d", seed)
	keys := append(parityEdgeCases(), parityRandomKeys(rand.New(rand.NewPCG(seed, 0)), 5000)...)
	for s := range hashtag.SlotCount {
		keys = append(keys, "batchlock:fence:{"+hashtag.ForSlot(s)+"}")
	}

	pipe := node.Pipeline()
	cmds := make([]*redis.IntCmd, len(keys))
	for i, k := range keys {
		cmds[i] = pipe.ClusterKeySlot(ctx, k)
	}
	if _, err := pipe.Exec(ctx); err != nil {
		t.Fatalf("CLUSTER KEYSLOT pipeline: %v", err)
	}
	mismatches := 0
	for i, k := range keys {
		if got, want := hashtag.Slot(k), int(cmds[i].Val()); got != want {
			t.Errorf("Slot(%.80q) = %d, server says %d", k, got, want)
			if mismatches++; mismatches == 20 {
				t.Fatal("too many mismatches")
			}
		}
	}
	t.Logf("%d keys agree with the server", len(keys))
}

func parityEdgeCases() []string {
	return []string{
		"", "foo", "bar", "123456789", "{user1000}.following", "{user1000}.followers",
		"foo{}{bar}", "foo{{bar}}zap", "foo{bar}{zap}", "{}", "{{a}}", "{{a}", "}{", "{a", "a}",
		"a}{b}", "}{a}", "{", "}", "{{", "}}", "{{}}", "{}}", "x{}",
		"héllo", "{héllo}x", "日本語", "{日本}語", "😀{😀}", "\x00", "\x00\xff", "{\x00}a", "\xff{\xfe}",
		"{\xff}", "\r\n", "{ }", "a b", strings.Repeat("a", 100_000),
		"{" + strings.Repeat("t", 70_000) + "}z", strings.Repeat("{", 5000) + "x}",
	}
}

// parityRandomKeys mixes keys of arbitrary bytes, keys of UTF-8 text, and keys built mostly of
// braces, since brace placement is where an implementation most likely departs from Redis.
func parityRandomKeys(rng *rand.Rand, n int) []string {
	keys := make([]string, n)
	for i := range keys {
		size := rng.IntN(40)
		if rng.IntN(100) == 0 {
			size = rng.IntN(5000)
		}
		b := make([]byte, 0, size)
		switch i % 3 {
		case 0:
			for range size {
				b = append(b, byte(rng.Uint32()))
			}
		case 1:
			for range size {
				b = utf8.AppendRune(b, rng.Int32N(utf8.MaxRune+1))
			}
		default:
			const alphabet = "{{}}ab\x00\xffé"
			for range size {
				b = append(b, alphabet[rng.IntN(len(alphabet))])
			}
		}
		keys[i] = string(b)
	}
	return keys
}
