#!/usr/bin/env bash
# A/B of two tetra builds on the same peerbench load, alternating, RUNS
# times each (default 2): 600 clients in pairs, 20 s at RATE msg/s, a fresh
# server (and with PG=1 a fresh PostgreSQL database and Redis prefix) per
# run. Prints one peerbench line per run, prefixed with the build's name.
# Needs /tmp/peerbench (see ../shared/peerbench/README.md).
# Usage: [PG=1] [RUNS=2] hack/peerbench-ab.sh OLD_BIN NEW_BIN RATE
set -u
OLD=$1; NEW=$2; RATE=$3; RUNS=${RUNS:-2}
PB=${PB:-/tmp/peerbench}
ulimit -n 20000
fp() { python3 -c 'import socket;s=socket.socket();s.bind(("127.0.0.1",0));print(s.getsockname()[1])'; }
run() { # $1 binary, rest: serve args
  local bin=$1; shift; local d; d=$(mktemp -d); local port; port=$(fp)
  TETRA_JWT_SECRET=ab-secret-0123456789abcdef "$bin" serve --addr 127.0.0.1:$port --data $d/data "$@" >$d/log 2>&1 & local pid=$!
  for _ in $(seq 100); do curl -fs -o /dev/null http://127.0.0.1:$port/healthz && break; sleep 0.1; done
  "$PB" --server tetra --tetra-url http://127.0.0.1:$port --tetra-secret ab-secret-0123456789abcdef --pid $pid \
    --n 600 --rate "$RATE" --duration ${DUR:-20s} --quiet 2>&1 | tail -1
  kill $pid; wait $pid 2>/dev/null; rm -rf $d
}
for i in $(seq "$RUNS"); do
  for b in old new; do
    bin=$OLD; [ $b = new ] && bin=$NEW
    if [ "${PG:-0}" = 1 ]; then
      db=ab_${b}_${i}_$$
      psql -h 127.0.0.1 -U postgres -qc "create database $db" >/dev/null
      echo "$b $(run "$bin" --store "postgres://postgres@127.0.0.1:5432/$db?sslmode=disable" \
        --index redis://127.0.0.1:6379/9 --index-prefix "$db:")"
      psql -h 127.0.0.1 -U postgres -qc "drop database $db" >/dev/null 2>&1
      redis-cli -n 9 --scan --pattern "$db:*" | xargs -r redis-cli -n 9 del >/dev/null
    else
      echo "$b $(run "$bin")"
    fi
  done
done
