#!/usr/bin/env bash
# CPU per transaction, split by process: pgbench fetching random blocks of
# node 2 through pgrac_fetch_block on node 1, against get_raw_page through
# libpq on node 2, with the same clients (docs/performance/2026-11-26-
# sixteen-clients.md). Each process's utime + stime is read from /proc twice
# during the run and divided by the transactions in between. Ends with the
# records of the 16-client runs (scripts/scoreboard): cf.16clients.*,
# cpu.serving-per-block.PROTECTION, cpu.requesting-per-block.PROTECTION.
#
#   bench/run_cpu_split.sh [--clients "4 16"] [--seconds 7] [--max-seconds 600]
#
# Root (the PostgreSQL parts run as postgres through runuser); a temporary
# two-instance tier3 cluster on 127.0.0.1, pgbench -i -s 2, node 2's buffer
# pool warmed; removed on exit. Extra postgresql.conf lines: PGRAC_BENCH_CONF.
set -euo pipefail

SRC_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
CLIENTS="4 16"
SECONDS_RUN=7
MAX_SECONDS=600
PGBIN="${PGBIN:-/usr/lib/postgresql/15/bin}"
PGUSER_OS=postgres

while [[ $# -gt 0 ]]; do
    case "$1" in
        --clients) CLIENTS="$2"; shift 2 ;;
        --seconds) SECONDS_RUN="$2"; shift 2 ;;
        --max-seconds) MAX_SECONDS="$2"; shift 2 ;;
        -h | --help) sed -n '2,14p' "$0" | sed 's/^# \{0,1\}//'; exit 2 ;;
        *) echo "unknown argument: $1" >&2; exit 2 ;;
    esac
done
[[ $(id -u) -eq 0 ]] || { echo "run_cpu_split.sh: run as root" >&2; exit 2; }
COMMAND_LINE="bench/run_cpu_split.sh $*"
COMMAND_LINE="${COMMAND_LINE% }"
BENCH_NAME=run_cpu_split
# shellcheck source=bench/lib/cluster.sh
source "$SRC_DIR/bench/lib/cluster.sh"
cluster_traps

cluster_ports
cluster_init pgrac-cpu
prepare_base --pgbench 2 "CREATE EXTENSION pageinspect" "CREATE EXTENSION pg_prewarm"

NODE_CONF="shared_buffers = 128MB
max_connections = 40
${PGRAC_BENCH_CONF:-}"
start_node 1 "$PG1" "$NODE_CONF"
start_node 2 "$PG2" "$NODE_CONF"
psql_n "$PG1" "CREATE EXTENSION pgrac_ic"
psql_n "$PG2" "CREATE EXTENSION pgrac_ic"
wait_peers_up
mapfile -t SETTINGS < <(scoreboard_settings "$PG1")  # for the records
PROT=$(psql_n "$PG1" "SHOW cluster.wire_protection")
psql_n "$PG2" "SELECT pg_prewarm('pgbench_accounts', 'buffer')" >/dev/null
NBLOCKS=$(psql_n "$PG2" "SELECT pg_relation_size('pgbench_accounts') / 8192")

write_fetch_scripts "$NBLOCKS"
PM1=$(head -1 "$WORK/n1/postmaster.pid")
PM2=$(head -1 "$WORK/n2/postmaster.pid")
log "machine: $(nproc) CPUs ($(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)), kernel $(uname -r)"
SPLIT_FETCH="" SPLIT_RAW=""  # the "split" lines at 16 clients, for the records
for c in $CLIENTS; do
    out=$(python3 "$SRC_DIR/bench/tools/cpu_split.py" --pgbench "$PGBIN/pgbench" --as-user "$PGUSER_OS" \
        --host "$WORK" --port "$PG1" --script "$WORK/fetch.sql" --clients "$c" \
        --seconds "$SECONDS_RUN" --postmaster 1="$PM1" --postmaster 2="$PM2" \
        --label "pgrac_fetch_block on node 1 (node 2 serves)")
    echo "$out"
    if [[ $c == 16 ]]; then SPLIT_FETCH=" $(grep '^split ' <<<"$out")"; fi
    out=$(python3 "$SRC_DIR/bench/tools/cpu_split.py" --pgbench "$PGBIN/pgbench" --as-user "$PGUSER_OS" \
        --host "$WORK" --port "$PG2" --script "$WORK/raw.sql" --clients "$c" \
        --seconds "$SECONDS_RUN" --postmaster 1="$PM1" --postmaster 2="$PM2" \
        --label "get_raw_page on node 2 through libpq")
    echo "$out"
    if [[ $c == 16 ]]; then SPLIT_RAW=" $(grep '^split ' <<<"$out")"; fi
done

# ---- records (scripts/scoreboard), from the 16-client runs: blocks/s against
# get_raw_page/s; node 2's listener CPU per block served; node 1's backends'
# CPU per fetch against node 2's backends' per get_raw_page statement
if [[ -n "$SPLIT_FETCH" && -n "$SPLIT_RAW" ]]; then
    echo
    scoreboard_record cf.16clients.fetch-vs-getrawpage --figure "$(kv tps <<<"$SPLIT_FETCH")" \
        --baseline "$(kv tps <<<"$SPLIT_RAW")" "${SETTINGS[@]}"
    scoreboard_record "cpu.serving-per-block.$PROT" --figure "$(kv node_2_listener <<<"$SPLIT_FETCH")" \
        "${SETTINGS[@]}"
    scoreboard_record "cpu.requesting-per-block.$PROT" --figure "$(kv node_1_backends <<<"$SPLIT_FETCH")" \
        --baseline "$(kv node_2_backends <<<"$SPLIT_RAW")" "${SETTINGS[@]}"
fi
