// Package batchlock locks many keys at once on Redis Cluster (or one Redis
// node): all of them or none, reentrant per owner, deadlock-free, with
// fencing tokens, automatic lease renewal, prompt hand-off to waiters and a
// signal when a lock is lost.
//
// A Client works on a go-redis client made from ClusterOptions; Check says
// whether a deployment is fit. Lock waits for its keys, TryLock makes one
// attempt, Do runs a function while it holds them. A Lock gives each key's
// fencing token, and ends with Unlock, Consume or its loss (Context,
// Err). WithShared keys are shared by readers; WithUnits keys are
// counted, held by many owners at once for their units within a capacity
// (SetCapacity). TryEach takes many baskets in one call, each whole or not
// at all; a Processor is a batch processor's admission on it, one per
// replica. Held, Inspect and ForceUnlock are for operators' tools.
//
// What is guaranteed, and how it works, is in docs/design.md
// (https://github.com/batchlock/batchlock/blob/main/docs/design.md); the
// README says how to use it, docs/faults.md names the tests of each
// guarantee, and docs/speed.md measures the cost.
package batchlock
