// Package script runs Lua scripts for batchlock and the order workload: the
// calls of each master in one pipeline on that master's own connection
// (EVALSHA, EVAL again for a master that does not know the script, WAIT for
// replicas at the end when asked), masters in parallel, so that a round costs
// one round trip per master touched.
//
// Send makes one attempt. Run is the one retry layer: it sends again the
// calls that failed in a way that leaves them not run, or run but safe to
// repeat, within the context and for at most RetryWindow. Sending to the
// masters' own clients keeps go-redis's cluster redirections out of it; a
// cluster client's per-node retries (ClusterOptions.MaxRetries) would stack
// on it and should stay off, as they are by default.
package script
