#!/usr/bin/env bash
# Tier 3 (TCP) side-by-side latency benchmark, in one run on one machine:
#   1. raw TCP ping-pong between two processes on 127.0.0.1 (the limit for tier 3)
#   2. libpq round trips against one instance: SELECT 1, and get_raw_page('t', 0)
#      (an 8 KiB page fetched the way users do it without an interconnect)
#   3. pgrac_ic_bench between two instances (backend -> its requester lane ->
#      TCP -> peer listener, which serves the ping in place -> back), 64 B and
#      8 KiB, plus the same RPC to the own node (no TCP: the in-instance
#      handoffs alone); also with cluster.requester_lanes = off (backend ->
#      listener -> TCP -> peer listener -> listener -> backend), and with
#      cluster.serve_in_place = off as well (the peer's listener hands the
#      request to an LMS worker and takes the reply back), in the same rounds
# Every measurement runs --rounds times, interleaved; the table reports the
# median over rounds of each round's p50/p99, and the p50 spread (min-max).
# It ends with the records of its three verdicts (scripts/scoreboard):
# tier3.{rpc64.pinned,fetch.pinned,rpc64.cpu0}.PROTECTION, per-round pairs.
#
# Runs as root; the PostgreSQL parts run as the postgres user. Creates its own
# temporary two-instance cluster and removes it on exit.
#
#   bench/run_tier3.sh [--build-dir DIR] [--skip-build] [--rounds 3]
#                      [--iterations 20000] [--iterations-8k 10000]
#                      [--markdown FILE] [--keep-logs DIR] [--max-seconds 1200]
# Environment: PGRAC_BENCH_CONF, extra postgresql.conf lines for both instances
# (e.g. "cluster.busy_poll_us = 0" to measure without busy-polling).
set -euo pipefail

SRC_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD_DIR="$SRC_DIR/build-bench"
SKIP_BUILD=0
ROUNDS=3
ITER=20000
ITER8K=10000
WARMUP=2000
MARKDOWN=""
KEEP_LOGS=""
MAX_SECONDS=1200
PGBIN="${PGBIN:-/usr/lib/postgresql/15/bin}"
PGUSER_OS=postgres

usage() {
    sed -n '2,25p' "$0" | sed 's/^# \{0,1\}//'
    exit 2
}

while [[ $# -gt 0 ]]; do
    case "$1" in
        --build-dir) BUILD_DIR="$2"; shift 2 ;;
        --skip-build) SKIP_BUILD=1; shift ;;
        --rounds) ROUNDS="$2"; shift 2 ;;
        --iterations) ITER="$2"; shift 2 ;;
        --iterations-8k) ITER8K="$2"; shift 2 ;;
        --warmup) WARMUP="$2"; shift 2 ;;
        --markdown) MARKDOWN="$2"; shift 2 ;;
        --keep-logs) KEEP_LOGS="$2"; shift 2 ;;
        --max-seconds) MAX_SECONDS="$2"; shift 2 ;;
        -h | --help) usage ;;
        *) echo "unknown argument: $1" >&2; usage ;;
    esac
done

[[ $(id -u) -eq 0 ]] || { echo "run_tier3.sh: run as root (it uses runuser -u postgres)" >&2; exit 2; }
COMMAND_LINE="bench/run_tier3.sh $*"
COMMAND_LINE="${COMMAND_LINE% }"

BENCH_NAME=run_tier3
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
LIBPQ_LATENCY="$BUILD_DIR/bin/libpq_latency"
[[ -x "$TCP_PINGPONG" && -x "$LIBPQ_LATENCY" ]] || { echo "missing tools in $BUILD_DIR/bin" >&2; exit 2; }

# ---- the cluster: initdb once, copy (same system identifier), two instances
cluster_ports
cluster_init pgrac-bench
# The table before the copy: both instances have it, so node 1 can fetch its
# blocks from node 2 (the block fetch row) and read them itself (get_raw_page).
prepare_base "CREATE EXTENSION pageinspect" \
    "CREATE TABLE t AS SELECT g, repeat('x', 40) AS filler FROM generate_series(1, 150) g"
