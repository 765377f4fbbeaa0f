#!/usr/bin/env bash
# Tier 3 (TCP) scaling benchmark (issue "Fewer hops", item 5), in one run on
# one machine, each measurement against raw TCP with as many connections:
#   1. instances: for each N of --instances, a temporary N-instance tier3
#      cluster (copies of one initdb'd base). Per instance: the interconnect's
#      established TCP connections (ss) and paths up, pgrac_ic's shared memory
#      (pg_shmem_allocations) and the listener's RSS; and the per-message cost,
#      pgrac_ic_bench(2, 64, --iterations) from node 1 (timed in the backend)
#      against tcp_pingpong 64 B whose client holds as many connections as
#      node 1's interconnect (--idle), rounds interleaved.
#   2. requesters, on the first cluster (2 instances by default), for each C of
#      --clients, for --seconds each:
#      - C backends on node 1 each running 64 B RPCs to node 2 back to back,
#        one RPC per statement, SELECT p50_us FROM pgrac_ic_bench(2, 64, 1)
#        (libpq_latency --connections C --pipeline: the sample is the RPC as
#        timed in the backend), against tcp_pingpong --connections C (C raw
#        TCP requesters, one connection each, timed in the requester);
#      - the same statement through PostgreSQL's protocol, C libpq clients over
#        TCP (libpq_latency --connections C: one thread and connection each,
#        prepared, back to back, each round trip timed in the client), against
#        SELECT 1 the same way; pgbench -n -M prepared -c C -j C -T gives the
#        throughput of both as a cross-check (its per-transaction log is not
#        used: PostgreSQL 15's pgbench logs 0 µs for a transaction whose result
#        is there when it first looks, most SELECT 1 under load).
# Ratios are taken only between like things (the same timing point, the same
# kind of client); the report names the difference in waiting policy.
# It ends with the records tier3.scaling.requesters-16 and .instances-8
# (scripts/scoreboard) when --clients and --instances include 16 and 8.
#
# Runs as root; the PostgreSQL parts run as the postgres user. Creates its own
# temporary clusters in /tmp and removes them on exit.
#
#   bench/run_scaling.sh [--build-dir DIR] [--skip-build] [--seconds 5]
#                        [--instances "2 4 8"] [--clients "1 4 16"]
#                        [--rounds 5] [--iterations 5000] [--pipeline 32]
#                        [--markdown FILE] [--keep-logs DIR] [--max-seconds 1200]
# Environment: PGRAC_BENCH_CONF, extra postgresql.conf lines for every instance.
set -euo pipefail

SRC_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD_DIR="$SRC_DIR/build-bench"
SKIP_BUILD=0
SECS=5
INSTANCES="2 4 8"
CLIENTS="1 4 16"
ROUNDS=5
ITER=5000
PIPELINE=32
MARKDOWN=""
KEEP_LOGS=""
MAX_SECONDS=1200
PGBIN="${PGBIN:-/usr/lib/postgresql/15/bin}"
PGUSER_OS=postgres

usage() {
    sed -n '2,37p' "$0" | sed 's/^# \{0,1\}//'
    exit 2
}
COMMAND_LINE="bench/run_scaling.sh $*"
COMMAND_LINE="${COMMAND_LINE% }"

while [[ $# -gt 0 ]]; do
    case "$1" in
        --build-dir) BUILD_DIR="$2"; shift 2 ;;
        --skip-build) SKIP_BUILD=1; shift ;;
        --seconds) SECS="$2"; shift 2 ;;
        --instances) INSTANCES="$2"; shift 2 ;;
        --clients) CLIENTS="$2"; shift 2 ;;
        --rounds) ROUNDS="$2"; shift 2 ;;
        --iterations) ITER="$2"; shift 2 ;;
        --pipeline) PIPELINE="$2"; shift 2 ;;
        --markdown) MARKDOWN="$2"; shift 2 ;;
        --keep-logs) KEEP_LOGS="$2"; shift 2 ;;
        --max-seconds) MAX_SECONDS="$2"; shift 2 ;;
        -h | --help) usage ;;
        *) echo "unknown argument: $1" >&2; usage ;;
    esac
done

[[ $(id -u) -eq 0 ]] || { echo "run_scaling.sh: run as root (it uses runuser -u postgres)" >&2; exit 2; }
for n in $INSTANCES; do
    [[ $n =~ ^[0-9]+$ && $n -ge 2 && $n -le 32 ]] || { echo "--instances: 2..32 each" >&2; exit 2; }
