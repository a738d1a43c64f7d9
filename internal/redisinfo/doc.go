// Package redisinfo reads the INFO reply of a Redis server and names which
// server answered: one parser (Parse) and one type (Identity) for both
// sides that ask "is this still the Redis I primed?": the waterline index in
// the pods (workload/waterline/redis records Identity.Key at MarkPrimed and
// rebuilds when the server's key differs) and the operator
// (internal/operator/redisid, which reports the master in the Messenger's
// status and tells a failover from a restart). Both read the same fields
// the same way, so they agree by construction.
//
// The identity is the pair (run_id, master_replid) of INFO's server and
// replication sections: a restart of the process changes run_id, the
// promotion of a replica changes master_replid. The address is never part
// of it: behind a stable Service name, a floating IP or Sentinel it need not
// change at all. The Redis deployment a fleet is configured with (host,
// database, Sentinel master name; redis.Index.Deployment) is another
// question, which a failover does not change.
package redisinfo
