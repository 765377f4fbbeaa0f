#!/usr/bin/env bash
# One client, nothing polling: what the interconnect adds to an 8 KiB page read
# through SQL, against a blocking raw TCP 64 B -> 8 KiB ping-pong of the same
# rounds (target cf.fetch-minus-getrawpage-vs-raw, issue 28).
#
#   bench/run_fetch_one_client.sh [--build-dir DIR] [--skip-build] [--rounds 5]
#                                 [--seconds 8] [--iterations 20000] [--max-seconds 300]
#
# On node 1 of a temporary two-instance tier3 cluster (cluster.busy_poll_us = 0
# on both), one pgbench client (-n -M prepared -c 1 -T SECONDS -l) runs either
#   SELECT length(pgrac_fetch_block(2, 'pgbench_accounts', :b))   node 2's block
#   SELECT length(get_raw_page('pgbench_accounts', :b))           node 1's block
# (:b random over the table, both instances' buffers warmed), the two in turns
# whose order alternates by round, with the raw ping-pong (tcp_pingpong --sizes
# 64 --reply-size 8192, blocking sockets, as placed) between them. Per round:
# the p50 of each side from pgbench's per-transaction log (nearest rank, the
# rule of bench/tools/latency_stats.hpp), difference = fetch p50 - get_raw_page
# p50 (the SQL, the executor and the client's round trip cancel: what is left
# is the request, its service on node 2 and the reply), ratio = difference /
# the raw ping-pong's p50. The record (scripts/scoreboard) keeps the rounds'
# difference/raw pairs. About 2 minutes with the defaults.
#
# Root (the PostgreSQL parts run as postgres through runuser). Extra
# postgresql.conf lines for both instances: PGRAC_BENCH_CONF (after this
# script's own, so they win; a record whose settings are not the target's is
# refused).
set -euo pipefail

SRC_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD_DIR="$SRC_DIR/build-bench"
SKIP_BUILD=0
ROUNDS=5
SECONDS_RUN=8
ITER=20000
WARMUP=2000
MAX_SECONDS=300
PGBIN="${PGBIN:-/usr/lib/postgresql/15/bin}"
PGUSER_OS=postgres

usage() {
    sed -n '2,27p' "$0" | sed 's/^# \{0,1\}//'
    exit 2
}

while [[ $# -gt 0 ]]; do
    case "$1" in
        --build-dir) BUILD_DIR="$2"; shift 2 ;;
        --skip-build) SKIP_BUILD=1; shift ;;
        --rounds) ROUNDS="$2"; shift 2 ;;
        --seconds) SECONDS_RUN="$2"; shift 2 ;;
        --iterations) ITER="$2"; shift 2 ;;
        --max-seconds) MAX_SECONDS="$2"; shift 2 ;;
        -h | --help) usage ;;
        *) echo "unknown argument: $1" >&2; usage ;;
    esac
done
[[ $(id -u) -eq 0 ]] || { echo "run_fetch_one_client.sh: run as root" >&2; exit 2; }
COMMAND_LINE="bench/run_fetch_one_client.sh $*"
COMMAND_LINE="${COMMAND_LINE% }"
BENCH_NAME=run_fetch_one_client
# shellcheck source=bench/lib/cluster.sh
source "$SRC_DIR/bench/lib/cluster.sh"
cluster_traps

# ---- build: only tcp_pingpong is needed
if [[ $SKIP_BUILD -eq 0 ]]; then
    log "building tcp_pingpong in $BUILD_DIR"
    timeout 900 cmake -S "$SRC_DIR" -B "$BUILD_DIR" -DCMAKE_BUILD_TYPE=RelWithDebInfo \
        -DPGRAC_BUILD_TESTS=OFF >/dev/null
    timeout 900 cmake --build "$BUILD_DIR" -j2 --target tcp_pingpong >/dev/null
fi
TCP_PINGPONG="$BUILD_DIR/bin/tcp_pingpong"
[[ -x "$TCP_PINGPONG" ]] || { echo "missing $TCP_PINGPONG (drop --skip-build?)" >&2; exit 2; }

# ---- the cluster: pgbench_accounts (scale 1, 1640 blocks) on both instances
cluster_ports
cluster_init pgrac-fetch1
prepare_base --pgbench 1 "CREATE EXTENSION pageinspect" "CREATE EXTENSION pg_prewarm"
NODE_CONF="shared_buffers = 128MB
max_connections = 20
cluster.busy_poll_us = 0
${PGRAC_BENCH_CONF:-}"
start_node 1 "$PG1" "$NODE_CONF"
start_node 2 "$PG2" "$NODE_CONF"
psql_n "$PG1" "CREATE EXTENSION pgrac_ic"
psql_n "$PG2" "CREATE EXTENSION pgrac_ic"
wait_peers_up
mapfile -t SETTINGS < <(scoreboard_settings "$PG1")  # for the record
POLL=$(psql_n "$PG1" "SHOW cluster.busy_poll_us")
[[ $POLL == 0 ]] || log "warning: cluster.busy_poll_us = $POLL (PGRAC_BENCH_CONF): something polls"
for p in "$PG1" "$PG2"; do psql_n "$p" "SELECT pg_prewarm('pgbench_accounts', 'buffer')" >/dev/null; done
NBLOCKS=$(psql_n "$PG2" "SELECT pg_relation_size('pgbench_accounts') / 8192")

