package wire_test

import (
	"context"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/batchlock/batchlock/hashtag"
	"github.com/batchlock/batchlock/internal/wire"
	"github.com/batchlock/batchlock/internal/wire/wiretest"
)

// The scripts, run against one redis-server: each case sets lock keys to a
// value, runs a script with its arguments, and checks the reply, the value
// after, and the messages published. Values are written with times relative
// to the server's clock: {now+N} is its time in milliseconds plus N; the
// values after the call match within a second.

// scriptCase is one run of a script.
type scriptCase struct {
	name   string
	before map[string]string // lock key -> value; each key expires with its value's last hold
	script *redis.Script
	keys   []string
	args   []any
	reply  any
	after  map[string]string // lock key -> value, "" for a key that must be gone
	// ttl is what is left of the lease, in milliseconds, of the keys after
	// whose one hold ends with the key ("<hold>=" with no end).
	ttl int64
	// expires, when set, is when the keys after expire, in milliseconds
	// from now, rather than with their last hold.
	expires int64
	told    map[string][]string
	// plain are keys that are no lock keys (counters, capacities), set
	// before with no expiry and read after: key -> value, "" for none.
	plain, plainAfter map[string]string
}

var (
	relativeTime    = regexp.MustCompile(`\{now([+-]\d+)\}`)
	fieldSeparators = regexp.MustCompile(`[=@]`)
)

// atTime writes the {now+N} of tmpl at the server time now.
func atTime(tmpl string, now int64) string {
	return relativeTime.ReplaceAllStringFunc(tmpl, func(m string) string {
		d, _ := strconv.ParseInt(m[4:len(m)-1], 10, 64)
		return strconv.FormatInt(now+d, 10)
	})
}

// serverNow returns the server's time in milliseconds.
func serverNow(t *testing.T, rdb *redis.Client) int64 {
	now, err := rdb.Time(t.Context()).Result()
	require.NoError(t, err)
	return now.UnixMilli()
}

func runScriptCases(t *testing.T, cases []scriptCase) {
	rdb := wiretest.ServerClient(t)
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ctx := t.Context()
			require.NoError(t, rdb.FlushAll(ctx).Err())
			var channels []string
			for key := range tc.told {
				channels = append(channels, key)
			}
			var sub *redis.PubSub
			if len(channels) > 0 {
				sub = rdb.SSubscribe(ctx, channels...)
				defer sub.Close()
				for range channels {
					_, err := sub.Receive(ctx) // the confirmation
					require.NoError(t, err)
				}
			}
			now := serverNow(t, rdb)
			for key, v := range tc.before {
				v = atTime(v, now)
				if fields := strings.Split(v, " "); len(fields) == 4 && (fields[3] == wire.CountedOwner || fields[3] == wire.SharedOwner) {
					// The owner field as scripts write it.
					v = strings.Join(fields[:3], " ") + " " + ownerField(fields[3], fields[2])
				}
				expires := int64(0)
				for _, e := range holdEnds(v) {
					expires = max(expires, e)
				}
				if expires <= now {
					expires = now + 5000 // a value whose holds ended, not yet expired
				}
				require.NoError(t, rdb.Set(ctx, key, v, 0).Err())
				require.NoError(t, rdb.PExpireAt(ctx, key, time.UnixMilli(expires)).Err())
			}
			for key, v := range tc.plain {
				require.NoError(t, rdb.Set(ctx, key, v, 0).Err())
			}
			reply, err := tc.script.Run(ctx, rdb, tc.keys, tc.args...).Result()
			require.NoError(t, err)
			for key, want := range tc.plainAfter {
				got, err := rdb.Get(ctx, key).Result()
				if want == "" {
					assert.ErrorIs(t, err, redis.Nil, "%s is there: %q", key, got)
					continue
				}
				require.NoError(t, err, "reading %s", key)
				assert.Equal(t, want, got, "%s after", key)
			}
			assert.True(t, similar(tc.reply, reply), "reply %v, want %v", reply, tc.reply)
			for key, want := range tc.after {
				got, err := rdb.Get(ctx, key).Result()
				if want == "" {
					assert.ErrorIs(t, err, redis.Nil, "%s is still there: %q", key, got)
					continue
				}
				require.NoError(t, err, "reading %s", key)
				sameValue(t, atTime(want, now), got)
				pttl, err := rdb.PTTL(ctx, key).Result()
				require.NoError(t, err)
				last := int64(0)
				for _, e := range holdEnds(got) {
					last = max(last, e)
				}
				switch {
				case tc.expires != 0:
					assert.InDelta(t, tc.expires, pttl.Milliseconds(), 1000, "%s keeps its expiry", key)
				case last == 0:
					assert.InDelta(t, tc.ttl, pttl.Milliseconds(), 1000, "%s expires with its hold", key)
				default:
					assert.InDelta(t, last-now, pttl.Milliseconds(), 1000, "%s expires with its last hold", key)
				}
			}
			for key, holds := range tc.told {
				var got []string
				for range holds {
					ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
					msg, err := sub.ReceiveMessage(ctx)
					cancel()
					require.NoError(t, err, "waiting for the messages on %s", key)
					got = append(got, msg.Payload)
				}
				assert.ElementsMatch(t, holds, got, "messages on %s", key)
			}
		})
	}
}

// similar compares replies: numbers of a thousand and more (durations in
// milliseconds) within a second, the rest exactly.
func similar(want, got any) bool {
	switch w := want.(type) {
	case []any:
		g, ok := got.([]any)
		if !ok || len(g) != len(w) {
			return false
		}
		for i := range w {
			if !similar(w[i], g[i]) {
				return false
			}
		}
		return true
	case int64:
		g, ok := got.(int64)
		if w >= 1000 {
			return ok && g > w-1000 && g < w+1000
		}
		return ok && g == w
	}
	return want == got
}

// holdEnds returns the ends of the holds of a lock value.
func holdEnds(v string) []int64 {
	fields := strings.SplitN(v, " ", 4)
	if len(fields) < 3 {
		return nil
	}
	var out []int64
	for e := range strings.SplitSeq(fields[2], ",") {
		parts := strings.Split(e, "=")
		if len(parts) >= 2 {
			n, _ := strconv.ParseInt(strings.TrimSuffix(parts[1], "g"), 10, 64)
			out = append(out, n)
		}
	}
	return out
}

// sameValue compares lock values field by field: holds in any order, and
// times within a second. What a value written in place carries beside (see
// layout.lua) is not compared: the holes of holds that left, and the spaces
// after an owner field written shorter.
func sameValue(t *testing.T, want, got string) {
	t.Helper()
	w, g := strings.SplitN(want, " ", 4), strings.SplitN(got, " ", 4)
	if len(g) == 4 {
		g[2] = strings.Join(slices.DeleteFunc(strings.Split(g[2], ","), func(e string) bool { return e == "" }), ",")
		g[3] = strings.TrimRight(g[3], " ")
	}
	require.Len(t, g, 4, "lock value %q", got)
	require.Len(t, w, 4, "lock value %q", want)
	assert.Equal(t, w[0], g[0], "token of %q", got)
	near := func(a, b string) bool {
		an, aerr := strconv.ParseInt(a, 10, 64)
		bn, berr := strconv.ParseInt(b, 10, 64)
		if aerr != nil || berr != nil {
			return a == b
		}
		return an-bn < 1000 && bn-an < 1000
	}
	same := func(a, b string) bool {
		as, bs := fieldSeparators.Split(a, -1), fieldSeparators.Split(b, -1)
		if len(as) != len(bs) {
			return false
		}
		for i := range as {
			an, bn := strings.TrimRight(as[i], "spgn"), strings.TrimRight(bs[i], "spgn")
			if !near(an, bn) || as[i][len(an):] != bs[i][len(bn):] {
				return false
			}
		}
		return true
	}
	// The queue keeps its order; holds may come in any order.
	wq, gq := strings.Split(w[1], ","), strings.Split(g[1], ",")
	assert.True(t, len(wq) == len(gq) && !slices.ContainsFunc(wq, func(e string) bool {
		i := slices.Index(wq, e)
		return !same(e, gq[i])
	}), "queue of %q, want %q", got, want)
	wh, gh := strings.Split(w[2], ","), strings.Split(g[2], ",")
	matched := len(wh) == len(gh)
	for _, e := range wh {
		if !slices.ContainsFunc(gh, func(o string) bool { return same(e, o) }) {
			matched = false
		}
	}
	assert.True(t, matched, "holds of %q, want %q", got, want)
	// A counted key's owner field says its holds' units, a shared key's
	// their earliest end: the want's bare "#" or "*" asks only that it
	// does.
	wo := w[3]
	if wo == wire.CountedOwner || wo == wire.SharedOwner {
		wo = ownerField(wo, g[2])
	}
	// A shared key's earliest end is a time; a counted key's units are not.
	if wo[:1] == wire.CountedOwner {
		assert.Equal(t, wo, g[3], "owner of %q", got)
		return
	}
	assert.True(t, wo[:1] == g[3][:1] && near(wo[1:], g[3][1:]), "owner of %q, want %q", got, wo)
}

// ownerField is the owner field of a key held in mode (wire.CountedOwner or
// wire.SharedOwner) by holds as scripts write it: a counted key's with the
// units of its holds, a shared key's with the earliest end of its holds
// when each has its end written.
func ownerField(mode, holds string) string {
	var units, earliest int64
	for e := range strings.SplitSeq(holds, ",") {
		parts := strings.Split(e, "=")
		if len(parts) < 3 {
			continue
		}
		ends, err := strconv.ParseInt(strings.TrimSuffix(parts[1], "g"), 10, 64)
		if err != nil {
			return mode // a hold that ends with the key
		}
		if earliest == 0 || ends < earliest {
			earliest = ends
		}
		if len(parts) == 4 {
			n, _ := strconv.ParseInt(parts[3], 10, 64)
			units += n
		}
	}
	if mode == wire.CountedOwner {
		return fmt.Sprintf("%s%d", mode, units)
	} else if earliest == 0 {
		return mode
	}
	return fmt.Sprintf("%s%d", mode, earliest)
}

