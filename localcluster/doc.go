// Package localcluster starts a throwaway Redis Cluster on loopback and
// injects faults into it, for integration tests, benchmarks and demos.
//
// [Start] builds six nodes, three masters and three replicas, with a fixed
// pairing: master i owns the i-th third of the slots and node i+3 replicates
// it. Nodes run as redis-server processes (process backend), as containers
// from a local image (docker backend, through testcontainers-go), or are an
// existing cluster named by BATCHLOCK_CLUSTER_ADDRS (external backend, no
// fault injection). See [Start] for how the backend is chosen.
//
// Every node binds and announces 127.0.0.1 only, on ports picked free at
// start, so several clusters can run side by side. Nodes detect a failure
// after about two seconds (cluster-node-timeout 2000) and a replica may
// always take over, however stale (cluster-replica-validity-factor 0).
//
// Fault helpers ([Cluster.Freeze], [Cluster.Kill], [Cluster.Failover],
// [Cluster.MigrateSlot], ...) return once their effect is observable, and
// [Cluster.WaitReady] polls until the cluster has settled again.
package localcluster
