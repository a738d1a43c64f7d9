#!/usr/bin/env bash
# A real single-node Kubernetes on this machine, for the operator's
# end-to-end test (test/realnode drives it; a person can too):
#
#   hack/realnode.sh check     # can this machine run a node? (exit 1 and why if not)
#   hack/realnode.sh deps      # apt-get the Debian parts (podman, containerd, runc, CNI plugins, ...)
#   hack/realnode.sh images    # build the workload and operator images from the Dockerfile with podman
#   hack/realnode.sh up        # etcd, kube-apiserver, controller-manager, scheduler, containerd, kubelet, kube-proxy
#   hack/realnode.sh env       # print KUBECONFIG=... and the addresses the test uses
#   hack/realnode.sh load IMG [AS]          # copy an image from podman into the node's containerd
#   hack/realnode.sh relay NAME PORT TARGET # socat on $NODE_IP:PORT to 127.0.0.1:TARGET
#   hack/realnode.sh down      # stop everything up started and remove what it left
#
# Kubernetes binaries and helm come from hack/node-assets.sh, etcd from
# hack/envtest-assets.sh (both built once from the Go module proxy, cached
# under ~/.cache keyed by version). Base images cannot be pulled here, so
# the Dockerfile's bases (golang:$GO and gcr.io/distroless/static-debian12)
# are stand-ins made locally with `podman import` from the local Go
# toolchain, busybox-static and the CA certificates, cached in podman's
# storage by Go version; the Dockerfile itself is built unchanged with
# `podman build --pull=never`, and the images are loaded into containerd.
#
# Network: a bridge ($BRIDGE, $NODE_IP/24) carries the pods (host-local
# IPAM) and is the node's address (the API server must advertise a
# non-loopback one). The Service range is routed onto the bridge too, so
# nothing meant for a cluster address can leave the machine, and a
# FORWARD rule drops anything from the pods to elsewhere. PostgreSQL and
# Redis listen on loopback only: socat relays on $NODE_IP reach them (the
# test starts them; see relay below).
#
# Everything lives under $REALNODE_DIR (default /var/tmp/tetra-realnode):
# state, logs (logs/*.log), PIDs (pids/*.pid), certificates, kubeconfig.
# `down` stops by PID, runs kube-proxy --cleanup, removes the kubelet's
# iptables chains, the FORWARD rule, unmounts everything under the
# directory, deletes the bridge and the directory's state.
set -euo pipefail
cd "$(dirname "$0")/.."
REPO="$PWD"

DIR="${REALNODE_DIR:-/var/tmp/tetra-realnode}"
BRIDGE="${REALNODE_BRIDGE:-tetra0}"
NODE_IP="${REALNODE_NODE_IP:-10.244.77.1}"
POD_CIDR="${REALNODE_POD_CIDR:-10.244.77.0/24}"
SERVICE_CIDR="${REALNODE_SERVICE_CIDR:-10.97.0.0/16}"
API_SERVICE_IP="${REALNODE_API_SERVICE_IP:-10.97.0.1}"
API_PORT="${REALNODE_API_PORT:-16443}"
ETCD_PORT="${REALNODE_ETCD_PORT:-12379}"
NODE_NAME="${REALNODE_NODE_NAME:-tetra-node}"
PAUSE_IMAGE="localhost/tetra-pause:1"
FWCHAIN="TETRA-REALNODE"
export PATH="/usr/local/go/bin:$PATH"

log() { echo "realnode: $*" >&2; }
die() { echo "realnode: $*" >&2; exit 1; }

assets() {
  NODE_BIN="$(bash "$REPO/hack/node-assets.sh")"
  ETCD_BIN="$(bash "$REPO/hack/envtest-assets.sh")/etcd"
}