// acquireArgv is acquire.lua's arguments for one key of one slot, asked for
// shared when modes is "s".
func acquireArgv(owner, hold string, leaseMs int64, mode, modes, key string) []any {
	if modes == "" {
		return []any{owner, hold, leaseMs, mode, "cancel:{a}:" + hold, 2000, "fence:{a}", 1, key}
	}
	return []any{owner, hold, leaseMs, mode + "s", "cancel:{a}:" + hold, 2000, "fence:{a}", 1, modes, key}
}

// countedArgv is acquire.lua's arguments for units of key, of one slot,
// whose capacity key is "units:{a}:" .. key.
func countedArgv(owner, hold string, leaseMs int64, mode string, units int64, key string) []any {
	return []any{owner, hold, leaseMs, mode + "s", "cancel:{a}:" + hold, 2000, "fence:{a}", 1, "n", key, units, "units:{a}:" + key}
}

// consumeArgv is release.lua's arguments for one hold on key, whose units
// it consumes.
func consumeArgv(owner, hold, key string) []any {
	return []any{owner, hold, 60000, 0, 1, 1, key, key, "units:{a}:" + key}
}

func releaseArgv(owner, hold string, keys ...string) []any {
	args := []any{owner, hold, 60000, 0, len(keys), 0}
	for _, k := range keys {
		args = append(args, k)
	}
	return args
}

// tryEachArgv is tryeach.lua's arguments for baskets of one key each of one
// slot, in mode, each basket {owner, hold, key}.
func tryEachArgv(mode string, baskets ...[3]string) []any {
	args := []any{1000, mode, "cancel:{a}:h:call"}
	for _, b := range baskets {
		args = append(args, b[0], b[1], 3, "fence:{a}", 1, b[2])
	}
	return args
}

// A TryEach call's baskets on one master: each taken or refused on its
// own, the first key held named without holders, and a key granted to a
// waiter is no basket's, fresh owner or not.
func TestScriptTryEach(t *testing.T) {
	runScriptCases(t, []scriptCase{
		{name: "baskets taken and refused on their own; a fresh owner's refusal reads nothing",
			before: map[string]string{"held": "3 - h:a={now+60000} alice"},
			script: wire.TryEachScript, args: tryEachArgv("fresh", [3]string{"bob", "h:b", "k"}, [3]string{"carol", "h:c", "held"}, [3]string{"dan", "h:d", "j"}),
			reply: []any{[]any{int64(1), int64(1)}, []any{int64(0), int64(0), int64(0), []any{"held"}, []any{}, int64(0)}, []any{int64(1), int64(3)}},
			after: map[string]string{"k": "1 - h:b= bob", "held": "3 - h:a={now+60000} alice", "j": "3 - h:d= dan"}, ttl: 1000},
		{name: "a grant is no fresh owner's",
			before: map[string]string{"k": "7 - h:w={now+3000}g wes"},
			script: wire.TryEachScript, args: tryEachArgv("fresh", [3]string{"bob", "h:b", "k"}),
			reply: []any{[]any{int64(0), int64(0), int64(0), []any{"k"}, []any{}, int64(0)}},
			after: map[string]string{"k": "7 - h:w={now+3000}g wes"}},
		{name: "a grant is no other owner's, read in full (first), and its lease told",
			before: map[string]string{"k": "7 - h:w={now+3000}g wes"},
			script: wire.TryEachScript, args: tryEachArgv("first", [3]string{"alice", "h:b", "k"}),
			reply: []any{[]any{int64(0), int64(0), int64(3000), []any{"k"}, []any{}, int64(0)}},
			after: map[string]string{"k": "7 - h:w={now+3000}g wes"}},
		{name: "an owner joins its own key (first), as a reentrant lock does",
			before: map[string]string{"k": "3 - h:a= alice"},
			script: wire.TryEachScript, args: tryEachArgv("first", [3]string{"alice", "h:b", "k"}),
			reply: []any{[]any{int64(1), int64(3)}},
			after: map[string]string{"k": "3 - h:a={now+5000},h:b={now+1000} alice"}},
		{name: "baskets of units of one key, taken in order while they fit; {-4} for a key with no capacity",
			plain:  map[string]string{"units:{a}:k": "5"},
			script: wire.TryEachScript, args: []any{1000, "firsts", "cancel:{a}:h:call",
				"bob", "h:b", 6, "fence:{a}", 1, "n", "k", 3, "units:{a}:k",
				"carol", "h:c", 6, "fence:{a}", 1, "n", "k", 3, "units:{a}:k",
				"dan", "h:d", 6, "fence:{a}", 1, "n", "k", 2, "units:{a}:k",
				"erin", "h:e", 6, "fence:{a}", 1, "n", "j", 1, "units:{a}:j"},
			reply: []any{[]any{int64(1), int64(1)}, []any{int64(0), int64(0), int64(1000), []any{"k"}, []any{}, int64(0)},
				[]any{int64(1), int64(3)}, []any{int64(-4), "j"}},
			after: map[string]string{"k": "3 - h:b={now+1000}=bob=3,h:d={now+1000}=dan=2 #", "j": ""}},
	})
}

func TestScriptAcquire(t *testing.T) {
	runScriptCases(t, []scriptCase{
		{name: "a fresh key gets the next token, its hold ending with the key",
			script: wire.AcquireScript, args: acquireArgv("bob", "h:b", 1000, "try", "", "k"),
			reply: []any{int64(1), int64(1)},
			after: map[string]string{"k": "1 - h:b= bob"}, ttl: 1000},
		{name: "the keys of a slot taken afresh share the slot's next token; a key joined keeps its own",
			before: map[string]string{"fence:{a}": "5", "k2": "3 - h:a={now+60000} alice"},
			script: wire.AcquireScript,
			args:   []any{"alice", "h:b", 1000, "try", "cancel:{a}:h:b", 2000, "fence:{a}", 3, "k1", "k2", "k3", "fence:{b}", 1, "k4"},
			reply:  []any{int64(1), int64(6), int64(3), int64(6), int64(1)},
			after: map[string]string{"k1": "6 - h:b= alice", "k2": "3 - h:a={now+60000},h:b={now+1000} alice",
				"k3": "6 - h:b= alice", "k4": "1 - h:b= alice"},
			ttl: 1000},
		{name: "a token of 10^14 and more is written in full",
			before: map[string]string{"fence:{a}": "99999999999999"},
			script: wire.AcquireScript, args: acquireArgv("bob", "h:b", 1000, "try", "", "k"),
			reply: []any{int64(1), int64(100000000000000)},
			after: map[string]string{"k": "100000000000000 - h:b= bob"}, ttl: 1000},
		{name: "a fresh key asked for shared",
			script: wire.AcquireScript, args: acquireArgv("bob", "h:b", 1000, "try", "s", "k"),
			reply: []any{int64(1), int64(1)},
			after: map[string]string{"k": "1 - h:b==bob *"}, ttl: 1000},
		{name: "an owner joins its own fresh key: both holds get their ends",
			before: map[string]string{"k": "3 - h:a= alice"},
			script: wire.AcquireScript, args: acquireArgv("alice", "h:b", 20000, "try", "", "k"),
			reply: []any{int64(1), int64(3)},
			after: map[string]string{"k": "3 - h:a={now+5000},h:b={now+20000} alice"}},
		{name: "a grant taken up by its waiter keeps its token, and is a grant no longer",
			before: map[string]string{"k": "7 - h:w={now+3000}g bob"},
			script: wire.AcquireScript, args: acquireArgv("bob", "h:w", 20000, "wait", "", "k"),
			reply: []any{int64(1), int64(7)},
			after: map[string]string{"k": "7 - h:w={now+20000} bob"}},
		{name: "a grant taken up with a lease shorter than the grant keeps the grant's end",
			before: map[string]string{"k": "7 - h:w={now+3000}g bob"},
			script: wire.AcquireScript, args: acquireArgv("bob", "h:w", 100, "wait", "", "k"),
			reply: []any{int64(1), int64(7)},
			after: map[string]string{"k": "7 - h:w={now+3000} bob"}},
		{name: "a waiter's place names its owner and its slot's counter, escaped",
			before: map[string]string{"k": "3 - h:a={now+60000} alice"},
			script: wire.AcquireScript, args: []any{"bob", "h:b", 1000, "wait", "cancel:{a}:h:b", 2000, "my pre,fix=fence:{a}", 1, "k"},
			reply: []any{int64(0), int64(0), int64(60000), []any{"k"}, []any{}, int64(0), []any{"alice"}, int64(3)},
			after: map[string]string{"k": "3 h:b@{now+2000}=bob=my%20pre%2Cfix%3Dfence:{a} h:a={now+60000} alice"}},
		{name: "a waiter that polls has its place marked",
			before: map[string]string{"k": "3 - h:a={now+60000} alice"},
			script: wire.AcquireScript, args: acquireArgv("bob", "h:b", 1000, "poll", "", "k"),
			reply: []any{int64(0), int64(0), int64(60000), []any{"k"}, []any{}, int64(0), []any{"alice"}, int64(3)},
			after: map[string]string{"k": "3 h:b@{now+2000}p=bob=fence:{a} h:a={now+60000} alice"}},
		{name: "a writer refused by readers is told who they are, the live ones sorted, each once",
			before: map[string]string{"k": "4 - h:r1={now+60000}=zed,h:r2={now+60000}=ann,h:r3={now-10}=old,h:r4={now+60000}=ann *"},
			script: wire.AcquireScript, args: acquireArgv("bob", "h:b", 1000, "try", "", "k"),
			reply: []any{int64(0), int64(0), int64(60000), []any{"k"}, []any{}, int64(0), []any{"ann,zed"}},
			after: map[string]string{"k": "4 - h:r1={now+60000}=zed,h:r2={now+60000}=ann,h:r3={now-10}=old,h:r4={now+60000}=ann *"}},
		{name: "a hold taken again keeps the later end",
			before: map[string]string{"k": "3 - h:a={now+60000} alice"},
			script: wire.AcquireScript, args: acquireArgv("alice", "h:a", 1000, "wait", "", "k"),
			reply: []any{int64(1), int64(3)},
			after: map[string]string{"k": "3 - h:a={now+60000} alice"}},
		{name: "a key whose holds all ended is free",
			before: map[string]string{"k": "3 h:x@{now+2000} h:a={now-10} alice"},
			script: wire.AcquireScript, args: acquireArgv("bob", "h:b", 1000, "try", "", "k"),
			reply: []any{int64(1), int64(1)},
			after: map[string]string{"k": "1 - h:b= bob"}, ttl: 1000},
		{name: "the readers behind a writer whose place lapsed are told they may join",
			before: map[string]string{"k": "4 h:x@{now-5}=xav=fence:{a},h:r2@{now+2000}s=rob=fence:{a} h:r1={now+60000}=ann *"},
			script: wire.AcquireScript, args: acquireArgv("cid", "h:r3", 1000, "wait", "s", "k"),
			reply: []any{int64(1), int64(4)},
			after: map[string]string{"k": "4 h:r2@{now+2000}s=rob=fence:{a} h:r1={now+60000}=ann,h:r3={now+1000}=cid *"},
			told:  map[string][]string{"k": {"again:h:x", "again:h:r2"}}},
		{name: "an owner that holds a key shared and asks for it exclusively is refused, nothing changed (ErrInvalid, an upgrade)",
			before: map[string]string{"k": "3 - h:a={now+60000}=alice *"},
			script: wire.AcquireScript, args: acquireArgv("alice", "h:b", 1000, "wait", "", "k"),
			reply: []any{int64(-3), "k"},
			after: map[string]string{"k": "3 - h:a={now+60000}=alice *"}},
		{name: "a reader joins readers whose ends are written, nobody waiting, their token shared",
			before: map[string]string{"k": "3 - h:a={now+60000}=alice,h:b={now+30000}=bob *"},
			script: wire.AcquireScript, args: acquireArgv("cid", "h:c", 1000, "try", "s", "k"),
			reply: []any{int64(1), int64(3)},
			after: map[string]string{"k": "3 - h:a={now+60000}=alice,h:b={now+30000}=bob,h:c={now+1000}=cid *"}},
		{name: "a reader that ends after the others joins them, the key expiring a lease after it",
			before: map[string]string{"k": "3 - h:a={now+60000}=alice,h:b={now+30000}=bob *"},
			script: wire.AcquireScript, args: acquireArgv("cid", "h:c", 90000, "try", "s", "k"),
			reply: []any{int64(1), int64(3)},
			after: map[string]string{"k": "3 - h:a={now+60000}=alice,h:b={now+30000}=bob,h:c={now+90000}=cid *"}, expires: 180000},
		{name: "the reader that ends first leaves, the others as they were, its end kept as the earliest (the next join reads them all)",
			before: map[string]string{"k": "3 - h:a={now+60000}=alice,h:b={now+30000}=bob *"},
			script: wire.ReleaseScript, args: releaseArgv("bob", "h:b", "k"),
			reply: int64(0),
			after: map[string]string{"k": "3 - h:a={now+60000}=alice *{now+30000}"}},
		{name: "the reader that ends last leaves so too, the key keeping its expiry (the next would be read from every reader)",
			before: map[string]string{"k": "3 - h:a={now+60000}=alice,h:b={now+30000}=bob *"},
			script: wire.ReleaseScript, args: releaseArgv("alice", "h:a", "k"),
			reply: int64(0),
			after: map[string]string{"k": "3 - h:b={now+30000}=bob *{now+30000}"}, expires: 60000},
		{name: "a reader joins readers whose earliest end has passed: all are read, the ended dropped",
			before: map[string]string{"k": "3 - h:a={now+60000}=alice *{now-10}"},
			script: wire.AcquireScript, args: acquireArgv("cid", "h:c", 1000, "try", "s", "k"),
			reply: []any{int64(1), int64(3)},
			after: map[string]string{"k": "3 - h:a={now+60000}=alice,h:c={now+1000}=cid *{now+1000}"}},
		{name: "the last reader leaves: the key goes",
			before: map[string]string{"k": "3 - h:b={now+30000}=bob *"},
			script: wire.ReleaseScript, args: releaseArgv("bob", "h:b", "k"),
			reply: int64(0),
			after: map[string]string{"k": ""}},
		{name: "a reader whose lease ended leaves the long way, the others staying",
			before: map[string]string{"k": "3 - h:a={now+60000}=alice,h:b={now-10}=bob *"},
			script: wire.ReleaseScript, args: releaseArgv("bob", "h:b", "k"),
			reply: int64(0),
			after: map[string]string{"k": "3 - h:a={now+60000}=alice *"}},
		{name: "a hold cancelled by a rollback that overtook it takes nothing",
			before: map[string]string{"cancel:{a}:h:b": "1"},
			script: wire.AcquireScript, args: acquireArgv("bob", "h:b", 1000, "try", "", "k"),
			reply: []any{int64(-1)},
			after: map[string]string{"k": ""}},
	})
}

