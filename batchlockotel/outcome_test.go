package batchlockotel_test

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/batchlock/batchlock/batchlock"
	"github.com/batchlock/batchlock/batchlockotel"
)

func TestOutcome(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want string
	}{
		{&batchlock.ConflictError{Keys: []string{"a"}}, batchlockotel.OutcomeConflict},
		{fmt.Errorf("%w: %w", batchlock.ErrNotObtained, batchlock.ErrNoReplicas), batchlockotel.OutcomeNoReplicas},
		{fmt.Errorf("%w: waiting: %w", batchlock.ErrNotObtained, context.DeadlineExceeded), batchlockotel.OutcomeTimeout},
		{batchlock.ErrClosed, batchlockotel.OutcomeClosed},
		{errors.New("connection refused"), batchlockotel.OutcomeError},
	} {
		assert.Equal(t, tc.want, batchlockotel.Outcome(tc.err), "%v", tc.err)
	}
}
