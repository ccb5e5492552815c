package script

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"

	"github.com/redis/go-redis/v9"

	"github.com/batchlock/batchlock/internal/errprefix"
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

// Describe explains the failure err of call c in step (such as "batchlock:
// acquire"): the slot, what the error means there, and the context's cause
// when it ended the call.
func Describe(ctx context.Context, step string, c *Call, err error) error {
	what := ""
	if _, ask := redis.IsAskError(err); ask || redis.IsTryAgainError(err) {
		what = " is being migrated"
	} else if _, moved := redis.IsMovedError(err); moved {
		what = " moved"
	}
	if cause := context.Cause(ctx); cause != nil && !errors.Is(err, cause) {
		return fmt.Errorf("%s: slot %d%s: %w: %w", step, c.Slot, what, errprefix.Inner(cause), errprefix.Inner(err))
	}
	return fmt.Errorf("%s: slot %d%s: %w", step, c.Slot, what, errprefix.Inner(err))
}
