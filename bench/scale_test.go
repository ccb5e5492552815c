package bench

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/batchlock/batchlock/hashtag"
	"github.com/batchlock/batchlock/localcluster"
)

// Nine masters sharing the slots evenly, as localcluster lays them out.
func nineMasters() []localcluster.Node {
	masters := make([]localcluster.Node, 9)
	per := hashtag.SlotCount / len(masters)
	for i := range masters {
		last := (i+1)*per - 1
		if i == len(masters)-1 {
			last = hashtag.SlotCount - 1
		}
		masters[i] = localcluster.Node{Addr: fmt.Sprintf("127.0.0.1:%d", 7000+i), Master: true, Slots: [][2]int{{i * per, last}}}
	}
	return masters
}

// Baskets on Touch masters have every SKU's key on one of the first Touch
// masters, SKU i on master i mod Touch, over scaleTags slots each; spread
// ones keep plain keys.
func TestScaleKeys(t *testing.T) {
	masters := nineMasters()
	const prefix = "scale1:"
	for _, tc := range []struct {
		touch   int
		wantErr bool
	}{{touch: 0}, {touch: 3}, {touch: 9}, {touch: 10, wantErr: true}} {
		t.Run(fmt.Sprint(tc.touch), func(t *testing.T) {
			keys, err := scaleKeys(ScaleLoad{MaxBasket: 40, Touch: tc.touch}, masters)
			if tc.wantErr {
				assert.Error(t, err)
				return
			}
			require.NoError(t, err)
			require.Len(t, keys, scaleSKUs)
			if tc.touch == 0 {
				assert.Equal(t, "sku:7", keys[7])
				return
			}
			slots := map[int]bool{}
			for i, k := range keys {
				slot := hashtag.Slot(prefix + k)
				slots[slot] = true
				assert.True(t, masters[i%tc.touch].ServesSlot(slot), "%s on master %d", k, i%tc.touch)
			}
			assert.Len(t, slots, tc.touch*scaleTags)
		})
	}
}

// A space is one slot: in one space every key is in one slot of the first
// master; in a space per master each basket's keys are in one slot, one
// of Touch, each on a master of its own.
func TestScaleSpaces(t *testing.T) {
	masters := nineMasters()
	const prefix = "scale1:"
	for _, tc := range []struct {
		load      ScaleLoad
		wantSlots int
	}{
		{ScaleLoad{MaxBasket: 40, Touch: 1, Batch: ScaleBatchSpace}, 1},
		{ScaleLoad{MaxBasket: 40, Touch: 3, Batch: ScaleBatchSpacePerMaster}, 3},
	} {
		t.Run(tc.load.String(), func(t *testing.T) {
			keys, err := scaleKeys(tc.load, masters)
			require.NoError(t, err)
			slots := map[int]bool{}
			for _, k := range keys {
				slots[hashtag.Slot(prefix+k)] = true
			}
			assert.Len(t, slots, tc.wantSlots)
			rng := rand.New(rand.NewPCG(1, 2))
			for range 200 {
				basket := scaleBasket(rng, tc.load, keys)
				require.NotEmpty(t, basket)
				assert.LessOrEqual(t, len(basket), tc.load.MaxBasket)
				in := map[int]bool{}
				for _, k := range basket {
					in[hashtag.Slot(prefix+k)] = true
				}
				assert.Len(t, in, 1, "a basket's keys in one space: %v", basket)
			}
		})
	}
}
