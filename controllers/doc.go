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
// Status: Ready, Progressing and Degraded come from the Deployment and from
// the workload's pods, which the controller watches through a cache that
// holds only pods labelled as the operator's (status.go): a container that
// cannot pull its image or keeps crashing changes no Deployment field, so
// the pod event is what wakes the reconcile. Ready is True only when the
// rollout is complete and every replica ready, and its message says which
// is missing otherwise.
//
// Live tuning: after the tuning ConfigMap is applied, every running pod
// gets the hash of its data as the tetra.dev/tuning-hash annotation; the
// pod update makes the kubelet sync the pod and refresh the mounted
// ConfigMap at once instead of at its periodic sync (about a minute).
//
// Redis failover: with spec.redis the reconcile requeues itself every
// RedisPollInterval (jittered) and compares the master's (run_id,
// master_replid) with status.redis. A different identity must be seen on
// two consecutive probes; then the epoch is incremented, an Event
// RedisFailoverDetected recorded, and every ready pod is asked to rebuild
// its waterline index (POST /admin/rebuild with an admin token minted from
// the JWT Secret). When that cannot be done for every pod, the epoch is
// written into the pod template (tetra.dev/redis-epoch), which restarts the
// pods; a restarted pod starts on a fresh part of the index (it has no
// connection yet), and its clients are caught up from the outbox as they
// reconnect. No master, or
// Sentinels that disagree, set Degraded and change nothing.
package controllers