func TestScriptExtend(t *testing.T) {
	runScriptCases(t, []scriptCase{
		{name: "a fresh hold, ending with its key, is lengthened with the key",
			before: map[string]string{"k": "3 - h:a= alice"},
			script: wire.ExtendScript, args: []any{"h:a", 60000, 1, "k"},
			reply: int64(0),
			after: map[string]string{"k": "3 - h:a= alice"}, ttl: 60000},
		{name: "a fresh hold with a longer lease left keeps it",
			before: map[string]string{"k": "3 - h:a= alice"},
			script: wire.ExtendScript, args: []any{"h:a", 1000, 1, "k"},
			reply: int64(0),
			after: map[string]string{"k": "3 - h:a= alice"}, ttl: 5000},
		{name: "a hold with its end written is lengthened in the value",
			before: map[string]string{"k": "3 - h:a={now+2000},h:b={now+3000} alice"},
			script: wire.ExtendScript, args: []any{"h:a", 60000, 1, "k"},
			reply: int64(0),
			after: map[string]string{"k": "3 - h:a={now+60000},h:b={now+3000} alice"}},
		{name: "a hold of a counted key is lengthened in place, the key keeping its expiry",
			before: map[string]string{"k": "4 - h:a={now+60000}=alice=2,h:b={now+3000}=bob=1 #"},
			script: wire.ExtendScript, args: []any{"h:b", 30000, 1, "k"},
			reply: int64(0),
			after: map[string]string{"k": "4 - h:a={now+60000}=alice=2,h:b={now+30000}=bob=1 #3"}, expires: 60000},
		{name: "a hold lengthened past its key's expiry: the key written whole, expiring a lease after it",
			before: map[string]string{"k": "4 - h:a={now+60000}=alice=2,h:b={now+3000}=bob=1 #"},
			script: wire.ExtendScript, args: []any{"h:b", 90000, 1, "k"},
			reply: int64(0),
			after: map[string]string{"k": "4 - h:a={now+60000}=alice=2,h:b={now+90000}=bob=1 #3"}, expires: 180000},
		{name: "a reader lengthened in place keeps the earliest end it had, which it may no longer be",
			before: map[string]string{"k": "3 - h:a={now+60000}=alice,h:b={now+3000}=bob *"},
			script: wire.ExtendScript, args: []any{"h:b", 30000, 1, "k"},
			reply: int64(0),
			after: map[string]string{"k": "3 - h:a={now+60000}=alice,h:b={now+30000}=bob *{now+3000}"}, expires: 60000},
		{name: "a reader granted the key loses its grant's mark: the long way",
			before: map[string]string{"k": "3 - h:a={now+60000}=alice,h:b={now+3000}g=bob *"},
			script: wire.ExtendScript, args: []any{"h:b", 30000, 1, "k"},
			reply: int64(0),
			after: map[string]string{"k": "3 - h:a={now+60000}=alice,h:b={now+30000}=bob *"}},
		{name: "a counted hold whose lease ended is not revived: dropped, and lost",
			before: map[string]string{"k": "4 - h:a={now+60000}=alice=2,h:b={now-10}=bob=1 #"},
			script: wire.ExtendScript, args: []any{"h:b", 30000, 1, "k"},
			reply: []any{[]any{"k"}, []any{}},
			after: map[string]string{"k": "4 - h:a={now+60000}=alice=2 #"}},
		{name: "a key without the hold is lost",
			before: map[string]string{"k": "3 - h:b= bob"},
			script: wire.ExtendScript, args: []any{"h:a", 60000, 2, "k", "gone"},
			reply: []any{[]any{"k", "gone"}, []any{}},
			after: map[string]string{"k": "3 - h:b= bob"}, ttl: 5000},
	})
}

