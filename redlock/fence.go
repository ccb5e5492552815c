package redlock

// Stale reports whether tokens, the Tokens of a key in one lock, belong to a
// holder older than the one whose Tokens are latest (both from Clients on
// the same deployments, in the same order). Storage that remembers the
// tokens of the last accepted write, and refuses writes whose tokens are
// stale, cannot be written by a holder that was paused past its lock.
//
// The tokens of later holders are larger on every deployment both were
// granted by, and two majorities share at least one: so a holder is stale
// exactly when some deployment gave it a smaller token. This holds only
// while no deployment forgets its counters (see the package documentation).
func Stale(tokens, latest []int64) bool {
	for i := range min(len(tokens), len(latest)) {
		if tokens[i] > 0 && latest[i] > 0 && tokens[i] < latest[i] {
			return true
		}
	}
	return false
}
