package batchlock

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/batchlock/batchlock/internal/owner"
	"github.com/batchlock/batchlock/internal/routing"
)

var (
	// ErrNotObtained: the keys are held by another owner (see ConflictError), or the wait ended first.
	ErrNotObtained = errors.New("batchlock: not obtained")
	// ErrLockLost: a held lock ended while its holder counted on it (a lease ran out, a key was taken
	// or deleted behind its back, its Client closed).
	ErrLockLost = errors.New("batchlock: lock lost")
	// ErrMaxHold is wrapped, with ErrLockLost, by the end of a lock held for its WithMaxHold.
	ErrMaxHold = errors.New("batchlock: held for its longest hold")
	// ErrNotHeld: an Unlock or Extend found keys without this lock's hold, or the lock released.
	ErrNotHeld = errors.New("batchlock: not held")
	// ErrInvalid is wrapped by every error about a bad call, nothing taken: bad input, refused
	// before anything is sent; found in Redis, units of a key with no capacity set, or a key asked
	// for exclusively, or for more units, that its owner holds shared or in units (two owners
	// waiting so would wait for each other); a Lock's or TryLock's also matches ErrNotObtained.
	ErrInvalid = errors.New("batchlock: invalid argument")
	// ErrNoReplicas: fewer replicas than WithReplicas asks for acknowledged in time; rolled back.
	ErrNoReplicas = errors.New("batchlock: not acknowledged by enough replicas")
	// ErrOverCapacity: more units asked than a key's capacity, refused at once, or a capacity
	// change that would leave fewer than the units held; nothing taken or changed.
	ErrOverCapacity = errors.New("batchlock: more units than the capacity")
	// ErrClosed: the Client is closed; with ErrLockLost, why Close ended a lock.
	ErrClosed = errors.New("batchlock: client closed")
)

// ConflictError is returned when keys are held by another owner, and
// matches ErrNotObtained: the caller's keys (without the prefix) found held, and
// who holds them. TryLock lists every key found held; a Lock whose WithWait
// ran out lists only the keys it waited for last (it asks in the global
// order and stops at the first held), and also wraps
// context.DeadlineExceeded.
type ConflictError struct {
	Keys []string
	// Holders names, for each key of Keys whose holders are known, the
	// owners holding it, sorted: one, or several for a key held shared.
	// Found by the call that met the conflict, in Redis or at this
	// Client's in-process gates; a key granted to a waiter is that
	// waiter's.
	Holders map[string][]string

	cause error // why the call stopped waiting; nil for TryLock
}

func (e *ConflictError) Error() string {
	msg := "batchlock: not obtained: held by another owner: " + describeHeld(e.Keys, e.Holders)
	if e.cause != nil {
		msg += ": " + inner(e.cause).Error()
	}
	return msg
}

// Unwrap returns ErrNotObtained, so that callers need test for one error,
// and why the call stopped waiting, if it waited.
func (e *ConflictError) Unwrap() []error {
	if e.cause == nil {
		return []error{ErrNotObtained}
	}
	return []error{ErrNotObtained, e.cause}
}

// checkContext refuses a nil context, which every call that sends
// something needs.
func checkContext(ctx context.Context) error {
	if ctx == nil {
		return invalid("context must not be nil")
	}
	return nil
}

// ended is the error of a call whose context ended, before it began or
// while it ran: the context's cause, wrapped.
func ended(ctx context.Context) error {
	return fmt.Errorf("batchlock: the call's context ended: %w", inner(context.Cause(ctx)))
}

func invalid(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrInvalid}, args...)...)
}

// upgradeRefused is the error of an owner asking exclusively, or for more
// units, for key, which it holds shared or in units.
func upgradeRefused(key string) error {
	return fmt.Errorf("%w: %w: %w: %q", ErrNotObtained, inner(ErrInvalid), owner.ErrUpgrade, key)
}

// noCapacity is the error of units asked of key, which has no capacity set.
func noCapacity(key string) error {
	return fmt.Errorf("%w: no capacity set: %q", ErrInvalid, key)
}

// describeKeys names the first few keys of a list, for error messages.
func describeKeys(keys []string) string { return describeHeld(keys, nil) }

// describeHeld names the first few keys of a list, each with its first
// holders where holders knows them: "sku:1" (by web-3:4711:9f2c...).
func describeHeld(keys []string, holders map[string][]string) string {
	const shownKeys, shownOwners = 5, 3
	var b strings.Builder
	for i, k := range keys {
		if i == shownKeys {
			fmt.Fprintf(&b, " and %d more", len(keys)-shownKeys)
			break
		}
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "%q", k)
		if owners := holders[k]; len(owners) > 0 {
			b.WriteString(" (by " + strings.Join(owners[:min(len(owners), shownOwners)], ", "))
			if len(owners) > shownOwners {
				fmt.Fprintf(&b, " and %d more", len(owners)-shownOwners)
			}
			b.WriteString(")")
		}
	}
	return b.String()
}

// prefix starts the message of every error the library makes, once: the
// outer error says it, and each error of the library written after the
// start of its message is wrapped with inner.
const prefix = "batchlock: "

// inner returns err for writing inside the message of another error of the
// library, after its start: its message without its own leading prefix. It
// unwraps to err, so that errors.Is and errors.As see through it. An error
// that does not start with the prefix (a caller's, go-redis's, a
// context's) is written as it is.
func inner(err error) error {
	if err == nil {
		return nil
	}
	return innerError{err}
}

type innerError struct{ err error }

func (e innerError) Error() string { return strings.TrimPrefix(e.err.Error(), prefix) }
func (e innerError) Unwrap() error { return e.err }

// described is what a call's part met (see routing.Error), said by the
// library once.
func described(e *routing.Error) error {
	said := *e
	said.Cause, said.Err = inner(e.Cause), inner(e.Err)
	return fmt.Errorf("batchlock: %w", &said)
}
