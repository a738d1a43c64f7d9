// Package config holds the workload's tuning: the thresholds of the paper
// (lease, max-delivery-attempts, max-pending, reconnect grace, GC grace,
// retention) and the per-connection limits, with their defaults, validation
// and the rules that tie them together (history retention must exceed the
// outbox backstop, paper invariant I4).
//
// Tuning is the "hot" half of the configuration: the delivery engine and the
// sessions read it through an atomic pointer, so a new value applies to
// running connections without dropping them. The operator renders the same
// keys into a ConfigMap (see Keys); the workload reloads them from a mounted
// directory. Cold settings (addresses, credentials, backend) live in the
// server's own Config and need a restart.
//
// This package imports nothing from Kubernetes or from the rest of the
// workload, so both the operator and the workload can read it.
package config
