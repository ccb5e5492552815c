// Package routing runs Lua scripts for batchlock: the calls of each master in
// one pipeline on that master's own connection (EVALSHA, EVAL again for a
// master that does not know the script, WAIT for replicas at the end when
// asked), masters in parallel, so that a round costs one round trip per
// master touched.
//
// Send makes one attempt. Route is the one routing and retry layer: it cuts
// a batch into calls per master, at most MaxCallKeys keys each, declaring no
// key, so that a key whose slot moved or is being migrated stops only its
// own part, which the script reports; such parts are followed to where their
// slot went, and calls that failed in a way that leaves them not run, or run
// but safe to repeat, are sent again, within the context and for at most
// RetryWindow. Sending to the masters' own clients keeps go-redis's cluster
// redirections out of it; a cluster client's per-node retries
// (ClusterOptions.MaxRetries) would stack on it and should stay off, as they
// are by default.
package routing