func TestScriptRelease(t *testing.T) {
	runScriptCases(t, []scriptCase{
		{name: "a fresh lone hold is deleted",
			before: map[string]string{"k": "3 - h:a= alice"},
			script: wire.ReleaseScript, args: releaseArgv("alice", "h:a", "k"),
			reply: int64(0),
			after: map[string]string{"k": ""}},
		{name: "a fresh hold with a waiter grants the key on",
			before: map[string]string{"k": "3 h:w@{now+2000}=wes=fence:{a} h:a= alice", "fence:{a}": "6"},
			script: wire.ReleaseScript, args: releaseArgv("alice", "h:a", "k"),
			reply: int64(0),
			after: map[string]string{"k": "7 - h:w={now+3000}g wes"},
			told:  map[string][]string{"k": {"h:w 7"}}},
		{name: "a lone hold is deleted",
			before: map[string]string{"k": "3 - h:a={now+60000} alice"},
			script: wire.ReleaseScript, args: releaseArgv("alice", "h:a", "k"),
			reply: int64(0),
			after: map[string]string{"k": ""}},
		{name: "a key granted to a waiter that listens is its for 3s, with the next token of the counter its place names",
			before: map[string]string{"k": "3 h:w@{now+9000}=wes=my%20pre%2Cfix%3Dfence:{a} h:a={now+60000} alice", "my pre,fix=fence:{a}": "6"},
			script: wire.ReleaseScript, args: releaseArgv("alice", "h:a", "k"),
			reply: int64(0),
			after: map[string]string{"k": "7 - h:w={now+3000}g wes"},
			told:  map[string][]string{"k": {"h:w 7"}}},
		{name: "a key granted to a waiter that polls is its until its place would have lapsed",
			before: map[string]string{"k": "3 h:w@{now+9000}p=wes=fence:{a} h:a={now+60000} alice", "fence:{a}": "6"},
			script: wire.ReleaseScript, args: releaseArgv("alice", "h:a", "k"),
			reply: int64(0),
			after: map[string]string{"k": "7 - h:w={now+9000}g wes"},
			told:  map[string][]string{"k": {"h:w 7"}}},
		{name: "a waiter whose counter is not here (its slot in migration) is not granted the key: every waiter tries again",
			before: map[string]string{"k": "3 h:w@{now+2000}=wes=fence:{a} h:a= alice"},
			script: wire.ReleaseScript, args: releaseArgv("alice", "h:a", "k"),
			reply: int64(0),
			after: map[string]string{"k": ""},
			told:  map[string][]string{"k": {"released"}}},
		{name: "a counter behind the key's token grants nothing",
			before: map[string]string{"k": "3 h:w@{now+2000}=wes=fence:{a} h:a= alice", "fence:{a}": "1"},
			script: wire.ReleaseScript, args: releaseArgv("alice", "h:a", "k"),
			reply: int64(0),
			after: map[string]string{"k": ""},
			told:  map[string][]string{"k": {"released"}}},
		{name: "a release run again after it granted the key on reports nothing",
			before: map[string]string{"k": "7 - h:w={now+3000}g wes"},
			script: wire.ReleaseScript, args: releaseArgv("alice", "h:a", "k"),
			reply: int64(0),
			after: map[string]string{"k": "7 - h:w={now+3000}g wes"}},
		{name: "a release run again after the waiter took up its grant reports the key taken",
			before: map[string]string{"k": "7 - h:w={now+30000} wes"},
			script: wire.ReleaseScript, args: releaseArgv("alice", "h:a", "k"),
			reply: []any{[]any{"k"}, []any{}},
			after: map[string]string{"k": "7 - h:w={now+30000} wes"}},
		{name: "a key another owner holds is reported",
			before: map[string]string{"k": "5 - h:b={now+60000} bob"},
			script: wire.ReleaseScript, args: releaseArgv("alice", "h:a", "k"),
			reply: []any{[]any{"k"}, []any{}},
			after: map[string]string{"k": "5 - h:b={now+60000} bob"}},
		{name: "a release of one of an owner's two holds keeps the other",
			before: map[string]string{"k": "3 - h:a={now+60000},h:b={now+50000} alice"},
			script: wire.ReleaseScript, args: releaseArgv("alice", "h:a", "k"),
			reply: int64(0),
			after: map[string]string{"k": "3 - h:b={now+50000} alice"}},
		{name: "a key released with readers first in its queue is granted to the run of them with one token, not the writer behind",
			before: map[string]string{"k": "3 h:r1@{now+2000}s=ann=fence:{a},h:r2@{now+2000}s=bob=fence:{a},h:w@{now+2000}=wes=fence:{a} h:a={now+60000} alice", "fence:{a}": "6"},
			script: wire.ReleaseScript, args: releaseArgv("alice", "h:a", "k"),
			reply: int64(0),
			after: map[string]string{"k": "7 h:w@{now+2000}=wes=fence:{a} h:r1={now+3000}g=ann,h:r2={now+3000}g=bob *"},
			told:  map[string][]string{"k": {"h:r1 7", "h:r2 7"}}},
		{name: "one call releasing every reader of a key: the writer waiting is granted it once",
			before: map[string]string{"k": "3 h:w@{now+2000}=wes=fence:{a} h:r1={now+60000}=ann,h:r2={now+60000}=bob *", "fence:{a}": "6"},
			script: wire.ReleaseScript, args: append(releaseArgv("ann", "h:r1", "k"), releaseArgv("bob", "h:r2", "k")...),
			reply: int64(0),
			after: map[string]string{"k": "7 - h:w={now+3000}g wes"},
			told:  map[string][]string{"k": {"h:w 7"}}},
		{name: "waiters whose place lapsed are told, and the first live one is granted the key",
			before: map[string]string{"k": "3 h:x@{now-5}=xav=fence:{a},h:w@{now+2000}=wes=fence:{a} h:a={now+60000} alice", "fence:{a}": "6"},
			script: wire.ReleaseScript, args: releaseArgv("alice", "h:a", "k"),
			reply: int64(0),
			after: map[string]string{"k": "7 - h:w={now+3000}g wes"},
			told:  map[string][]string{"k": {"again:h:x", "h:w 7"}}},
	})
}

