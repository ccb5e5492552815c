package wire_test

import (
	"cmp"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/batchlock/batchlock/internal/wire"
	"github.com/batchlock/batchlock/internal/wire/wiretest"
)

// The scripts' own cost, on one redis-server, against the lock floor (the
// least a real lock does: per slot an INCR, SET NX PX of an owned value per
// key, an owner-checked delete) and the fenced floor (an INCRBY per slot, a
// SET PX per key, a DEL per key), whose scripts are the bench's
// (bench/floor). Each iteration locks and releases n fresh keys of one slot
// (slots=33: one key in each of 33 slots) with one call each way, as a batch
// does on each master; the server's CPU
// and its in-command time per iteration are reported beside the client's
// ns/op:
//
//	go test -run '^$' -bench BenchmarkScript ./internal/wire
//
// With BATCHLOCK_BENCH_CALLGRIND=1 the benchmark starts its own
// redis-server under valgrind's callgrind and reports the instructions the
// server ran per iteration (instr/op): a count that, unlike times, repeats
// from run to run on a busy machine.
//
//	BATCHLOCK_BENCH_CALLGRIND=1 go test -run '^$' -bench BenchmarkScript -benchtime 200x ./internal/wire

func BenchmarkScript(b *testing.B) {
	srv := benchServer(b)
	rdb := srv.rdb
	lockFloorLock, lockFloorUnlock := floorScript(b, "owned_lock.lua"), floorScript(b, "owned_unlock.lua")
	fencedFloorLock, fencedFloorUnlock := floorScript(b, "fenced_lock.lua"), floorScript(b, "unlock.lua")
	// Ids as long as a Client's own: "host:pid:" and 8 random bytes in hex
	// for the owner, "h:" and 8 random bytes for a hold.
	const owner = "worker-7:12345:0123456789abcdef"
	for _, n := range []int{1, 100, 1000} {
		b.Run(fmt.Sprintf("lock-floor/keys=%d", n), func(b *testing.B) {
			srv.measure(b, n, func(i int, keys []string) {
				route := keys[:1]
				args := append([]any{10000, owner, "fence:{a}", len(keys)}, anysOf(keys)...)
				mustRun(b, lockFloorLock.Run(b.Context(), rdb, route, args...))
				mustRun(b, lockFloorUnlock.Run(b.Context(), rdb, route, append([]any{owner}, anysOf(keys)...)...))
			})
		})
		b.Run(fmt.Sprintf("fenced-floor/keys=%d", n), func(b *testing.B) {
			srv.measure(b, n, func(i int, keys []string) {
				route := keys[:1]
				args := append([]any{10000, "fence:{a}", len(keys)}, anysOf(keys)...)
				mustRun(b, fencedFloorLock.Run(b.Context(), rdb, route, args...))
				mustRun(b, fencedFloorUnlock.Run(b.Context(), rdb, route, anysOf(keys)...))
			})
		})
		b.Run(fmt.Sprintf("batchlock/keys=%d", n), func(b *testing.B) {
			srv.measure(b, n, func(i int, keys []string) {
				hold := fmt.Sprintf("h:%016x", i)
				args := []any{owner, hold, 10000, wire.ModeWait, "cancel:{a}:" + hold, 3000, "fence:{a}", len(keys)}
				mustRun(b, wire.AcquireScript.Run(b.Context(), rdb, nil, append(args, anysOf(keys)...)...))
				rel := []any{owner, hold, 10000, 0, len(keys), 0}
				mustRun(b, wire.ReleaseScript.Run(b.Context(), rdb, nil, append(rel, anysOf(keys)...)...))
			})
		})
		// Units of n fresh counted keys taken and sold (Consume), against
		// the decrement floor's check and decrement of n counts.
		b.Run(fmt.Sprintf("counted/keys=%d", n), func(b *testing.B) {
			for j := range n {
				mustRun(b, rdb.Do(b.Context(), "SET", fmt.Sprintf("units:{a}%d", j), 1<<40))
			}
			srv.measure(b, n, func(i int, keys []string) {
				hold := fmt.Sprintf("h:%016x", i)
				args := []any{owner, hold, 10000, wire.ModeWait + "s", "cancel:{a}:" + hold, 3000, "fence:{a}", len(keys), strings.Repeat("n", len(keys))}
				args = append(args, anysOf(keys)...)
				rel := append([]any{owner, hold, 10000, 0, len(keys), len(keys)}, anysOf(keys)...)
				for j, k := range keys {
					args = append(args, 1, fmt.Sprintf("units:{a}%d", j))
					rel = append(rel, k, fmt.Sprintf("units:{a}%d", j))
				}
				mustRun(b, wire.AcquireScript.Run(b.Context(), rdb, nil, args...))
				mustRun(b, wire.ReleaseScript.Run(b.Context(), rdb, nil, rel...))
			})
		})
		b.Run(fmt.Sprintf("decrement-floor/keys=%d", n), func(b *testing.B) {
			decrement := floorScript(b, "decrement.lua")
			args := []any{0, n}
			for j := range n {
				mustRun(b, rdb.Do(b.Context(), "SET", fmt.Sprintf("{a}count:%d", j), 1<<40))
				args = append(args, fmt.Sprintf("{a}count:%d", j), 1)
			}
			srv.measure(b, n, func(int, []string) {
				mustRun(b, decrement.Run(b.Context(), rdb, []string{"{a}count:0"}, args...))
			})
		})
		// The hold floor's take and sale of n counts: the decrement floor's
		// work, each key's units also kept as a hold with a lease and a
		// token, then sold.
		b.Run(fmt.Sprintf("hold-floor/keys=%d", n), func(b *testing.B) {
			hold := floorScript(b, "hold.lua")
			var pairs []any
			for j := range n {
				mustRun(b, rdb.Do(b.Context(), "SET", fmt.Sprintf("{a}count:%d", j), 1<<40))
				pairs = append(pairs, fmt.Sprintf("{a}count:%d", j), 1)
			}
			srv.measure(b, n, func(i int, _ []string) {
				id := fmt.Sprintf("h:%016x", i)
				mustRun(b, hold.Run(b.Context(), rdb, []string{"{a}count:0"}, append([]any{"take", 10000, 0, id, n}, pairs...)...))
				mustRun(b, hold.Run(b.Context(), rdb, []string{"{a}count:0"}, append([]any{"sell", 10000, 0, id, n}, pairs...)...))
			})
		})
		// A refused call: every key held by another owner, as a "try"
		// finds them (it lists each conflict and who holds it); it leaves
		// the keys as they were, so every iteration meets the same ones.
		b.Run(fmt.Sprintf("batchlock-refused/keys=%d", n), func(b *testing.B) {
			held := make([]any, n)
			for j := range held {
				held[j] = fmt.Sprintf("{a}held:%d", j)
				mustRun(b, rdb.Do(b.Context(), "SET", held[j], "1 - h:a= alice", "PX", 600000))
			}
			args := append([]any{"bob", "h:b", 10000, wire.ModeTry, "cancel:{a}:h:b", 3000, "fence:{a}", n}, held...)
			srv.measure(b, n, func(int, []string) {
				mustRun(b, wire.AcquireScript.Run(b.Context(), rdb, nil, args...))
			})
		})
	}
	// Keys spread over the slots, as a batch spread over the masters is: a
	// master's share of 100 keys over three masters, each key in a slot of
	// its own, against the lock floor alike; what a slot costs beyond a key
	// is the difference from the one-slot runs above.
	spread := func(i int) (keys []string, slots []any) {
		for j := range 33 {
			k := fmt.Sprintf("{s%d}k:%d", j, i%64)
			keys = append(keys, k)
			slots = append(slots, fmt.Sprintf("fence:{s%d}", j), 1, k)
		}
		return keys, slots
	}
	b.Run("lock-floor/slots=33", func(b *testing.B) {
		srv.measure(b, 0, func(i int, _ []string) {
			keys, slots := spread(i)
			mustRun(b, lockFloorLock.Run(b.Context(), rdb, keys[:1], append([]any{10000, owner}, slots...)...))
			mustRun(b, lockFloorUnlock.Run(b.Context(), rdb, keys[:1], append([]any{owner}, anysOf(keys)...)...))
		})
	})
	b.Run("batchlock/slots=33", func(b *testing.B) {
		srv.measure(b, 0, func(i int, _ []string) {
			keys, slots := spread(i)
			hold := fmt.Sprintf("h:%016x", i)
			args := []any{owner, hold, 10000, wire.ModeWait, "cancel:{s0}:" + hold, 3000}
			mustRun(b, wire.AcquireScript.Run(b.Context(), rdb, nil, append(args, slots...)...))
			rel := []any{owner, hold, 10000, 0, len(keys), 0}
			mustRun(b, wire.ReleaseScript.Run(b.Context(), rdb, nil, append(rel, anysOf(keys)...)...))
		})
	})
	// A tick on one master: 32 baskets of 8 fresh keys each, every key in
	// a slot of its own (spread), taken by one TryEach call and let go by
	// one release call, exclusively or in units (sold): what a tick costs
	// per key beyond acquire's one basket. With hot, every basket's first
	// key is one key that hot others hold in units already, as a flash
	// sale's SKU: the tick joins it 32 times and sells 32 holds of it.
	// With overlap, each key is in 4 of the baskets (64 keys in all), as
	// SKUs are in a tick of a sale in units: most lines join a key.
	for _, tc := range []struct {
		mode    byte
		hot     int
		overlap bool
	}{{wire.ModeExclusive, 0, false}, {wire.ModeCounted, 0, false}, {wire.ModeCounted, 1000, false}, {wire.ModeCounted, 0, true}} {
		name := fmt.Sprintf("tryeach-%c/baskets=32,keys=8", tc.mode)
		if tc.hot > 0 {
			name += fmt.Sprintf(",hot=%d", tc.hot)
		}
		if tc.overlap {
			name += ",overlap=4"
		}
		b.Run(name, func(b *testing.B) {
			const baskets, perBasket, hot = 32, 8, "{a}hot"
			pipe := rdb.Pipeline()
			for i := range 64 { // measure's key sets
				for j := range baskets * perBasket {
					pipe.Set(b.Context(), fmt.Sprintf("units:{a}k:%d:%d", i, j), 1<<40, 0)
				}
			}
			pipe.Set(b.Context(), "units:"+hot, 1<<40, 0)
			if _, err := pipe.Exec(b.Context()); err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { rdb.Del(context.Background(), hot) })
			for j := range tc.hot {
				args := []any{fmt.Sprintf("%s:%d", owner, j), fmt.Sprintf("h:%016x", j), 600000, wire.ModeTry + "s", "cancel:{a}:h", 3000, "fence:{a}", 1, "n", hot, 1, "units:" + hot}
				mustRun(b, wire.AcquireScript.Run(b.Context(), rdb, nil, args...))
			}
			srv.measure(b, baskets*perBasket, func(i int, keys []string) {
				args := wire.AppendTryEach(nil, 10000, wire.ModeFresh+"s", fmt.Sprintf("cancel:{k%d}:t", i))
				var rel []any
				for j := range baskets {
					who, hold := owner, fmt.Sprintf("h:%08x%08x", i, j)
					mine := slices.Clone(keys[j*perBasket : (j+1)*perBasket])
					if tc.overlap {
						who = fmt.Sprintf("%s:%d", owner, j)
						for k := range mine {
							mine[k] = keys[(j*perBasket+k)%(baskets*perBasket/4)]
						}
					}
					if tc.hot > 0 {
						// Each basket an owner of its own, as a Processor's.
						who, mine[0] = fmt.Sprintf("%s:%d", owner, j), hot
					}
					args = wire.AppendBasket(args, who, hold, func(args []any) []any {
						for _, k := range mine {
							args = wire.AppendSlot(args, "fence:"+k, []string{k}, []byte{tc.mode}, true)
							args = wire.AppendCounted(args, []string{k}, []byte{tc.mode}, func(string) (int64, string) { return 1, "units:" + k })
						}
						return args
					})
					consumed := 0
					if tc.mode == wire.ModeCounted {
						consumed = perBasket
					}
					rel = wire.AppendRelease(rel, who, hold, 10000, 0, perBasket, consumed)
					rel = append(rel, anysOf(mine)...)
					for _, k := range mine[:consumed] {
						rel = append(rel, k, "units:"+k)
					}
				}
				mustRun(b, wire.TryEachScript.Run(b.Context(), rdb, nil, args...))
				mustRun(b, wire.ReleaseScript.Run(b.Context(), rdb, nil, rel...))
			})
		})
	}
	// A hold of a key that others hold already, in units of a counted key
	// or shared, taken and released (one call each way): its cost should
	// not grow with theirs.
	for _, mode := range []string{"counted", "shared"} {
		for _, holders := range []int{1, 100, 1000} {
			benchJoin(b, srv, owner, mode, holders, false)
		}
	}
	// A hold of such a key renewed (extend.lua), as the watchdog does a
	// third of a lease after the last time: its cost should not grow with
	// the others' either.
	for _, mode := range []string{"counted", "shared"} {
		for _, holders := range []int{1, 1000} {
			benchJoin(b, srv, owner, mode, holders, true)
		}
	}
}

