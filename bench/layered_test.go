package bench

import (
	"errors"
	"slices"
	"testing"
)

func TestLayered(t *testing.T) {
	errOuterLock, errInnerLock := errors.New("outer lock failed"), errors.New("inner lock failed")
	errOuterUnlock, errInnerUnlock := errors.New("outer unlock failed"), errors.New("inner unlock failed")
	for _, tc := range []struct {
		name         string
		outer, inner fakeLocker // name and log set by the test
		// The errors Lock's and Unlock's must wrap; none for success.
		lockErrs, unlockErrs []error
		log                  []string
	}{
		{name: "outer then inner, let go in reverse",
			log: []string{"outer lock", "inner lock", "inner unlock", "outer unlock"}},
		{name: "outer fails: inner not asked", outer: fakeLocker{lockErr: errOuterLock},
			lockErrs: []error{errOuterLock}, log: []string{"outer lock"}},
		{name: "inner fails: outer given back", inner: fakeLocker{lockErr: errInnerLock},
			lockErrs: []error{errInnerLock}, log: []string{"outer lock", "inner lock", "outer unlock"}},
		{name: "inner fails, and giving outer back too", outer: fakeLocker{unlockErr: errOuterUnlock}, inner: fakeLocker{lockErr: errInnerLock},
			lockErrs: []error{errInnerLock, errOuterUnlock}, log: []string{"outer lock", "inner lock", "outer unlock"}},
		{name: "inner's unlock fails: outer still let go", inner: fakeLocker{unlockErr: errInnerUnlock},
			unlockErrs: []error{errInnerUnlock}, log: []string{"outer lock", "inner lock", "inner unlock", "outer unlock"}},
		{name: "both unlocks fail", outer: fakeLocker{unlockErr: errOuterUnlock}, inner: fakeLocker{unlockErr: errInnerUnlock},
			unlockErrs: []error{errInnerUnlock, errOuterUnlock}, log: []string{"outer lock", "inner lock", "inner unlock", "outer unlock"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var log []string
			tc.outer.name, tc.outer.log = "outer", &log
			tc.inner.name, tc.inner.log = "inner", &log
			l := NewLayered("layered", &tc.outer, &tc.inner)
			h, err := l.Lock(t.Context(), []string{"k"})
			checkWraps(t, "Lock", err, tc.lockErrs)
			if err == nil {
				checkWraps(t, "Unlock", h.Unlock(t.Context()), tc.unlockErrs)
			}
			if !slices.Equal(log, tc.log) {
				t.Errorf("calls %q, want %q", log, tc.log)
			}
		})
	}
}

// checkWraps checks that err wraps every one of want, and is nil for none.
func checkWraps(t *testing.T, call string, err error, want []error) {
	t.Helper()
	if len(want) == 0 && err != nil {
		t.Errorf("%s: %v", call, err)
	}
	for _, w := range want {
		if !errors.Is(err, w) {
			t.Errorf("%s: error %v, want it to wrap %v", call, err, w)
		}
	}
}
