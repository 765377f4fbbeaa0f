#!/usr/bin/env bash
# Tier 3 (TCP) streaming throughput, side by side in one run on one machine:
#   1. raw TCP streaming between two processes on 127.0.0.1 (tcp_pingpong
#      --stream: N messages written back to back, one send() each, TCP_NODELAY;
#      the receiver reads them all, then replies once)
#   2. pgrac_ic_stream from node 1 to node 2: N one-way notes on one route
#      (backend -> listener -> TCP -> peer listener -> one LMS worker), closed
#      by a ping on the same route, so the time includes what the receiving
#      LMS worker took to handle every note
#   3. at 8192 B, one iperf3 stream with 8 KiB writes (-l 8192), the same bytes,
#      its receiver's rate (when iperf3 is installed)
# at 64 B (GES-sized), 512 B and 8192 B (block-sized). Every measurement runs
# --rounds times, interleaved; the table reports the median over rounds and
# the spread (min-max), and the ratio to raw TCP taken within each round.
# It ends with the records tier3.stream8k.vs-raw.PROTECTION and
# tier3.stream8k.vs-iperf3 (scripts/scoreboard).
#
# Runs as root; the PostgreSQL parts run as the postgres user. Creates its own
# temporary two-instance cluster and removes it on exit.
#
#   bench/run_stream.sh [--build-dir DIR] [--skip-build] [--rounds 3]
#                       [--messages-64 200000] [--messages-512 100000]
#                       [--messages-8k 20000] [--markdown FILE]
#                       [--keep-logs DIR] [--max-seconds 1200]
# Environment: PGRAC_BENCH_CONF, extra postgresql.conf lines for both instances.
set -euo pipefail

SRC_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD_DIR="$SRC_DIR/build-bench"
SKIP_BUILD=0
ROUNDS=3
N64=200000
N512=100000
N8K=20000
WARMUP=5000
MARKDOWN=""
KEEP_LOGS=""
MAX_SECONDS=1200
PGBIN="${PGBIN:-/usr/lib/postgresql/15/bin}"
PGUSER_OS=postgres

usage() {
    sed -n '2,22p' "$0" | sed 's/^# \{0,1\}//'
    exit 2
}

while [[ $# -gt 0 ]]; do
    case "$1" in
        --build-dir) BUILD_DIR="$2"; shift 2 ;;
        --skip-build) SKIP_BUILD=1; shift ;;
        --rounds) ROUNDS="$2"; shift 2 ;;
        --messages-64) N64="$2"; shift 2 ;;
        --messages-512) N512="$2"; shift 2 ;;
        --messages-8k) N8K="$2"; shift 2 ;;
        --warmup) WARMUP="$2"; shift 2 ;;
        --markdown) MARKDOWN="$2"; shift 2 ;;
        --keep-logs) KEEP_LOGS="$2"; shift 2 ;;
        --max-seconds) MAX_SECONDS="$2"; shift 2 ;;
        -h | --help) usage ;;
        *) echo "unknown argument: $1" >&2; usage ;;
    esac
done

[[ $(id -u) -eq 0 ]] || { echo "run_stream.sh: run as root (it uses runuser -u postgres)" >&2; exit 2; }
COMMAND_LINE="bench/run_stream.sh $*"
COMMAND_LINE="${COMMAND_LINE% }"

