package cluster_test

import (
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// section is one critical section as its worker saw it: Start taken once the
// lock was held, End before it was released (or when the worker heard the lock
// was lost). Times come from time.Now in one process, so they carry the
// monotonic clock and compare across goroutines.
type section struct {
	Owner  string
	Keys   []string
	Tokens map[string]int64 // fencing token per key; a key missing here is not token-checked
	Shared map[string]bool  // keys held shared (WithShared)
	Start  time.Time
	End    time.Time
}

// checker collects the critical sections of concurrent workers and finds
// what mutual exclusion forbids: two owners inside a section on the same key
// at once, unless both hold it shared, and a key's fencing token going
// backwards (or being handed out again to another owner, unless both hold it
// shared) from one section to the next.
type checker struct {
	mu       sync.Mutex
	sections []section
	problems []string // seen by workers themselves, such as a foreign owner in Redis
}

func (c *checker) record(s section) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.sections = append(c.sections, s)
}

// report records a violation a worker saw directly.
func (c *checker) report(format string, args ...any) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.problems = append(c.problems, fmt.Sprintf(format, args...))
}

func (c *checker) count() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.sections)
}

// violations returns every problem found, empty for a clean history.
func (c *checker) violations() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := slices.Clone(c.problems)
	found, _ := breaches(c.sections)
	for _, b := range found {
		out = append(out, b.what)
	}
	return out
}

// breach is one thing mutual exclusion forbids, between an earlier section
// and a later one (by index), on one key.
type breach struct {
	key            string
	earlier, later int
	what           string
	overlap        bool // two owners inside at once, not a token's fault
}

// breaches finds, key by key, two owners inside a section at once (unless
// both hold the key shared), and a key's fencing token going backwards (or
// being handed out again to another owner) from one section to the next. It
// counts too the sections that shared a key with another owner's section
// at once, to show that readers did overlap.
func breaches(sections []section) (out []breach, overlapped int) {
	byKey := map[string][]int{}
	for i, s := range sections {
		if s.End.Before(s.Start) {
			out = append(out, breach{earlier: i, later: i, what: fmt.Sprintf("section %d of %s ends before it starts", i, s.Owner)})
		}
		for _, k := range s.Keys {
			byKey[k] = append(byKey[k], i)
		}
	}
	keys := make([]string, 0, len(byKey))
	for k := range byKey {
		keys = append(keys, k)
	}
	slices.Sort(keys)

	for _, k := range keys {
		idx := byKey[k]
		slices.SortStableFunc(idx, func(a, b int) int { return sections[a].Start.Compare(sections[b].Start) })
		// Sorted by start, a section overlaps exactly the earlier ones that
		// have not ended when it starts: all of them are compared, as a long
		// section of one owner may hide another owner's behind it.
		var open []int
		lastTok := -1
		for _, i := range idx {
			s := sections[i]
			open = slices.DeleteFunc(open, func(o int) bool { return !s.Start.Before(sections[o].End) })
			readers := false
			for _, o := range open {
				p := sections[o]
				if p.Owner == s.Owner {
					continue
				}
				if p.Shared[k] && s.Shared[k] {
					readers = true
					continue
				}
				out = append(out, breach{key: k, earlier: o, later: i, overlap: true, what: fmt.Sprintf("key %s: %s held it from %s while %s held it until %s (%v later)",
					k, s.Owner, s.Start.Format("15:04:05.000000"), p.Owner, p.End.Format("15:04:05.000000"), p.End.Sub(s.Start))})
				break
			}
			if readers {
				overlapped++
			}
			open = append(open, i)

			tok, ok := s.Tokens[k]
			if !ok {
				continue
			}
			if lastTok >= 0 {
				p := sections[lastTok]
				pt := p.Tokens[k]
				switch {
				case tok < pt:
					out = append(out, breach{key: k, earlier: lastTok, later: i,
						what: fmt.Sprintf("key %s: token went backwards from %d (%s) to %d (%s)", k, pt, p.Owner, tok, s.Owner)})
				case tok == pt && s.Owner != p.Owner && !(p.Shared[k] && s.Shared[k]):
					// Storage that accepts a token equal to the largest seen
					// (so that reentrant holds can write) would accept both.
					out = append(out, breach{key: k, earlier: lastTok, later: i,
						what: fmt.Sprintf("key %s: token %d given to both %s and %s", k, tok, p.Owner, s.Owner)})
				}
			}
			lastTok = i
		}
	}
	return out, overlapped
}

// requireClean fails the test with every violation found.
func (c *checker) requireClean(t testing.TB) {
	t.Helper()
	v := c.violations()
	const shown = 20
	if len(v) > shown {
		v = append(v[:shown], fmt.Sprintf("... and %d more", len(v)-shown))
	}
	require.Empty(t, v, "mutual exclusion violated in %d sections", c.count())
}