// benchJoin measures a hold of a key taken and released, in mode (counted
// or shared), the key held by holders others whose leases end later; with
// renew, one of those holds renewed instead, in turn.
func benchJoin(b *testing.B, srv *benchTarget, owner, mode string, holders int, renew bool) {
	rdb := srv.rdb
	name := fmt.Sprintf("%s-join/holders=%d", mode, holders)
	if renew {
		name = fmt.Sprintf("%s-renew/holders=%d", mode, holders)
	}
	b.Run(name, func(b *testing.B) {
		const key, capacity = "{a}hot", "units:{a}hot"
		mustRun(b, rdb.Do(b.Context(), "SET", capacity, 1<<40))
		b.Cleanup(func() { rdb.Del(context.Background(), key, capacity) })
		take := func(owner, hold string, lease int) []any {
			args := []any{owner, hold, lease, wire.ModeTry + "s", "cancel:{a}:" + hold, 3000, "fence:{a}", 1}
			if mode == "shared" {
				return append(args, "s", key)
			}
			return append(args, "n", key, 1, capacity)
		}
		for j := range holders {
			mustRun(b, wire.AcquireScript.Run(b.Context(), rdb, nil, take(fmt.Sprintf("%s:%d", owner, j), fmt.Sprintf("h:%016x", j), 600000)...))
		}
		if renew {
			srv.measure(b, 1, func(i int, _ []string) {
				mustRun(b, wire.ExtendScript.Run(b.Context(), rdb, nil, fmt.Sprintf("h:%016x", i%holders), 600000+i, 1, key))
			})
			return
		}
		srv.measure(b, 1, func(i int, _ []string) {
			who, hold := fmt.Sprintf("%s:joins:%d", owner, i), fmt.Sprintf("h:j%015x", i)
			mustRun(b, wire.AcquireScript.Run(b.Context(), rdb, nil, take(who, hold, 10000)...))
			mustRun(b, wire.ReleaseScript.Run(b.Context(), rdb, nil, who, hold, 60000, 0, 1, 0, key))
		})
	})
}

