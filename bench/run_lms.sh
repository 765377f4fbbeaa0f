#!/usr/bin/env bash
# Cache Fusion and GES benchmark, side by side in one run on one machine, on a
# temporary two-instance tier3 cluster (copies of one data directory that
# pgbench -i filled, so both instances have pgbench_accounts):
#   1. block fetch node 1 -> node 2 (pgrac_fetch_block_bench: backend -> its
#      requester lane -> TCP -> node 2's listener, which serves blocks in its
#      buffer pool in place -> back; with cluster.requester_lanes = off, through
#      both listeners; and with cluster.serve_in_place = off on node 2, where
#      its LMS serves them), 1 and 7 blocks per round trip, against raw TCP
#      8 KiB ping-pong and libpq get_raw_page on node 2 (what users do without
#      an interconnect);
#   2. lock + unlock of an uncontended global lock mastered on node 2
#      (pgrac_ges_bench, and through libpq) against pg_advisory_lock + unlock
#      over libpq;
#   3. throughput with 1, 4 and 16 concurrent backends (pgbench -T on node 1):
#      random single-block fetches from node 2 (the three ways above),
#      the same blocks with get_raw_page through libpq on node 2; lock + unlock
#      of a per-client global lock.
# It ends with the records ges.libpq-vs-advisory and
# cf.16clients.fetch-vs-getrawpage (scripts/scoreboard).
# Runs as root (PostgreSQL parts as postgres); removes its cluster on exit.
#
#   bench/run_lms.sh [--build-dir DIR] [--iterations 5000] [--seconds 5]
#                    [--markdown FILE] [--max-seconds 900]
set -euo pipefail

SRC_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD_DIR="$SRC_DIR/build-bench"
ITER=5000
SECONDS_TPS=5
MARKDOWN=""
MAX_SECONDS=900
PGBIN="${PGBIN:-/usr/lib/postgresql/15/bin}"
PGUSER_OS=postgres

while [[ $# -gt 0 ]]; do
    case "$1" in
        --build-dir) BUILD_DIR="$2"; shift 2 ;;
        --iterations) ITER="$2"; shift 2 ;;
        --seconds) SECONDS_TPS="$2"; shift 2 ;;
        --markdown) MARKDOWN="$2"; shift 2 ;;
        --max-seconds) MAX_SECONDS="$2"; shift 2 ;;
        -h | --help) sed -n '2,24p' "$0" | sed 's/^# \{0,1\}//'; exit 2 ;;
        *) echo "unknown argument: $1" >&2; exit 2 ;;
    esac
done
[[ $(id -u) -eq 0 ]] || { echo "run_lms.sh: run as root" >&2; exit 2; }
COMMAND_LINE="bench/run_lms.sh $*"
COMMAND_LINE="${COMMAND_LINE% }"
BENCH_NAME=run_lms
# shellcheck source=bench/lib/cluster.sh
source "$SRC_DIR/bench/lib/cluster.sh"
cluster_traps

TCP_PINGPONG="$BUILD_DIR/bin/tcp_pingpong"
LIBPQ_LATENCY="$BUILD_DIR/bin/libpq_latency"
if [[ ! -x "$TCP_PINGPONG" || ! -x "$LIBPQ_LATENCY" ]]; then build_bench_tools; fi

cluster_ports
cluster_init pgrac-lms
# Fill the base before the copy: both instances get pgbench_accounts.
prepare_base --pgbench 2 "CREATE EXTENSION pageinspect" "CREATE EXTENSION pg_prewarm"

