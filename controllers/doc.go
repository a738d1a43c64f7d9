// Package controllers holds the Messenger reconciler.
//
// One reconcile reads the Messenger and the Secrets it references (through
// the API reader: the cache holds only their metadata, to be woken on a
// rotation), probes the Redis identity when the Messenger has Redis, renders
// the children with internal/operator/render and server-side applies them
// with the field owner "tetra-operator". Applying what is already there
// writes nothing, so a reconcile with nothing to change leaves every
// resourceVersion as it was. Status is patched only when it changed, with an
// optimistic lock, and the Messenger watch passes only generation and
// annotation changes, so the controller's own status writes do not wake it.
//
// Redis failover: with spec.redis the reconcile requeues itself every
// RedisPollInterval (jittered) and compares the master's (run_id,
// master_replid) with status.redis. A different identity must be seen on
// two consecutive probes; then the epoch is incremented, an Event
// RedisFailoverDetected recorded, and every ready pod is asked to rebuild
// its waterline index (POST /admin/rebuild with an admin token minted from
// the JWT Secret). When that cannot be done for every pod, the epoch is
// written into the pod template (tetra.dev/redis-epoch), which restarts the
// pods; a restarted pod primes its index from the outbox. No master, or
// Sentinels that disagree, set Degraded and change nothing.
package controllers