# check says why this machine cannot run a node (exit 1), or nothing.
cmd_check() {
  local why=()
  [ "$(id -u)" = 0 ] || why+=("not root (the kubelet, containerd and the bridge need root)")
  [ "$(uname -s)" = Linux ] || why+=("not Linux")
  [ -d /sys/fs/cgroup ] || why+=("no /sys/fs/cgroup")
  command -v ip >/dev/null || why+=("no ip (iproute2)")
  grep -qw overlay /proc/filesystems || why+=("no overlay filesystem")
  if [ -d "/sys/class/net/$BRIDGE" ] && [ ! -f "$DIR/pids/.owner" ]; then
    why+=("a network interface $BRIDGE exists that this script did not create")
  fi
  if ! command -v apt-get >/dev/null && ! { command -v containerd && command -v runc && command -v podman; } >/dev/null; then
    why+=("no containerd/runc/podman and no apt-get to install them")
  fi
  if [ ${#why[@]} -gt 0 ]; then
    printf '%s\n' "${why[@]}"
    exit 1
  fi
}

cmd_deps() {
  local need=()
  command -v podman >/dev/null || need+=(podman)
  command -v containerd >/dev/null || need+=(containerd)
  command -v runc >/dev/null || need+=(runc)
  [ -x /usr/lib/cni/bridge ] || need+=(containernetworking-plugins)
  command -v busybox >/dev/null || need+=(busybox-static)
  command -v iptables >/dev/null || need+=(iptables)
  command -v socat >/dev/null || need+=(socat)
  command -v openssl >/dev/null || need+=(openssl)
  command -v conntrack >/dev/null || need+=(conntrack)
  command -v curl >/dev/null || need+=(curl)
  if [ ${#need[@]} -gt 0 ]; then
    log "installing ${need[*]} from Debian"
    apt-get update -qq >&2
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}" >&2
  fi
}

# --- images ----------------------------------------------------------------

PODMAN=(podman --cgroup-manager=cgroupfs --events-backend=file)

version() { sed -n 's/^const Version = "\(.*\)"/\1/p' "$REPO/internal/version/version.go"; }

stand_in_bases() {
  local gov; gov="$(go env GOVERSION)"; gov="${gov#go}"
  if ! "${PODMAN[@]}" image exists "docker.io/library/golang:$gov"; then
    log "making the stand-in builder docker.io/library/golang:$gov from the local Go toolchain (cached in podman's storage)"
    local root; root="$(mktemp -d)"
    mkdir -p "$root"/{bin,etc/ssl/certs,tmp,root,go,usr/local}
    cp -a "$(go env GOROOT)" "$root/usr/local/go"
    cp /bin/busybox "$root/bin/busybox"
    for t in sh ls cat cp mv rm mkdir env true; do ln -s busybox "$root/bin/$t"; done
    cp /etc/ssl/certs/ca-certificates.crt "$root/etc/ssl/certs/"
    echo 'root:x:0:0:root:/root:/bin/sh' > "$root/etc/passwd"
    echo 'root:x:0:' > "$root/etc/group"
    chmod 1777 "$root/tmp"
    tar -C "$root" -c . | "${PODMAN[@]}" import \
      --change 'ENV PATH=/go/bin:/usr/local/go/bin:/bin' --change 'ENV GOPATH=/go' \
      --change 'ENV GOTOOLCHAIN=local' --change 'ENV GOPROXY=off' --change 'ENV GOFLAGS=-mod=mod' \
      --change 'WORKDIR /go' - "docker.io/library/golang:$gov" >/dev/null
    rm -rf "$root"
  fi
  if ! "${PODMAN[@]}" image exists gcr.io/distroless/static-debian12:nonroot; then
    log "making the stand-in gcr.io/distroless/static-debian12:nonroot (passwd/group for 65532, CA certs, /tmp)"
    local root; root="$(mktemp -d)"
    mkdir -p "$root"/{etc/ssl/certs,tmp,home/nonroot}
    cp /etc/ssl/certs/ca-certificates.crt "$root/etc/ssl/certs/"
    printf 'root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n' > "$root/etc/passwd"
    printf 'root:x:0:\nnonroot:x:65532:\n' > "$root/etc/group"
    chmod 1777 "$root/tmp"; chown 65532:65532 "$root/home/nonroot"
    tar -C "$root" -c . | "${PODMAN[@]}" import --change 'USER 65532' - gcr.io/distroless/static-debian12:nonroot >/dev/null
    rm -rf "$root"
  fi
  if ! "${PODMAN[@]}" image exists "$PAUSE_IMAGE"; then
    log "making the pause image $PAUSE_IMAGE (a static Go binary that waits for a signal)"
    local root; root="$(mktemp -d)"
    mkdir -p "$root/src"
    cat > "$root/src/main.go" <<'GO'
package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	c := make(chan os.Signal, 1)
	signal.Notify(c, syscall.SIGTERM, syscall.SIGINT)
	<-c
}
GO
    ( cd "$root/src" && GOFLAGS= GO111MODULE=off CGO_ENABLED=0 go build -ldflags='-s -w' -o "$root/pause" main.go )
    rm -rf "$root/src"
    tar -C "$root" -c pause | "${PODMAN[@]}" import --change 'ENTRYPOINT ["/pause"]' - "$PAUSE_IMAGE" >/dev/null
    rm -rf "$root"
  fi
  GO_VERSION="$gov"
}

# images builds both images of the Dockerfile (unchanged) and writes
# $DIR/images.env: WORKLOAD_IMAGE, OPERATOR_IMAGE, VERSION.
cmd_images() {
  mkdir -p "$DIR"
  stand_in_bases
  local v; v="$(version)"
  local mods; mods="$(go env GOMODCACHE)"
  ( cd "$REPO" && go mod download )
  # The builder's Go build cache persists across builds (keyed by Go
  # version), so a warm build compiles only what changed; the module cache
  # is the host's, overlaid read-only (GOPROXY=off in the builder).
  local gocache="${TETRA_NODE_CACHE:-$HOME/.cache/tetra-node}/podman-gocache-$GO_VERSION"
  mkdir -p "$gocache"
  for target in workload operator; do
    local img pkg
    if [ $target = workload ]; then img="ghcr.io/tetra-messenger/tetra:$v"; pkg=./workload/cmd/tetra
    else img="ghcr.io/tetra-messenger/tetra-operator:$v"; pkg=.; fi
    log "podman build $img (TARGET=$pkg) from the Dockerfile"
    local t0=$SECONDS
    "${PODMAN[@]}" build --pull=never --network=none -q -f "$REPO/Dockerfile" -t "$img" \
      --build-arg "GO_VERSION=$GO_VERSION" --build-arg "TARGET=$pkg" \
      --ulimit nofile=4096:4096 --ulimit nproc=4096:4096 \
      -v "$mods:/go/pkg/mod:O" -v "$gocache:/root/.cache/go-build" \
      "$REPO" >/dev/null
    log "built $img in $((SECONDS - t0)) s"
  done
  # The build stages' images are left dangling by every build: drop them
  # (the persistent Go build cache keeps the next build quick).
  # Housekeeping only: an image another container still uses (a build
  # running beside this one) is not an error of this build.
  "${PODMAN[@]}" image prune -f >/dev/null 2>&1 || log "podman image prune failed (an image is in use); left for the next build"
  cat > "$DIR/images.env" <<EOF
VERSION=$v
WORKLOAD_IMAGE=ghcr.io/tetra-messenger/tetra:$v
OPERATOR_IMAGE=ghcr.io/tetra-messenger/tetra-operator:$v
PAUSE_IMAGE=$PAUSE_IMAGE
EOF
  cat "$DIR/images.env"
}

# load IMAGE [AS-NAME]: copy an image from podman into the node's containerd.
cmd_load() {
  local img="$1" as="${2:-$1}"
  local tar; tar="$(mktemp --suffix=.tar)"
  if [ "$as" != "$img" ]; then "${PODMAN[@]}" tag "$img" "$as"; fi
  "${PODMAN[@]}" save --format docker-archive -o "$tar" "$as" >/dev/null
  ctr -a "$DIR/containerd.sock" -n k8s.io images import "$tar" >/dev/null
  rm -f "$tar"
  log "loaded $as into containerd"
}

# --- up --------------------------------------------------------------------

start() { # name cmd...: start a process in the background, PID in pids/name.pid
  local name="$1"; shift
  setsid "$@" >"$DIR/logs/$name.log" 2>&1 < /dev/null &
  echo $! > "$DIR/pids/$name.pid"
}

wait_for() { # seconds what cmd...
  local secs="$1" what="$2"; shift 2
  local t0=$SECONDS
  until "$@" >/dev/null 2>&1; do
    if (( SECONDS - t0 > secs )); then
      log "timed out after ${secs}s waiting for $what; last log lines:"
      tail -n 30 "$DIR"/logs/*.log >&2 || true
      return 1
    fi
    sleep 0.5
  done
}

pki() {
  local p="$DIR/pki"; mkdir -p "$p"
  [ -f "$p/ca.crt" ] && return
  openssl req -x509 -newkey rsa:2048 -nodes -days 2 -subj "/CN=tetra-realnode-ca" \
    -keyout "$p/ca.key" -out "$p/ca.crt" 2>/dev/null
  cert() { # name subject [sans]
    openssl req -newkey rsa:2048 -nodes -subj "$2" -keyout "$p/$1.key" -out "$p/$1.csr" 2>/dev/null
    local ext="$p/$1.ext"
    echo "basicConstraints=CA:FALSE" > "$ext"
    echo "keyUsage=digitalSignature,keyEncipherment" >> "$ext"
    echo "extendedKeyUsage=serverAuth,clientAuth" >> "$ext"
    if [ -n "${3:-}" ]; then echo "subjectAltName=$3" >> "$ext"; fi
    openssl x509 -req -in "$p/$1.csr" -CA "$p/ca.crt" -CAkey "$p/ca.key" -CAcreateserial -days 2 \
      -extfile "$ext" -out "$p/$1.crt" 2>/dev/null
  }
  cert apiserver "/CN=kube-apiserver" "IP:$NODE_IP,IP:$API_SERVICE_IP,IP:127.0.0.1,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local"
  cert admin "/O=system:masters/CN=realnode-admin"
  cert kubelet "/O=system:nodes/CN=system:node:$NODE_NAME" "IP:$NODE_IP,DNS:$NODE_NAME"
  cert proxy "/CN=system:kube-proxy"
  openssl genrsa -out "$p/sa.key" 2048 2>/dev/null
  openssl rsa -in "$p/sa.key" -pubout -out "$p/sa.pub" 2>/dev/null
}

kubeconfig() { # name cert
  cat > "$DIR/$1.kubeconfig" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: realnode
  cluster:
    server: https://$NODE_IP:$API_PORT
    certificate-authority: $DIR/pki/ca.crt
users:
- name: $1
  user:
    client-certificate: $DIR/pki/$2.crt
    client-key: $DIR/pki/$2.key
contexts:
- name: realnode
  context: {cluster: realnode, user: $1, namespace: default}
current-context: realnode
EOF
}

network_up() {
  if [ ! -d "/sys/class/net/$BRIDGE" ]; then
    ip link add "$BRIDGE" type bridge
    touch "$DIR/pids/.owner"
  fi
  ip addr replace "$NODE_IP/${POD_CIDR#*/}" dev "$BRIDGE"
  ip link set "$BRIDGE" up
  # Cluster addresses never leave the machine: the Service range goes onto
  # the bridge (kube-proxy rewrites what it knows before routing).
  ip route replace "$SERVICE_CIDR" dev "$BRIDGE"
  # Pods reach the node and each other, nothing else.
  iptables -N "$FWCHAIN" 2>/dev/null || iptables -F "$FWCHAIN"
  iptables -A "$FWCHAIN" -s "$POD_CIDR" -d "$POD_CIDR" -j RETURN
  iptables -A "$FWCHAIN" -s "$POD_CIDR" -j DROP
  iptables -C FORWARD -j "$FWCHAIN" 2>/dev/null || iptables -I FORWARD 1 -j "$FWCHAIN"
  mkdir -p "$DIR/cni/net.d"
  cat > "$DIR/cni/net.d/10-tetra.conflist" <<EOF
{
  "cniVersion": "0.4.0",
  "name": "tetra-realnode",
  "plugins": [
    {"type": "bridge", "bridge": "$BRIDGE", "isGateway": true, "ipMasq": false, "hairpinMode": true,
     "ipam": {"type": "host-local", "dataDir": "$DIR/cni/ipam", "ranges": [[{"subnet": "$POD_CIDR", "gateway": "$NODE_IP"}]],
              "routes": [{"dst": "0.0.0.0/0"}]}},
    {"type": "portmap", "capabilities": {"portMappings": true}}
  ]
}
EOF
}

containerd_up() {
  mkdir -p "$DIR/containerd"
  cat > "$DIR/containerd/config.toml" <<EOF
version = 2
root = "$DIR/containerd/root"
state = "$DIR/containerd/state"
[grpc]
  address = "$DIR/containerd.sock"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "$PAUSE_IMAGE"
  restrict_oom_score_adj = true
  disable_apparmor = true
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/usr/lib/cni"
    conf_dir = "$DIR/cni/net.d"
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
EOF
  start containerd containerd --config "$DIR/containerd/config.toml"
  wait_for 30 containerd ctr -a "$DIR/containerd.sock" version
  # shellcheck disable=SC1091
  . "$DIR/images.env"
  cmd_load "$PAUSE_IMAGE"
  cmd_load "$WORKLOAD_IMAGE"
  cmd_load "$OPERATOR_IMAGE"
}

control_plane_up() {
  start etcd "$ETCD_BIN" --name realnode --data-dir "$DIR/etcd" --unsafe-no-fsync \
    --listen-client-urls "http://127.0.0.1:$ETCD_PORT" --advertise-client-urls "http://127.0.0.1:$ETCD_PORT" \
    --listen-peer-urls "http://127.0.0.1:$((ETCD_PORT + 1))" --initial-advertise-peer-urls "http://127.0.0.1:$((ETCD_PORT + 1))" \
    --initial-cluster "realnode=http://127.0.0.1:$((ETCD_PORT + 1))" --listen-metrics-urls "" 
  wait_for 30 etcd curl -sf "http://127.0.0.1:$ETCD_PORT/health"
  local p="$DIR/pki"
  start kube-apiserver "$NODE_BIN/kube-apiserver" \
    --etcd-servers "http://127.0.0.1:$ETCD_PORT" \
    --bind-address "$NODE_IP" --advertise-address "$NODE_IP" --secure-port "$API_PORT" \
    --service-cluster-ip-range "$SERVICE_CIDR" \
    --client-ca-file "$p/ca.crt" --tls-cert-file "$p/apiserver.crt" --tls-private-key-file "$p/apiserver.key" \
    --kubelet-client-certificate "$p/admin.crt" --kubelet-client-key "$p/admin.key" \
    --kubelet-preferred-address-types InternalIP \
    --service-account-issuer https://kubernetes.default.svc --service-account-key-file "$p/sa.pub" \
    --service-account-signing-key-file "$p/sa.key" \
    --authorization-mode Node,RBAC --allow-privileged=false \
    --profiling=false
  kubeconfig admin admin
  kubeconfig kubelet kubelet
  kubeconfig proxy proxy
  wait_for 90 kube-apiserver "$NODE_BIN/kubectl" --kubeconfig "$DIR/admin.kubeconfig" get --raw /readyz
  start kube-controller-manager "$NODE_BIN/kube-controller-manager" \
    --kubeconfig "$DIR/admin.kubeconfig" --leader-elect=false --secure-port 0 \
    --service-account-private-key-file "$p/sa.key" --root-ca-file "$p/ca.crt" \
    --cluster-cidr "$POD_CIDR" --allocate-node-cidrs=false --use-service-account-credentials=false
  start kube-scheduler "$NODE_BIN/kube-scheduler" \
    --kubeconfig "$DIR/admin.kubeconfig" --leader-elect=false --secure-port 0
}

node_up() {
  mkdir -p "$DIR/kubelet"
  cat > "$DIR/kubelet.yaml" <<EOF
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
address: $NODE_IP
port: 10250
healthzBindAddress: 127.0.0.1
healthzPort: 10248
readOnlyPort: 0
cgroupDriver: cgroupfs
failCgroupV1: false
failSwapOn: false
containerRuntimeEndpoint: unix://$DIR/containerd.sock
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: false}
  x509: {clientCAFile: $DIR/pki/ca.crt}
authorization: {mode: AlwaysAllow}
tlsCertFile: $DIR/pki/kubelet.crt
tlsPrivateKeyFile: $DIR/pki/kubelet.key
evictionHard: {memory.available: "100Mi", nodefs.available: "1%", imagefs.available: "1%"}
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
resolvConf: ""
serializeImagePulls: false
maxPods: 60
EOF
  start kubelet "$NODE_BIN/kubelet" --config "$DIR/kubelet.yaml" --kubeconfig "$DIR/kubelet.kubeconfig" \
    --root-dir "$DIR/kubelet" --cert-dir "$DIR/kubelet/pki" --hostname-override "$NODE_NAME" --node-ip "$NODE_IP"
  start kube-proxy "$NODE_BIN/kube-proxy" --kubeconfig "$DIR/proxy.kubeconfig" --hostname-override "$NODE_NAME" \
    --proxy-mode iptables --cluster-cidr "$POD_CIDR" --conntrack-max-per-core 0 \
    --metrics-bind-address 127.0.0.1:10249 --healthz-bind-address 127.0.0.1:10256
  local k=("$NODE_BIN/kubectl" --kubeconfig "$DIR/admin.kubeconfig")
  # The proxy's identity (CN system:kube-proxy) is bound by the default
  # RBAC; the node is authorised by the Node authoriser.
  wait_for 90 "node $NODE_NAME Ready" "${k[@]}" wait --for=condition=Ready "node/$NODE_NAME" --timeout=1s
}