// A key under the prefix that holds something other than a string is not a
// lock key: a release, an extension and a forced release leave it alone and
// go on with the other keys, rather than stop half-way.
// Counted keys: holds of units of any number of owners while the units
// fit the capacity, a queue no small request passes, reentrancy with no
// more units, units freed announced, consume counted once, the capacity
// never set below the units held.
func TestScriptCounted(t *testing.T) {
	const (
		alice6 = "h:a={now+60000}=alice=6"
		waiter = "h:w@{now+2000}n=wes=fence:{a}"
	)
	capacity := map[string]string{"units:{a}:k": "10"}
	capacityKeys := []string{"units:{a}:k", "k", "cancel:{a}:c:1"} // capacity, lock key, the change's mark
	runScriptCases(t, []scriptCase{
		{name: "a fresh key taken in units, its hold ending with its lease",
			plain: capacity, before: map[string]string{"fence:{a}": "5"},
			script: wire.AcquireScript, args: countedArgv("bob", "h:b", 1000, "try", 3, "k"),
			reply: []any{int64(1), int64(6)},
			after: map[string]string{"k": "6 - h:b={now+1000}=bob=3 #3"}, ttl: 1000},
		{name: "no capacity set: refused outright, nothing written",
			script: wire.AcquireScript, args: countedArgv("bob", "h:b", 1000, "try", 3, "k"),
			reply: []any{int64(-4), "k"},
			after: map[string]string{"k": ""}},
		{name: "more units than the capacity: refused outright, nothing written",
			plain: capacity, script: wire.AcquireScript, args: countedArgv("bob", "h:b", 1000, "wait", 11, "k"),
			reply: []any{int64(-5), "k"},
			after: map[string]string{"k": ""}},
		{name: "more units than the capacity of a key held: refused outright, no place taken",
			plain: capacity, before: map[string]string{"fence:{a}": "5", "k": "4 - " + alice6 + " #"},
			script: wire.AcquireScript, args: countedArgv("bob", "h:b", 1000, "wait", 11, "k"),
			reply: []any{int64(-5), "k"},
			after: map[string]string{"k": "4 - " + alice6 + " #"}},
		{name: "another owner joins while the units fit, with a token of its own",
			plain: capacity, before: map[string]string{"fence:{a}": "5", "k": "4 - " + alice6 + " #"},
			script: wire.AcquireScript, args: countedArgv("bob", "h:b", 1000, "try", 4, "k"),
			reply: []any{int64(1), int64(6)},
			after: map[string]string{"k": "6 - " + alice6 + ",h:b={now+1000}=bob=4 #"}},
		{name: "units that do not fit are refused, the holders named",
			plain: capacity, before: map[string]string{"fence:{a}": "5", "k": "4 - " + alice6 + " #"},
			script: wire.AcquireScript, args: countedArgv("bob", "h:b", 1000, "try", 5, "k"),
			reply: []any{int64(0), int64(0), int64(60000), []any{"k"}, []any{}, int64(0), []any{"alice"}},
			after: map[string]string{"k": "4 - " + alice6 + " #"}},
		{name: "a waiting request for units that do not fit gets a place marked n",
			plain: capacity, before: map[string]string{"fence:{a}": "5", "k": "4 - " + alice6 + " #"},
			script: wire.AcquireScript, args: countedArgv("bob", "h:b", 1000, "wait", 5, "k"),
			reply: []any{int64(0), int64(0), int64(60000), []any{"k"}, []any{}, int64(0), []any{"alice"}, int64(4)},
			after: map[string]string{"k": "4 h:b@{now+2000}n=bob=fence:{a} " + alice6 + " #"}},
		{name: "a small request does not pass a waiter ahead, though its units fit",
			plain: capacity, before: map[string]string{"fence:{a}": "5", "k": "4 " + waiter + " " + alice6 + " #"},
			script: wire.AcquireScript, args: countedArgv("bob", "h:b", 1000, "try", 1, "k"),
			reply: []any{int64(0), int64(0), int64(60000), []any{"k"}, []any{}, int64(0), []any{"alice"}},
			after: map[string]string{"k": "4 " + waiter + " " + alice6 + " #"}},
		{name: "the waiter at the head takes its units once they fit, leaving the queue",
			plain: capacity, before: map[string]string{"fence:{a}": "5", "k": "4 " + waiter + " " + alice6 + " #"},
			script: wire.AcquireScript, args: countedArgv("wes", "h:w", 1000, "wait", 4, "k"),
			reply: []any{int64(1), int64(6)},
			after: map[string]string{"k": "6 - " + alice6 + ",h:w={now+1000}=wes=4 #"}},
		{name: "the head of a key left with no hold takes it, the queue kept",
			plain: capacity, before: map[string]string{"fence:{a}": "5", "k": "4 " + waiter + ",h:x@{now+2000}n=xi=fence:{a}  #"},
			script: wire.AcquireScript, args: countedArgv("wes", "h:w", 1000, "wait", 4, "k"),
			reply: []any{int64(1), int64(6)},
			after: map[string]string{"k": "6 h:x@{now+2000}n=xi=fence:{a} h:w={now+1000}=wes=4 #"}},
		{name: "an exclusive request at the head of a key left with no hold takes it, the queue kept",
			plain: capacity, before: map[string]string{"fence:{a}": "5", "k": "4 " + waiter + ",h:x@{now+2000}n=xi=fence:{a}  #"},
			script: wire.AcquireScript, args: acquireArgv("wes", "h:w", 1000, "try", "x", "k"),
			reply: []any{int64(1), int64(6)},
			after: map[string]string{"k": "6 h:x@{now+2000}n=xi=fence:{a} h:w={now+1000} wes"}},
		{name: "an owner that holds units joins again with none when it asks for no more",
			plain: capacity, before: map[string]string{"fence:{a}": "5", "k": "4 - " + alice6 + " #"},
			script: wire.AcquireScript, args: countedArgv("alice", "h:c", 1000, "try", 6, "k"),
			reply: []any{int64(1), int64(6)},
			after: map[string]string{"k": "6 - " + alice6 + ",h:c={now+1000}=alice=0 #"}},
		{name: "an owner that holds units and asks for more is refused outright (ErrInvalid, an upgrade)",
			plain: capacity, before: map[string]string{"fence:{a}": "5", "k": "4 - " + alice6 + " #"},
			script: wire.AcquireScript, args: countedArgv("alice", "h:c", 1000, "try", 7, "k"),
			reply: []any{int64(-3), "k"},
			after: map[string]string{"k": "4 - " + alice6 + " #"}},
		{name: "an owner that holds units and asks for the key exclusively is refused outright",
			plain: capacity, before: map[string]string{"fence:{a}": "5", "k": "4 - " + alice6 + " #"},
			script: wire.AcquireScript, args: acquireArgv("alice", "h:c", 1000, "try", "x", "k"),
			reply: []any{int64(-3), "k"}},
		{name: "another owner asking for a counted key shared is refused",
			plain: capacity, before: map[string]string{"fence:{a}": "5", "k": "4 - " + alice6 + " #"},
			script: wire.AcquireScript, args: acquireArgv("bob", "h:b", 1000, "try", "s", "k"),
			reply: []any{int64(0), int64(0), int64(60000), []any{"k"}, []any{}, int64(0), []any{"alice"}}},
		{name: "units of a key held exclusively by another owner are refused",
			plain: capacity, before: map[string]string{"fence:{a}": "5", "k": "4 - h:a={now+60000} alice"},
			script: wire.AcquireScript, args: countedArgv("bob", "h:b", 1000, "try", 1, "k"),
			reply: []any{int64(0), int64(0), int64(60000), []any{"k"}, []any{}, int64(0), []any{"alice"}}},
		{name: "a release that frees units with a waiter announces them",
			before: map[string]string{"k": "4 " + waiter + " " + alice6 + ",h:b={now+60000}=bob=2 #"},
			script: wire.ReleaseScript, args: releaseArgv("bob", "h:b", "k"),
			reply: int64(0),
			after: map[string]string{"k": "4 " + waiter + " " + alice6 + " #"},
			told:  map[string][]string{"k": {"released"}}},
		{name: "the last hold released with a waiter for units leaves the key with no hold and the queue",
			before: map[string]string{"k": "4 " + waiter + " " + alice6 + " #"},
			script: wire.ReleaseScript, args: releaseArgv("alice", "h:a", "k"),
			reply: int64(0),
			after: map[string]string{"k": "4 " + waiter + "  #"}, ttl: 2000,
			told: map[string][]string{"k": {"released"}}},
		{name: "consumed: the hold goes and its units leave the capacity",
			plain: capacity, before: map[string]string{"k": "4 - " + alice6 + ",h:b={now+60000}=bob=2 #"},
			script: wire.ReleaseScript, args: consumeArgv("bob", "h:b", "k"),
			reply: int64(0),
			after: map[string]string{"k": "4 - " + alice6 + " #"}, plainAfter: map[string]string{"units:{a}:k": "8"}},
		{name: "a key taken afresh, consumed: its one hold read in one match, the key gone, its units out of the capacity",
			plain: capacity, before: map[string]string{"k": "6 - h:b={now+1000}=bob=3 #3"},
			script: wire.ReleaseScript, args: consumeArgv("bob", "h:b", "k"),
			reply: int64(0),
			after: map[string]string{"k": ""}, plainAfter: map[string]string{"units:{a}:k": "7"}},
		{name: "a key taken afresh whose hold's lease ended: consumes nothing, and says so",
			plain: capacity, before: map[string]string{"k": "6 - h:b={now-10}=bob=3 #3"},
			script: wire.ReleaseScript, args: consumeArgv("bob", "h:b", "k"),
			reply: []any{[]any{"k"}, []any{}},
			after: map[string]string{"k": ""}, plainAfter: map[string]string{"units:{a}:k": "10"}},
		{name: "a key taken afresh whose capacity is not here (its slot in migration): nothing changed, the key named away, no capacity made",
			before: map[string]string{"k": "6 - h:b={now+1000}=bob=3 #3"},
			script: wire.ReleaseScript, args: consumeArgv("bob", "h:b", "k"),
			reply: []any{[]any{}, []any{"k"}},
			after: map[string]string{"k": "6 - h:b={now+1000}=bob=3 #3"}, plainAfter: map[string]string{"units:{a}:k": ""}},
		{name: "a key taken afresh, let go: the key gone, the capacity as it was",
			plain: capacity, before: map[string]string{"k": "6 - h:b={now+1000}=bob=3 #3"},
			script: wire.ReleaseScript, args: releaseArgv("bob", "h:b", "k"),
			reply: int64(0),
			after: map[string]string{"k": ""}, plainAfter: capacity},
		{name: "consumed again, the hold gone: nothing more (the key is told held by another, which a resend does not count as lost)",
			plain: capacity, before: map[string]string{"k": "4 - " + alice6 + " #"},
			script: wire.ReleaseScript, args: consumeArgv("bob", "h:b", "k"),
			reply: []any{[]any{"k"}, []any{}},
			after: map[string]string{"k": "4 - " + alice6 + " #"}, plainAfter: map[string]string{"units:{a}:k": "10"}},
		{name: "a consume whose capacity is not here (its slot in migration) changes nothing and names the key away",
			before: map[string]string{"k": "4 - " + alice6 + ",h:b={now+60000}=bob=2 #"},
			script: wire.ReleaseScript, args: consumeArgv("bob", "h:b", "k"),
			reply: []any{[]any{}, []any{"k"}},
			after: map[string]string{"k": "4 - " + alice6 + ",h:b={now+60000}=bob=2 #"}, plainAfter: map[string]string{"units:{a}:k": ""}},
		{name: "a hold whose lease ended consumes nothing, and says so",
			plain: capacity, before: map[string]string{"k": "4 - " + alice6 + ",h:b={now-10}=bob=2 #"},
			script: wire.ReleaseScript, args: consumeArgv("bob", "h:b", "k"),
			reply: []any{[]any{"k"}, []any{}},
			after: map[string]string{"k": "4 - " + alice6 + " #"}, plainAfter: map[string]string{"units:{a}:k": "10"}},
		{name: "units that fit once an ended hold is dropped: the owner field counts it, so every hold is read",
			plain: capacity, before: map[string]string{"fence:{a}": "5", "k": "4 - h:a={now-10}=alice=6,h:b={now+60000}=bob=2 #"},
			script: wire.AcquireScript, args: countedArgv("carol", "h:c", 1000, "try", 8, "k"),
			reply: []any{int64(1), int64(6)},
			after: map[string]string{"k": "6 - h:b={now+60000}=bob=2,h:c={now+1000}=carol=8 #10"}},
		{name: "the first of three holds released, nobody waiting: the others kept as they were",
			before: map[string]string{"k": "4 - " + alice6 + ",h:b={now+60000}=bob=2,h:c={now+30000}=carol=1 #"},
			script: wire.ReleaseScript, args: releaseArgv("alice", "h:a", "k"),
			reply: int64(0),
			after: map[string]string{"k": "4 - h:b={now+60000}=bob=2,h:c={now+30000}=carol=1 #3"}},
		{name: "the hold that ends last released, nobody waiting: the others kept, the key keeping its expiry",
			before: map[string]string{"k": "4 - " + alice6 + ",h:b={now+30000}=bob=2 #"},
			script: wire.ReleaseScript, args: releaseArgv("alice", "h:a", "k"),
			reply: int64(0),
			after: map[string]string{"k": "4 - h:b={now+30000}=bob=2 #2"}, expires: 60000},
		{name: "the middle one of three holds released, nobody waiting",
			before: map[string]string{"k": "4 - " + alice6 + ",h:b={now+60000}=bob=2,h:c={now+30000}=carol=1 #"},
			script: wire.ReleaseScript, args: releaseArgv("bob", "h:b", "k"),
			reply: int64(0),
			after: map[string]string{"k": "4 - " + alice6 + ",h:c={now+30000}=carol=1 #7"}},
		{name: "a consumed hold of three, nobody waiting: the others kept, its units out of the owner field",
			plain: capacity, before: map[string]string{"k": "4 - " + alice6 + ",h:b={now+60000}=bob=2,h:c={now+30000}=carol=1 #"},
			script: wire.ReleaseScript, args: consumeArgv("carol", "h:c", "k"),
			reply: int64(0),
			after: map[string]string{"k": "4 - " + alice6 + ",h:b={now+60000}=bob=2 #8"}, plainAfter: map[string]string{"units:{a}:k": "9"}},
		{name: "one call consumes two holds of a key among three: each sale counted, the third kept",
			plain: capacity, before: map[string]string{"k": "4 - " + alice6 + ",h:b={now+60000}=bob=2,h:c={now+30000}=carol=1 #9"},
			script: wire.ReleaseScript, args: append(consumeArgv("bob", "h:b", "k"), consumeArgv("carol", "h:c", "k")...),
			reply: int64(0),
			after: map[string]string{"k": "4 - " + alice6 + " #6"}, plainAfter: map[string]string{"units:{a}:k": "7"}},
		{name: "one call consumes every hold of a key, one of them ended: the key goes, the ended one sells nothing",
			plain: capacity, before: map[string]string{"k": "4 - " + alice6 + ",h:b={now-10}=bob=2 #8"},
			script: wire.ReleaseScript, args: append(consumeArgv("alice", "h:a", "k"), consumeArgv("bob", "h:b", "k")...),
			reply: []any{[]any{}, []any{}, []any{"k"}, []any{}},
			after: map[string]string{"k": ""}, plainAfter: map[string]string{"units:{a}:k": "4"}},
		{name: "one call releasing two holds of a key, one gone while another owner holds it: that lock is told",
			before: map[string]string{"k": "4 - " + alice6 + ",h:b={now+60000}=bob=2 #8"},
			script: wire.ReleaseScript, args: append(releaseArgv("bob", "h:b", "k"), releaseArgv("dan", "h:d", "k")...),
			reply: []any{[]any{}, []any{}, []any{"k"}, []any{}},
			after: map[string]string{"k": "4 - " + alice6 + " #6"}},
		{name: "a key gone consumes nothing, and says so",
			plain: capacity, script: wire.ReleaseScript, args: consumeArgv("bob", "h:b", "k"),
			reply: []any{[]any{"k"}, []any{}}, plainAfter: capacity},
		{name: "a capacity below the units held is refused, nothing changed",
			plain: capacity, before: map[string]string{"k": "4 - " + alice6 + " #"},
			script: wire.CapacityScript, keys: capacityKeys, args: []any{"set", 5, 60000},
			reply: []any{int64(0), int64(10), int64(6)}, plainAfter: map[string]string{"units:{a}:k": "10", "cancel:{a}:c:1": ""}},
		{name: "a capacity taken below 0 is refused",
			plain: capacity, script: wire.CapacityScript, keys: capacityKeys, args: []any{"add", -11, 60000},
			reply: []any{int64(0), int64(10), int64(0)}, plainAfter: capacity},
		{name: "a capacity grown is announced",
			plain: capacity, before: map[string]string{"k": "4 " + waiter + " " + alice6 + " #"},
			script: wire.CapacityScript, keys: capacityKeys, args: []any{"add", 5, 60000},
			reply: []any{int64(1), int64(15), int64(6)}, plainAfter: map[string]string{"units:{a}:k": "15", "cancel:{a}:c:1": "15 6"},
			told: map[string][]string{"k": {"released"}}},
		{name: "a capacity set on a key with none, its holds' ended units not counted",
			before: map[string]string{"k": "4 - h:a={now-10}=alice=6 #"},
			script: wire.CapacityScript, keys: capacityKeys, args: []any{"set", 3, 60000},
			reply: []any{int64(1), int64(3), int64(0)}, plainAfter: map[string]string{"units:{a}:k": "3"}},
		{name: "a change sent again, its mark there, is not made twice and replies as it did",
			plain:  map[string]string{"units:{a}:k": "15", "cancel:{a}:c:1": "15 6"},
			script: wire.CapacityScript, keys: capacityKeys, args: []any{"add", 5, 60000},
			reply: []any{int64(1), int64(15), int64(6)}, plainAfter: map[string]string{"units:{a}:k": "15"}},
	})
}