done
MAX_CLIENTS=1
for c in $CLIENTS; do
    [[ $c =~ ^[0-9]+$ && $c -ge 1 && $c -le 100 ]] || { echo "--clients: 1..100 each" >&2; exit 2; }
    [[ $c -gt $MAX_CLIENTS ]] && MAX_CLIENTS=$c
done
[[ $SECS =~ ^[0-9]+$ && $SECS -ge 1 ]] || { echo "--seconds: a whole number >= 1" >&2; exit 2; }
[[ $ROUNDS =~ ^[0-9]+$ && $ROUNDS -ge 1 && $ITER =~ ^[0-9]+$ && $ITER -ge 100 ]] ||
    { echo "--rounds >= 1, --iterations >= 100" >&2; exit 2; }
FIRST_N=$(awk '{print $1}' <<<"$INSTANCES")

BENCH_NAME=run_scaling
# shellcheck source=bench/lib/cluster.sh
source "$SRC_DIR/bench/lib/cluster.sh"
cluster_on_exit() {  # --keep-logs
    if [[ -n "$KEEP_LOGS" ]]; then
        mkdir -p "$KEEP_LOGS"
        cp "$WORK"/*.log "$WORK"/*.tsv "$KEEP_LOGS"/ 2>/dev/null || true
    fi
}
cluster_traps
RUN_START=$(date +%s)

# ---- build
if [[ $SKIP_BUILD -eq 0 ]]; then build_bench_tools; fi
TCP_PINGPONG="$BUILD_DIR/bin/tcp_pingpong"
LIBPQ_LATENCY="$BUILD_DIR/bin/libpq_latency"
[[ -x "$TCP_PINGPONG" && -x "$LIBPQ_LATENCY" ]] || { echo "missing tools in $BUILD_DIR/bin" >&2; exit 2; }
[[ $("$TCP_PINGPONG" --help 2>&1 || true) == *--connections* ]] ||
    { echo "$TCP_PINGPONG predates --connections: rebuild (drop --skip-build)" >&2; exit 2; }
[[ $("$LIBPQ_LATENCY" --help 2>&1 || true) == *--pipeline* ]] ||
    { echo "$LIBPQ_LATENCY predates --pipeline: rebuild (drop --skip-build)" >&2; exit 2; }

# Small instances: the run starts up to 8 of them on one machine.
NODE_CONF="shared_buffers = 32MB
max_connections = $((MAX_CLIENTS + 24 > 40 ? MAX_CLIENTS + 24 : 40))
${PGRAC_BENCH_CONF:-}"
INST="$WORK/instances.tsv"  # N, node, ic_conns, paths_up, paths, shm_ic, shm_ges, vmrss_kb, rssanon_kb
MSG="$WORK/messages.tsv"    # N, round, what (ic|tcp), p50, p99
REQ="$WORK/requesters.tsv"  # C, what, ops_per_sec, p50, p99, busy_fraction (p50/p99 empty: pgbench)

# instance_conns PMPID: established TCP connections that processes of the
# instance (the postmaster and its children) hold on interconnect ports.
instance_conns() {
    local pids
    pids=$({ echo "$1"; pgrep -P "$1" || true; } | paste -sd'|')
    ss -Htnp state established | awk -v pids="$pids" -v ports=" ${ICP[*]:1} " '
        { lp = $3; rp = $4; sub(/.*:/, "", lp); sub(/.*:/, "", rp) }
        (index(ports, " " lp " ") || index(ports, " " rp " ")) && $0 ~ ("pid=(" pids "),") { c++ }
        END { print c + 0 }'
}
status_kb() { awk -v k="$1:" '$1 == k { print $2 }' "/proc/$2/status"; }

# pgbench_tps C SCRIPT TAG: pgbench on node 1 over TCP; records its tps.
pgbench_tps() {
    local out tps
    out=$(as_pg timeout $((SECS + 120)) "$PGBIN/pgbench" -n -M prepared -c "$1" -j "$1" -T "$SECS" \
        -f "$2" -h 127.0.0.1 -p "$PG1" postgres 2>&1) || { echo "$out" >&2; exit 1; }
    tps=$(sed -n 's/^tps = \([0-9.]*\).*/\1/p' <<<"$out")
    [[ -n "$tps" ]] || { echo "pgbench printed no tps: $out" >&2; exit 1; }
    printf '%s\t%s\t%.0f\t\t\t\n' "$1" "$3" "$tps" >>"$REQ"
}
record_tool() {  # record_tool C WHAT LINE (a tcp_pingpong or libpq_latency line)
    printf '%s\t%s\t%s\t%s\t%s\t%s\n' "$1" "$2" "$(kv ops_per_sec <<<"$3")" "$(kv p50_us <<<"$3")" \
        "$(kv p99_us <<<"$3")" "$(kv busy_fraction <<<"$3")" >>"$REQ"
}

