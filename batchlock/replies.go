package batchlock

import (
	"fmt"
	"time"
)

// Replies of acquire.lua, by their first element (scripts/acquire.lua's
// header says what each carries).
const (
	acquireGranted   = 1
	acquireRefused   = 0
	acquireCancelled = -1 // a rollback overtook the call: its outcome is unknown
	acquireElsewhere = -2 // a slot is not served by the master: nothing changed
	acquireUpgrade   = -3 // the owner holds a key shared that it asked for exclusively: nothing changed
)

// acquireReply is one reply of acquire.lua, decoded.
type acquireReply struct {
	status int64
	// tokens: when granted, one per key of the call in order; when refused,
	// those of the slots held (held of them), then those of the first part
	// keys of the refused slot.
	tokens    []int64
	held      int           // refused: slots held before the refused one
	part      int           // refused: keys of the refused slot held
	wait      time.Duration // refused: the longest lease left of the conflicts
	conflicts []string      // refused: lock keys held by other owners
	holders   []string      // refused: per conflict, its owners (escaped, comma-separated); may be empty
	// blockerToken: refused while waiting, the token of the key waited for
	// (0 when not told).
	blockerToken int64
	key          string // upgrade: the key held shared
}

// decodeAcquire decodes the elements of a reply, or says why they are none
// of acquire.lua's.
func decodeAcquire(vals []any) (acquireReply, error) {
	if len(vals) == 0 {
		return acquireReply{}, fmt.Errorf("unexpected reply %v", vals)
	}
	status, ok := vals[0].(int64)
	if !ok {
		return acquireReply{}, fmt.Errorf("unexpected reply %v", vals)
	}
	r := acquireReply{status: status}
	var err error
	switch status {
	case acquireGranted:
		r.tokens, err = int64s(vals[1:])
	case acquireRefused:
		err = r.decodeRefusal(vals)
	case acquireCancelled, acquireElsewhere:
		if len(vals) != 1 {
			err = fmt.Errorf("%d elements", len(vals))
		}
	case acquireUpgrade:
		if len(vals) == 2 {
			r.key, ok = vals[1].(string)
		}
		if !ok || len(vals) != 2 {
			err = fmt.Errorf("no key")
		}
	default:
		err = fmt.Errorf("status %d", status)
	}
	if err != nil {
		return acquireReply{}, fmt.Errorf("unexpected reply %v: %w", vals, err)
	}
	return r, nil
}

// decodeRefusal decodes {0, held, wait, {key, ...}, {token, ...}, part,
// [{holders, ...} [, token]]}.
func (r *acquireReply) decodeRefusal(vals []any) error {
	if len(vals) < 6 || len(vals) > 8 {
		return fmt.Errorf("%d elements", len(vals))
	}
	held, okHeld := vals[1].(int64)
	waitMs, okWait := vals[2].(int64)
	part, okPart := vals[5].(int64)
	list, okList := vals[4].([]any)
	if !okHeld || !okWait || !okPart || !okList || held < 0 || part < 0 {
		return fmt.Errorf("malformed refusal")
	}
	var err error
	if r.tokens, err = int64s(list); err != nil {
		return err
	}
	if r.conflicts, err = stringList(vals[3]); err != nil {
		return err
	}
	if len(vals) >= 7 {
		if r.holders, err = stringList(vals[6]); err != nil {
			return err
		}
	}
	if len(vals) == 8 {
		token, ok := vals[7].(int64)
		if !ok {
			return fmt.Errorf("malformed refusal")
		}
		r.blockerToken = token
	}
	r.held, r.part, r.wait = int(held), int(part), time.Duration(waitMs)*time.Millisecond
	return nil
}

func int64s(vals []any) ([]int64, error) {
	out := make([]int64, len(vals))
	for i, v := range vals {
		n, ok := v.(int64)
		if !ok {
			return nil, fmt.Errorf("token %v is no integer", v)
		}
		out[i] = n
	}
	return out, nil
}

func stringList(v any) ([]string, error) {
	vals, ok := v.([]any)
	if !ok {
		return nil, fmt.Errorf("%v is no list", v)
	}
	out := make([]string, len(vals))
	for i, s := range vals {
		if out[i], ok = s.(string); !ok {
			return nil, fmt.Errorf("%v is no string", s)
		}
	}
	return out, nil
}

// keyLists is, per lock of a release.lua or extend.lua call (one for a
// release), the keys that no longer carry its hold (held by another owner,
// or lost) and the keys whose slot this master does not serve.
type keyLists struct{ lost, elsewhere []string }

// decodeKeyLists decodes a release or extend reply for locks locks: 0 when
// every key went as asked (nil), else {lost, elsewhere, ...} per lock.
func decodeKeyLists(reply any, locks int) ([]keyLists, error) {
	if n, ok := reply.(int64); ok && n == 0 {
		return nil, nil
	}
	vals, ok := reply.([]any)
	if !ok || len(vals) != 2*locks {
		return nil, fmt.Errorf("unexpected reply %v", reply)
	}
	out := make([]keyLists, locks)
	for i := range out {
		var err error
		if out[i].lost, err = stringList(vals[2*i]); err != nil {
			return nil, fmt.Errorf("unexpected reply %v: %w", reply, err)
		}
		if out[i].elsewhere, err = stringList(vals[2*i+1]); err != nil {
			return nil, fmt.Errorf("unexpected reply %v: %w", reply, err)
		}
	}
	return out, nil
}

// forceReply is force.lua's reply for keys keys: the server's time, the keys
// it does not serve, and per key the value it had (empty for none).
type forceReply struct {
	now       time.Time
	elsewhere []string
	values    []string
}

func decodeForce(reply any, keys int) (forceReply, error) {
	vals, ok := reply.([]any)
	if !ok || len(vals) != 2+keys {
		return forceReply{}, fmt.Errorf("unexpected reply %v", reply)
	}
	ms, ok := vals[0].(int64)
	if !ok {
		return forceReply{}, fmt.Errorf("unexpected reply %v: no time", reply)
	}
	elsewhere, err := stringList(vals[1])
	if err != nil {
		return forceReply{}, fmt.Errorf("unexpected reply %v: %w", reply, err)
	}
	r := forceReply{now: time.UnixMilli(ms), elsewhere: elsewhere, values: make([]string, keys)}
	for i, v := range vals[2:] {
		switch v := v.(type) {
		case string:
			r.values[i] = v
		case nil:
		default:
			return forceReply{}, fmt.Errorf("unexpected reply %v: value %v", reply, v)
		}
	}
	return r, nil
}
