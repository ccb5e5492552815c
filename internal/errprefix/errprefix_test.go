package errprefix

import (
	"errors"
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestInner(t *testing.T) {
	closed := errors.New("batchlock: client closed")
	lost := errors.New("batchlock: lock lost")
	callers := errors.New("saving the order")
	for _, tc := range []struct {
		name string
		err  error
		want string
	}{
		{"two of ours", fmt.Errorf("%w: %w", lost, Inner(closed)), "batchlock: lock lost: client closed"},
		{"a step around ours", fmt.Errorf("batchlock: unlock: %w", Inner(fmt.Errorf("%w: %w", lost, Inner(closed)))), "batchlock: unlock: lock lost: client closed"},
		{"not ours", fmt.Errorf("%w: %w", lost, Inner(callers)), "batchlock: lock lost: saving the order"},
		{"the prefix later in the text", fmt.Errorf("%w: %w", lost, Inner(errors.New(`key "batchlock: a"`))), `batchlock: lock lost: key "batchlock: a"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			assert.Equal(t, tc.want, tc.err.Error())
		})
	}
	err := fmt.Errorf("%w: %w", lost, Inner(closed))
	assert.ErrorIs(t, err, lost)
	assert.ErrorIs(t, err, closed, "what Inner wraps stays visible")
	assert.NoError(t, Inner(nil))
}