// The checker is what every fault test trusts, so it is shown to catch each
// kind of violation on made-up histories.
func TestCheckerCatchesViolations(t *testing.T) {
	t0 := time.Now()
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	sec := func(owner string, from, to int, toks map[string]int64) section {
		keys := make([]string, 0, len(toks))
		for k := range toks {
			keys = append(keys, k)
		}
		return section{Owner: owner, Keys: keys, Tokens: toks, Start: at(from), End: at(to)}
	}
	shared := func(s section) section {
		s.Shared = map[string]bool{}
		for _, k := range s.Keys {
			s.Shared[k] = true
		}
		return s
	}

	for _, tc := range []struct {
		name     string
		sections []section
		want     []string // substrings, one per expected violation
	}{
		{
			name: "clean history",
			sections: []section{
				sec("a", 0, 10, map[string]int64{"x": 1, "y": 1}),
				sec("b", 10, 20, map[string]int64{"x": 2}), // starts exactly when a ended
				sec("c", 5, 30, map[string]int64{"z": 7}),  // other keys overlap freely
				sec("d", 25, 40, map[string]int64{"x": 3, "y": 2}),
			},
		},
		{
			name: "reentrant holds of one owner share a token and may overlap",
			sections: []section{
				sec("a", 0, 10, map[string]int64{"x": 4}),
				sec("a", 2, 8, map[string]int64{"x": 4}),
				sec("b", 11, 12, map[string]int64{"x": 5}),
			},
		},
		{
			name: "overlap",
			sections: []section{
				sec("a", 0, 10, map[string]int64{"x": 1}),
				sec("b", 9, 20, map[string]int64{"x": 2}),
			},
			want: []string{"key x: b held it"},
		},
		{
			name: "overlap with a long section, not the previous one",
			sections: []section{
				sec("a", 0, 100, map[string]int64{"x": 1}),
				sec("b", 10, 20, map[string]int64{"y": 1}),
				sec("c", 30, 40, map[string]int64{"x": 2}),
			},
			want: []string{"key x: c held it"},
		},
		{
			name: "token backwards",
			sections: []section{
				sec("a", 0, 10, map[string]int64{"x": 5}),
				sec("b", 20, 30, map[string]int64{"x": 3}),
			},
			want: []string{"token went backwards from 5 (a) to 3 (b)"},
		},
		{
			name: "token reused by another owner",
			sections: []section{
				sec("a", 0, 10, map[string]int64{"x": 5}),
				sec("b", 20, 30, map[string]int64{"x": 5}),
			},
			want: []string{"token 5 given to both a and b"},
		},
		{
			name: "readers of a shared key overlap and share its token",
			sections: []section{
				shared(sec("a", 0, 10, map[string]int64{"x": 4})),
				shared(sec("b", 2, 12, map[string]int64{"x": 4})),
				sec("c", 12, 20, map[string]int64{"x": 5}),
				shared(sec("d", 21, 30, map[string]int64{"x": 6})),
			},
		},
		{
			name: "a writer inside a reader's section",
			sections: []section{
				shared(sec("a", 0, 100, map[string]int64{"x": 4})),
				shared(sec("b", 2, 10, map[string]int64{"x": 4})),
				sec("c", 50, 60, map[string]int64{"x": 5}),
			},
			want: []string{"key x: c held it"},
		},
		{
			name: "a reader inside a writer's section",
			sections: []section{
				sec("a", 0, 100, map[string]int64{"x": 4}),
				shared(sec("b", 50, 60, map[string]int64{"x": 5})),
			},
			want: []string{"key x: b held it"},
		},
		{
			name: "a reader's token given to a writer",
			sections: []section{
				shared(sec("a", 0, 10, map[string]int64{"x": 4})),
				sec("b", 20, 30, map[string]int64{"x": 4}),
			},
			want: []string{"token 4 given to both a and b"},
		},
		{
			name: "a long shared section does not hide the exclusive one under it",
			sections: []section{
				sec("a", 0, 50, map[string]int64{"x": 4}),
				shared(sec("a", 1, 100, map[string]int64{"x": 4})),
				shared(sec("b", 20, 30, map[string]int64{"x": 5})),
			},
			want: []string{"key x: b held it"},
		},
		{
			name: "a key without token is still checked for overlap",
			sections: []section{
				{Owner: "a", Keys: []string{"x"}, Start: at(0), End: at(10)},
				{Owner: "b", Keys: []string{"x"}, Start: at(5), End: at(6)},
			},
			want: []string{"key x: b held it"},
		},
		{
			name: "end before start",
			sections: []section{
				sec("a", 10, 0, map[string]int64{"x": 1}),
			},
			want: []string{"ends before it starts"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var c checker
			for _, s := range tc.sections {
				c.record(s)
			}
			got := c.violations()
			require.Len(t, got, len(tc.want), "violations: %q", got)
			for i, w := range tc.want {
				assert.Contains(t, got[i], w)
			}
		})
	}

	_, overlapped := breaches([]section{
		shared(sec("a", 0, 10, map[string]int64{"x": 4})),
		shared(sec("b", 2, 12, map[string]int64{"x": 4})),
		shared(sec("c", 3, 5, map[string]int64{"x": 4})),
		sec("d", 12, 20, map[string]int64{"x": 5}),
	})
	assert.Equal(t, 2, overlapped, "b and c each found another owner's reader inside")

	var c checker
	c.record(sec("a", 0, 10, map[string]int64{"x": 1}))
	c.report("worker saw %s", "a foreign owner")
	assert.Equal(t, []string{"worker saw a foreign owner"}, c.violations(), "problems reported by workers count")
}
