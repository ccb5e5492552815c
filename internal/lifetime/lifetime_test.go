package lifetime

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

type ownerKey struct{}

func TestLifetimeEndsOnceKeepingValues(t *testing.T) {
	parent, cancel := context.WithCancel(context.WithValue(t.Context(), ownerKey{}, "order-1"))
	l := New(parent)
	cancel()
	require.NoError(t, l.Err(), "the call's context ending does not end the lock")
	assert.Equal(t, "order-1", l.Context().Value(ownerKey{}), "values are kept")

	first, second := errors.New("lost"), errors.New("released")
	assert.True(t, l.End(first))
	assert.False(t, l.End(second), "only the first end counts")
	<-l.Done()
	assert.Same(t, first, l.Err())
	assert.Same(t, first, context.Cause(l.Context()))
}

// fakeLock is a lock whose loss and unlock the test decides.
type fakeLock struct {
	life      *Lifetime
	unlocked  int
	unlockErr error
}

func (f *fakeLock) Context() context.Context { return f.life.Context() }
func (f *fakeLock) Err() error               { return f.life.Err() }
func (f *fakeLock) Unlock(ctx context.Context) error {
	f.unlocked++
	if ctx.Err() != nil {
		return ctx.Err()
	}
	f.life.End(errNotHeld)
	return f.unlockErr
}

var (
	errLost    = errors.New("lost")
	errNotHeld = errors.New("not held")
)

func TestDo(t *testing.T) {
	boom := errors.New("boom")
	for _, tc := range []struct {
		name      string
		lockErr   error
		unlockErr error
		fn        func(ctx context.Context, l *fakeLock) error
		want      []error // wrapped by Do's error; none: nil
		unlocks   int
		once      string // said once in Do's error
	}{
		{name: "fn's error, unlocked", fn: func(context.Context, *fakeLock) error { return boom }, want: []error{boom}, unlocks: 1},
		{name: "lock fails: fn does not run", lockErr: boom, want: []error{boom}},
		{name: "unlock error joined", unlockErr: boom, fn: func(context.Context, *fakeLock) error { return nil }, want: []error{boom}, unlocks: 1},
		{name: "loss cancels fn's context with its cause", unlockErr: errNotHeld, fn: func(ctx context.Context, l *fakeLock) error {
			l.life.End(errLost)
			<-ctx.Done()
			if !errors.Is(context.Cause(ctx), errLost) {
				return errors.New("wrong cause")
			}
			return nil
		}, want: []error{errLost}, unlocks: 1},
		{name: "fn's error that wraps the loss: the loss is not added again", unlockErr: errNotHeld, fn: func(ctx context.Context, l *fakeLock) error {
			l.life.End(errLost)
			<-ctx.Done()
			return fmt.Errorf("writing: %w", context.Cause(ctx))
		}, want: []error{errLost}, unlocks: 1, once: errLost.Error()},
		{name: "fn's context carries values", fn: func(ctx context.Context, _ *fakeLock) error {
			if ctx.Value(ownerKey{}) != "with" {
				return errors.New("no value")
			}
			return nil
		}, unlocks: 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := &fakeLock{life: New(t.Context()), unlockErr: tc.unlockErr}
			ran := false
			err := Do(t.Context(), func(context.Context) (*fakeLock, error) {
				if tc.lockErr != nil {
					return nil, tc.lockErr
				}
				return f, nil
			}, func(ctx context.Context) error {
				ran = true
				return tc.fn(ctx, f)
			}, func(ctx context.Context, _ *fakeLock) context.Context {
				return context.WithValue(ctx, ownerKey{}, "with")
			}, errLost, errNotHeld)
			if len(tc.want) == 0 {
				assert.NoError(t, err)
			}
			for _, w := range tc.want {
				assert.ErrorIs(t, err, w)
			}
			if tc.once != "" {
				assert.Equal(t, 1, strings.Count(err.Error(), tc.once), "%q says %q once", err, tc.once)
			}
			assert.Equal(t, tc.lockErr == nil, ran)
			assert.Equal(t, tc.unlocks, f.unlocked)
		})
	}
}

func TestDoUnlocksOnPanicAndWithEndedContext(t *testing.T) {
	f := &fakeLock{life: New(t.Context())}
	ctx, cancel := context.WithCancel(t.Context())
	assert.PanicsWithValue(t, "kaboom", func() {
		_ = Do(ctx, func(context.Context) (*fakeLock, error) { return f, nil }, func(context.Context) error {
			cancel() // the caller's context ends while fn runs
			panic("kaboom")
		}, func(ctx context.Context, _ *fakeLock) context.Context { return ctx }, errLost, errNotHeld)
	})
	assert.Equal(t, 1, f.unlocked, "unlocked despite the panic")
	assert.ErrorIs(t, f.Err(), errNotHeld, "and with a live context, though the caller's had ended")

	uctx, ucancel := Detached(ctx)
	defer ucancel()
	deadline, ok := uctx.Deadline()
	require.True(t, ok)
	assert.WithinDuration(t, time.Now().Add(UnlockTimeout), deadline, time.Second)
}

func TestCallsCloseRefusesAndWaits(t *testing.T) {
	var c Calls
	require.True(t, c.Enter(1))
	c.Join() // work the call leaves running
	require.True(t, c.Close())
	assert.False(t, c.Close(), "Close is idempotent")
	assert.False(t, c.Enter(1), "no call enters once closed")

	waited := make(chan struct{})
	go func() { c.Wait(); close(waited) }()
	c.Leave()
	select {
	case <-waited:
		t.Fatal("Wait returned with work still running")
	case <-time.After(10 * time.Millisecond): // a negative: nothing to poll for
	}
	c.Leave()
	<-waited
}