// unitsBasket is one basket of tryeach.lua on the slot of fence:{a}: owner,
// hold, its keys and their modes ("n": units of it, from the units in
// order, of the capacity "units:{a}:" and the key; "s" shared; "x").
func unitsBasket(owner, hold string, keys []string, modes string, units ...int64) []any {
	slot := []any{"fence:{a}", len(keys), modes}
	for _, k := range keys {
		slot = append(slot, k)
	}
	for i, k := range keys {
		if modes[i] == wire.ModeCounted {
			slot = append(slot, units[0], "units:{a}:"+k)
			units = units[1:]
		}
	}
	return append([]any{owner, hold, len(slot)}, slot...)
}

// tryEachUnits is tryeach.lua's arguments for baskets (unitsBasket's), in
// mode (with "s": the modes are said).
func tryEachUnits(mode string, baskets ...[]any) []any {
	args := []any{1000, mode + "s", "cancel:{a}:h:call"}
	for _, b := range baskets {
		args = append(args, b...)
	}
	return args
}

// A TryEach call's lines in units that join a key are written once a key,
// at the end of the call or before a key is read the long way (see
// attempt.lua): what the call leaves is what joining them one by one
// leaves. A basket refused after it joined is taken out, one that reads a
// key the long way after it joined keeps its join.
func TestScriptTryEachJoinsOnce(t *testing.T) {
	const alice = "h:a={now+60000}=alice=2"
	plain := map[string]string{"units:{a}:k": "10", "fence:{a}": "5"}
	k := []string{"k"}
	runScriptCases(t, []scriptCase{
		{name: "baskets join one key in order; one whose units do not fit reads it as the others left it",
			plain: plain, before: map[string]string{"k": "4 - " + alice + " #"},
			script: wire.TryEachScript, args: tryEachUnits("fresh", unitsBasket("bob", "h:b", k, "n", 3), unitsBasket("carol", "h:c", k, "n", 2),
				unitsBasket("dan", "h:d", k, "n", 4), unitsBasket("erin", "h:e", k, "n", 1)),
			reply: []any{[]any{int64(1), int64(6)}, []any{int64(1), int64(7)}, []any{int64(0), int64(0), int64(60000), []any{"k"}, []any{}, int64(0)},
				[]any{int64(1), int64(9)}},
			after: map[string]string{"k": "9 - " + alice + ",h:b={now+1000}=bob=3,h:c={now+1000}=carol=2,h:e={now+1000}=erin=1 #"}},
		{name: "a basket refused after it joined is taken out",
			plain: plain, before: map[string]string{"k": "4 - " + alice + " #", "held": "3 - h:z={now+60000} zed"},
			script: wire.TryEachScript, args: tryEachUnits("fresh", unitsBasket("bob", "h:b", []string{"k", "held"}, "nx", 3),
				unitsBasket("carol", "h:c", k, "n", 2)),
			reply: []any{[]any{int64(0), int64(0), int64(0), []any{"held"}, []any{}, int64(0)}, []any{int64(1), int64(7)}},
			after: map[string]string{"k": "7 - " + alice + ",h:c={now+1000}=carol=2 #", "held": "3 - h:z={now+60000} zed"}},
		{name: "a basket that reads a key the long way after it joined keeps its join",
			plain: plain, before: map[string]string{"k": "4 - " + alice + " #", "mine": "3 - h:z= bob"},
			script: wire.TryEachScript, args: tryEachUnits("first", unitsBasket("bob", "h:b", []string{"k", "mine"}, "nx", 3),
				unitsBasket("carol", "h:c", k, "n", 2)),
			reply: []any{[]any{int64(1), int64(6), int64(3)}, []any{int64(1), int64(7)}},
			after: map[string]string{"k": "7 - " + alice + ",h:b={now+1000}=bob=3,h:c={now+1000}=carol=2 #",
				"mine": "3 - h:z={now+5000},h:b={now+1000} bob"}},
		{name: "a basket refused after it read a key the long way leaves nothing",
			plain: plain, before: map[string]string{"k": "4 - " + alice + " #", "held": "3 - h:z={now+60000} zed"},
			script: wire.TryEachScript, args: tryEachUnits("first", unitsBasket("bob", "h:b", []string{"k", "held"}, "nx", 3),
				unitsBasket("carol", "h:c", k, "n", 2)),
			reply: []any{[]any{int64(0), int64(0), int64(60000), []any{"held"}, []any{}, int64(0)}, []any{int64(1), int64(7)}},
			after: map[string]string{"k": "7 - " + alice + ",h:c={now+1000}=carol=2 #", "held": "3 - h:z={now+60000} zed"}},
	})

	rdb := wiretest.ServerClient(t)
	ctx := t.Context()
	// setUp writes k's value, and returns it as written.
	setUp := func(t *testing.T, value string) string {
		require.NoError(t, rdb.FlushAll(ctx).Err())
		for key, v := range plain {
			require.NoError(t, rdb.Set(ctx, key, v, 0).Err())
		}
		value = atTime(value, serverNow(t, rdb))
		require.NoError(t, rdb.Set(ctx, "k", value, time.Minute).Err())
		return value
	}
	t.Run("a key with holes is written whole without them", func(t *testing.T) {
		setUp(t, "4 - "+strings.Repeat(",", 30)+alice+",,,, #2")
		_, err := wire.TryEachScript.Run(ctx, rdb, nil, tryEachUnits("fresh", unitsBasket("bob", "h:b", k, "n", 3))...).Result()
		require.NoError(t, err)
		v, err := rdb.Get(ctx, "k").Result()
		require.NoError(t, err)
		assert.Regexp(t, `^6 - h:a=\d+=alice=2,h:b=\d+=bob=3 #5$`, v)
	})
	// A call that fails undoes its writes in the reverse order of their
	// making, the writes of its batches among them.
	failing := func(baskets ...[]any) error {
		baskets = append(baskets, unitsBasket("dan", "h:d", []string{"list"}, "n", 1))
		_, err := wire.TryEachScript.Run(ctx, rdb, nil, tryEachUnits("fresh", baskets...)...).Result()
		return err
	}
	t.Run("a key a failed call took afresh and batched is gone", func(t *testing.T) {
		setUp(t, "4 - "+alice+" #2")
		require.NoError(t, rdb.RPush(ctx, "units:{a}:list", "x").Err())
		require.NoError(t, rdb.Set(ctx, "units:{a}:new", 10, 0).Err())
		// carol asks shared for the key frank took: gina's join of it is
		// written first.
		require.ErrorContains(t, failing(unitsBasket("frank", "h:f", []string{"new"}, "n", 1), unitsBasket("gina", "h:g", []string{"new"}, "n", 1),
			unitsBasket("carol", "h:c", []string{"new"}, "s")), "WRONGTYPE")
		v, err := rdb.Get(ctx, "new").Result()
		assert.ErrorIs(t, err, redis.Nil, "the key frank took: %q", v)
	})
	t.Run("a key whose batch was written is put back", func(t *testing.T) {
		before := setUp(t, "4 - "+alice+" #2")
		require.NoError(t, rdb.RPush(ctx, "units:{a}:list", "x").Err())
		// carol asks shared for k after bob joined it: his join is written
		// first; then hank's join is kept.
		require.ErrorContains(t, failing(unitsBasket("bob", "h:b", k, "n", 3), unitsBasket("carol", "h:c", k, "s"),
			unitsBasket("hank", "h:h", k, "n", 1)), "WRONGTYPE")
		v, err := rdb.Get(ctx, "k").Result()
		require.NoError(t, err)
		assert.Equal(t, before, v)
		ttl, err := rdb.PTTL(ctx, "k").Result()
		require.NoError(t, err)
		assert.Greater(t, ttl, 50*time.Second, "the key's expiry put back")
	})
	t.Run("a call that fails puts back what it wrote of its joins", func(t *testing.T) {
		before := setUp(t, "4 - "+alice+" #2")
		require.NoError(t, rdb.RPush(ctx, "units:{a}:list", "x").Err())
		require.NoError(t, rdb.Set(ctx, "units:{a}:new", 10, 0).Err())
		// carol's shared key is read the long way: bob's join of k and
		// gina's of the key frank took are written first; dan's capacity
		// is no number: the call fails.
		_, err := wire.TryEachScript.Run(ctx, rdb, nil, tryEachUnits("fresh", unitsBasket("bob", "h:b", k, "n", 3),
			unitsBasket("frank", "h:f", []string{"new"}, "n", 1), unitsBasket("gina", "h:g", []string{"new"}, "n", 1),
			unitsBasket("carol", "h:c", []string{"s"}, "s"), unitsBasket("dan", "h:d", []string{"list"}, "n", 1))...).Result()
		require.ErrorContains(t, err, "WRONGTYPE")
		v, err := rdb.Get(ctx, "k").Result()
		require.NoError(t, err)
		assert.Equal(t, before, v, "bob's join taken out")
		ttl, err := rdb.PTTL(ctx, "k").Result()
		require.NoError(t, err)
		assert.Greater(t, ttl, 50*time.Second, "the key's expiry put back")
		assert.ErrorIs(t, rdb.Get(ctx, "s").Err(), redis.Nil, "carol's key let go")
		assert.ErrorIs(t, rdb.Get(ctx, "new").Err(), redis.Nil, "the key frank took afresh let go")
	})
}

