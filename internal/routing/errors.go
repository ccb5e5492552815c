package routing

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"

	"github.com/redis/go-redis/v9"
)

// errUnrouted marks a call that was not sent because no master could be
// found for its slot (the cluster's map is being reloaded).
var errUnrouted = errors.New("no master known for the slot")

// Retryable reports errors after which a script call has not run, or may have
// run but is safe to repeat, and may succeed when sent again.
func Retryable(err error) bool {
	switch {
	case err == nil, errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return false
	case Refused(err):
		return true
	}
	var netErr net.Error
	return errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.As(err, &netErr)
}

// Refused reports errors with which a server refused a call without running
// it, and calls that were never sent.
func Refused(err error) bool {
	if err == nil {
		return false
	}
	var opErr *net.OpError
	if errors.As(err, &opErr) && opErr.Op == "dial" {
		return true
	}
	_, moved := redis.IsMovedError(err)
	_, ask := redis.IsAskError(err)
	return moved || ask || errors.Is(err, errUnrouted) || errors.Is(err, redis.ErrPoolTimeout) ||
		redis.IsTryAgainError(err) || redis.IsClusterDownError(err) || redis.IsLoadingError(err) ||
		redis.IsReadOnlyError(err) || redis.IsMasterDownError(err) ||
		// A script flushed between the digest and the source: send again.
		redis.HasErrorPrefix(err, "NOSCRIPT")
}

// Error is what a call's part met: err, in step (such as "acquire"), on
// slot, with the context's cause when it ended the call. Its message names
// all four; the library renders it in its own words (one prefix per
// message).
type Error struct {
	Step  string
	Slot  int
	What  string // " moved", " is being migrated", or ""
	Cause error  // the context's cause, when it ended the call
	Err   error
}

func (e *Error) Error() string {
	msg := fmt.Sprintf("%s: slot %d%s: ", e.Step, e.Slot, e.What)
	if e.Cause != nil {
		msg += e.Cause.Error() + ": "
	}
	return msg + e.Err.Error()
}

// Unwrap returns the cause and the error met.
func (e *Error) Unwrap() []error {
	if e.Cause != nil {
		return []error{e.Cause, e.Err}
	}
	return []error{e.Err}
}

// Describe explains the failure err of call c in step: the slot, what the
// error means there, and the context's cause when it ended the call.
func Describe(ctx context.Context, step string, c *Call, err error) *Error {
	e := &Error{Step: step, Slot: c.Slot, Err: err}
	if _, ask := redis.IsAskError(err); ask || redis.IsTryAgainError(err) {
		e.What = " is being migrated"
	} else if _, moved := redis.IsMovedError(err); moved {
		e.What = " moved"
	}
	if cause := context.Cause(ctx); cause != nil && !errors.Is(err, cause) {
		e.Cause = cause
	}
	return e
}
