// Package handoff lets waiting lock calls hear that a key they wait for was
// handed to them or released: a Hub keeps one sharded pub/sub connection per
// slot, shared by every waiter of a Client, and a Subscription is one
// waiter's interest in some lock keys, woken by a message on any of them
// and keeping the last grant addressed to its hold. The messages are those
// package wire defines; a waiter whose subscription is not confirmed, or
// whose listener was dropped, polls instead.
package handoff
