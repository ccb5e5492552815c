package wire

import "strings"

// The arguments of the scripts, in the order their headers list them. Each
// function appends one part of a call's ARGV to args; the lock keys that
// follow a count are the caller's to append.

// SharedModes is the mark after a mode (ModeTry, ModeFirst, ...) that says
// every slot of the call lists its keys' modes (see AppendSlot).
const SharedModes = "s"

// Letters of a key's mode in a slot's modes (see AppendSlot).
const (
	ModeExclusive = 'x'
	ModeShared    = 's'
	ModeCounted   = 'n'
)

// AppendAcquire appends the head of acquire.lua's arguments: the hold's
// owner (escaped here), its hold field, its lease, the mode, its cancel mark
// and how long a place in a queue lasts. Its slots follow (AppendSlot).
func AppendAcquire(args []any, owner, hold string, leaseMs int64, mode, mark string, placeMs int64) []any {
	return append(args, EscapeOwner(owner), hold, leaseMs, mode, mark, placeMs)
}

// AppendTryEach appends the head of tryeach.lua's arguments: the lease, the
// mode (ModeFirst or ModeFresh) and the call's cancel mark. Its baskets
// follow (AppendBasket).
func AppendTryEach(args []any, leaseMs int64, mode, mark string) []any {
	return append(args, leaseMs, mode, mark)
}

// AppendBasket appends one basket of tryeach.lua: its owner (escaped here),
// its hold field and the number of arguments of its slots, which slots
// appends (with AppendSlot) after it.
func AppendBasket(args []any, owner, hold string, slots func([]any) []any) []any {
	args = append(args, EscapeOwner(owner), hold, 0)
	count := len(args) - 1
	args = slots(args)
	args[count] = len(args) - count - 1
	return args
}

// AppendSlot appends one slot of an attempt (see attempt.lua): its fencing
// counter, its number of keys, when shared (every slot of the call then says
// it) its keys' modes, ModeShared, ModeExclusive or ModeCounted, all
// exclusive when modes is nil, then its lock keys; the units of its counted
// keys follow (AppendCounted).
func AppendSlot(args []any, fence string, keys []string, modes []byte, shared bool) []any {
	args = append(args, fence, len(keys))
	if shared {
		text := string(modes)
		if text == "" {
			text = strings.Repeat("x", len(keys))
		}
		args = append(args, text)
	}
	for _, k := range keys {
		args = append(args, k)
	}
	return args
}

// AppendCounted appends, after a slot's lock keys, per counted key (by
// modes) in order the units asked for and its capacity key, as of reads
// them.
func AppendCounted(args []any, keys []string, modes []byte, of func(lockKey string) (units int64, capacity string)) []any {
	for i, m := range modes {
		if m == ModeCounted {
			units, capacity := of(keys[i])
			args = append(args, units, capacity)
		}
	}
	return args
}

// AppendRelease appends the head of one lock's share of release.lua: its
// owner (escaped here), hold field, how long its cancel marks live, and the
// numbers of marks, of lock keys and of counted keys consumed that follow
// it: marks, lock keys, then a lock key and its capacity key per key
// consumed.
func AppendRelease(args []any, owner, hold string, leaseMs int64, marks, keys, consumed int) []any {
	return append(args, EscapeOwner(owner), hold, leaseMs, marks, keys, consumed)
}

// AppendExtend appends the head of one lock's share of extend.lua: its hold
// field, the lease, and the number of its lock keys that follow.
func AppendExtend(args []any, hold string, leaseMs int64, keys int) []any {
	return append(args, hold, leaseMs, keys)
}
