// Package localcluster starts a throwaway Redis Cluster on loopback and
// injects faults into it, for integration tests, benchmarks and demos.
//
// [Start] builds three masters ([WithMasters] sets another number, m),
// each with one replica, with a fixed pairing: master i owns the i-th m-th
// of the slots and node i+m replicates it. With [WithReplicasPerMaster](n)
// each master has n replicas, nodes mk+i for k = 1..n (with three masters
// and two replicas, nodes 3+i and 6+i), so a test can let one replica
// acknowledge writes while another lags. Nodes
// run as redis-server processes (process backend), as containers from a
// local image (docker backend, through testcontainers-go), or are an
// existing cluster named by BATCHLOCK_CLUSTER_ADDRS (external backend, no
// fault injection). See [Start] for how the backend is chosen. They run
// the host's Redis 7.0, or Valkey 8.1 or Redis 8.0 from Debian 13's
// packages ([WithServer], BATCHLOCK_SERVER).
//
// Every node binds and announces 127.0.0.1 only, on ports picked free at
// start, so several clusters can run side by side. Nodes detect a failure
// after about two seconds (cluster-node-timeout 2000) and a replica may
// always take over, however stale (cluster-replica-validity-factor 0).
//
// Fault helpers ([Cluster.Freeze], [Cluster.Kill], [Cluster.Failover],
// [Cluster.PauseReplication], [Cluster.PromoteLagging],
// [Cluster.MigrateSlot], ...) return once their effect is observable, and
// [Cluster.WaitReady] polls until the cluster has settled again.
// [Cluster.PromoteLagging] stages the loss of a write that WAIT counted
// as acknowledged: a replica that never received it takes over.
//
// [Cluster.BeginMigration] opens a slot migration and returns a
// [Migration], which moves chosen keys ([Migration.Move]) or all of them,
// at a chosen pace ([Migration.MoveAll]), and leaves the slot half-moved,
// with the source answering ASK for moved keys, for as long as a test
// needs; [Migration.Finish] completes it and [Migration.Abort] puts
// everything back on the source.
package localcluster
