#!/usr/bin/env bash
# Runs kube-score (github.com/zegl/kube-score) on everything the project
# renders: the operator's children for each sample (hack/render-samples),
# the chart (helm template) and config/default (kubectl kustomize). Every
# finding left is a deliberate choice named in docs/operator.md
# ("kube-score"). Needs kube-score on PATH (go install
# github.com/zegl/kube-score/cmd/kube-score@latest), helm and kubectl (both
# in the node assets: eval "$(hack/realnode.sh env)"; PATH=$NODE_BIN:$PATH).
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="/usr/local/go/bin:$(go env GOPATH 2>/dev/null || echo /root/go)/bin:$PATH"
for tool in kube-score helm kubectl; do
  command -v "$tool" >/dev/null || { echo "kube-score.sh: $tool not on PATH" >&2; exit 2; }
done
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
go run ./hack/render-samples >"$out/samples.yaml"
helm template tetra charts/tetra-operator -n tetra-system --kube-version v1.37.2 >"$out/chart.yaml"
kubectl kustomize config/default >"$out/default.yaml"
rc=0
for f in samples chart default; do
  echo "== kube-score: $f"
  kube-score score "$out/$f.yaml" || rc=$?
done
exit "$rc"
