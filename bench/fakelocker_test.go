package bench

import "context"

// fakeLocker is a Locker that holds nothing: it writes each call to a log
// shared with other fakes, so that tests see their order, and fails its
// Lock or its Unlock as told.
type fakeLocker struct {
	name               string
	lockErr, unlockErr error
	log                *[]string
}

func (f *fakeLocker) Name() string       { return f.name }
func (f *fakeLocker) Commands() []string { return nil }

func (f *fakeLocker) Lock(context.Context, []string) (Held, error) {
	*f.log = append(*f.log, f.name+" lock")
	if f.lockErr != nil {
		return nil, f.lockErr
	}
	return fakeHeld{f}, nil
}

type fakeHeld struct{ f *fakeLocker }

func (h fakeHeld) Unlock(context.Context) error {
	*h.f.log = append(*h.f.log, h.f.name+" unlock")
	return h.f.unlockErr
}
