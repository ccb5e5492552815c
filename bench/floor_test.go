package bench

import (
	"context"
	"fmt"
	"slices"
	"testing"

	"github.com/batchlock/batchlock/hashtag"
)

func TestFenceKeyIsInItsSlot(t *testing.T) {
	for _, slot := range []int{0, 1, 5461, 12182, hashtag.SlotCount - 1} {
		if got := hashtag.Slot(FenceKey(slot)); got != slot {
			t.Errorf("FenceKey(%d) = %q, in slot %d", slot, FenceKey(slot), got)
		}
	}
}

func TestBySlotGroupsInOrder(t *testing.T) {
	keys := []string{"{a}1", "{b}1", "{a}2", "{c}1", "{b}2", "{a}3"}
	got := bySlot(keys)
	want := []hashtag.Group{
		{Slot: hashtag.Slot("{a}"), Keys: []string{"{a}1", "{a}2", "{a}3"}},
		{Slot: hashtag.Slot("{b}"), Keys: []string{"{b}1", "{b}2"}},
		{Slot: hashtag.Slot("{c}"), Keys: []string{"{c}1"}},
	}
	if len(got) != len(want) {
		t.Fatalf("got %v, want %v", got, want)
	}
	for i := range want {
		if got[i].Slot != want[i].Slot || !slices.Equal(got[i].Keys, want[i].Keys) {
			t.Errorf("group %d: got %v, want %v", i, got[i], want[i])
		}
	}
	if n := len(bySlot(Keys("k", 1000))); n < 900 {
		t.Errorf("1000 spread keys in %d slots", n)
	}
}

func TestLockCallArgs(t *testing.T) {
	groups := []hashtag.Group{{Slot: 7, Keys: []string{"x", "y"}}, {Slot: 9, Keys: []string{"z"}}}
	lease := TTL.Milliseconds()
	for _, tc := range []struct {
		fenced bool
		owner  string
		want   []any
	}{
		{false, "", []any{lease, "x", "y", "z"}},
		{true, "", []any{lease, FenceKey(7), 2, "x", "y", FenceKey(9), 1, "z"}},
		{true, "o1", []any{lease, "o1", FenceKey(7), 2, "x", "y", FenceKey(9), 1, "z"}},
	} {
		c := lockCall(groups, tc.fenced, tc.owner)
		if fmt.Sprint(c.Args) != fmt.Sprint(tc.want) || cap(c.Args) != len(tc.want) {
			t.Errorf("fenced %v: args %v (cap %d), want %v", tc.fenced, c.Args, cap(c.Args), tc.want)
		}
		if c.Slot != 7 || c.Key != "x" {
			t.Errorf("fenced %v: routed by slot %d, key %v", tc.fenced, c.Slot, c.Key)
		}
	}
}

// recorder is a Locker that records the batches it is asked for.
type recorder struct {
	name    string
	batches [][]string
}

func (r *recorder) Name() string       { return r.name }
func (r *recorder) Commands() []string { return nil }
func (r *recorder) Lock(_ context.Context, keys []string) (Held, error) {
	r.batches = append(r.batches, keys)
	return r, nil
}
func (r *recorder) Unlock(context.Context) error { return nil }

func TestOneSlotTagsEveryKey(t *testing.T) {
	rec := &recorder{name: NameFencedFloor}
	l := OneSlot{rec}
	if l.Name() != NameFencedFloorOneSlot {
		t.Errorf("name %q", l.Name())
	}
	if err := LockUnlock(context.Background(), l, Keys("k", 50)); err != nil {
		t.Fatal(err)
	}
	if groups := bySlot(rec.batches[0]); len(groups) != 1 || len(groups[0].Keys) != 50 {
		t.Errorf("one-slot keys in %d slots", len(groups))
	}
}

func TestRunLatencySkips(t *testing.T) {
	bl, seq, par := &recorder{name: NameBatchlock}, &recorder{name: NameRedsyncSeq}, &recorder{name: NameRedsyncPar}
	res, err := RunLatency(context.Background(), []Locker{bl, seq, par}, LatencyPlan{Keys: 3, Iterations: 4, Batch: 2, Skip: SlowAtLargest})
	if err != nil {
		t.Fatal(err)
	}
	if len(res) != 2 || res[0].Library != NameBatchlock || res[1].Library != NameRedsyncPar || len(res[1].Samples) != 4 {
		t.Errorf("results %+v", res)
	}
	if len(seq.batches) != 0 {
		t.Errorf("a skipped locker ran %d times", len(seq.batches))
	}
}
