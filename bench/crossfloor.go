package bench

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/batchlock/batchlock/hashtag"
	"github.com/batchlock/batchlock/orders"
)

var (
	//go:embed floor/basket_lock.lua
	basketFloorLockSource string

	basketFloorLock = redis.NewScript(basketFloorLockSource)
)

// NewCrossFloorKind is the cross-process floor, the least a Redis lock
// costs when processors meet in Redis: each of its processors admits among
// its own tick's baskets in process (an earlier basket wins), sends per
// master one call that takes each admitted basket's keys there with the
// lock floor's work, a basket's keys on that master undone at its first
// held key, then one owner-checked delete per master of the parts of
// baskets refused on another master; the release is one owner-checked
// delete per master. floors are the processors' lock floors, each on a
// cluster client of its own. With a space (a hash tag), every lock key is
// in its slot: the co-located floor, one call per tick.
func NewCrossFloorKind(floors []*Floor, space string) BatchKind {
	name := NameCrossFloorProcessor
	if space != "" {
		name = NameCrossFloorOneSlot
	}
	return BatchKind{Name: name, New: func(i int, stock *orders.Stock) orders.Ticker {
		f := newFloor(floors[i].rdb, name, true)
		f.owned = true
		return &crossFloor{floor: f, stock: stock, space: space}
	}}
}

type crossFloor struct {
	floor *Floor // the lock floor's release, under this kind's name
	stock *orders.Stock
	space string
}

// basketPart is a basket's keys on one master, by slot.
type basketPart struct {
	basket int
	groups []hashtag.Group
}

func (f *crossFloor) Tick(ctx context.Context, batch []orders.Order) ([]orders.Fulfilled, []int, error) {
	baskets := make([][]string, len(batch))
	for i, o := range batch {
		baskets[i] = lockKeys(f.stock.Keys(o))
		for j, k := range baskets[i] {
			baskets[i][j] = orders.InSpace(f.space, k)
		}
	}
	admitted := (&admission{held: map[string]bool{}}).admit(baskets)
	masters, err := partsByMaster(ctx, f.floor.rdb, baskets, admitted)
	if err != nil {
		return nil, nil, err
	}
	owner := randomOwner()
	asked := time.Now()
	calls := make([]*floorCall, len(masters))
	for m, parts := range masters {
		args := []any{TTL.Milliseconds(), owner}
		for _, part := range parts {
			args = append(args, part.basket, len(part.groups))
			for _, g := range part.groups {
				args = append(args, FenceKey(g.Slot), len(g.Keys))
				for _, k := range g.Keys {
					args = append(args, k)
				}
			}
		}
		calls[m] = masterCall(parts[0].groups, args)
	}
	sendCalls(ctx, f.floor.rdb, basketFloorLock, calls)
	refused := map[int]bool{}                     // anywhere
	refusedOn := make([]map[int]bool, len(calls)) // by master
	tokens := map[string]int64{}
	var errs []error
	for m, c := range calls {
		r, err := basketReply(c.Reply)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: slot %d: %w", NameCrossFloorProcessor, c.Slot, err))
			continue
		}
		refusedOn[m] = map[int]bool{}
		for _, b := range r.refused {
			refused[int(b)], refusedOn[m][int(b)] = true, true
		}
		n := 0
		for _, part := range masters[m] {
			if refusedOn[m][part.basket] {
				continue
			}
			for _, g := range part.groups {
				for _, k := range g.Keys {
					if n < len(r.tokens) {
						tokens[k] = r.tokens[n]
					}
					n++
				}
			}
		}
		if n != len(r.tokens) {
			errs = append(errs, fmt.Errorf("%s: slot %d: %d tokens for %d keys", NameCrossFloorProcessor, c.Slot, len(r.tokens), n))
		}
	}
	all := func(int, int) bool { return true }
	if len(errs) > 0 {
		return nil, nil, errors.Join(append(errs, f.release(context.WithoutCancel(ctx), masters, owner, all))...)
	}
	if len(refused) > 0 {
		givenBack := func(m, b int) bool { return refused[b] && !refusedOn[m][b] }
		if err := f.release(ctx, masters, owner, givenBack); err != nil {
			return nil, nil, errors.Join(err, f.release(context.WithoutCancel(ctx), masters, owner, all))
		}
	}
	var taken []int
	for _, i := range admitted {
		if !refused[i] {
			taken = append(taken, i)
		}
	}
	out := f.stock.FulfilTaken(ctx, batch, taken, time.Since(asked), func(i, line int) int64 { return tokens[baskets[i][line]] }, 0)
	// The release's error changes nothing the orders did: their keys are
	// left to their lease, as orders.Batched leaves them.
	_ = f.release(context.WithoutCancel(ctx), masters, owner, func(_, b int) bool { return !refused[b] })
	return out, refusedOf(len(batch), taken), nil
}

// release deletes, one owner-checked call per master, the keys of the
// parts which says, by master and basket.
func (f *crossFloor) release(ctx context.Context, masters [][]basketPart, owner string, which func(master, basket int) bool) error {
	h := floorHeld{f: f.floor, owner: owner}
	for m, parts := range masters {
		var groups []hashtag.Group
		for _, part := range parts {
			if which(m, part.basket) {
				groups = append(groups, part.groups...)
			}
		}
		if groups != nil {
			h.masters = append(h.masters, groups)
		}
	}
	return h.Unlock(ctx)
}

// basketTake is basket_lock.lua's reply: the baskets it refused, and the
// tokens of the keys it took.
type basketTake struct {
	refused []int64
	tokens  []int64
}

func basketReply(c *redis.Cmd) (basketTake, error) {
	v, err := c.Slice()
	if err != nil {
		return basketTake{}, err
	}
	if len(v) != 2 {
		return basketTake{}, fmt.Errorf("a reply of %d parts, not 2", len(v))
	}
	refused, err := int64s(v[0])
	if err != nil {
		return basketTake{}, err
	}
	tokens, err := int64s(v[1])
	return basketTake{refused: refused, tokens: tokens}, err
}

// int64s is a reply part that is a list of integers.
func int64s(part any) ([]int64, error) {
	list, ok := part.([]any)
	if !ok {
		return nil, fmt.Errorf("a reply part of %T", part)
	}
	out := make([]int64, len(list))
	for i, x := range list {
		if out[i], ok = x.(int64); !ok {
			return nil, fmt.Errorf("a reply element of %T", x)
		}
	}
	return out, nil
}