# ---- requesters: on the cluster of FIRST_N instances, node 1 -> node 2
requesters() {
    local c line
    local ic_query="SELECT p50_us FROM pgrac_ic_bench(2, 64, 1)"
    echo "$ic_query;" >"$WORK/ic.sql"
    echo "SELECT 1;" >"$WORK/select1.sql"
    chown "$PGUSER_OS": "$WORK"/*.sql
    local conn="host=127.0.0.1 port=$PG1 dbname=postgres user=postgres"
    local lq=(timeout $((SECS + 60)) "$LIBPQ_LATENCY" --conninfo "$conn" --seconds "$SECS" --warmup 200
        --mode prepared)
    for c in $CLIENTS; do
        log "requesters: $c (${SECS}s each: raw TCP; pgrac_ic in the backends; through libpq:" \
            "pgrac_ic, SELECT 1; pgbench: pgrac_ic, SELECT 1)"
        line=$(timeout $((SECS + 60)) "$TCP_PINGPONG" --sizes 64 --connections "$c" --seconds "$SECS" \
            --warmup 1000)
        record_tool "$c" tcp "$line"
        line=$("${lq[@]}" --connections "$c" --query "$ic_query" --result-us --pipeline "$PIPELINE" \
            --label pgrac_ic_in_backend)
        record_tool "$c" ic "$line"
        line=$("${lq[@]}" --connections "$c" --query "$ic_query" --label pgrac_ic_libpq)
        record_tool "$c" libpq_ic "$line"
        line=$("${lq[@]}" --connections "$c" --query "SELECT 1" --label select1_libpq)
        record_tool "$c" libpq_select1 "$line"
        pgbench_tps "$c" "$WORK/ic.sql" pgbench_ic
        pgbench_tps "$c" "$WORK/select1.sql" pgbench_select1
        log "requesters $c: $(awk -F'\t' -v c="$c" '$1 == c { printf "%s %s/s p99 %s us; ", $2, $3, $5 }' "$REQ")"
    done
}

: >"$INST"
: >"$MSG"
: >"$REQ"
FIRST=1
for N in $INSTANCES; do
    cluster_ports_n "$N"
    if [[ $FIRST -eq 1 ]]; then cluster_init pgrac-scaling; fi
    log "starting $N instances"
    for i in $(seq 1 "$N"); do start_node "$i" "${PGP[i]}" "$NODE_CONF"; done
    for i in $(seq 1 "$N"); do psql_n "${PGP[i]}" "CREATE EXTENSION pgrac_ic"; done
    wait_all_up "${PGP[@]:1}"
    psql_n "$PG1" "SELECT pgrac_ic_ping(2)" >/dev/null
    if [[ $FIRST -eq 1 ]]; then
        BUSY_POLL=$(psql_n "$PG1" "SHOW cluster.busy_poll_us")
        TCP_PATHS=$(psql_n "$PG1" "SHOW cluster.tcp_paths")
        LMS=$(psql_n "$PG1" "SHOW cluster.lms_workers")
        WIRE=$(psql_n "$PG1" "SHOW cluster.wire_protection")
    fi

    # Connections and memory, per instance (idle: heartbeats only), once
    # every lane is up (UP needs the control lane only).
    for i in $(seq 1 "$N"); do
        for _ in $(seq 1 40); do
            [[ $(psql_n "${PGP[i]}" "SELECT sum(paths_up) = sum(paths) FROM pg_cluster_ic_peers
                                     WHERE NOT is_self") == t ]] && break
            sleep 0.5
        done
    done
    sleep 1
    for i in $(seq 1 "$N"); do
        pm=$(head -1 "$WORK/n$i/postmaster.pid")
        listener=$(ps -o pid=,args= --ppid "$pm" | awk '/pgrac_ic listener/ { print $1; exit }')
        [[ -n "$listener" ]] || { echo "node $i: no pgrac_ic listener process" >&2; exit 1; }
        paths=$(psql_n "${PGP[i]}" "SELECT sum(paths_up) || E'\t' || sum(paths)
                                    FROM pg_cluster_ic_peers WHERE NOT is_self")
        shm=$(psql_n "${PGP[i]}" "SELECT coalesce(sum(allocated_size) FILTER (WHERE name = 'pgrac_ic'), 0)
                                  || E'\t' || coalesce(sum(allocated_size) FILTER (WHERE name = 'pgrac_ic ges'), 0)
                                  FROM pg_shmem_allocations")
        printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$N" "$i" "$(instance_conns "$pm")" "$paths" "$shm" \
            "$(status_kb VmRSS "$listener")" "$(status_kb RssAnon "$listener")" >>"$INST"
    done
    conns1=$(awk -F'\t' -v n="$N" '$1 == n && $2 == 1 { print $3 }' "$INST")
    log "$N instances: $(awk -F'\t' -v n="$N" '$1 == n { printf "node %s %s conns, listener RSS %s kB; ", $2, $3, $8 }' "$INST")"

    # Per-message cost: pgrac_ic 64 B node 1 -> 2 against raw TCP 64 B whose
    # client holds as many connections as node 1's interconnect, interleaved.
    psql_n "$PG1" "SELECT count(*) FROM pgrac_ic_bench(2, 64, 1000)" >/dev/null
    for r in $(seq 1 "$ROUNDS"); do
        line=$(psql_n "$PG1" "SELECT round(p50_us::numeric, 2) || E'\t' || round(p99_us::numeric, 2)
                              FROM pgrac_ic_bench(2, 64, $ITER)")
        printf '%s\t%s\tic\t%s\n' "$N" "$r" "$line" >>"$MSG"
        line=$(timeout 120 "$TCP_PINGPONG" --sizes 64 --iterations "$ITER" --warmup 1000 \
            --idle $((conns1 > 1 ? conns1 - 1 : 0)))
        printf '%s\t%s\ttcp\t%s\t%s\n' "$N" "$r" "$(kv p50_us <<<"$line")" "$(kv p99_us <<<"$line")" >>"$MSG"
    done
    log "$N instances, 64 B p50/p99 per round: $(awk -F'\t' -v n="$N" '$1 == n { printf "%s %s/%s; ", $3, $4, $5 }' "$MSG")"

    if [[ $FIRST -eq 1 ]]; then requesters; fi
    stop_nodes "N$N"
    FIRST=0
done

# ---- report
machine_cpu=$(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -1)
REPORT=$(python3 - "$INST" "$MSG" "$REQ" "$FIRST_N" "$BUSY_POLL" "$(nproc)" "$SECS" "$PIPELINE" \
    "$TCP_PATHS" "$WORK/records.tsv" <<'PY'
import statistics, sys
inst_f, msg_f, req_f, first_n, busy_poll, ncpu, secs, pipeline, tcp_paths, records_f = sys.argv[1:]
rows = lambda f: [l.rstrip("\n").split("\t") for l in open(f) if l.strip()]
med = statistics.median
def span(xs, fmt="{:.0f}"):
    lo, hi = min(xs), max(xs)
    return fmt.format(lo) if fmt.format(lo) == fmt.format(hi) else f"{fmt.format(lo)}–{fmt.format(hi)}"
def ratio(xs):
    return f"{med(xs):.2f}x ({min(xs):.2f}–{max(xs):.2f})" if len(xs) > 1 else f"{xs[0]:.2f}x"

inst, msg, req = rows(inst_f), rows(msg_f), rows(req_f)
ns = list(dict.fromkeys(int(r[0]) for r in inst))
print("### Instances")
print()
print("Per instance (range over the instances when they differ). Connections: established TCP")
print("connections on interconnect ports held by the instance's processes (`ss`), and the sum of")
print(f"`paths_up` / `paths` in `pg_cluster_ic_peers` (one control lane and `cluster.tcp_paths` = {tcp_paths}")
print("bulk lanes per peer). Shared memory: `pg_shmem_allocations`, the `pgrac_ic` and `pgrac_ic ges`")
print("entries. RSS: the listener's `VmRSS` (it counts the shared memory it touched) and `RssAnon`")
print("(its private memory). Latency: 64 B round trips, p50 / p99 µs, the median over rounds;")
print("pgrac_ic_bench(2, 64) on node 1 (timed in the backend) and, in the same rounds, tcp_pingpong")
print("64 B (timed in the client), whose client holds as many connections as node 1's interconnect")
print("(one ping-pong, the rest idle); ratios are the median of per-round ratios (range).")
print()
print("| instances | connections per instance | paths up / paths | pgrac_ic shared memory (MB) | pgrac_ic ges (MB) | listener VmRSS (MB) | listener RssAnon (MB) | pgrac_ic 64 B p50 / p99 µs | raw TCP 64 B p50 / p99 µs (same connections) | p50 ratio | p99 ratio |")
print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
for n in ns:
    r = [x for x in inst if int(x[0]) == n]
    conns = span([int(x[2]) for x in r])
    paths = f"{span([int(x[3]) for x in r])} / {span([int(x[4]) for x in r])}"
    shm = span([int(x[5]) / 2**20 for x in r], "{:.1f}")
    ges = span([int(x[6]) / 2**20 for x in r], "{:.1f}")
    rss = span([int(x[7]) / 1024 for x in r], "{:.1f}")
    anon = span([int(x[8]) / 1024 for x in r], "{:.1f}")
    m = {(int(x[1]), x[2]): (float(x[3]), float(x[4])) for x in msg if int(x[0]) == n}
    rounds = sorted({k[0] for k in m})
    ic50, ic99 = med(m[(k, "ic")][0] for k in rounds), med(m[(k, "ic")][1] for k in rounds)
    t50, t99 = med(m[(k, "tcp")][0] for k in rounds), med(m[(k, "tcp")][1] for k in rounds)
    r50 = ratio([m[(k, "ic")][0] / m[(k, "tcp")][0] for k in rounds])
    r99 = ratio([m[(k, "ic")][1] / m[(k, "tcp")][1] for k in rounds])
    print(f"| {n} | {conns} | {paths} | {shm} | {ges} | {rss} | {anon} | {ic50:.1f} / {ic99:.1f} | "
          f"{t50:.1f} / {t99:.1f} | {r50} | {r99} |")
print()
print("A raw TCP full mesh with one connection per pair would hold N−1 connections per process;")
print("the kernel's socket memory is in neither column.")
print()

cs = list(dict.fromkeys(int(r[0]) for r in req))
q = {(int(r[0]), r[1]): (float(r[2]), float(r[3] or "nan"), float(r[4] or "nan"), r[5]) for r in req}
print(f"### Requesters ({first_n} instances, node 1 → node 2, {secs} s per point)")
print()
print("The interconnect against raw TCP. pgrac_ic: C backends on node 1, each running one 64 B RPC")
print("per statement back to back, `SELECT p50_us FROM pgrac_ic_bench(2, 64, 1)`, the statements")
print(f"pipelined {pipeline} at a time (libpq pipeline mode) so the backend never waits for its client; a")
print("sample is the RPC as timed in the backend. The rate counts whole statements, so it includes")
print("the executor's work between RPCs; \"in RPC\" is the share of the backends' time spent inside")
print("an RPC. Raw TCP: C client threads, one connection and one echo process each, 64 B blocking")
print("ping-pong back to back, timed in the client. p50 / p99 over all samples of all requesters.")
print()
print("| requesters | pgrac_ic RPC/s | p50 / p99 µs | in RPC | raw TCP round trips/s | p50 / p99 µs | rate ratio | p99 ratio |")
print("|---:|---:|---:|---:|---:|---:|---:|---:|")
for c in cs:
    ic, tcp = q.get((c, "ic")), q.get((c, "tcp"))
    if not ic or not tcp:
        continue
    print(f"| {c} | {ic[0]:,.0f} | {ic[1]:.1f} / {ic[2]:.1f} | {float(ic[3]):.0%} | {tcp[0]:,.0f} | "
          f"{tcp[1]:.1f} / {tcp[2]:.1f} | {ic[0] / tcp[0]:.2f}x | {ic[2] / tcp[2]:.2f}x |")
print()
print("Through PostgreSQL's protocol: C libpq clients over TCP to node 1 (one thread and one")
print("connection each, prepared, back to back, each round trip timed in the client with")
print("`CLOCK_MONOTONIC`), the same statement against `SELECT 1` (what a round trip through")
print("PostgreSQL's own protocol costs). pgbench -n -M prepared -c C -j C -T, run right after, gives the")
print("throughput of both as a cross-check; its per-transaction log is not used (PostgreSQL 15's")
print("pgbench logs 0 µs for a transaction whose result is already there when it looks).")
print()
print("| clients | pgrac_ic_bench(2, 64, 1) statements/s | p50 / p99 µs | SELECT 1 statements/s | p50 / p99 µs | rate ratio | p99 ratio | pgbench tps: pgrac_ic / SELECT 1 |")
print("|---:|---:|---:|---:|---:|---:|---:|---:|")
for c in cs:
    a, b = q.get((c, "libpq_ic")), q.get((c, "libpq_select1"))
    if not a or not b:
        continue
    pa, pb = q.get((c, "pgbench_ic")), q.get((c, "pgbench_select1"))
    pg = f"{pa[0]:,.0f} / {pb[0]:,.0f}" if pa and pb else "–"
    print(f"| {c} | {a[0]:,.0f} | {a[1]:.1f} / {a[2]:.1f} | {b[0]:,.0f} | {b[1]:.1f} / {b[2]:.1f} | "
          f"{a[0] / b[0]:.2f}x | {a[2] / b[2]:.2f}x | {pg} |")
print()
c0 = cs[0]
print(f"Throughput relative to {c0} requester(s), each series against itself:")
print()
print("| requesters | pgrac_ic RPC/s (in the backends) | raw TCP | pgrac_ic through libpq | SELECT 1 through libpq |")
print("|---:|---:|---:|---:|---:|")
for c in cs:
    cells = [f"{q[(c, w)][0] / q[(c0, w)][0]:.2f}x" if (c, w) in q and (c0, w) in q else "–"
             for w in ("ic", "tcp", "libpq_ic", "libpq_select1")]
    print(f"| {c} | " + " | ".join(cells) + " |")
print()
print(f"Waiting policies differ: pgrac_ic's backends, listener and LMS workers poll (yielding the")
print(f"CPU) for up to `cluster.busy_poll_us` = {busy_poll} µs before they sleep on their latch; the raw TCP")
print("requesters and echo processes block in `recv()`, and so do the libpq clients and pgbench, and")
print(f"the backends serving `SELECT 1` between statements. On a VM where a wakeup across CPUs is")
print("expensive this favours pgrac_ic at few requesters; with more requesters than CPUs")
print(f"({ncpu} here) a poller takes CPU time the others could use.")
# For the records (scripts/scoreboard): 16 requesters' rates, and the 64 B p50
# per round at 8 instances (each against raw TCP), when this run measured them.
with open(records_f, "w") as out:
    if (16, "ic") in q and (16, "tcp") in q:
        out.write(f"requesters-16\tpair\t{q[(16, 'ic')][0]}/{q[(16, 'tcp')][0]}\n")
    if 8 in ns:
        m = {(int(x[1]), x[2]): float(x[3]) for x in msg if int(x[0]) == 8}
        pairs = [f"{m[(k, 'ic')]}/{m[(k, 'tcp')]}" for k in sorted({k for k, _ in m})
                 if (k, "ic") in m and (k, "tcp") in m]
        out.write(f"instances-8\trounds\t{' '.join(pairs)}\n")
PY
)
{
    echo "Run: \`$COMMAND_LINE\` ($(date -u '+%Y-%m-%d %H:%M UTC'), $(($(date +%s) - RUN_START)) s," \
        "HEAD $(git -C "$SRC_DIR" rev-parse --short HEAD 2>/dev/null || echo unknown))"
    echo
    echo "Machine: $(nproc) CPUs ($machine_cpu), kernel $(uname -r), PostgreSQL" \
        "$("$PGBIN/postgres" --version | awk '{print $3}'); instances: shared_buffers 32MB," \
        "cluster.lms_workers = $LMS, cluster.tcp_paths = $TCP_PATHS, cluster.wire_protection = $WIRE," \
        "cluster.busy_poll_us = $BUSY_POLL${PGRAC_BENCH_CONF:+; PGRAC_BENCH_CONF: $PGRAC_BENCH_CONF}"
    echo
    echo "$REPORT"
} | tee "$WORK/report.md"
if [[ -n "$MARKDOWN" ]]; then cp "$WORK/report.md" "$MARKDOWN"; fi

# ---- records (scripts/scoreboard): tier3.scaling.requesters-16, .instances-8
echo
while IFS=$'\t' read -r kind how value; do
    if [[ $how == rounds ]]; then
        args=(--rounds "$value")
    else
        args=(--figure "${value%/*}" --baseline "${value#*/}")
    fi
    scoreboard_record "tier3.scaling.$kind" "${args[@]}" --setting "cluster.wire_protection=$WIRE" \
        --setting "cluster.busy_poll_us=$BUSY_POLL"
done <"$WORK/records.tsv"
