// Package realnode is the operator's end-to-end test on a real
// single-node Kubernetes: kube-apiserver, etcd, kube-controller-manager,
// kube-scheduler, kubelet and kube-proxy (built from the Go module proxy by
// hack/node-assets.sh), containerd, runc and the CNI plugins from Debian,
// brought up and torn down by hack/realnode.sh. Both images are built from
// the repository's Dockerfile with podman; the workload runs against the
// host's PostgreSQL (a database of its own) and Redis servers the test
// starts, reached from the pods through relays on the node's bridge
// address.
//
// The test installs the operator with Helm, applies the PostgreSQL sample
// Messenger and checks what envtest cannot: pods that run and get Ready,
// a conversation and a load run across two pods with nothing lost, a live
// tuning change that restarts nothing (and how long the pods take to see
// it), an image change that rolls under ~100 requests/s with no failed
// request, a Secret rotation, a broken image reported as Degraded within
// 60 s, a Redis replaced under load and answered by the operator, and the
// garbage collection of everything on deletion; then once more with the
// kustomize manifests instead of Helm.
//
// It needs root on Linux and apt-get (or the Debian packages already
// installed). Where a node cannot run it skips, saying why on stderr; with
// CI=true it never skips. It takes a lock, so two checkouts on one
// machine run one at a time.
package realnode