write_fetch_scripts "$NBLOCKS"
# Both return the whole page (and the fetch comes from node 2).
[[ $(psql_n "$PG1" "SELECT length(pgrac_fetch_block(2, 'pgbench_accounts', 1))") == 8192 &&
   $(psql_n "$PG1" "SELECT length(get_raw_page('pgbench_accounts', 1))") == 8192 ]] ||
    { echo "a statement does not return 8192 bytes" >&2; exit 1; }

# pgbench_run NAME SECONDS TAG: one client on node 1, per-transaction log
# $WORK/TAG.PID; prints nothing (pgbench's summary goes to $WORK/TAG-summary.txt).
pgbench_run() {
    as_pg timeout $(($2 + 60)) "$PGBIN/pgbench" -n -M prepared -c 1 -j 1 -T "$2" \
        -f "$WORK/$1.sql" -l --log-prefix="$WORK/$3" -h "$WORK" -p "$PG1" postgres \
        >"$WORK/$3-summary.txt" 2>&1 ||
        { echo "pgbench $1 failed:" >&2; cat "$WORK/$3-summary.txt" >&2; exit 1; }
}
# p50_of TAG: the p50 (nearest rank) of the log's latencies (column 3, µs),
# and how many transactions.
p50_of() {
    python3 - "$WORK/$1".* <<'PY'
import sys
lat = sorted(int(line.split()[2]) for f in sys.argv[1:] for line in open(f))
print(f"{lat[int(0.5 * (len(lat) - 1) + 0.5)]} {len(lat)}")
PY
}

log "machine: $(nproc) CPUs ($(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)), kernel $(uname -r)"
log "warm-up: 2 s of each statement, one raw ping-pong"
pgbench_run fetch 2 warm-fetch
pgbench_run raw 2 warm-raw
timeout 120 "$TCP_PINGPONG" --sizes 64 --reply-size 8192 --iterations "$WARMUP" --warmup 200 >/dev/null

RESULTS="$WORK/rounds.tsv"  # round, order, fetch p50, get_raw_page p50, raw p50, difference, ratio
: >"$RESULTS"
PAIRS=""
for r in $(seq 1 "$ROUNDS"); do
    if ((r % 2)); then order="fetch raw"; else order="raw fetch"; fi
    first=${order%% *}
    pgbench_run "$first" "$SECONDS_RUN" "r$r-$first"
    raw_line=$(timeout 300 "$TCP_PINGPONG" --sizes 64 --reply-size 8192 --iterations "$ITER" \
        --warmup "$WARMUP")
    second=${order##* }
    pgbench_run "$second" "$SECONDS_RUN" "r$r-$second"
    read -r fetch_p50 fetch_n < <(p50_of "r$r-fetch")
    read -r grp_p50 grp_n < <(p50_of "r$r-raw")
    raw_p50=$(kv p50_us <<<"$raw_line")
    diff=$((fetch_p50 - grp_p50))
    ratio=$(python3 -c "print(f'{$diff / $raw_p50:.2f}')")
    log "round $r/$ROUNDS ($first first): fetch p50 $fetch_p50 µs ($fetch_n tx), get_raw_page p50" \
        "$grp_p50 µs ($grp_n tx), difference $diff µs; raw 64 B -> 8 KiB p50 $raw_p50 µs; ratio $ratio"
    printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$r" "$first first" "$fetch_p50" "$grp_p50" "$raw_p50" \
        "$diff" "$ratio" >>"$RESULTS"
    PAIRS+="${PAIRS:+ }$diff/$raw_p50"
done

# ---- report
REPORT=$(python3 - "$RESULTS" <<'PY'
import statistics, sys
rows = [line.rstrip("\n").split("\t") for line in open(sys.argv[1])]
print("| round | order | fetch p50 µs | get_raw_page p50 µs | difference µs | raw TCP 64 B → 8 KiB p50 µs | ratio |")
print("|---:|---|---:|---:|---:|---:|---:|")
for r, order, f, g, raw, d, ratio in rows:
    print(f"| {r} | {order} | {f} | {g} | {d} | {raw} | {ratio}x |")
med = lambda i: statistics.median(float(x[i]) for x in rows)
ratios = [float(x[6]) for x in rows]
print(f"| median | | {med(2):g} | {med(3):g} | {med(5):g} | {med(4):g} | "
      f"**{statistics.median(ratios):.2f}x** ({min(ratios):.2f}–{max(ratios):.2f}) |")
print()
print(f"note: fetch p50 {med(2):g} µs, get_raw_page p50 {med(3):g} µs (medians of rounds)")
PY
)
{
    echo "Run: \`$COMMAND_LINE\` ($(date -u '+%Y-%m-%d %H:%M UTC')); settings: ${SETTINGS[*]}"
    echo
    echo "Machine: $(nproc) CPUs, kernel $(uname -r), PostgreSQL" \
        "$("$PGBIN/postgres" --version | awk '{print $3}'); one pgbench client (-M prepared)," \
        "$SECONDS_RUN s per side per round; raw: $ITER round trips, blocking; goal: ratio ≤ 1.2x"
    echo
    grep -v '^note:' <<<"$REPORT"
} | tee "$WORK/report.md"

# ---- record (bench/results/cf.fetch-minus-getrawpage-vs-raw.json)
echo
NOTE=$(sed -n 's/^note: //p' <<<"$REPORT")
scoreboard_record cf.fetch-minus-getrawpage-vs-raw --rounds "$PAIRS" "${SETTINGS[@]}" \
    --note "$NOTE; pgbench -n -M prepared -c 1 -T $SECONDS_RUN per side, order alternating by round; raw: tcp_pingpong --sizes 64 --reply-size 8192, blocking, as placed."
