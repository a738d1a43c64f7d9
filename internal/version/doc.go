// Package version holds the one release number of tetra that the images,
// the Helm chart, the kustomize manifests and the operator's default
// workload image follow. Images are pinned to it (never :latest), so a
// node that has them pre-loaded, or cannot reach a registry, runs them
// with imagePullPolicy IfNotPresent; the test in this package fails when a
// manifest names another tag.
package version
