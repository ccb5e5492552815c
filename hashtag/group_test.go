package hashtag_test

import (
	"fmt"
	"math/rand/v2"
	"reflect"
	"slices"
	"testing"

	"github.com/batchlock/batchlock/hashtag"
)

func TestGroupBySlot(t *testing.T) {
	tests := []struct {
		name string
		keys []string
		want []hashtag.Group
	}{
		{"nil", nil, nil},
		{"empty", []string{}, nil},
		{"one", []string{"foo"}, []hashtag.Group{{12182, []string{"foo"}}}},
		{"duplicates", []string{"foo", "bar", "foo", "bar", "foo"}, []hashtag.Group{
			{5061, []string{"bar"}},
			{12182, []string{"foo"}},
		}},
		{"ascending slots", []string{"foo", "a", "bar", ""}, []hashtag.Group{
			{0, []string{""}},
			{5061, []string{"bar"}},
			{12182, []string{"foo"}},
			{15495, []string{"a"}},
		}},
		{"tags co-locate, sorted within", []string{
			"{user1000}.following", "foo{bar}{zap}", "user1000", "{user1000}.followers", "bar",
		}, []hashtag.Group{
			{3443, []string{"user1000", "{user1000}.followers", "{user1000}.following"}},
			{5061, []string{"bar", "foo{bar}{zap}"}},
		}},
		{"byte order within", []string{"{t}b", "{t}B", "{t}a", "{t}\xff", "{t}\x00"}, []hashtag.Group{
			{hashtag.Slot("t"), []string{"{t}\x00", "{t}B", "{t}a", "{t}b", "{t}\xff"}},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			in := slices.Clone(tt.keys)
			got := hashtag.GroupBySlot(tt.keys)
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("GroupBySlot(%q) = %v, want %v", tt.keys, got, tt.want)
			}
			if !slices.Equal(in, tt.keys) {
				t.Errorf("GroupBySlot modified its input: %q, was %q", tt.keys, in)
			}
		})
	}
}

func TestGroupBySlotAppendDoesNotClobber(t *testing.T) {
	groups := hashtag.GroupBySlot([]string{"{a}1", "{a}2", "{b}1", "{b}2"})
	want := slices.Clone(groups[1].Keys)
	_ = append(groups[0].Keys, "intruder")
	if !slices.Equal(groups[1].Keys, want) {
		t.Errorf("second group = %q after appending to the first, want %q", groups[1].Keys, want)
	}
}

func TestGroupBySlotProperties(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for range 200 {
		keys := randomKeys(rng, rng.IntN(500))
		groups := hashtag.GroupBySlot(keys)

		distinct := make(map[string]bool)
		for _, k := range keys {
			distinct[k] = true
		}
		var total int
		for i, g := range groups {
			if i > 0 && g.Slot <= groups[i-1].Slot {
				t.Fatalf("group %d has slot %d after slot %d", i, g.Slot, groups[i-1].Slot)
			}
			if len(g.Keys) == 0 {
				t.Fatalf("group %d (slot %d) is empty", i, g.Slot)
			}
			for j, k := range g.Keys {
				if j > 0 && k <= g.Keys[j-1] {
					t.Fatalf("slot %d: %q after %q", g.Slot, k, g.Keys[j-1])
				}
				if s := hashtag.Slot(k); s != g.Slot {
					t.Fatalf("%q is in the group of slot %d, its slot is %d", k, g.Slot, s)
				}
				if !distinct[k] {
					t.Fatalf("%q is not an input key", k)
				}
			}
			total += len(g.Keys)
		}
		if total != len(distinct) {
			t.Fatalf("%d keys in groups, %d distinct keys in input", total, len(distinct))
		}
	}
}

// randomKeys returns n keys drawn from a small alphabet rich in braces, so that tags, empty tags and
// duplicates are all common.
func randomKeys(rng *rand.Rand, n int) []string {
	const alphabet = "{}{}ab\x00\xff"
	keys := make([]string, n)
	for i := range keys {
		b := make([]byte, rng.IntN(8))
		for j := range b {
			b[j] = alphabet[rng.IntN(len(alphabet))]
		}
		keys[i] = string(b)
	}
	return keys
}

var groupSink []hashtag.Group

func BenchmarkGroupBySlot(b *testing.B) {
	for _, n := range []int{100, 10_000} {
		keys := make([]string, n)
		for i := range keys {
			keys[i] = fmt.Sprintf("batchlock:sku:%08d", i)
		}
		b.Run(fmt.Sprint(n), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				groupSink = hashtag.GroupBySlot(keys)
			}
		})
	}
}
