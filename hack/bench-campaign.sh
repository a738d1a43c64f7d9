#!/usr/bin/env bash
# The load campaign behind docs/benchmarks.md: the paper's sweep on both
# backends, a rate ladder per backend, 5,000 connected clients, groups of
# 10, and 1/2/3 processes on PostgreSQL + Redis. Every run reconciles
# message by message. Run it on a quiet machine; it takes about 30 minutes.
#
#   bash hack/bench-campaign.sh [outdir]        (default results/<date-time>)
#
# Needs PostgreSQL (TETRA_BENCH_PG_ADMIN, default postgres://postgres@127.0.0.1:5432/postgres)
# and Redis (TETRA_BENCH_REDIS, default redis://127.0.0.1:6379/0). Each
# PostgreSQL run gets a database of its own, dropped afterwards.
# BENCH_ONLY="sweep-embedded sweep-postgres sweep-misbehaving ladder clients groups replicas flow"
# (any subset, space-separated) runs only those parts.
set -uo pipefail
cd "$(dirname "$0")/.."
out=${1:-results/$(date +%Y%m%d-%H%M)}
mkdir -p "$out"
admin=${TETRA_BENCH_PG_ADMIN:-postgres://postgres@127.0.0.1:5432/postgres}
redis=${TETRA_BENCH_REDIS:-redis://127.0.0.1:6379/0}
only=${BENCH_ONLY:-}
go build -o "$out/tetra" ./workload/cmd/tetra || exit 1
T="$out/tetra"

newdb() {
	local db="bench_$(date +%s)_$RANDOM"
	# exit only leaves the $(newdb) subshell: callers check the result.
	psql "$admin" -qc "CREATE DATABASE $db" >/dev/null || return 1
	echo "$db"
}
dropdb() { psql "$admin" -qc "DROP DATABASE IF EXISTS $1 WITH (FORCE)" >/dev/null; }
pgurl() { echo "${admin%/*}/$1?sslmode=disable"; }

# run NAME ARGS...: one loadgen run, its report in $out/NAME.txt, with the
# machine's load average before and after.
run() {
	local name=$1
	shift
	{
		echo "# $(date -u +%FT%TZ) tetra loadgen $*"
		echo "# load before: $(cut -d' ' -f1-3 /proc/loadavg)"
		"$T" loadgen --quiet "$@" 2>&1
		echo "# exit: $?"
		echo "# load after: $(cut -d' ' -f1-3 /proc/loadavg)"
	} >"$out/$name.txt"
	grep -E "^(accepted|lost|deliveries/accepted|reconnects|latency|withdrawals|index faults|server|# exit)" "$out/$name.txt" | sed "s/^/$name: /"
}

pg() { # pg NAME ARGS...: run on a fresh PostgreSQL database + Redis
	local name=$1
	shift
	local db
	db=$(newdb) || exit 1
	[ -n "$db" ] || exit 1
	run "$name" --store "$(pgurl "$db")" --index "$redis" "$@"
	dropdb "$db"
}

part() { [ -z "$only" ] || [[ " $only " == *" $1 "* ]]; }

if part sweep-embedded; then
	echo "== the paper's sweep on the embedded default, 600 clients pairwise at 2,000 msg/s, 60 s per row"
	"$T" loadgen sweep --out "$out/sweep-embedded" >"$out/sweep-embedded.txt" 2>&1
	echo "sweep embedded: exit $?"
fi
if part sweep-postgres; then
	echo "== the paper's sweep on PostgreSQL + Redis (one database for the five rows)"
	db=$(newdb) || exit 1
	[ -n "$db" ] || exit 1
	"$T" loadgen sweep --store "$(pgurl "$db")" --index "$redis" --out "$out/sweep-postgres" >"$out/sweep-postgres.txt" 2>&1
	echo "sweep postgres: exit $?"
	dropdb "$db"
fi

if part sweep-misbehaving; then
	echo "== the paper's sweep on the embedded default with 5 % stuck and 5 % slow (2 s) clients"
	"$T" loadgen sweep --stuck-share 0.05 --slow-share 0.05 --out "$out/sweep-misbehaving" >"$out/sweep-misbehaving.txt" 2>&1
	echo "sweep misbehaving: exit $?"
fi

if part ladder; then
	echo "== rate ladder, 600 clients pairwise, 20 s"
	for rate in ${LADDER_RATES:-2000 3000 4000 6000 8000 10000}; do
		run "ladder-embedded-$rate" --clients 600 --rate "$rate" --duration 20s
		pg "ladder-postgres-$rate" --clients 600 --rate "$rate" --duration 20s
	done
fi

if part clients; then
	echo "== 5,000 connected clients at 2,000 msg/s, 30 s"
	run clients-5000-embedded --clients 5000 --rate 2000 --duration 30s
fi

if part groups; then
	echo "== groups of 10 (300 groups, 3,000 clients): one outbox row per member"
	for rate in 200 500 1000; do
		run "groups10-embedded-$rate" --clients 3000 --group-size 10 --rate "$rate" --duration 20s
		pg "groups10-postgres-$rate" --clients 3000 --group-size 10 --rate "$rate" --duration 20s
	done
fi

if part replicas; then
	echo "== 1, 2, 3 processes on PostgreSQL + Redis, 600 clients pairwise at 2,000 msg/s, 30 s"
	for n in 1 2 3; do
		pg "replicas-$n" --replicas "$n" --clients 600 --rate 2000 --duration 30s
	done
fi
if part flow; then
	echo "== flow control (issue 15): busy groups, groups of 10 at 4,000 msg/s, the index lost under load"
	# 120 clients in groups of 12; six members of each send pipelined
	# bursts of 16 (the issue's repro, at scale).
	run busy-groups-embedded --clients 120 --group-size 12 --senders 6 --window 16 --rate 600 --duration 20s --send-rate 1000
	pg busy-groups-postgres --clients 120 --group-size 12 --senders 6 --window 16 --rate 600 --duration 20s --send-rate 1000
	for rate in 2000 4000; do
		run "groups10-embedded-$rate" --clients 3000 --group-size 10 --rate "$rate" --duration 20s
		pg "groups10-postgres-$rate" --clients 3000 --group-size 10 --rate "$rate" --duration 20s
	done
	# 400 msg/s in pairs; three index faults 8 s apart.
	for fault in flush restart stale; do
		pg "index-$fault" --clients 600 --rate 400 --duration 30s --index-fault "$fault" --index-fault-at 5s --index-fault-every 8s
	done
fi
echo "results in $out"
