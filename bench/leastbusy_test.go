package bench

import (
	"errors"
	"fmt"
	"testing"
)

func TestLeastBusy(t *testing.T) {
	errLock, errUnlock := errors.New("lock failed"), errors.New("unlock failed")
	// A step locks, or unlocks what an earlier step locked (of, its index);
	// want is the call it reaches a client with, as the fakes log it, and
	// err the error it must return.
	type step struct {
		of   int
		want string
		err  error
	}
	lock := func(want string, err error) step { return step{of: -1, want: want, err: err} }
	unlock := func(of int, want string, err error) step { return step{of: of, want: want, err: err} }
	for _, tc := range []struct {
		name    string
		clients []fakeLocker // named c0, c1, ... by the test
		steps   []step
	}{
		{name: "the least busy, the lowest index among equals", clients: make([]fakeLocker, 3), steps: []step{
			lock("c0 lock", nil), lock("c1 lock", nil), lock("c2 lock", nil), lock("c0 lock", nil),
			// c0 has 2 in flight, c1 none and c2 one.
			unlock(1, "c1 unlock", nil), lock("c1 lock", nil), lock("c1 lock", nil),
		}},
		{name: "a failed Lock is counted off", clients: []fakeLocker{{lockErr: errLock}, {}}, steps: []step{
			lock("c0 lock", errLock), lock("c0 lock", errLock),
		}},
		{name: "an Unlock is counted off, even a failed one", clients: []fakeLocker{{}, {unlockErr: errUnlock}}, steps: []step{
			lock("c0 lock", nil), lock("c1 lock", nil), unlock(1, "c1 unlock", errUnlock), lock("c1 lock", nil),
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var log []string
			clients := make([]Locker, len(tc.clients))
			for i := range tc.clients {
				tc.clients[i].name, tc.clients[i].log = fmt.Sprintf("c%d", i), &log
				clients[i] = &tc.clients[i]
			}
			b := NewLeastBusy("least-busy", clients)
			if b.Clients() != len(clients) {
				t.Errorf("Clients() = %d, want %d", b.Clients(), len(clients))
			}
			held := make([]Held, len(tc.steps))
			for i, s := range tc.steps {
				var err error
				if s.of < 0 {
					held[i], err = b.Lock(t.Context(), []string{"k"})
				} else {
					err = held[s.of].Unlock(t.Context())
				}
				if !errors.Is(err, s.err) {
					t.Fatalf("step %d: error %v, want %v", i, err, s.err)
				}
				if n := len(log); n == 0 || log[n-1] != s.want {
					t.Fatalf("step %d: calls %q, want the last %q", i, log, s.want)
				}
			}
		})
	}
}
