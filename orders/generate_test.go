package orders

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/batchlock/batchlock/hashtag"
)

func genConfig() GenConfig {
	return GenConfig{SKUs: 500, Orders: 400, MaxBasket: 60, MaxQty: 4, HotSKUs: 10, HotShare: 0.1, Seed: 7}
}

func TestGenerateIsDeterministicPerSeed(t *testing.T) {
	a, err := Generate(genConfig())
	require.NoError(t, err)
	b, err := Generate(genConfig())
	require.NoError(t, err)
	assert.Equal(t, a, b, "same seed, same orders")

	other := genConfig()
	other.Seed = 8
	c, err := Generate(other)
	require.NoError(t, err)
	assert.NotEqual(t, a, c, "another seed, other orders")
}

func TestGenerateUniformBaskets(t *testing.T) {
	cfg := genConfig()
	cfg.UniformBaskets = true
	orders, err := Generate(cfg)
	require.NoError(t, err)
	lines := 0
	for _, o := range orders {
		require.NotEmpty(t, o.Lines, o.ID)
		require.LessOrEqual(t, len(o.Lines), cfg.MaxBasket, o.ID)
		lines += len(o.Lines)
	}
	mean := float64(lines) / float64(len(orders))
	assert.InDelta(t, float64(cfg.MaxBasket+1)/2, mean, float64(cfg.MaxBasket)/10, "sizes alike in 1..MaxBasket")
}

func TestGenerateBasketsWithinBounds(t *testing.T) {
	cfg := genConfig()
	orders, err := Generate(cfg)
	require.NoError(t, err)
	require.Len(t, orders, cfg.Orders)

	ids := map[string]bool{}
	sizes := map[int]int{}
	for _, o := range orders {
		require.False(t, ids[o.ID], "order id %s twice", o.ID)
		ids[o.ID] = true
		require.NotEmpty(t, o.Lines, o.ID)
		require.LessOrEqual(t, len(o.Lines), cfg.MaxBasket, o.ID)
		sizes[len(o.Lines)]++
		skus := map[string]bool{}
		for _, l := range o.Lines {
			require.False(t, skus[l.SKU], "order %s has %s twice", o.ID, l.SKU)
			skus[l.SKU] = true
			require.True(t, l.Qty >= 1 && l.Qty <= cfg.MaxQty, "order %s: qty %d", o.ID, l.Qty)
			require.True(t, strings.HasPrefix(l.SKU, "sku-"), l.SKU)
		}
	}
	assert.Greater(t, sizes[1], 0, "some orders have a single line")
	big := 0
	for n, c := range sizes {
		if n > cfg.MaxBasket/2 {
			big += c
		}
	}
	assert.Greater(t, big, 0, "some baskets are large")
}

func TestGenerateHotSKUsContend(t *testing.T) {
	cfg := genConfig()
	orders, err := Generate(cfg)
	require.NoError(t, err)
	hot := map[string]bool{}
	for i := range cfg.HotSKUs {
		hot[SKU(i)] = true
	}
	perSKU := map[string]int{}
	lines := 0
	for _, o := range orders {
		for _, l := range o.Lines {
			perSKU[l.SKU]++
			lines++
		}
	}
	hotLines := 0
	for sku := range hot {
		hotLines += perSKU[sku]
	}
	// Uniform picks alone would give hot SKUs 10/500 of the lines (2%);
	// a 10% hot share gives them about 12%.
	assert.Greater(t, float64(hotLines)/float64(lines), 0.08)
	assert.Less(t, float64(hotLines)/float64(lines), 0.16)
}

func TestGenerateSpreadsOverSlots(t *testing.T) {
	cfg := genConfig()
	orders, err := Generate(cfg)
	require.NoError(t, err)
	stock := NewStock(nil, "demo:run1:", Catalogue(cfg.SKUs), 10)
	// The three masters of a six-node cluster serve a third of the slots
	// each: a catalogue must land on all of them, and evenly.
	var thirds [3]int
	for _, o := range orders {
		for _, k := range stock.Keys(o) {
			_, tagged := hashtag.Tag(k)
			require.False(t, tagged, "%s has a hash tag: it would pin SKUs to one slot", k)
			thirds[hashtag.Slot(k)*3/hashtag.SlotCount]++
		}
	}
	total := thirds[0] + thirds[1] + thirds[2]
	for i, n := range thirds {
		assert.InDelta(t, 1.0/3, float64(n)/float64(total), 0.06, "share of lines on master %d", i)
	}
}