// floorScript is one of the bench's floor scripts (bench/floor), read from
// this repository.
func floorScript(b *testing.B, name string) *redis.Script {
	src, err := os.ReadFile(filepath.Join("..", "..", "bench", "floor", name))
	if err != nil {
		b.Fatalf("the bench's floor script: %v", err)
	}
	return redis.NewScript(string(src))
}

// benchTarget is the redis-server a script benchmark measures: the script
// tests' own, or, with BATCHLOCK_BENCH_CALLGRIND=1, one of the benchmark's
// own under callgrind (pid set, its dumps written to dumps).
type benchTarget struct {
	rdb   *redis.Client
	pid   int
	dumps string
}

// benchServer is the redis-server of the script benchmarks.
func benchServer(b *testing.B) *benchTarget {
	if os.Getenv("BATCHLOCK_BENCH_CALLGRIND") == "" {
		return &benchTarget{rdb: wiretest.ServerClient(b)}
	}
	dir := b.TempDir()
	dumps := filepath.Join(dir, "callgrind.out")
	addr, cmd, err := wiretest.StartRedisServerUnder([]string{"valgrind", "--tool=callgrind", "--callgrind-out-file=" + dumps})
	if err != nil {
		b.Fatalf("redis-server under callgrind: %v", err)
	}
	b.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	rdb := redis.NewClient(&redis.Options{Addr: addr, ReadTimeout: time.Minute})
	b.Cleanup(func() { _ = rdb.Close() })
	return &benchTarget{rdb: rdb, pid: cmd.Process.Pid, dumps: dumps}
}

