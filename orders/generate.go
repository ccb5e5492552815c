package orders

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
)

// Order is one customer order: a basket of distinct SKUs and a quantity of
// each.
type Order struct {
	ID    string
	Lines []Line
	// Promos are the promotions the order applies: it reads them, and
	// writes nothing to them.
	Promos []string
}

// Line is one SKU of an order.
type Line struct {
	SKU string
	Qty int64
}

// GenConfig describes a stream of orders.
type GenConfig struct {
	SKUs      int     // catalogue size: SKUs are SKU(0) .. SKU(SKUs-1)
	Orders    int     // number of orders
	MaxBasket int     // lines per order, 1..MaxBasket, small baskets more likely
	MaxQty    int64   // units per line, 1..MaxQty
	HotSKUs   int     // SKU(0) .. SKU(HotSKUs-1) are hot
	HotShare  float64 // probability that a line picks a hot SKU, in [0, 1]
	// UniformBaskets draws every basket size in 1..MaxBasket alike, for a
	// heavier load than the power law's.
	UniformBaskets bool
	// ZipfS, when above 1, draws the SKUs that are not hot by Zipf's law:
	// SKU(k) with a probability in proportion to (ZipfV + k)^-ZipfS, so
	// that popularity falls off smoothly from SKU(0) rather than in two
	// steps. ZipfV is at least 1.
	ZipfS, ZipfV float64
	// Promos is the number of promotions, Promo(0) .. Promo(Promos-1), and
	// PromoShare the probability, in [0, 1], that an order applies one of
	// them. Few promotions in many orders make them hot keys that orders
	// only read. Without promotions the orders are those of earlier
	// versions, seed for seed.
	Promos     int
	PromoShare float64
	// FlashShare is the probability, in [0, 1], that an order has a line
	// of SKU(0), the flash sale's SKU, besides its basket: one SKU in a
	// large share of the orders. At 0 the orders are those of earlier
	// versions, seed for seed.
	FlashShare float64
	Seed       uint64 // same seed, same orders
}

// Validate reports the first setting that cannot generate orders.
func (c GenConfig) Validate() error {
	switch {
	case c.SKUs < 1:
		return fmt.Errorf("orders: %d SKUs: need at least 1", c.SKUs)
	case c.Orders < 0:
		return fmt.Errorf("orders: %d orders: must not be negative", c.Orders)
	case c.MaxBasket < 1:
		return fmt.Errorf("orders: basket of at most %d SKUs: need at least 1", c.MaxBasket)
	case c.MaxQty < 1:
		return fmt.Errorf("orders: quantity of at most %d: need at least 1", c.MaxQty)
	case c.HotSKUs < 0 || c.HotSKUs > c.SKUs:
		return fmt.Errorf("orders: %d hot SKUs out of %d", c.HotSKUs, c.SKUs)
	case math.IsNaN(c.HotShare) || c.HotShare < 0 || c.HotShare > 1:
		return fmt.Errorf("orders: hot share %v must be in [0, 1]", c.HotShare)
	case c.Promos < 0:
		return fmt.Errorf("orders: %d promotions: must not be negative", c.Promos)
	case math.IsNaN(c.PromoShare) || c.PromoShare < 0 || c.PromoShare > 1:
		return fmt.Errorf("orders: promotion share %v must be in [0, 1]", c.PromoShare)
	case math.IsNaN(c.FlashShare) || c.FlashShare < 0 || c.FlashShare > 1:
		return fmt.Errorf("orders: flash share %v must be in [0, 1]", c.FlashShare)
	case c.ZipfS != 0 && !(c.ZipfS > 1 && c.ZipfV >= 1):
		return fmt.Errorf("orders: Zipf s %v, v %v: s must be above 1 and v at least 1", c.ZipfS, c.ZipfV)
	}
	return nil
}

// SKU names the i-th SKU of a catalogue.
func SKU(i int) string { return fmt.Sprintf("sku-%05d", i) }

// Promo names the i-th promotion.
func Promo(i int) string { return fmt.Sprintf("promo-%03d", i) }

// Catalogue returns the names of n SKUs.
func Catalogue(n int) []string {
	skus := make([]string, n)
	for i := range skus {
		skus[i] = SKU(i)
	}
	return skus
}

// Generate returns the orders cfg describes, the same for the same cfg.
//
// Basket sizes follow a power law, as in real order books: 1 + MaxBasket*u^8
// for u uniform in [0, 1), so that half of the orders have one or two
// SKUs, the mean is about MaxBasket/9 and one order in twelve has more
// than MaxBasket/2; with UniformBaskets every size alike, a mean of about
// MaxBasket/2. Hot SKUs appear in many baskets, so that orders contend
// for them and run them out of stock during a run.
func Generate(cfg GenConfig) ([]Order, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	rng := rand.New(rand.NewPCG(cfg.Seed, 0x6f72646572730a))
	maxBasket := min(cfg.MaxBasket, cfg.SKUs)
	pick := func() int { return rng.IntN(cfg.SKUs) }
	if cfg.ZipfS != 0 {
		zipf := rand.NewZipf(rng, cfg.ZipfS, cfg.ZipfV, uint64(cfg.SKUs-1))
		pick = func() int { return int(zipf.Uint64()) }
	}
	orders := make([]Order, cfg.Orders)
	for i := range orders {
		size := 1 + int(float64(maxBasket)*math.Pow(rng.Float64(), 8))
		if cfg.UniformBaskets {
			size = 1 + rng.IntN(maxBasket)
		}
		orders[i] = Order{ID: fmt.Sprintf("o%07d", i), Lines: basket(rng, cfg, size, pick)}
		if cfg.Promos > 0 && rng.Float64() < cfg.PromoShare {
			orders[i].Promos = []string{Promo(rng.IntN(cfg.Promos))}
		}
		if cfg.FlashShare > 0 && rng.Float64() < cfg.FlashShare && !slices.ContainsFunc(orders[i].Lines, func(l Line) bool { return l.SKU == SKU(0) }) {
			orders[i].Lines = append(orders[i].Lines, Line{SKU: SKU(0), Qty: 1 + rng.Int64N(cfg.MaxQty)})
		}
	}
	return orders, nil
}

// basket draws size distinct SKUs with their quantities, those that are
// not hot by pick.
func basket(rng *rand.Rand, cfg GenConfig, size int, pick func() int) []Line {
	seen := make(map[int]bool, size)
	lines := make([]Line, 0, size)
	hotLeft := cfg.HotSKUs
	for len(lines) < size {
		var i int
		if hotLeft > 0 && rng.Float64() < cfg.HotShare {
			i = rng.IntN(cfg.HotSKUs)
		} else {
			i = pick()
		}
		if seen[i] {
			continue
		}
		seen[i] = true
		if i < cfg.HotSKUs {
			hotLeft--
		}
		lines = append(lines, Line{SKU: SKU(i), Qty: 1 + rng.Int64N(cfg.MaxQty)})
	}
	return lines
}
