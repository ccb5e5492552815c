// Package pgorders is a batch order processor whose stock lives in
// PostgreSQL, locked with batchlock: the pattern to copy when the data a lock
// protects is in a SQL database, and the workload of the demo's
// --store=postgres.
//
// Each order takes three steps, in this order:
//
//  1. Lock the basket (every SKU at once) with its own deadline, before
//     BEGIN: a transaction never waits for a lock, so the wait spends no
//     statement or transaction timeout of the database and holds no
//     connection.
//  2. Open the transaction in the lock's context and run every statement
//     and the COMMIT in it. The moment the lock is lost, its connection is
//     closed, so PostgreSQL rolls the transaction back at once (and frees
//     its row locks for the next owner); a COMMIT is sent only while the lock
//     holds.
//  3. Write every stock row with the key's fencing token: UPDATE … WHERE
//     fence <= token. A holder whose lock was lost while it was paused (a GC
//     pause, a stalled VM) and whose write reaches the database after the
//     next owner's changes no row, and its transaction is rolled back.
//
// With Processor.Counted, orders hold units of their SKUs instead
// (batchlock.WithUnits), side by side: each row is then guarded by its own
// stock (UPDATE … WHERE units >= qty), each order recorded once, and a
// committed sale consumed (SellOrder, docs/sql.md).
//
// # Data in PostgreSQL
//
// stock has one row per SKU: initial and remaining units, fence (the largest
// fencing token that wrote the row) and writes (how many orders wrote it).
// orders has one row per accepted order, order_lines one per line, with the
// token its write carried and its place among the row's writes (write_seq).
// [Store.Audit] reads them back and checks that nothing was oversold, that
// every accepted order has all its lines, and that along each row's writes
// the tokens only grew: no row was written by a stale token.
package pgorders