// measure runs op b.N times on keys of one slot, fresh each time, and
// reports the server's CPU (user+sys) and in-command time (EVALSHA) per op,
// and under callgrind the instructions it ran per op.
func (t *benchTarget) measure(b *testing.B, n int, op func(i int, keys []string)) {
	ctx := b.Context()
	keys := make([][]string, 64)
	for i := range keys {
		for j := range n {
			keys[i] = append(keys[i], fmt.Sprintf("{a}k:%d:%d", i, j))
		}
	}
	op(0, keys[0]) // loads the scripts
	if err := t.rdb.ConfigResetStat(ctx).Err(); err != nil {
		b.Fatal(err)
	}
	t.instructions(b) // starts the count
	cpu0 := serverCPU(b, t.rdb)
	b.ResetTimer()
	for i := range b.N {
		op(i, keys[i%len(keys)])
	}
	b.StopTimer()
	cpu := serverCPU(b, t.rdb) - cpu0
	stats, err := t.rdb.Info(ctx, "commandstats").Result()
	if err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(float64(cpu.Microseconds())/float64(b.N), "cpu-µs/op")
	b.ReportMetric(float64(commandUsec(stats, "evalsha"))/float64(b.N), "cmd-µs/op")
	if t.pid != 0 {
		b.ReportMetric(float64(t.instructions(b))/float64(b.N), "instr/op")
	}
}