// The locks of one release call that leave a key in place are written once
// a key (see release.lua): the key then lists the others with their units,
// or is gone when they all left; a lock sent twice in one call sells once.
func TestScriptReleaseLeavesOnce(t *testing.T) {
	const (
		alice = "h:a={now+60000}=alice=2"
		bob   = "h:b={now+60000}=bob=3"
		carol = "h:c={now+60000}=carol=1"
	)
	plain := map[string]string{"units:{a}:k": "10"}
	before := map[string]string{"k": "4 - " + alice + "," + bob + "," + carol + " #"}
	consume := func(owners ...string) []any {
		var args []any
		for _, o := range owners {
			args = append(args, consumeArgv(o, "h:"+o[:1], "k")...)
		}
		return args
	}
	runScriptCases(t, []scriptCase{
		{name: "two of three holds consumed: the third listed with its units",
			plain: plain, before: before, script: wire.ReleaseScript, args: consume("bob", "carol"),
			reply: int64(0), after: map[string]string{"k": "4 - " + alice + " #"}, plainAfter: map[string]string{"units:{a}:k": "6"}},
		{name: "every hold consumed: the key is gone",
			plain: plain, before: before, script: wire.ReleaseScript, args: consume("alice", "bob", "carol"),
			reply: int64(0), after: map[string]string{"k": ""}, plainAfter: map[string]string{"units:{a}:k": "4"}},
		{name: "a lock sent twice sells once, and its second finds another's key",
			plain: plain, before: before, script: wire.ReleaseScript, args: consume("bob", "bob"),
			reply: []any{[]any{}, []any{}, []any{"k"}, []any{}}, after: map[string]string{"k": "4 - " + alice + "," + carol + " #"},
			plainAfter: map[string]string{"units:{a}:k": "7"}},
	})
}

// Holds that join and leave a key of many holds are written in place (see
// layout.lua): one that leaves leaves a hole, one that joins fills a hole
// as long as it, so that a key's value grows no longer than its holds at
// their most, through any number of holds coming and going; and what is
// written reads as the holds it lists, units and all.
func TestScriptHoldsWrittenInPlace(t *testing.T) {
	rdb := wiretest.ServerClient(t)
	ctx := t.Context()
	for _, mode := range []string{"counted", "shared"} {
		t.Run(mode, func(t *testing.T) {
			require.NoError(t, rdb.FlushAll(ctx).Err())
			require.NoError(t, rdb.Set(ctx, "units:{a}:k", 1000, 0).Err())
			lease := int64(60000)
			take := func(i int) {
				owner, hold := fmt.Sprintf("owner-%03d", i), fmt.Sprintf("h:%016x", i)
				args := acquireArgv(owner, hold, lease, "try", "s", "k")
				if mode == "counted" {
					args = countedArgv(owner, hold, lease, "try", int64(1+i%9), "k")
				}
				reply, err := wire.AcquireScript.Run(ctx, rdb, nil, args...).Slice()
				require.NoError(t, err)
				require.Equal(t, int64(1), reply[0], "hold %d taken: %v", i, reply)
			}
			leave := func(i int) {
				reply, err := wire.ReleaseScript.Run(ctx, rdb, nil, releaseArgv(fmt.Sprintf("owner-%03d", i), fmt.Sprintf("h:%016x", i), "k")...).Result()
				require.NoError(t, err)
				require.Equal(t, int64(0), reply, "hold %d let go", i)
			}
			value := func() string {
				v, err := rdb.Get(ctx, "k").Result()
				require.NoError(t, err)
				return v
			}
			live := map[int]bool{}
			for i := range 10 {
				take(i)
				live[i] = true
			}
			longest := len(value())
			leave(3)
			delete(live, 3)
			v := value()
			assert.Len(t, v, longest, "a hold that leaves is written out in place")
			assert.Contains(t, v, ",,,,,,,,,,", "its entry became a hole")
			// Holds coming and going, none more than ten at once.
			for i := 10; i < 300; i++ {
				gone := i - 7
				if live[gone] {
					leave(gone)
					delete(live, gone)
				}
				take(i)
				live[i] = true
				for j := range live {
					if len(live) > 10 {
						leave(j)
						delete(live, j)
					}
				}
			}
			v = value()
			assert.LessOrEqual(t, len(v), longest+len(v)/10, "the value of %d holds is no longer than it was at its longest, but for a hold", len(live))
			state, ok := wire.ParseLock(v, time.Now())
			require.True(t, ok, "%q reads as a lock value", v)
			var want []string
			units := map[string]int64{}
			for i := range live {
				want = append(want, fmt.Sprintf("owner-%03d", i))
				units[fmt.Sprintf("owner-%03d", i)] = int64(1 + i%9)
			}
			slices.Sort(want)
			assert.Equal(t, want, state.Holders, "the holds listed are the live ones")
			if mode == "counted" {
				assert.Equal(t, units, state.Units)
			}
			// A hold that ends past the key's expiry has it written whole,
			// without holes, expiring a lease after the hold.
			leave(1)
			delete(live, 1)
			require.Contains(t, value(), ",,", "the hole of a hold that left")
			lease = 2 * lease
			take(300)
			live[300] = true
			v = value()
			assert.NotContains(t, v, ",,", "written whole: %q", v)
			assert.InDelta(t, 2*lease, rdb.PTTL(ctx, "k").Val().Milliseconds(), 1000)
			state, ok = wire.ParseLock(v, time.Now())
			require.True(t, ok, "%q reads as a lock value", v)
			assert.Len(t, state.Holders, len(live))
			for i := range live {
				leave(i)
			}
			assert.ErrorIs(t, rdb.Get(ctx, "k").Err(), redis.Nil, "the last hold's leaving deletes the key")
		})
	}
}

// A call refused after it joined a key of many holds puts the key back as
// it was, its expiry too: measured from a time read once per call, an
// expiry put back ended the key before a live hold's end by as long as the
// call had run (120-330 ms here for 32 baskets).
func TestScriptUndoKeepsTheExpiry(t *testing.T) {
	rdb := wiretest.ServerClient(t)
	ctx := t.Context()
	for _, tc := range []struct {
		name, modes, field string
		units              bool
	}{{"shared", "sx", "*", false}, {"counted", "nx", "#", true}} {
		t.Run(tc.name, func(t *testing.T) {
			require.NoError(t, rdb.FlushAll(ctx).Err())
			require.NoError(t, rdb.Set(ctx, "units:{a}:k", 5000, 0).Err())
			end := serverNow(t, rdb) + 60000
			holds := make([]string, 0, 1001)
			for i := range 1000 {
				holds = append(holds, fmt.Sprintf("h:%016x=%d=holder-%d", i+5000, end-1000, i))
			}
			holds = append(holds, fmt.Sprintf("h:%016x=%d=reader", 1, end))
			if tc.units {
				for i := range holds {
					holds[i] += "=1"
				}
			}
			v := "5 - " + strings.Join(holds, ",") + " " + ownerField(tc.field, strings.Join(holds, ","))
			require.NoError(t, rdb.Set(ctx, "k", v, 0).Err())
			require.NoError(t, rdb.PExpireAt(ctx, "k", time.UnixMilli(end)).Err())
			require.NoError(t, rdb.Set(ctx, "k2x", "1 - h:zz= zz", time.Hour).Err())
			args := []any{1000, wire.ModeFirst + "s", "cancel:{a}:h:call"}
			for b := range 32 {
				slot := []any{"fence:{a}", 2, tc.modes, "k", "k2x"}
				if tc.units {
					slot = append(slot, 1, "units:{a}:k")
				}
				args = append(append(args, fmt.Sprintf("owner-%d", b), fmt.Sprintf("h:%016x", b+100), len(slot)), slot...)
			}
			reply, err := wire.TryEachScript.Run(ctx, rdb, nil, args...).Slice()
			require.NoError(t, err)
			require.Len(t, reply, 32)
			for _, r := range reply {
				assert.Equal(t, int64(0), r.([]any)[0], "a basket refused by k2x: %v", r)
			}
			got, err := rdb.Get(ctx, "k").Result()
			require.NoError(t, err)
			assert.Equal(t, v, got, "the key as it was")
			expires, err := rdb.PExpireTime(ctx, "k").Result()
			require.NoError(t, err)
			assert.GreaterOrEqual(t, expires.Milliseconds(), end, "the key expires no earlier than its live holds")
		})
	}
}

