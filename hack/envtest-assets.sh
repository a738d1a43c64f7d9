#!/usr/bin/env bash
# Builds the envtest binaries (kube-apiserver, etcd) from the Go module proxy,
# since setup-envtest's downloads are not reachable here, and caches them
# outside the repository. Prints the directory to use as KUBEBUILDER_ASSETS.
#
#   hack/envtest-assets.sh            # build if missing, print the directory
#   hack/envtest-assets.sh --if-present   # print the directory if both
#                                         # binaries exist, else exit 1
#
# Versions: kube-apiserver from k8s.io/kubernetes $K8S_VERSION (staging
# modules replaced by their published v0 versions), etcd $ETCD_VERSION.
# A fresh machine builds once (~6 minutes on 2 cores); later runs reuse the
# cache in ${TETRA_ENVTEST_CACHE:-$HOME/.cache/tetra-envtest}.
set -euo pipefail
K8S_VERSION="${K8S_VERSION:-1.37.2}"
ETCD_VERSION="${ETCD_VERSION:-3.6.16}"
CACHE="${TETRA_ENVTEST_CACHE:-$HOME/.cache/tetra-envtest}"
DIR="$CACHE/k8s-$K8S_VERSION-etcd-$ETCD_VERSION"
export GOFLAGS="-mod=mod"

if [ "${1:-}" = "--if-present" ]; then
  [ -x "$DIR/etcd" ] && [ -x "$DIR/kube-apiserver" ] || exit 1
  echo "$DIR"
  exit 0
fi

mkdir -p "$DIR"
# One build at a time: a second caller (another test package, CI right after
# a developer's run) waits for the first and then finds the binaries.
if command -v flock >/dev/null; then
  exec 9>"$CACHE/.lock"
  if ! flock -n 9; then
    echo "envtest: another build of the assets is running; waiting for it..." >&2
    flock 9
  fi
fi

build_apiserver() {
  local work; work="$(mktemp -d)"
  echo "envtest: building kube-apiserver v$K8S_VERSION from the module proxy (one time, several minutes)..." >&2
  ( cd "$work"
    go mod init envtest-apiserver >/dev/null 2>&1
    go mod download "k8s.io/kubernetes@v$K8S_VERSION"
    local modfile; modfile="$(go env GOMODCACHE)/cache/download/k8s.io/kubernetes/@v/v$K8S_VERSION.mod"
    {
      echo "module envtest-apiserver"
      echo
      echo "go 1.26"
      echo
      echo "require k8s.io/kubernetes v$K8S_VERSION"
      echo
      echo "replace ("
      # every staging module that kubernetes replaces with ./staging/...
      grep -E '^\s*k8s\.io/[a-z0-9-]+ => \./staging/' "$modfile" | awk -v v="v0.${K8S_VERSION#1.}" '{print "\t" $1 " => " $1 " " v}'
      echo ")"
    } > go.mod
    cat > tools.go <<'GO'
//go:build tools

package tools

import _ "k8s.io/kubernetes/cmd/kube-apiserver"
GO
    go mod tidy >/dev/null 2>&1 || true
    # Version-stamped, as hack/node-assets.sh does (unstamped it reports
    # v0.0.0-master); the stamp changes only the link, not the cache key.
    local major="${K8S_VERSION%%.*}" rest="${K8S_VERSION#*.}"
    local stamp=""
    for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
      stamp+=" -X $pkg.gitVersion=v$K8S_VERSION -X $pkg.gitMajor=$major -X $pkg.gitMinor=${rest%%.*} -X $pkg.gitTreeState=clean"
    done
    go build -tags tools -ldflags "$stamp" -o "$DIR/kube-apiserver.tmp" k8s.io/kubernetes/cmd/kube-apiserver
    mv "$DIR/kube-apiserver.tmp" "$DIR/kube-apiserver" )
  rm -rf "$work"
}

build_etcd() {
  local work; work="$(mktemp -d)"
  echo "envtest: building etcd v$ETCD_VERSION from the module proxy (one time, about a minute)..." >&2
  ( cd "$work"
    cat > go.mod <<MOD
module envtest-etcd

go 1.26

require go.etcd.io/etcd/server/v3 v$ETCD_VERSION

replace (
	go.etcd.io/etcd/api/v3 => go.etcd.io/etcd/api/v3 v$ETCD_VERSION
	go.etcd.io/etcd/client/pkg/v3 => go.etcd.io/etcd/client/pkg/v3 v$ETCD_VERSION
	go.etcd.io/etcd/client/v3 => go.etcd.io/etcd/client/v3 v$ETCD_VERSION
	go.etcd.io/etcd/pkg/v3 => go.etcd.io/etcd/pkg/v3 v$ETCD_VERSION
)
MOD
    cat > tools.go <<'GO'
//go:build tools

package tools

import _ "go.etcd.io/etcd/server/v3"
GO
    go mod tidy >/dev/null 2>&1 || true
    go build -o "$DIR/etcd.tmp" go.etcd.io/etcd/server/v3
    mv "$DIR/etcd.tmp" "$DIR/etcd" )
  rm -rf "$work"
}

if [ ! -x "$DIR/etcd" ] || [ ! -x "$DIR/kube-apiserver" ]; then
  echo "envtest: $DIR lacks the envtest binaries; a fresh machine builds them once from the Go module proxy" >&2
fi
[ -x "$DIR/etcd" ] || build_etcd
[ -x "$DIR/kube-apiserver" ] || build_apiserver
echo "$DIR"