cmd_up() {
  [ -f "$DIR/images.env" ] || die "run '$0 images' first"
  cmd_check >/dev/null || die "this machine cannot run a node: $(cmd_check || true)"
  assets
  mkdir -p "$DIR/logs" "$DIR/pids"
  local t0=$SECONDS
  pki
  network_up
  containerd_up
  control_plane_up
  node_up
  local dead=()
  for f in "$DIR"/pids/*.pid; do kill -0 "$(cat "$f")" 2>/dev/null || dead+=("$(basename "$f" .pid)"); done
  if [ ${#dead[@]} -gt 0 ]; then
    for d in "${dead[@]}"; do log "$d exited:"; tail -n 5 "$DIR/logs/$d.log" >&2; done
    die "${dead[*]} did not stay up"
  fi
  log "node $NODE_NAME Ready after $((SECONDS - t0)) s; KUBECONFIG=$DIR/admin.kubeconfig"
  cmd_env
}

cmd_env() {
  assets
  echo "KUBECONFIG=$DIR/admin.kubeconfig"
  echo "NODE_IP=$NODE_IP"
  echo "NODE_BIN=$NODE_BIN"
  echo "CONTAINERD_SOCK=$DIR/containerd.sock"
  echo "REALNODE_DIR=$DIR"
  cat "$DIR/images.env" 2>/dev/null || true
}

# relay NAME LISTEN_PORT TARGET_PORT: a socat relay on $NODE_IP:LISTEN_PORT
# to 127.0.0.1:TARGET_PORT, replacing any relay of that NAME.
cmd_relay() {
  local name="relay-$1"
  stop_pid "$name"
  mkdir -p "$DIR/logs" "$DIR/pids"
  start "$name" socat "TCP-LISTEN:$2,bind=$NODE_IP,reuseaddr,fork" "TCP:127.0.0.1:$3"
  wait_for 10 "relay $1" bash -c "exec 3<>/dev/tcp/$NODE_IP/$2"
}

# --- down ------------------------------------------------------------------

stop_pid() { # name: TERM the process group started by start(), then KILL
  local f="$DIR/pids/$1.pid"
  [ -f "$f" ] || return 0
  local pid; pid="$(cat "$f")"
  if kill -0 "$pid" 2>/dev/null; then
    kill -TERM -- "-$pid" 2>/dev/null || kill -TERM "$pid" 2>/dev/null || true
    for _ in $(seq 1 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.2; done
    kill -KILL -- "-$pid" 2>/dev/null || kill -KILL "$pid" 2>/dev/null || true
  fi
  rm -f "$f"
}

cmd_down() {
  set +e # tear down as much as possible, whatever fails
  [ -d "$DIR" ] || { log "nothing to tear down ($DIR absent)"; return 0; }
  local state="$DIR/containerd/state"
  for f in "$DIR"/pids/relay-*.pid; do
    if [ -f "$f" ]; then stop_pid "$(basename "$f" .pid)"; fi
  done
  stop_pid kube-proxy
  stop_pid kubelet
  # Containers the kubelet left: kill their shims (PIDs from containerd's
  # state), so no container outlives the node; remove their netns.
  if [ -S "$DIR/containerd.sock" ]; then
    for id in $(ctr -a "$DIR/containerd.sock" -n k8s.io tasks ls -q 2>/dev/null); do
      ctr -a "$DIR/containerd.sock" -n k8s.io tasks kill -s KILL "$id" >/dev/null 2>&1 || true
    done
  fi
  for f in "$state"/io.containerd.runtime.v2.task/*/*/shim.pid; do
    [ -f "$f" ] || continue
    local spid; spid="$(cat "$f")"
    if [ -n "$spid" ]; then kill -KILL "$spid" 2>/dev/null || true; fi
  done
  stop_pid containerd
  stop_pid kube-scheduler
  stop_pid kube-controller-manager
  stop_pid kube-apiserver
  stop_pid etcd
  if [ -n "${NODE_BIN:-}" ] || NODE_BIN="$(bash "$REPO/hack/node-assets.sh" --if-present 2>/dev/null)"; then
    "$NODE_BIN/kube-proxy" --cleanup >/dev/null 2>&1 || true
  fi
  # The kubelet's own chains (KUBE-FIREWALL, KUBE-KUBELET-CANARY, ...) and
  # whatever kube-proxy --cleanup left.
  for ipt in iptables ip6tables; do
    command -v $ipt >/dev/null || continue
    for table in filter nat mangle; do
      $ipt -t $table -S 2>/dev/null | grep -E '^-A (INPUT|OUTPUT|FORWARD|PREROUTING|POSTROUTING) .*-j KUBE-' | sed 's/^-A /-D /' |
        while read -r rule; do eval "$ipt -t $table $rule" 2>/dev/null || true; done
      for chain in $($ipt -t $table -S 2>/dev/null | sed -n 's/^-N \(KUBE-[A-Z0-9-]*\).*/\1/p'); do
        $ipt -t $table -F "$chain" 2>/dev/null || true
      done
      for chain in $($ipt -t $table -S 2>/dev/null | sed -n 's/^-N \(KUBE-[A-Z0-9-]*\).*/\1/p'); do
        $ipt -t $table -X "$chain" 2>/dev/null || true
      done
    done
  done
  iptables -D FORWARD -j "$FWCHAIN" 2>/dev/null || true
  iptables -F "$FWCHAIN" 2>/dev/null || true
  iptables -X "$FWCHAIN" 2>/dev/null || true
  # Network namespaces of sandboxes the kubelet did not tear down.
  for ns in $(ls "$DIR/containerd/netns" 2>/dev/null); do ip netns delete "$ns" 2>/dev/null || true; done
  if [ -d "$state" ]; then
    for nsf in $(grep -rhoE '/var/run/netns/cni-[0-9a-f-]+' "$state" 2>/dev/null | sort -u); do
      ip netns delete "$(basename "$nsf")" 2>/dev/null || true
    done
  fi
  # Everything mounted under the directory (kubelet volumes, container
  # rootfs, sandbox shm), deepest first.
  for _ in 1 2 3; do
    local mounts; mounts="$(awk -v d="$DIR/" 'index($2, d) == 1 {print $2}' /proc/self/mounts | sort -r)"
    [ -z "$mounts" ] && break
    while read -r m; do umount -l "$m" 2>/dev/null || true; done <<< "$mounts"
  done
  ip route del "$SERVICE_CIDR" dev "$BRIDGE" 2>/dev/null || true
  if [ -f "$DIR/pids/.owner" ] && [ -d "/sys/class/net/$BRIDGE" ]; then
    ip link del "$BRIDGE" 2>/dev/null || true
  fi
  # Keep images.env (the images stay in podman's storage); drop the state.
  find "$DIR" -mindepth 1 -maxdepth 1 ! -name images.env ! -name logs -exec rm -rf {} + 2>/dev/null || true
  log "down: stopped, cleaned up ($DIR/logs kept)"
}

case "${1:-}" in
  check) cmd_check ;;
  deps) cmd_deps ;;
  images) cmd_images ;;
  up) cmd_up ;;
  env) cmd_env ;;
  load) shift; cmd_load "$@" ;;
  relay) shift; cmd_relay "$@" ;;
  down) cmd_down ;;
  *) sed -n '2,14p' "$0"; exit 2 ;;
esac