BENCH_NAME=run_stream
# shellcheck source=bench/lib/cluster.sh
source "$SRC_DIR/bench/lib/cluster.sh"
cluster_on_exit() {  # --keep-logs
    if [[ -n "$KEEP_LOGS" ]]; then
        mkdir -p "$KEEP_LOGS"
        cp "$WORK"/*.log "$WORK"/results.tsv "$KEEP_LOGS"/ 2>/dev/null || true
    fi
}
cluster_traps

# ---- build
if [[ $SKIP_BUILD -eq 0 ]]; then build_bench_tools; fi
TCP_PINGPONG="$BUILD_DIR/bin/tcp_pingpong"
[[ -x "$TCP_PINGPONG" ]] || { echo "missing $TCP_PINGPONG" >&2; exit 2; }

# ---- the cluster: initdb once, copy (same system identifier), two instances
cluster_ports
cluster_init pgrac-stream
start_node 1 "$PG1" "${PGRAC_BENCH_CONF:-}"
start_node 2 "$PG2" "${PGRAC_BENCH_CONF:-}"
psql_n "$PG1" "CREATE EXTENSION pgrac_ic;"
psql_n "$PG2" "CREATE EXTENSION pgrac_ic;"

log "waiting for the peers to be UP"
wait_peers_up
mapfile -t SETTINGS < <(scoreboard_settings "$PG1")  # for the record
PROT=$(psql_n "$PG1" "SHOW cluster.wire_protection")
psql_n "$PG1" "SELECT messages_sent FROM pgrac_ic_stream(2, 64, $WARMUP)" >/dev/null
NOTES_BEFORE=$(psql_n "$PG2" "SELECT notes_recv FROM pg_cluster_ic_peers WHERE node_id = 1")

# ---- measurements
RESULTS="$WORK/results.tsv"  # what, size, messages, round, msgs/s, MB/s
: >"$RESULTS"
SENT=0
tcp_run() {  # tcp_run SIZE MESSAGES ROUND
    local out
    out=$(timeout 300 "$TCP_PINGPONG" --stream "$2" --sizes "$1" --warmup "$WARMUP")
    printf 'raw TCP stream\t%s\t%s\t%s\t%s\t%s\n' "$1" "$2" "$3" \
        "$(kv msgs_per_sec <<<" $out")" "$(kv mbytes_per_sec <<<" $out")" >>"$RESULTS"
}
IPERF3=$(command -v iperf3 || true)
IPERF_PORT=$(pick_port 58000 58999)
iperf_run() {  # iperf_run MESSAGES ROUND: one stream, 8 KiB writes, MESSAGES x 8 KiB
    local json rate
    timeout 60 "$IPERF3" -s -1 -B 127.0.0.1 -p "$IPERF_PORT" >/dev/null 2>&1 &
    local server=$!
    sleep 0.3
    json=$(timeout 60 "$IPERF3" -c 127.0.0.1 -p "$IPERF_PORT" -l 8192 -n $(($1 * 8192)) -J) || {
        kill "$server" 2>/dev/null
        return 1
    }
    wait "$server" 2>/dev/null || true
    rate=$(python3 -c 'import json,sys; b=json.load(sys.stdin)["end"]["sum_received"]["bits_per_second"]; print(b/8, b/8/1e6)' <<<"$json")
    printf 'iperf3, one stream, 8 KiB writes\t8192\t%s\t%s\t%s\t%s\n' "$1" "$2" \
        "$(awk '{printf "%.0f", $1 / 8192}' <<<"$rate")" "$(awk '{print $2}' <<<"$rate")" >>"$RESULTS"
}
ic_run() {  # ic_run SIZE MESSAGES ROUND
    local line
    line=$(psql_n "$PG1" "SELECT msgs_per_sec, mbytes_per_sec FROM pgrac_ic_stream(2, $1, $2)")
    printf 'pgrac_ic_stream node 1 -> 2\t%s\t%s\t%s\t%s\n' "$1" "$2" "$3" "${line/|/$'\t'}" \
        >>"$RESULTS"
    SENT=$((SENT + $2))
}

for r in $(seq 1 "$ROUNDS"); do
    log "round $r/$ROUNDS"
    for spec in "64 $N64" "512 $N512" "8192 $N8K"; do
        read -r size n <<<"$spec"
        tcp_run "$size" "$n" "$r"
        ic_run "$size" "$n" "$r"
        if [[ $size -eq 8192 && -n "$IPERF3" ]]; then iperf_run "$n" "$r"; fi
    done
done

# Exactly-once under the stream: node 2 handled every note node 1 sent.
NOTES_AFTER=$(psql_n "$PG2" "SELECT notes_recv FROM pg_cluster_ic_peers WHERE node_id = 1")
if [[ $((NOTES_AFTER - NOTES_BEFORE)) -ne $SENT ]]; then
    echo "node 2 counted $((NOTES_AFTER - NOTES_BEFORE)) notes from node 1, expected $SENT" >&2
    exit 1
fi
STALLS=$(psql_n "$PG1" "SELECT backpressure_stalls FROM pg_cluster_rdma_counters WHERE peer_node_id = 2")

# ---- report
machine_cpu=$(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -1)
REPORT=$(python3 - "$RESULTS" <<'PY'
import statistics, sys
rows, order = {}, []
for line in open(sys.argv[1]):
    what, size, n, rnd, mps, mbps = line.rstrip("\n").split("\t")
    key = (what, int(size))
    if key not in rows:
        rows[key] = {}
        order.append(key)
    rows[key][int(rnd)] = (int(n), float(mps), float(mbps))
med = statistics.median
print("| what | size (B) | messages | msgs/s | msgs/s min–max | MB/s | / raw TCP (same round) |")
print("|---|---:|---:|---:|---:|---:|---:|")
for k in sorted(order, key=lambda k: (k[1], k[0] != "raw TCP stream")):
    v = rows[k]
    mps = [x[1] for x in v.values()]
    base = rows.get(("raw TCP stream", k[1]), {})
    rs = [v[r][1] / base[r][1] for r in v if r in base]
    ratio = "1.00x" if k[0] == "raw TCP stream" else "–" if k[0].startswith("iperf3") else \
        f"**{med(rs):.2f}x** ({min(rs):.2f}–{max(rs):.2f})"
    n = next(iter(v.values()))[0]
    print(f"| {k[0]} | {k[1]} | {n} | {med(mps):,.0f} | {min(mps):,.0f}–{max(mps):,.0f} | "
          f"{med(x[2] for x in v.values()):,.1f} | {ratio} |")
PY
)
{
    echo "Run: \`$COMMAND_LINE\` ($(date -u '+%Y-%m-%d %H:%M UTC'))"
    echo
    echo "Machine: $(nproc) CPUs ($machine_cpu), kernel $(uname -r), PostgreSQL" \
        "$("$PGBIN/postgres" --version | awk '{print $3}'); rounds: $ROUNDS;" \
        "messages per stream: $N64 (64 B), $N512 (512 B), $N8K (8192 B); warmup $WARMUP"
    echo
    echo "$REPORT"
    echo
    echo "MB/s counts payload bytes (1 MB = 10^6 B). Node 2 counted exactly the $SENT notes node 1" \
        "streamed (pg_cluster_ic_peers.notes_recv); node 1 stalled on a full send queue to" \
        "node 2 $STALLS times (backpressure_stalls)."
} | tee "$WORK/report.md"
if [[ -n "$MARKDOWN" ]]; then cp "$WORK/report.md" "$MARKDOWN"; fi
echo
echo "per-round results (what, size, messages, round, msgs/s, MB/s):"
cat "$RESULTS"

# ---- record (scripts/scoreboard): 8 KiB msgs/s against raw TCP, per round
ROUNDS_8K=$(awk -F'\t' '$2 == 8192 && $1 !~ /^iperf3/ { v[$4, ($1 == "raw TCP stream")] = $5 }
    END { for (r = 1; ((r, 0) in v) && ((r, 1) in v); r++) printf "%s/%s ", v[r, 0], v[r, 1] }' "$RESULTS")
echo
scoreboard_record "tier3.stream8k.vs-raw.$PROT" --rounds "$ROUNDS_8K" "${SETTINGS[@]}"
# 8 KiB MB/s against iperf3 (payload bytes both), per round
ROUNDS_IPERF=$(awk -F'\t' '$2 == 8192 && $1 != "raw TCP stream" { v[$4, ($1 ~ /^iperf3/)] = $6 }
    END { for (r = 1; ((r, 0) in v) && ((r, 1) in v); r++) printf "%s/%s ", v[r, 0], v[r, 1] }' "$RESULTS")
if [[ -n "$ROUNDS_IPERF" ]]; then
    scoreboard_record tier3.stream8k.vs-iperf3 --rounds "$ROUNDS_IPERF" "${SETTINGS[@]}"
else
    echo "[$BENCH_NAME] no iperf3: tier3.stream8k.vs-iperf3 not measured" >&2
fi