start_node 1 "$PG1" "${PGRAC_BENCH_CONF:-}"
start_node 2 "$PG2" "${PGRAC_BENCH_CONF:-}"
psql_n "$PG1" "CREATE EXTENSION pgrac_ic;"
psql_n "$PG2" "CREATE EXTENSION pgrac_ic; SELECT count(*) FROM t;"

log "waiting for the peers to be UP"
wait_peers_up
psql_n "$PG1" "SELECT pgrac_ic_ping(2); SELECT pgrac_ic_ping(1);" >/dev/null
# What the records name (the targets are per protection mode).
mapfile -t SETTINGS < <(scoreboard_settings "$PG1")
PROT=$(psql_n "$PG1" "SHOW cluster.wire_protection")

# ---- measurements
# Placement matters a lot on a small VM: a wakeup across CPUs costs far more
# than one on the same CPU. So every path is measured as the scheduler places
# it (group "sched": the base for the ratios), and the raw TCP, libpq SELECT 1
# and pgrac_ic 64 B paths also with every process involved on CPU 0 (group
# "cpu0"); raw TCP also busy-polling on CPUs 0 and 1 (group "spin": the limit of
# a design that never sleeps).
RESULTS="$WORK/results.tsv"  # group, what, size, round, p50, p99, p999
: >"$RESULTS"
record() {  # record GROUP WHAT SIZE ROUND LINE
    printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$1" "$2" "$3" "$4" "$(kv p50_us <<<"$5")" \
        "$(kv p99_us <<<"$5")" "$(kv p999_us <<<"$5")" >>"$RESULTS"
}
CONN="host=127.0.0.1 port=$PG1 dbname=postgres user=postgres"
LAST_CPU=$(($(nproc) - 1))
SPIN_PORT=$(pick_port 57000 57999 "$IC1" "$IC2")

instance_pids() {
    local d pm
    for d in "${STARTED[@]}"; do
        pm=$(head -1 "$d/postmaster.pid")
        echo "$pm"
        pgrep -P "$pm" || true
    done
}
pin_instances() {  # pin_instances CPULIST: every process of both instances
    local p
    for p in $(instance_pids); do taskset -a -pc "$1" "$p" >/dev/null 2>&1 || true; done
}

tcp_run() {  # tcp_run GROUP SIZE ITERS ROUND [REPLY-SIZE]
    local out what="raw TCP ping-pong" reply=()
    if [[ -n "${5:-}" ]]; then
        reply=(--reply-size "$5")
        what="raw TCP $2 B -> $5 B"
    fi
    case "$1" in
        sched) out=$(timeout 300 "$TCP_PINGPONG" --sizes "$2" --iterations "$3" --warmup "$WARMUP") ;;
        cpu0) out=$(timeout 300 taskset -c 0 "$TCP_PINGPONG" --sizes "$2" --iterations "$3" \
            --warmup "$WARMUP") ;;
        spin)
            timeout 300 taskset -c "$LAST_CPU" "$TCP_PINGPONG" --server --busy-poll \
                --port "$SPIN_PORT" 2>/dev/null &
            local srv=$!
            out=$(timeout 300 taskset -c 0 "$TCP_PINGPONG" --client --busy-poll --port "$SPIN_PORT" \
                --sizes "$2" --iterations "$3" --warmup "$WARMUP" "${reply[@]}")
            wait "$srv"
            ;;
    esac
    record "$1" "$what" "$2" "$4" "$out"
}
libpq_run() {  # libpq_run GROUP WHAT SIZE ROUND ITERS ARGS...
    local group=$1 what=$2 size=$3 round=$4 iters=$5 out pin=()
    shift 5
    [[ $group == cpu0 ]] && pin=(taskset -c 0)
    out=$(timeout 300 "${pin[@]}" "$LIBPQ_LATENCY" --conninfo "$CONN" --iterations "$iters" \
        --warmup "$WARMUP" "$@")
    if [[ $size == 8192 && "$(kv result_bytes <<<"$out")" != 8192 ]]; then
        echo "get_raw_page returned: $out" >&2
        exit 1
    fi
    record "$group" "$what" "$size" "$round" "$out"
}
ic_run() {  # ic_run GROUP NODE SIZE ITERS ROUND [LABEL-SUFFIX [SESSION-SETTING]]
    local line what="pgrac_ic RPC node 1 -> 2" set="${7:-}"
    [[ $2 == 1 ]] && what="pgrac_ic RPC to own node (no TCP)"
    what+="${6:-}"
    [[ -n $set ]] && set="SET $set; "
    psql_n "$PG1" "${set}SELECT count(*) FROM pgrac_ic_bench($2, $3, $WARMUP)" >/dev/null
    line=$(psql_n "$PG1" "${set}SELECT format('p50_us=%s p99_us=%s p999_us=%s',
              round(p50_us::numeric, 2), round(p99_us::numeric, 2), round(p999_us::numeric, 2))
              FROM pgrac_ic_bench($2, $3, $4)")
    record "$1" "$what" "$3" "$5" " $line"
}

