package wire

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Each reply acquire.lua's header names decodes into its fields; anything
// else is an error, which the caller takes as an outcome it does not know.
func TestDecodeAcquire(t *testing.T) {
	refusal := func(extra ...any) []any {
		return append([]any{int64(0), int64(1), int64(250), []any{"p:a", "p:b"}, []any{int64(7), int64(9)}, int64(1)}, extra...)
	}
	for _, tc := range []struct {
		name  string
		reply []any
		want  AcquireReply
		bad   bool
	}{
		{name: "granted", reply: []any{int64(1), int64(4), int64(5)}, want: AcquireReply{Status: AcquireGranted, Tokens: []int64{4, 5}}},
		{name: "granted no key", reply: []any{int64(1)}, want: AcquireReply{Status: AcquireGranted, Tokens: []int64{}}},
		{name: "refused", reply: refusal(), want: AcquireReply{Status: AcquireRefused, Held: 1, Part: 1, Wait: 250 * time.Millisecond,
			Conflicts: []string{"p:a", "p:b"}, Tokens: []int64{7, 9}}},
		{name: "refused with holders", reply: refusal([]any{"alice", ""}), want: AcquireReply{Status: AcquireRefused, Held: 1, Part: 1,
			Wait: 250 * time.Millisecond, Conflicts: []string{"p:a", "p:b"}, Tokens: []int64{7, 9}, Holders: []string{"alice", ""}}},
		{name: "cancelled", reply: []any{int64(-1)}, want: AcquireReply{Status: AcquireCancelled}},
		{name: "elsewhere", reply: []any{int64(-2)}, want: AcquireReply{Status: AcquireElsewhere}},
		{name: "upgrade", reply: []any{int64(-3), "p:a"}, want: AcquireReply{Status: AcquireUpgrade, Key: "p:a"}},

		{name: "empty", reply: []any{}, bad: true},
		{name: "status not a number", reply: []any{"1"}, bad: true},
		{name: "unknown status", reply: []any{int64(7)}, bad: true},
		{name: "token not a number", reply: []any{int64(1), "4"}, bad: true},
		{name: "refusal too short", reply: refusal()[:5], bad: true},
		{name: "refused while waiting, with the token of the key waited for", reply: refusal([]any{"alice", ""}, int64(12)), want: AcquireReply{Status: AcquireRefused,
			Held: 1, Part: 1, Wait: 250 * time.Millisecond, Conflicts: []string{"p:a", "p:b"}, Tokens: []int64{7, 9}, Holders: []string{"alice", ""}, BlockerToken: 12}},
		{name: "refusal token not a number", reply: refusal([]any{}, "12"), bad: true},
		{name: "refusal too long", reply: refusal([]any{}, int64(1), int64(2)), bad: true},
		{name: "refusal negative held", reply: []any{int64(0), int64(-1), int64(0), []any{}, []any{}, int64(0)}, bad: true},
		{name: "refusal conflicts not strings", reply: []any{int64(0), int64(0), int64(0), []any{int64(1)}, []any{}, int64(0)}, bad: true},
		{name: "refusal holders not a list", reply: refusal("alice"), bad: true},
		{name: "elsewhere with more", reply: []any{int64(-2), int64(0)}, bad: true},
		{name: "upgrade without key", reply: []any{int64(-3)}, bad: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := DecodeAcquire(tc.reply)
			checkDecoded(t, tc.bad, tc.want, got, err)
		})
	}
}

func TestDecodeKeyLists(t *testing.T) {
	for _, tc := range []struct {
		name  string
		reply any
		locks int
		want  []KeyLists
		bad   bool
	}{
		{name: "every key went as asked", reply: int64(0), locks: 2},
		{name: "one release", reply: []any{[]any{"p:a"}, []any{"p:b"}}, locks: 1, want: []KeyLists{{Lost: []string{"p:a"}, Elsewhere: []string{"p:b"}}}},
		{name: "two locks extended", reply: []any{[]any{}, []any{}, []any{"p:c"}, []any{}}, locks: 2,
			want: []KeyLists{{Lost: []string{}, Elsewhere: []string{}}, {Lost: []string{"p:c"}, Elsewhere: []string{}}}},
		{name: "another number", reply: int64(1), locks: 1, bad: true},
		{name: "a list per lock missing", reply: []any{[]any{}, []any{}}, locks: 2, bad: true},
		{name: "a key not a string", reply: []any{[]any{int64(1)}, []any{}}, locks: 1, bad: true},
		{name: "not a list of lists", reply: []any{"p:a", []any{}}, locks: 1, bad: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := DecodeKeyLists(tc.reply, tc.locks)
			checkDecoded(t, tc.bad, tc.want, got, err)
		})
	}
}

func TestDecodeForce(t *testing.T) {
	got, err := DecodeForce([]any{int64(1700000000000), []any{"p:moved"}, "3 - h:a= alice", nil}, 2)
	require.NoError(t, err)
	assert.Equal(t, ForceReply{Now: time.UnixMilli(1700000000000), Elsewhere: []string{"p:moved"}, Values: []string{"3 - h:a= alice", ""}}, got)
	for name, reply := range map[string]any{
		"a value missing":       []any{int64(1), []any{}},
		"no time":               []any{"now", []any{}, nil},
		"moved keys not a list": []any{int64(1), "p:moved", nil},
		"a value not a string":  []any{int64(1), []any{}, int64(3)},
		"not a list":            int64(0),
	} {
		_, err := DecodeForce(reply, 1)
		assert.Error(t, err, name)
	}
}

// checkDecoded checks a decoder's result: an error that says the reply was
// unexpected when bad, else want.
func checkDecoded[T any](t *testing.T, bad bool, want, got T, err error) {
	t.Helper()
	if bad {
		require.Error(t, err)
		assert.Contains(t, err.Error(), "unexpected reply")
		return
	}
	require.NoError(t, err)
	assert.Equal(t, want, got)
}