// Under Zipf's law the first SKUs are drawn far more often than the last,
// popularity falling smoothly, and a big basket still has distinct SKUs.
func TestGenerateZipf(t *testing.T) {
	cfg := GenConfig{SKUs: 2000, Orders: 2000, MaxBasket: 200, MaxQty: 1, UniformBaskets: true, ZipfS: 1.1, ZipfV: 10, Seed: 3}
	orders, err := Generate(cfg)
	require.NoError(t, err)
	count := map[string]int{}
	for _, o := range orders {
		seen := map[string]bool{}
		for _, l := range o.Lines {
			require.False(t, seen[l.SKU], "order %s has %s twice", o.ID, l.SKU)
			seen[l.SKU] = true
			count[l.SKU]++
		}
	}
	first, tenth, middle := count[SKU(0)], count[SKU(10)], count[SKU(1000)]
	assert.Greater(t, first, tenth, "SKU(0) against SKU(10)")
	assert.Greater(t, tenth, 2*middle, "SKU(10) against SKU(1000)")
	assert.Positive(t, middle, "the tail is drawn too")
}

func TestGenerateBasketNeverExceedsCatalogue(t *testing.T) {
	orders, err := Generate(GenConfig{SKUs: 3, Orders: 50, MaxBasket: 10, MaxQty: 1, HotSKUs: 3, HotShare: 1, Seed: 1})
	require.NoError(t, err)
	for _, o := range orders {
		require.LessOrEqual(t, len(o.Lines), 3)
	}
}

func TestGenConfigValidate(t *testing.T) {
	for name, tc := range map[string]struct {
		change func(*GenConfig)
		want   string
	}{
		"no SKUs":             {func(c *GenConfig) { c.SKUs = 0 }, "0 SKUs"},
		"empty basket":        {func(c *GenConfig) { c.MaxBasket = 0 }, "basket of at most 0"},
		"zero qty":            {func(c *GenConfig) { c.MaxQty = 0 }, "quantity of at most 0"},
		"too many hot":        {func(c *GenConfig) { c.HotSKUs = 501 }, "501 hot SKUs out of 500"},
		"share above 1":       {func(c *GenConfig) { c.HotShare = 1.5 }, "hot share 1.5"},
		"negative":            {func(c *GenConfig) { c.Orders = -1 }, "-1 orders"},
		"negative promotions": {func(c *GenConfig) { c.Promos = -1 }, "-1 promotions"},
		"promotion share":     {func(c *GenConfig) { c.PromoShare = -0.5 }, "promotion share -0.5"},
		"flash share":         {func(c *GenConfig) { c.FlashShare = 2 }, "flash share 2"},
		"Zipf s of 1":         {func(c *GenConfig) { c.ZipfS, c.ZipfV = 1, 10 }, "Zipf s 1, v 10"},
		"Zipf v below 1":      {func(c *GenConfig) { c.ZipfS, c.ZipfV = 1.1, 0.5 }, "Zipf s 1.1, v 0.5"},
	} {
		t.Run(name, func(t *testing.T) {
			cfg := genConfig()
			tc.change(&cfg)
			_, err := Generate(cfg)
			require.Error(t, err)
			assert.Contains(t, err.Error(), tc.want)
		})
	}
}

// About PromoShare of the orders apply one of a few hot promotions; without
// promotions, no order has any.
func TestGeneratePromotions(t *testing.T) {
	plain, err := Generate(genConfig())
	require.NoError(t, err)
	cfg := genConfig()
	cfg.Promos, cfg.PromoShare = 3, 0.5
	promoted, err := Generate(cfg)
	require.NoError(t, err)
	require.Len(t, promoted, len(plain))
	with := map[string]int{}
	for i, o := range promoted {
		assert.Nil(t, plain[i].Promos)
		assert.LessOrEqual(t, len(o.Promos), 1)
		for _, p := range o.Promos {
			with[p]++
		}
	}
	total := with[Promo(0)] + with[Promo(1)] + with[Promo(2)]
	assert.Len(t, with, 3, "only the three promotions: %v", with)
	assert.InDelta(t, 0.5, float64(total)/float64(len(promoted)), 0.1)
	keys := NewStock(nil, "p:", nil, 1).PromoKeys(Order{Promos: []string{Promo(2)}})
	assert.Equal(t, []string{"p:promo:promo-002"}, keys)
}

// About FlashShare of the orders have a line of SKU(0), once.
func TestGenerateFlashSale(t *testing.T) {
	cfg := genConfig()
	cfg.FlashShare = 0.3
	flash, err := Generate(cfg)
	require.NoError(t, err)
	with := 0
	for _, o := range flash {
		n := 0
		for _, l := range o.Lines {
			if l.SKU == SKU(0) {
				n++
			}
		}
		require.LessOrEqual(t, n, 1, "order %s", o.ID)
		if n == 1 {
			with++
		}
	}
	assert.InDelta(t, 0.3, float64(with)/float64(len(flash)), 0.1)
}
