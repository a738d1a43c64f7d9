#!/usr/bin/env bash
# Builds the binaries of a single-node Kubernetes (kube-apiserver,
# kube-controller-manager, kube-scheduler, kubelet, kube-proxy, kubectl)
# and helm from the Go module proxy, version-stamped, and caches them
# outside the repository. Prints the directory. etcd comes from
# hack/envtest-assets.sh (same cache pattern).
#
#   hack/node-assets.sh               # build if missing, print the directory
#   hack/node-assets.sh --if-present  # print the directory if complete, else exit 1
#
# Same build flags as hack/envtest-assets.sh (so a warm Go build cache is
# reused: only the link differs). Stamped with -X k8s.io/component-base/version.gitVersion=v$K8S_VERSION
# (and gitMajor/gitMinor, and client-go's copy): unstamped builds report
# v0.0.0-master, and `helm install` then refuses a chart's kubeVersion.
# A fresh machine builds once (~6 minutes on 2 cores, less when the envtest
# build left its objects in the Go build cache); later runs reuse
# ${TETRA_NODE_CACHE:-$HOME/.cache/tetra-node}.
set -euo pipefail
K8S_VERSION="${K8S_VERSION:-1.37.2}"
HELM_VERSION="${HELM_VERSION:-4.3.2}"
CACHE="${TETRA_NODE_CACHE:-$HOME/.cache/tetra-node}"
DIR="$CACHE/k8s-$K8S_VERSION-helm-$HELM_VERSION"
BINS=(kube-apiserver kube-controller-manager kube-scheduler kubelet kube-proxy kubectl)
export GOFLAGS="-mod=mod"

complete() {
  for b in "${BINS[@]}" helm; do [ -x "$DIR/$b" ] || return 1; done
}

if [ "${1:-}" = "--if-present" ]; then
  complete || exit 1
  echo "$DIR"
  exit 0
fi

mkdir -p "$DIR"
if command -v flock >/dev/null; then
  exec 9>"$CACHE/.lock"
  if ! flock -n 9; then
    echo "node-assets: another build is running; waiting for it..." >&2
    flock 9
  fi
fi

stamp() {
  local major="${K8S_VERSION%%.*}" rest="${K8S_VERSION#*.}" minor
  minor="${rest%%.*}"
  local v
  for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    v+=" -X $pkg.gitVersion=v$K8S_VERSION -X $pkg.gitMajor=$major -X $pkg.gitMinor=$minor"
    v+=" -X $pkg.gitTreeState=clean -X $pkg.buildDate=1970-01-01T00:00:00Z"
  done
  echo "-s -w$v"
}

build_k8s() {
  local work; work="$(mktemp -d)"
  echo "node-assets: building ${BINS[*]} v$K8S_VERSION from the module proxy (one time, several minutes)..." >&2
  ( cd "$work"
    go mod init node-assets >/dev/null 2>&1
    go mod download "k8s.io/kubernetes@v$K8S_VERSION"
    local modfile; modfile="$(go env GOMODCACHE)/cache/download/k8s.io/kubernetes/@v/v$K8S_VERSION.mod"
    {
      echo "module node-assets"
      echo
      echo "go 1.26"
      echo
      echo "require k8s.io/kubernetes v$K8S_VERSION"
      echo
      echo "replace ("
      grep -E '^\s*k8s\.io/[a-z0-9-]+ => \./staging/' "$modfile" | awk -v v="v0.${K8S_VERSION#1.}" '{print "\t" $1 " => " $1 " " v}'
      echo ")"
    } > go.mod
    {
      echo "//go:build tools"
      echo
      echo "package tools"
      echo
      echo "import ("
      for b in "${BINS[@]}"; do echo "	_ \"k8s.io/kubernetes/cmd/$b\""; done
      echo ")"
    } > tools.go
    go mod tidy >/dev/null 2>&1 || true
    mkdir -p out
    local pkgs=()
    for b in "${BINS[@]}"; do pkgs+=("k8s.io/kubernetes/cmd/$b"); done
    go build -tags tools -ldflags "$(stamp)" -o out/ "${pkgs[@]}"
    for b in "${BINS[@]}"; do mv "out/$b" "$DIR/$b"; done )
  rm -rf "$work"
}

build_helm() {
  echo "node-assets: building helm v$HELM_VERSION from the module proxy (one time, about a minute)..." >&2
  local work; work="$(mktemp -d)"
  ( cd "$work"
    GOBIN="$work" CGO_ENABLED=0 go install -trimpath \
      -ldflags "-s -w -X helm.sh/helm/v4/internal/version.version=v$HELM_VERSION" \
      "helm.sh/helm/v4/cmd/helm@v$HELM_VERSION"
    mv "$work/helm" "$DIR/helm" )
  rm -rf "$work"
}

need=0
for b in "${BINS[@]}"; do [ -x "$DIR/$b" ] || need=1; done
if [ "$need" = 1 ]; then
  echo "node-assets: $DIR lacks the node binaries; a fresh machine builds them once from the Go module proxy" >&2
  build_k8s
fi
[ -x "$DIR/helm" ] || build_helm
echo "$DIR"
