package batchlock

import (
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// The scripts' own cost, on one redis-server, against the fenced floor: the
// least a lock with per-key leases and per-slot fencing tokens does (an INCR
// of the slot's counter and a SET PX per key, then a DEL per key). Each
// iteration locks and releases n fresh keys of one slot with one call each
// way, as a batch does on each master; the server's CPU and its in-command
// time per iteration are reported beside the client's ns/op.
//
//	go test -run '^$' -bench BenchmarkScript ./batchlock

var (
	fencedFloorLock = redis.NewScript(`#!lua flags=allow-cross-slot-keys
local n = redis.call('INCRBY', ARGV[2], #ARGV - 2)
for i = 3, #ARGV do
  redis.call('SET', ARGV[i], n - #ARGV + i, 'PX', ARGV[1])
end
return n`)
	fencedFloorUnlock = redis.NewScript(`#!lua flags=allow-cross-slot-keys
for i = 1, #ARGV do
  redis.call('DEL', ARGV[i])
end
return #ARGV`)
)

func BenchmarkScript(b *testing.B) {
	rdb := benchServer(b)
	for _, n := range []int{1, 100, 1000} {
		b.Run(fmt.Sprintf("fenced-floor/keys=%d", n), func(b *testing.B) {
			measureServer(b, rdb, n, func(i int, keys []string) {
				args := append([]any{10000, "fence:{a}"}, anysOf(keys)...)
				mustRun(b, fencedFloorLock.Run(b.Context(), rdb, nil, args...))
				mustRun(b, fencedFloorUnlock.Run(b.Context(), rdb, nil, anysOf(keys)...))
			})
		})
		b.Run(fmt.Sprintf("batchlock/keys=%d", n), func(b *testing.B) {
			measureServer(b, rdb, n, func(i int, keys []string) {
				hold := "h:" + strconv.Itoa(i)
				args := []any{"0123456789abcdef0123456789abcdef", hold, 10000, modeWait, "cancel:{a}:" + hold, 3000, "fence:{a}", len(keys)}
				mustRun(b, acquireScript.Run(b.Context(), rdb, nil, append(args, anysOf(keys)...)...))
				rel := []any{"0123456789abcdef0123456789abcdef", hold, 10000, 0, len(keys)}
				mustRun(b, releaseScript.Run(b.Context(), rdb, nil, append(rel, anysOf(keys)...)...))
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
			args := append([]any{"bob", "h:b", 10000, modeTry, "cancel:{a}:h:b", 3000, "fence:{a}", n}, held...)
			measureServer(b, rdb, n, func(int, []string) {
				mustRun(b, acquireScript.Run(b.Context(), rdb, nil, args...))
			})
		})
	}
}

// benchServer is the script tests' server, for benchmarks.
func benchServer(b *testing.B) *redis.Client {
	scriptServer.once.Do(startScriptServer)
	if scriptServer.err != nil {
		b.Skipf("no redis-server: %v", scriptServer.err)
	}
	rdb := redis.NewClient(&redis.Options{Addr: scriptServer.addr})
	b.Cleanup(func() { _ = rdb.Close() })
	return rdb
}

// measureServer runs op b.N times on keys of one slot, fresh each time, and
// reports the server's CPU (user+sys) and in-command time (EVALSHA) per op.
func measureServer(b *testing.B, rdb *redis.Client, n int, op func(i int, keys []string)) {
	ctx := b.Context()
	keys := make([][]string, 64)
	for i := range keys {
		for j := range n {
			keys[i] = append(keys[i], fmt.Sprintf("{a}k:%d:%d", i, j))
		}
	}
	op(0, keys[0]) // loads the scripts
	if err := rdb.ConfigResetStat(ctx).Err(); err != nil {
		b.Fatal(err)
	}
	cpu0 := serverCPU(b, rdb)
	b.ResetTimer()
	for i := range b.N {
		op(i, keys[i%len(keys)])
	}
	b.StopTimer()
	cpu := serverCPU(b, rdb) - cpu0
	stats, err := rdb.Info(ctx, "commandstats").Result()
	if err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(float64(cpu.Microseconds())/float64(b.N), "cpu-µs/op")
	b.ReportMetric(float64(commandUsec(stats, "evalsha"))/float64(b.N), "cmd-µs/op")
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