NODE_CONF="shared_buffers = 128MB
max_connections = 40"
start_node 1 "$PG1" "$NODE_CONF"
start_node 2 "$PG2" "$NODE_CONF"
psql_n "$PG1" "CREATE EXTENSION pgrac_ic"
psql_n "$PG2" "CREATE EXTENSION pgrac_ic"
wait_peers_up
mapfile -t SETTINGS < <(scoreboard_settings "$PG1")  # for the records
# The GES start-up replay barrier is over once a NOWAIT lock is answered.
psql_n "$PG1" "SELECT pgrac_ges_lock('warmup', 'EX', 0), pgrac_ges_unlock('warmup')" >/dev/null
# Load the whole relation into node 2's buffer pool (a fetch then measures
# the interconnect and the serving side, not the disk; a sequential scan would
# read it through a small ring of buffers and leave most of it out), so that
# the first path measured finds what the others find.
psql_n "$PG2" "SELECT pg_prewarm('pgbench_accounts', 'buffer')" >/dev/null
RES=$(psql_n "$PG1" "SELECT n FROM generate_series(1, 1000) g, LATERAL (SELECT 'bench' || g AS n) s,
                     LATERAL pgrac_ges_resource(n) r WHERE r.master_node = 2 LIMIT 1")
ROWS=()
row() { ROWS+=("| $1 | $2 | $3 |"); log "$1: p50 $2 µs, p99 $3 µs"; }
CONN2="host=127.0.0.1 port=$PG2 dbname=postgres user=postgres"
CONN1="host=127.0.0.1 port=$PG1 dbname=postgres user=postgres"

log "latency ($ITER iterations each)"
out=$(timeout 300 "$TCP_PINGPONG" --sizes 8192 --iterations "$ITER" --warmup 1000)
row "raw TCP ping-pong, 8 KiB" "$(kv p50_us <<<"$out")" "$(kv p99_us <<<"$out")"
out=$(timeout 300 "$LIBPQ_LATENCY" --conninfo "$CONN2" --iterations "$ITER" --warmup 1000 \
    --query "SELECT get_raw_page('pgbench_accounts', 7)" --mode prepared --binary)
row "libpq get_raw_page (prepared, binary)" "$(kv p50_us <<<"$out")" "$(kv p99_us <<<"$out")"
# cluster.serve_in_place on node 2 (sighup): on, its listener serves blocks in
# its buffer pool itself; off, it hands every request to an LMS worker.
serve_in_place() {  # serve_in_place on|off
    psql_n "$PG2" "ALTER SYSTEM SET cluster.serve_in_place = $1" >/dev/null
    psql_n "$PG2" "SELECT pg_reload_conf()" >/dev/null
    sleep 1
}
# Modes: on = the requester's own lane, node 2's listener serves in place (the
# defaults); nolanes = through both listeners (cluster.requester_lanes = off on
# node 1's sessions); off = on the lane, node 2's LMS serves (serve_in_place off).
for mode in on nolanes off; do
    set="" conn="$CONN1"
    case $mode in
        on) how="requester lane, served in place" ;;
        nolanes)
            how="requester_lanes off: both listeners, served in place"
            set="SET cluster.requester_lanes = off; "
            conn="$CONN1 options='-c cluster.requester_lanes=off'" ;;
        off) how="requester lane, serve_in_place off: LMS"; serve_in_place off ;;
    esac
    for b in 1 7; do
        psql_n "$PG1" "${set}SELECT count(*) FROM pgrac_fetch_block_bench(2, 'pgbench_accounts', 1000, $b)" >/dev/null
        line=$(psql_n "$PG1" "${set}SELECT round(p50_us::numeric, 1) || ' ' || round(p99_us::numeric, 1) || ' ' || round(blocks_per_sec)
                              FROM pgrac_fetch_block_bench(2, 'pgbench_accounts', $ITER, $b)")
        read -r p50 p99 bps <<<"$line"
        row "pgrac_fetch_block node 1 -> 2, $b block(s) per round trip, $how ($bps blocks/s)" "$p50" "$p99"
    done
    out=$(timeout 300 "$LIBPQ_LATENCY" --conninfo "$conn" --iterations "$ITER" --warmup 1000 \
        --query "SELECT pgrac_fetch_block(2, 'pgbench_accounts', 7)" --mode prepared --binary)
    row "libpq SELECT pgrac_fetch_block(node 2) on node 1, $how" "$(kv p50_us <<<"$out")" "$(kv p99_us <<<"$out")"
done
serve_in_place on
out=$(timeout 300 "$LIBPQ_LATENCY" --conninfo "$CONN1" --iterations "$ITER" --warmup 1000 \
    --query "SELECT pg_advisory_lock(1), pg_advisory_unlock(1)" --mode prepared)
row "libpq pg_advisory_lock + unlock (one statement)" "$(kv p50_us <<<"$out")" "$(kv p99_us <<<"$out")"
ADV_P50=$(kv p50_us <<<"$out")
line=$(psql_n "$PG1" "SELECT round(p50_us::numeric, 1) || ' ' || round(p99_us::numeric, 1)
                      FROM pgrac_ges_bench('$RES', 'EX', $ITER)")
read -r p50 p99 <<<"$line"
row "pgrac_ges_lock + unlock, master node 2 (in the backend)" "$p50" "$p99"
line=$(psql_n "$PG1" "SELECT round(p50_us::numeric, 1) || ' ' || round(p99_us::numeric, 1)
                      FROM pgrac_ges_bench('local' || (SELECT n FROM generate_series(1, 1000) n
                           WHERE (pgrac_ges_resource('local' || n)).master_node = 1 LIMIT 1), 'EX', $ITER)")
read -r p50 p99 <<<"$line"
row "pgrac_ges_lock + unlock, master node 1 (own node)" "$p50" "$p99"
out=$(timeout 300 "$LIBPQ_LATENCY" --conninfo "$CONN1" --iterations "$ITER" --warmup 1000 \
    --query "SELECT pgrac_ges_lock('$RES'), pgrac_ges_unlock('$RES')" --mode prepared)
row "libpq pgrac_ges_lock + unlock (one statement), master node 2" "$(kv p50_us <<<"$out")" "$(kv p99_us <<<"$out")"
GES_P50=$(kv p50_us <<<"$out")

log "throughput (${SECONDS_TPS}s per point)"
cat >"$WORK/fetch.sql" <<'EOF'
\set b random(0, 3200)
SELECT length(pgrac_fetch_block(2, 'pgbench_accounts', :b));
EOF
cat >"$WORK/raw.sql" <<'EOF'
\set b random(0, 3200)
SELECT length(get_raw_page('pgbench_accounts', :b));
EOF
cat >"$WORK/lock.sql" <<'EOF'
SELECT pgrac_ges_lock(:client_id::bigint), pgrac_ges_unlock(:client_id::bigint);
EOF
cat >"$WORK/adv.sql" <<'EOF'
SELECT pg_advisory_lock(:client_id), pg_advisory_unlock(:client_id);
EOF
chown "$PGUSER_OS": "$WORK"/*.sql
TPS=()
declare -A TPSV  # TPSV[clients,script]: transactions/s, for the records
for c in 1 4 16; do
    line="| $c"
    for s in fetch fetch_nolanes fetch_lms raw lock adv; do
        script=$s port=$PG1 opts=""
        case $s in
            fetch_nolanes) script=fetch; opts="-c cluster.requester_lanes=off" ;;
            fetch_lms) script=fetch; serve_in_place off ;;
            raw) port=$PG2 ;;  # get_raw_page on the serving instance, through libpq
        esac
        tps=$(as_pg env PGOPTIONS="$opts" timeout 120 "$PGBIN/pgbench" -n -M prepared -c "$c" -j "$c" -T "$SECONDS_TPS" \
            -f "$WORK/$script.sql" -h "$WORK" -p "$port" postgres 2>&1 |
            sed -n 's/^tps = \([0-9.]*\).*/\1/p')
        [[ $s == fetch_lms ]] && serve_in_place on
        line="$line | ${tps%.*}"
        TPSV[$c,$s]=$tps
    done
    TPS+=("$line |")
    log "clients $c: $line"
done

machine_cpu=$(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -1)
{
    echo "Run: \`$COMMAND_LINE\` ($(date -u '+%Y-%m-%d %H:%M UTC'))"
    echo
    echo "Machine: $(nproc) CPUs ($machine_cpu), kernel $(uname -r); two instances, tier3;" \
        "$ITER iterations per latency row"
    echo
    echo "| what | p50 µs | p99 µs |"
    echo "|---|---:|---:|"
    printf '%s\n' "${ROWS[@]}"
    echo
    echo "Throughput, pgbench -M prepared on node 1 (transactions/s):"
    echo
    echo "| clients | pgrac_fetch_block from node 2 (random block), requester lane, served in place | the same through both listeners (requester_lanes off) | the same on the lane, serve_in_place off (LMS) | get_raw_page on node 2 through libpq (random block) | pgrac_ges_lock + unlock (per-client resource) | pg_advisory_lock + unlock |"
    echo "|---:|---:|---:|---:|---:|---:|---:|"
    printf '%s\n' "${TPS[@]}"
} | tee "$WORK/report.md"
if [[ -n "$MARKDOWN" ]]; then cp "$WORK/report.md" "$MARKDOWN"; fi

# ---- records (scripts/scoreboard): GES through libpq against pg_advisory_lock
# through libpq; 16 clients, blocks/s through pgrac_fetch_block (the default
# path) against get_raw_page on node 2
echo
scoreboard_record ges.libpq-vs-advisory --figure "$GES_P50" --baseline "$ADV_P50" "${SETTINGS[@]}"
scoreboard_record cf.16clients.fetch-vs-getrawpage --figure "${TPSV[16,fetch]:-}" \
    --baseline "${TPSV[16,raw]:-}" "${SETTINGS[@]}"
