// Package orders is the SKU order-processing workload of the batchlock demo
// and benchmarks: a catalogue of SKUs with stock in a Redis Cluster, a
// deterministic stream of orders whose baskets span many SKUs (and so every
// master), processors that take an order, check stock for every line and
// either apply every line or reject the order, and an audit that proves
// whether stock was oversold.
//
// It is a module of its own, github.com/batchlock/batchlock/orders, and locks
// and writes with only what a user's processor can: batchlock's public API
// and go-redis. Its pauses are batchlock's own (internal/backoff), so that
// one definition of a jittered retry serves the library and its workload.
//
// # Data in Redis
//
// Each SKU is one hash, prefix+"stock:"+sku, with the fields initial, units
// (remaining), sold, fence (the largest fencing token that wrote it) and
// last (the order that wrote it last). Keys carry no hash tag, so a
// catalogue spreads over every slot and every master. A line is applied by
// one Lua script on its SKU's hash, so units and sold move together: on each
// SKU, initial == units + sold holds whatever happens between SKUs.
//
// # What the processors show
//
// [Locked] holds the whole basket with batchlock while it reads, checks and
// writes: no two orders interleave on a SKU, so stock cannot be oversold,
// and every write carries the lock's fencing token, which the SKU refuses
// when it goes backwards. [Unlocked] runs the same read, check and write
// without a lock: two orders that read the same stock before either writes
// both succeed, and stock goes below zero. [Audit] tells the two apart.
package orders
