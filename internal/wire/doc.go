// Package wire is the Go half of batchlock's contract with Redis: the names
// of the keys under a Client's prefix (Keyspace), the value of a lock key
// (ParseLock, HoldsIn, PlaceIn), owner and hold ids, the messages of the
// hand-off channels, the Lua scripts (embedded from scripts/), the encoders
// of their arguments and the decoders of their replies. The other half is
// scripts/layout.lua, the one definition of a lock key's value for the
// scripts, which describes it field by field. Nothing else in the module
// knows the layout; tools read it through the admin API.
//
// Keys, all under the prefix:
//   - prefix+key, the lock key of a user key (its own {tag} kept, so that
//     keys co-located stay so): a string "<token> <queue> <holds> <owner>"
//     (the fencing token, the waiters' places, the holds with the server
//     time each ends, and the owner). It expires with its longest live hold,
//     or up to a lease later for a shared or counted key whose holds are
//     written in place (layout.lua says how).
//   - prefix+"fence:{"+tag+"}", one per slot (tag: hashtag.ForSlot of the
//     slot; Keyspace.Fence): the slot's fencing counter, which a fresh
//     ownership increments (INCRBY) for its token. It never expires.
//   - prefix+"cancel:{"+tag+"}:"+hold (Keyspace.CancelMark): a hold cancelled
//     by a rollback, for one lease, so that a late acquire of that hold (a
//     frozen master) cannot take its key.
//   - prefix+"cancel:{"+tag+"}:c:"+change (Keyspace.ChangeMark): a change
//     of a capacity made, with its reply, for a minute, so that the call
//     sent again does not make it twice.
//   - prefix+"units:{"+tag+"}:"+key (Keyspace.Capacity): a counted key's
//     capacity, in its slot. It never expires.
//
// User keys starting with "fence:{", "cancel:{" or "units:{" are reserved. Hold fields
// and default owner ids come from crypto/rand (RandomID). Owner ids, a
// caller's too, are stored escaped (EscapeOwner), so that none reads as a
// separator or as "*", the owner field of a key held shared.
//
// Messages: a grant is announced with SPUBLISH on a channel named like the
// lock key, its message the hold field of the waiter it is for, a space and
// the key's new fencing token; ReleasedMessage when a key is freed with no
// live place left in its queue, or by a forced release: every waiter of the
// key then tries again. A waiter whose place lapsed, and a reader that may
// join once the writer ahead of it left, are told with AgainMessage and their
// own hold field, which is no hand-off.
//
// Package wiretest holds an in-memory fake of the scripts and the test
// binaries' redis-server.
package wire
