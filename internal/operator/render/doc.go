// Package render turns a Messenger and the inputs the controller resolved
// (the referenced Secrets' resourceVersions, the default image, the restart
// epoch) into the objects that run the workload: the tuning ConfigMap, the
// Deployment, the Service and, with more than one replica, a
// PodDisruptionBudget. It is a pure function: no client, no clock, no
// randomness, so the same inputs give byte-identical objects and a
// reconcile with nothing to change writes nothing.
//
// The configuration is split in two. Hot settings (delivery thresholds,
// retention, per-connection limits) are rendered with config.Tuning.Render
// into the ConfigMap, which the pods mount as a directory (never subPath)
// and reload live. Cold settings (backend, store and index addresses,
// credentials, image, the inbound queue) are environment variables; a hash
// of exactly those declared inputs, plus the referenced Secrets'
// resourceVersions, is written on the pod template, so changing one, or
// rotating a Secret, rolls the pods, and changing a hot setting does not.
// The Redis key prefix is a cold setting too (KeyPrefix: unique per
// Messenger by default); a change of it is rendered with the Recreate
// strategy when the controller asks (Inputs.Recreate), since pods of two
// prefixes may not share a database.
//
// The pod stops gracefully (a preStop sleep, the workload's drain, then its
// shutdown, all within terminationGracePeriodSeconds), mounts no
// ServiceAccount token, pulls its pinned image only when absent, and turns
// the end of a failed run's log into its termination message, which the
// controller quotes when the pod crash-loops.
package render