# One 8 KiB block per round trip from node 2's buffer pool (a 24-byte request,
# an 8 KiB page back), timed in node 1's backend.
FETCH="pgrac_fetch_block node 1 -> 2 (1 block)"
fetch_run() {  # fetch_run GROUP ROUND
    local line
    psql_n "$PG1" "SELECT count(*) FROM pgrac_fetch_block_bench(2, 't', $WARMUP, 1)" >/dev/null
    line=$(psql_n "$PG1" "SELECT format('p50_us=%s p99_us=%s p999_us=0', round(p50_us::numeric, 2),
              round(p99_us::numeric, 2)) FROM pgrac_fetch_block_bench(2, 't', $ITER8K, 1)")
    record "$1" "$FETCH" 8192 "$2" " $line"
}

# Group "pin": placed as the busy-polling raw pair is (client on CPU 0, server
# on the last CPU): node 1's backend pinned to CPU 0 from inside its session
# (psql's \! runs as postgres, which may set its own processes' affinity) and
# node 2's listener to the last CPU; every other process as placed.
pinned_run() {  # pinned_run ROUND
    local listener2 sql
    listener2=$(psql_n "$PG2" "SELECT pid FROM pg_stat_activity WHERE backend_type = 'pgrac_ic listener'")
    taskset -pc "$LAST_CPU" "$listener2" >/dev/null
    sql="SELECT pg_backend_pid() AS pid \\gset
\\setenv BACKEND_PID :pid
\\! taskset -pc 0 \$BACKEND_PID >/dev/null
SELECT count(*) FROM pgrac_ic_bench(2, 64, $WARMUP);
SELECT format('p50_us=%s p99_us=%s p999_us=%s', round(p50_us::numeric, 2), round(p99_us::numeric, 2),
              round(p999_us::numeric, 2)) FROM pgrac_ic_bench(2, 64, $ITER);
SELECT count(*) FROM pgrac_fetch_block_bench(2, 't', $WARMUP, 1);
SELECT format('p50_us=%s p99_us=%s p999_us=0', round(p50_us::numeric, 2), round(p99_us::numeric, 2))
  FROM pgrac_fetch_block_bench(2, 't', $ITER8K, 1);"
    mapfile -t lines < <(as_pg timeout 300 "$PGBIN/psql" -X -A -t -q -v ON_ERROR_STOP=1 -h "$WORK" \
        -p "$PG1" -d postgres <<<"$sql" | grep '^p50_us=')
    taskset -pc "0-$LAST_CPU" "$listener2" >/dev/null
    [[ ${#lines[@]} -eq 2 ]] || { echo "pinned run: unexpected output" >&2; exit 1; }
    record pin "pgrac_ic RPC node 1 -> 2" 64 "$1" " ${lines[0]}"
    record pin "$FETCH" 8192 "$1" " ${lines[1]}"
}

# cluster.serve_in_place on both instances (sighup): off hands every request
# to an LMS worker, the path before serving in place; measured in the same
# rounds as the default.
serve_in_place() {  # serve_in_place on|off
    local pg
    for pg in "$PG1" "$PG2"; do
        psql_n "$pg" "ALTER SYSTEM SET cluster.serve_in_place = $1" >/dev/null
        psql_n "$pg" "SELECT pg_reload_conf()" >/dev/null
    done
    sleep 1
}
OFF=" (serve_in_place off: LMS handoff)"
# The backend's own requester lane is the default; off, its RPCs go through
# both listeners (the path before requester lanes), in the same rounds.
LANES_OFF=" (requester_lanes off: through both listeners)"
NOLANES="cluster.requester_lanes = off"

for r in $(seq 1 "$ROUNDS"); do
    log "round $r/$ROUNDS: as the scheduler places it"
    tcp_run sched 64 "$ITER" "$r"
    tcp_run sched 8192 "$ITER8K" "$r"
    libpq_run sched "libpq SELECT 1 (simple protocol)" 4 "$r" "$ITER" --query "SELECT 1"
    libpq_run sched "libpq SELECT 1 (prepared)" 4 "$r" "$ITER" --query "SELECT 1" --mode prepared
    libpq_run sched "libpq get_raw_page (prepared, binary)" 8192 "$r" "$ITER8K" \
        --query "SELECT get_raw_page('t', 0)" --mode prepared --binary
    ic_run sched 2 64 "$ITER" "$r"
    ic_run sched 2 8192 "$ITER8K" "$r"
    fetch_run sched "$r"
    ic_run sched 1 64 "$ITER" "$r"
    ic_run sched 2 64 "$ITER" "$r" "$LANES_OFF" "$NOLANES"
    ic_run sched 2 8192 "$ITER8K" "$r" "$LANES_OFF" "$NOLANES"
    serve_in_place off
    ic_run sched 2 64 "$ITER" "$r" "$OFF" "$NOLANES"
    ic_run sched 2 8192 "$ITER8K" "$r" "$OFF" "$NOLANES"
    ic_run sched 1 64 "$ITER" "$r" "$OFF"
    serve_in_place on

    log "round $r/$ROUNDS: everything on CPU 0; raw TCP busy-polling on CPUs 0 and $LAST_CPU"
    pin_instances 0
    tcp_run cpu0 64 "$ITER" "$r"
    libpq_run cpu0 "libpq SELECT 1 (prepared)" 4 "$r" "$ITER" --query "SELECT 1" --mode prepared
    ic_run cpu0 2 64 "$ITER" "$r"
    ic_run cpu0 1 64 "$ITER" "$r"
    ic_run cpu0 2 64 "$ITER" "$r" "$LANES_OFF" "$NOLANES"
    serve_in_place off
    ic_run cpu0 2 64 "$ITER" "$r" "$OFF" "$NOLANES"
    serve_in_place on
    pin_instances "0-$LAST_CPU"
    tcp_run spin 64 "$ITER" "$r"
    tcp_run spin 8192 "$ITER8K" "$r"
    tcp_run spin 64 "$ITER8K" "$r" 8192
    pinned_run "$r"
done

# ---- report
machine_cpu=$(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -1)
REPORT=$(python3 - "$RESULTS" "$WORK/pairs.tsv" <<'PY'
import statistics, sys
rows, order = {}, []
for line in open(sys.argv[1]):
    group, what, size, rnd, p50, p99, p999 = line.rstrip("\n").split("\t")
    key = (group, what, int(size))
    if key not in rows:
        rows[key] = {}
        order.append(key)
    rows[key][int(rnd)] = (float(p50), float(p99))
med = lambda xs: statistics.median(xs)
label = {"sched": "", "cpu0": " — all on CPU 0", "spin": " — busy-poll, 2 CPUs",
         "pin": " — pinned as the busy-poll pair (backend CPU 0, node 2's listener last CPU)"}
def tcp_key(group, size):
    return (group, "raw TCP ping-pong", 64 if size <= 64 else 8192)
FETCH = "pgrac_fetch_block node 1 -> 2 (1 block)"
RAW_FETCH = ("spin", "raw TCP 64 B -> 8192 B", 64)
def ratios(k, b):  # per-round ratio k / b: both measured in the same round
    if k not in rows or b not in rows:
        return []
    return [rows[k][r][0] / rows[b][r][0] for r in rows[k] if r in rows[b]]
print("| what | size (B) | p50 µs | p50 min–max | p99 µs | p50 / raw TCP p50 (same round, same placement) |")
print("|---|---:|---:|---:|---:|---:|")
for k in sorted(order, key=lambda k: ["sched", "cpu0", "spin", "pin"].index(k[0])):
    p50s = [v[0] for v in rows[k].values()]
    rs = ratios(k, tcp_key(k[0], k[2]))
    ratio = f"{med(rs):.2f}x ({min(rs):.2f}–{max(rs):.2f})" if rs else "–"
    if k[1].startswith("raw TCP"):
        ratio = "1.00x"
    print(f"| {k[1]}{label[k[0]]} | {k[2]} | {med(p50s):.1f} | {min(p50s):.1f}–{max(p50s):.1f} | "
          f"{med(v[1] for v in rows[k].values()):.1f} | {ratio} |")
print()
IC64, IC8K = "pgrac_ic RPC node 1 -> 2", "pgrac_ic RPC node 1 -> 2"
def line(grp, num, nsize, den, dsize):
    rs = ratios((grp, num, nsize), (grp, den, dsize))
    return (med(rs), min(rs), max(rs)) if rs else (float("nan"),) * 3
fmt = lambda t: f"**{t[0]:.2f}x** (rounds: {t[1]:.2f}–{t[2]:.2f})"
print("Ratios: the median over rounds of ratios taken within one round (so both sides of a ratio")
print("ran minutes apart at most under the same load); \"as placed\" = where the scheduler put")
print("the processes, \"CPU 0\" = every process involved pinned to CPU 0.")
print()
# Verdicts only where both sides wait the same way (docs/performance.md): pgrac_ic's
# processes poll before they sleep (cluster.busy_poll_us), so as placed its baseline is
# the busy-polling raw TCP ping-pong of the same round (which is pinned, client on CPU 0
# and server on CPU 1: pgrac_ic's six processes cannot be placed one per CPU on two, so
# they run as placed, and they sleep after cluster.busy_poll_us where the ping-pong never
# does; both gaps favour the baseline, and the line says so); on one CPU nothing gains from
# polling and the baseline is the blocking ping-pong, target 2x (issue "Fewer hops").
def across(num, den):  # per-round ratio of two rows of different groups, same round
    if num not in rows or den not in rows:
        return (float("nan"),) * 3
    rs = [rows[num][r][0] / rows[den][r][0] for r in rows[num] if r in rows[den]]
    return (med(rs), min(rs), max(rs)) if rs else (float("nan"),) * 3
# The verdicts pair pinned with pinned: pgrac_ic's backend and node 2's listener
# placed as the raw client and server are (both poll for the whole round trip:
# cluster.busy_poll_us is far longer). As placed is reported beside them.
t = across(("pin", IC64, 64), ("spin", "raw TCP ping-pong", 64))
print(f"- pgrac_ic 64 B / busy-polling raw TCP 64 B, both pinned the same way: {fmt(t)} — "
      f"target ≤ 1.5x: {'met' if t[0] <= 1.5 else 'MISSED'}")
tf = across(("pin", FETCH, 8192), RAW_FETCH)
print(f"- block fetch, 1 block / busy-polling raw TCP 64 B -> 8 KiB, both pinned the same way: "
      f"{fmt(tf)} — target ≤ 1.5x: {'met' if tf[0] <= 1.5 else 'MISSED'}")
t = across(("sched", IC64, 64), ("spin", "raw TCP ping-pong", 64))
print(f"- pgrac_ic 64 B as placed / busy-polling raw TCP 64 B (pinned): {fmt(t)}")
t8 = across(("sched", IC8K, 8192), ("spin", "raw TCP ping-pong", 8192))
print(f"- pgrac_ic 8 KiB echo as placed / busy-polling raw TCP 8 KiB (pinned): {fmt(t8)} "
      f"(no verdict: the issue's 8 KiB target is the block fetch above)")
tf = across(("sched", FETCH, 8192), RAW_FETCH)
print(f"- block fetch, 1 block, as placed / busy-polling raw TCP 64 B -> 8 KiB (pinned): {fmt(tf)}")
t = line("cpu0", IC64, 64, "raw TCP ping-pong", 64)
print(f"- pgrac_ic 64 B / blocking raw TCP 64 B, every process on CPU 0: {fmt(t)} — "
      f"target ≤ 2x: {'met' if t[0] <= 2 else 'MISSED'}")
print(f"- not verdicts (the waiting policies differ): pgrac_ic 64 B / blocking raw TCP 64 B, "
      f"as placed: {fmt(line('sched', IC64, 64, 'raw TCP ping-pong', 64))}")
for grp, name in (("sched", "as placed"), ("cpu0", "CPU 0")):
    t = line(grp, "libpq SELECT 1 (prepared)", 4, IC64, 64)
    extra = ""
    if grp == "sched":
        s = line(grp, "libpq SELECT 1 (simple protocol)", 4, IC64, 64)
        extra = f"; simple protocol: {fmt(s)}"
    print(f"- libpq SELECT 1 (prepared, a blocking client) / pgrac_ic 64 B (polling), {name}: "
          f"{fmt(t)}{extra}")
print(f"- libpq get_raw_page / pgrac_ic 8 KiB, as placed: "
      f"{fmt(line('sched', 'libpq get_raw_page (prepared, binary)', 8192, IC8K, 8192))}")
for grp, name in (("sched", "as placed"), ("cpu0", "CPU 0")):
    t = line(grp, "pgrac_ic RPC to own node (no TCP)", 64, IC64, 64)
    print(f"- pgrac_ic 64 B to own node (no TCP) / to node 2, {name}: {fmt(t)}")
LANES_OFF = IC64 + " (requester_lanes off: through both listeners)"
for grp, name, size in (("sched", "as placed", 64), ("sched", "as placed", 8192), ("cpu0", "CPU 0", 64)):
    t = line(grp, IC64, size, LANES_OFF, size)
    print(f"- pgrac_ic {size} B on a requester lane / through both listeners, {name}: {fmt(t)}")
# For the records (scripts/scoreboard): the verdicts' pairs, "figure/baseline" per round.
with open(sys.argv[2], "w") as out:
    for kind, num, den in (("rpc64.pinned", ("pin", IC64, 64), ("spin", "raw TCP ping-pong", 64)),
                           ("fetch.pinned", ("pin", FETCH, 8192), RAW_FETCH),
                           ("rpc64.cpu0", ("cpu0", IC64, 64), ("cpu0", "raw TCP ping-pong", 64))):
        if num in rows and den in rows:
            pairs = [f"{rows[num][r][0]}/{rows[den][r][0]}" for r in sorted(rows[num]) if r in rows[den]]
            out.write(f"{kind}\t{' '.join(pairs)}\n")
PY
)
{
    echo "Run: \`$COMMAND_LINE\` ($(date -u '+%Y-%m-%d %H:%M UTC'))"
    echo
    echo "Machine: $(nproc) CPUs ($machine_cpu), kernel $(uname -r), PostgreSQL" \
        "$("$PGBIN/postgres" --version | awk '{print $3}'); rounds: $ROUNDS;" \
        "iterations per round: $ITER (64 B and SELECT 1), $ITER8K (8 KiB); warmup $WARMUP"
    echo
    echo "$REPORT"
} | tee "$WORK/report.md"
if [[ -n "$MARKDOWN" ]]; then cp "$WORK/report.md" "$MARKDOWN"; fi
echo
echo "per-round results (group, what, size, round, p50, p99, p999 µs):"
cat "$RESULTS"

# ---- records (bench/results/tier3.KIND.PROTECTION.json): the three verdicts
echo
while IFS=$'\t' read -r kind pairs; do
    scoreboard_record "tier3.$kind.$PROT" --rounds "$pairs" "${SETTINGS[@]}"
done <"$WORK/pairs.tsv"