// instructions dumps the counts of the server under callgrind and returns
// how many instructions it ran since the last dump (0 when not under
// callgrind). The two INFO calls of measure fall in the count: a few
// thousand instructions, against hundreds of thousands per op.
func (t *benchTarget) instructions(b *testing.B) int64 {
	if t.pid == 0 {
		return 0
	}
	before, _ := filepath.Glob(t.dumps + ".*")
	if out, err := exec.Command("callgrind_control", "--dump", strconv.Itoa(t.pid)).CombinedOutput(); err != nil {
		b.Fatalf("callgrind_control --dump: %v: %s", err, out)
	}
	after, _ := filepath.Glob(t.dumps + ".*")
	if len(after) != len(before)+1 {
		b.Fatalf("callgrind wrote %d dumps, want one", len(after)-len(before))
	}
	newest := slices.MaxFunc(after, func(x, y string) int { return cmp.Compare(dumpNumber(x), dumpNumber(y)) })
	text, err := os.ReadFile(newest)
	if err != nil {
		b.Fatal(err)
	}
	for line := range strings.Lines(string(text)) {
		if v, ok := strings.CutPrefix(line, "summary: "); ok {
			count, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
			if err != nil {
				b.Fatalf("callgrind's summary %q: %v", v, err)
			}
			return count
		}
	}
	b.Fatalf("no summary in callgrind's dump %s", newest)
	return 0
}

// dumpNumber is the number callgrind puts after a dump's file name.
func dumpNumber(path string) int {
	n, _ := strconv.Atoi(path[strings.LastIndexByte(path, '.')+1:])
	return n
}

func serverCPU(b *testing.B, rdb *redis.Client) time.Duration {
	info, err := rdb.Info(b.Context(), "cpu").Result()
	if err != nil {
		b.Fatal(err)
	}
	var total time.Duration
	for line := range strings.Lines(info) {
		k, v, _ := strings.Cut(strings.TrimSpace(line), ":")
		if k == "used_cpu_user" || k == "used_cpu_sys" {
			secs, _ := strconv.ParseFloat(v, 64)
			total += time.Duration(secs * float64(time.Second))
		}
	}
	return total
}

func commandUsec(stats, name string) int64 {
	for line := range strings.Lines(stats) {
		rest, ok := strings.CutPrefix(strings.TrimSpace(line), "cmdstat_"+name+":")
		if !ok {
			continue
		}
		for field := range strings.SplitSeq(rest, ",") {
			if v, ok := strings.CutPrefix(field, "usec="); ok {
				n, _ := strconv.ParseInt(v, 10, 64)
				return n
			}
		}
	}
	return 0
}

func anysOf(ss []string) []any {
	out := make([]any, len(ss))
	for i, s := range ss {
		out[i] = s
	}
	return out
}

func mustRun(b *testing.B, cmd *redis.Cmd) {
	if err := cmd.Err(); err != nil {
		b.Fatal(err)
	}
}
