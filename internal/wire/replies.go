package wire

import (
	"fmt"
	"time"
)

// Replies of acquire.lua, by their first element (scripts/acquire.lua's
// header says what each carries).
const (
	AcquireGranted   = 1
	AcquireRefused   = 0
	AcquireCancelled = -1 // a rollback overtook the call: its outcome is unknown
	AcquireElsewhere = -2 // a slot is not served by the master: nothing changed
	AcquireUpgrade   = -3 // the owner holds a key shared or in units that it asked for exclusively or in more units: nothing changed
	AcquireNoUnits   = -4 // a key asked for in units has no capacity set: nothing changed
	AcquireOverUnits = -5 // more units of a key than its capacity were asked for: nothing changed
)

// AcquireReply is one reply of acquire.lua, decoded.
type AcquireReply struct {
	Status int64
	// Tokens: when granted, one per key of the call in order; when refused,
	// those of the slots held (held of them), then those of the first part
	// keys of the refused slot.
	Tokens    []int64
	Held      int           // refused: slots held before the refused one
	Part      int           // refused: keys of the refused slot held
	Wait      time.Duration // refused: the longest lease left of the conflicts
	Conflicts []string      // refused: lock keys held by other owners
	Holders   []string      // refused: per conflict, its owners (escaped, comma-separated); may be empty
	// BlockerToken: refused while waiting, the token of the key waited for
	// (0 when not told).
	BlockerToken int64
	Key          string // upgrade: the key held shared
}

// DecodeAcquire decodes the elements of a reply, or says why they are none
// of acquire.lua's.
func DecodeAcquire(vals []any) (AcquireReply, error) {
	if len(vals) == 0 {
		return AcquireReply{}, fmt.Errorf("unexpected reply %v", vals)
	}
	status, ok := vals[0].(int64)
	if !ok {
		return AcquireReply{}, fmt.Errorf("unexpected reply %v", vals)
	}
	r := AcquireReply{Status: status}
	var err error
	switch status {
	case AcquireGranted:
		r.Tokens, err = int64s(vals[1:])
	case AcquireRefused:
		err = r.decodeRefusal(vals)
	case AcquireCancelled, AcquireElsewhere:
		if len(vals) != 1 {
			err = fmt.Errorf("%d elements", len(vals))
		}
	case AcquireUpgrade, AcquireNoUnits, AcquireOverUnits:
		if len(vals) == 2 {
			r.Key, ok = vals[1].(string)
		}
		if !ok || len(vals) != 2 {
			err = fmt.Errorf("no key")
		}
	default:
		err = fmt.Errorf("status %d", status)
	}
	if err != nil {
		return AcquireReply{}, fmt.Errorf("unexpected reply %v: %w", vals, err)
	}
	return r, nil
}

// decodeRefusal decodes {0, held, wait, {key, ...}, {token, ...}, part,
// [{holders, ...} [, token]]}.
func (r *AcquireReply) decodeRefusal(vals []any) error {
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
	if r.Tokens, err = int64s(list); err != nil {
		return err
	}
	if r.Conflicts, err = stringList(vals[3]); err != nil {
		return err
	}
	if len(vals) >= 7 {
		if r.Holders, err = stringList(vals[6]); err != nil {
			return err
		}
	}
	if len(vals) == 8 {
		token, ok := vals[7].(int64)
		if !ok {
			return fmt.Errorf("malformed refusal")
		}
		r.BlockerToken = token
	}
	r.Held, r.Part, r.Wait = int(held), int(part), time.Duration(waitMs)*time.Millisecond
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

// KeyLists is, per lock of a release.lua or extend.lua call (one for a
// release), the keys that no longer carry its hold (held by another owner,
// or lost) and the keys whose slot this master does not serve.
type KeyLists struct{ Lost, Elsewhere []string }

// DecodeKeyLists decodes a release or extend reply for locks locks: 0 when
// every key went as asked (nil), else {lost, elsewhere, ...} per lock.
func DecodeKeyLists(reply any, locks int) ([]KeyLists, error) {
	if n, ok := reply.(int64); ok && n == 0 {
		return nil, nil
	}
	vals, ok := reply.([]any)
	if !ok || len(vals) != 2*locks {
		return nil, fmt.Errorf("unexpected reply %v", reply)
	}
	out := make([]KeyLists, locks)
	for i := range out {
		var err error
		if out[i].Lost, err = stringList(vals[2*i]); err != nil {
			return nil, fmt.Errorf("unexpected reply %v: %w", reply, err)
		}
		if out[i].Elsewhere, err = stringList(vals[2*i+1]); err != nil {
			return nil, fmt.Errorf("unexpected reply %v: %w", reply, err)
		}
	}
	return out, nil
}

// ForceReply is force.lua's reply for keys keys: the server's time, the keys
// it does not serve, and per key the value it had (empty for none).
type ForceReply struct {
	Now       time.Time
	Elsewhere []string
	Values    []string
}

func DecodeForce(reply any, keys int) (ForceReply, error) {
	vals, ok := reply.([]any)
	if !ok || len(vals) != 2+keys {
		return ForceReply{}, fmt.Errorf("unexpected reply %v", reply)
	}
	ms, ok := vals[0].(int64)
	if !ok {
		return ForceReply{}, fmt.Errorf("unexpected reply %v: no time", reply)
	}
	elsewhere, err := stringList(vals[1])
	if err != nil {
		return ForceReply{}, fmt.Errorf("unexpected reply %v: %w", reply, err)
	}
	r := ForceReply{Now: time.UnixMilli(ms), Elsewhere: elsewhere, Values: make([]string, keys)}
	for i, v := range vals[2:] {
		switch v := v.(type) {
		case string:
			r.Values[i] = v
		case nil:
		default:
			return ForceReply{}, fmt.Errorf("unexpected reply %v: value %v", reply, v)
		}
	}
	return r, nil
}