func TestScriptNonStringKeyIsNoLockKey(t *testing.T) {
	rdb := wiretest.ServerClient(t)
	ctx := t.Context()
	now := serverNow(t, rdb)
	hold := atTime("3 - h:a={now+60000} alice", now)
	for _, tc := range []struct {
		name   string
		script *redis.Script
		args   []any
		reply  any
	}{
		{"release", wire.ReleaseScript, releaseArgv("alice", "h:a", "list", "k"), int64(0)},
		{"extend", wire.ExtendScript, []any{"h:a", 1000, 2, "list", "k"}, []any{[]any{"list"}, []any{}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			require.NoError(t, rdb.FlushAll(ctx).Err())
			require.NoError(t, rdb.RPush(ctx, "list", "x").Err())
			require.NoError(t, rdb.Set(ctx, "k", hold, time.Minute).Err())
			reply, err := tc.script.Run(ctx, rdb, nil, tc.args...).Result()
			require.NoError(t, err)
			assert.True(t, similar(tc.reply, reply), "reply %v, want %v", reply, tc.reply)
			n, err := rdb.LLen(ctx, "list").Result()
			require.NoError(t, err)
			assert.EqualValues(t, 1, n, "the list is left alone")
			if tc.name == "release" {
				assert.ErrorIs(t, rdb.Get(ctx, "k").Err(), redis.Nil, "the lock key after it is released")
			}
		})
	}
	t.Run("acquire in units", func(t *testing.T) {
		require.NoError(t, rdb.FlushAll(ctx).Err())
		require.NoError(t, rdb.RPush(ctx, "list", "x").Err())
		require.NoError(t, rdb.Set(ctx, "units:{a}:list", 10, 0).Err())
		reply, err := wire.AcquireScript.Run(ctx, rdb, nil, countedArgv("bob", "h:b", 1000, "try", 1, "list")...).Slice()
		require.NoError(t, err)
		assert.Equal(t, int64(0), reply[0], "refused, as a key another owner holds: %v", reply)
		n, err := rdb.LLen(ctx, "list").Result()
		require.NoError(t, err)
		assert.EqualValues(t, 1, n, "the list is left alone")
	})
	require.NoError(t, rdb.FlushAll(ctx).Err())
	require.NoError(t, rdb.RPush(ctx, "list", "x").Err())
	reply, err := wire.ForceScript.Run(ctx, rdb, nil, "list").Result()
	require.NoError(t, err)
	vals := reply.([]any)
	assert.Equal(t, []any{[]any{}, nil}, vals[1:], "a forced release says the list was not held")
}

// luaConstant is the value of `local name = value` in a script's source.
func luaConstant(t *testing.T, source, name string) string {
	t.Helper()
	m := regexp.MustCompile(`(?m)^local ` + name + ` = (.+)$`).FindStringSubmatch(source)
	require.NotNil(t, m, "no %s in the script", name)
	return strings.Trim(m[1], `'"`)
}

// The facts the Go code and the scripts share are written once on each side
// and agree: the messages, the owner field of a shared key, the grant time
// doc.go states, the hold prefix the script headers name, and the statuses
// acquire.lua's header lists against those the Go side decodes.
func TestScriptConstantsAgree(t *testing.T) {
	assert.Equal(t, wire.ReleasedMessage, luaConstant(t, wire.LayoutSource, "RELEASED"))
	assert.Equal(t, wire.AgainMessage, luaConstant(t, wire.LayoutSource, "AGAIN"))
	assert.Equal(t, wire.SharedOwner, luaConstant(t, wire.LayoutSource, "SHARED"))
	assert.Equal(t, wire.CountedOwner, luaConstant(t, wire.LayoutSource, "COUNTED"))
	assert.Equal(t, strconv.FormatInt(wire.GrantTime.Milliseconds(), 10), luaConstant(t, wire.LayoutSource, "GRANT_MS"))
	for name, source := range map[string]string{"acquire": wire.AcquireSource, "release": wire.ReleaseSource} {
		assert.Contains(t, source, `"`+wire.HoldPrefix+`" .. hold id`, "%s.lua's header names the hold prefix", name)
	}
	var statuses []int64
	for _, m := range regexp.MustCompile(`(?m)^-- Returns \{(-?\d+)`).FindAllStringSubmatch(wire.AcquireSource, -1) {
		n, err := strconv.ParseInt(m[1], 10, 64)
		require.NoError(t, err)
		statuses = append(statuses, n)
	}
	assert.ElementsMatch(t, []int64{wire.AcquireGranted, wire.AcquireRefused, wire.AcquireCancelled, wire.AcquireElsewhere, wire.AcquireUpgrade,
		wire.AcquireNoUnits, wire.AcquireOverUnits}, statuses)
}

// On a master that does not serve a key's slot (moved, or never its), the
// scripts change nothing for that key and say so: an acquire that meets one
// takes nothing, even of the keys it could have taken or joined ({-2}); a release, an
// extension and a forced release name it as elsewhere and go on with the
// keys served here.
func TestScriptMovedKeys(t *testing.T) {
	rdb := wiretest.HalfClusterNode(t)
	ctx := t.Context()
	served, moved := hashtag.ForSlot(100), hashtag.ForSlot(9000)
	here, away := "k{"+served+"}", "k{"+moved+"}"
	hold := func() {
		t.Helper()
		require.NoError(t, rdb.FlushAll(ctx).Err())
		require.NoError(t, rdb.Set(ctx, here, "3 - h:a= alice", time.Minute).Err())
	}
	run := func(s *redis.Script, args ...any) any {
		t.Helper()
		reply, err := s.Run(ctx, rdb, nil, args...).Result()
		require.NoError(t, err)
		return reply
	}
	cancelMark := "cancel:{" + served + "}:h:b"

	require.NoError(t, rdb.FlushAll(ctx).Err())
	reply := run(wire.AcquireScript, "bob", "h:b", 1000, "try", cancelMark, 2000, "fence:{"+moved+"}", 1, away)
	assert.True(t, similar([]any{int64(-2)}, reply), "a moved key: %v", reply)
	reply = run(wire.AcquireScript, "bob", "h:b", 1000, "try", cancelMark, 2000, "fence:{"+served+"}", 1, "j{"+served+"}", "fence:{"+moved+"}", 1, away)
	assert.True(t, similar([]any{int64(-2)}, reply), "a served and a moved slot: %v", reply)
	n, err := rdb.Exists(ctx, "j{"+served+"}").Result()
	require.NoError(t, err)
	assert.Zero(t, n, "the served key the call could have taken is not taken")

	// A served slot only joined (the owner holds its key), then a moved
	// one: the join is undone too.
	hold()
	reply = run(wire.AcquireScript, "alice", "h:b", 1000, "try", cancelMark, 2000, "fence:{"+served+"}", 1, here, "fence:{"+moved+"}", 1, away)
	assert.True(t, similar([]any{int64(-2)}, reply), "a joined and a moved slot: %v", reply)
	v, err := rdb.Get(ctx, here).Result()
	require.NoError(t, err)
	assert.Equal(t, "3 - h:a= alice", v, "the key joined is as it was")

	// tryeach: a basket with a moved slot changes nothing of it ({-2}); the
	// other baskets of the call are taken.
	require.NoError(t, rdb.FlushAll(ctx).Err())
	reply = run(wire.TryEachScript, 1000, "try", cancelMark,
		"bob", "h:b", 6, "fence:{"+served+"}", 1, "j{"+served+"}", "fence:{"+moved+"}", 1, away,
		"carol", "h:c", 3, "fence:{"+served+"}", 1, "m{"+served+"}")
	assert.True(t, similar([]any{[]any{int64(-2)}, []any{int64(1), int64(2)}}, reply), "tryeach: %v", reply)
	n, err = rdb.Exists(ctx, "j{"+served+"}").Result()
	require.NoError(t, err)
	assert.Zero(t, n, "nothing of the basket with a moved slot is taken")
	v, err = rdb.Get(ctx, "m{"+served+"}").Result()
	require.NoError(t, err)
	assert.Equal(t, "2 - h:c= carol", v, "the other basket is")

	hold()
	reply = run(wire.ReleaseScript, releaseArgv("alice", "h:a", here, away)...)
	assert.True(t, similar([]any{[]any{}, []any{away}}, reply), "release: %v", reply)
	assert.ErrorIs(t, rdb.Get(ctx, here).Err(), redis.Nil, "the served key is released")

	// A cancel mark of a slot not served here is named as elsewhere, to be
	// set where its slot is; one served here is set.
	markAway := "cancel:{" + moved + "}:h:a"
	reply = run(wire.ReleaseScript, "alice", "h:a", 60000, 2, 1, 0, cancelMark, markAway, here)
	assert.True(t, similar([]any{[]any{}, []any{markAway}}, reply), "release with marks: %v", reply)
	n, err = rdb.Exists(ctx, cancelMark).Result()
	require.NoError(t, err)
	assert.EqualValues(t, 1, n, "the mark served here is set")

	hold()
	reply = run(wire.ExtendScript, "h:a", 60000, 2, here, away)
	assert.True(t, similar([]any{[]any{}, []any{away}}, reply), "extend: %v", reply)
	pttl, err := rdb.PTTL(ctx, here).Result()
	require.NoError(t, err)
	assert.Greater(t, pttl, 59*time.Second, "the served key is extended")

	hold()
	vals, ok := run(wire.ForceScript, here, away).([]any)
	require.True(t, ok)
	require.Len(t, vals, 4)
	assert.Equal(t, []any{away}, vals[1], "force: the moved key is elsewhere")
	assert.Equal(t, "3 - h:a= alice", vals[2])
	assert.Nil(t, vals[3])
	assert.ErrorIs(t, rdb.Get(ctx, here).Err(), redis.Nil, "the served key is released")
}

func TestMain(m *testing.M) { wiretest.Main(m) }
