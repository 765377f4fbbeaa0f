#!/usr/bin/env bash
# The part of bench/run_tier2_fetch_vm.sh that runs inside the soft-RoCE VM
# (tests/vm/run-in-vm.sh), as root, in one boot:
#   1. initdb and a table (bench/lib/cluster.sh's base directory), then a
#      warm-up: one cluster and its bench, as in step 3, not reported (the
#      first cluster of a boot runs slow under TCG);
#   2. perftest's ib_write_lat on rxe0 at 64 B and 8192 B, server and client in
#      this VM over $RXEVM_IPADDR (both busy-poll); its t_typical is the median
#      one-way latency;
#   3. per cluster.wire_protection mode, a fresh two-instance tier2 cluster on
#      $RXEVM_IPADDR (cluster.sh's ports and waits; every other cluster.*
#      setting at its default), node 2's copy of the table prewarmed, and on
#      node 1 pgrac_fetch_block_bench(2, 'fetch_t', ITERATIONS, 1) after a
#      warm-up of 200;
#   4. ib_write_lat again, as in step 2.
#
#   bash bench/lib/tier2_fetch_in_vm.sh --out DIR [--modes "crc mac secure"]
#        [--iterations 1000] [--max-seconds 1400] [--verbs-pingpong PATH]
#
# Writes to DIR: ib_write_lat.tsv (before or after, size, t_typical µs, t_min
# µs), ib_write_lat_SIZE_PASS.txt (the client's output; _srv the server's),
# fetch.tsv (mode, p50 µs, p99 µs, blocks/s, iterations, wire_protection and
# busy_poll_us as node 1 reports them, tier, node 2's verbs receives during
# the bench; warmup.tsv the same of the warm-up), counters.txt (both nodes'
# pg_cluster_rdma_counters after each bench), guest.txt (vCPUs, CPU model), verbs_pingpong.txt (with
# --verbs-pingpong), logs/ (the instances' logs, nI-MODE.log). A mode that
# fails leaves no fetch.tsv line and the run goes on to the next; the exit
# status is 1 if any step failed.
set -euo pipefail

OUT="${RXEVM_OUT:-}"
MODES="crc mac secure"
ITERATIONS=1000
MAX_SECONDS=1400
VERBS_PINGPONG=""
while [[ $# -gt 0 ]]; do
    case "$1" in
        --out) OUT="$2"; shift 2 ;;
        --modes) MODES="$2"; shift 2 ;;
        --iterations) ITERATIONS="$2"; shift 2 ;;
        --max-seconds) MAX_SECONDS="$2"; shift 2 ;;
        --verbs-pingpong) VERBS_PINGPONG="$2"; shift 2 ;;
        -h | --help) sed -n '2,28p' "$0" | sed 's/^# \{0,1\}//'; exit 2 ;;
        *) echo "unknown argument: $1" >&2; exit 2 ;;
    esac
done
[[ -n "$OUT" ]] || { echo "tier2_fetch_in_vm: no --out (and no RXEVM_OUT)" >&2; exit 2; }
ADDR="${RXEVM_IPADDR:-}"
GID="${RXEVM_GID_INDEX:-}"
[[ -n "$ADDR" && -n "$GID" && -e /sys/class/infiniband/rxe0 ]] ||
    { echo "tier2_fetch_in_vm: no rxe0 with an IPv4 GID (run it through tests/vm/run-in-vm.sh)" >&2; exit 2; }

SRC_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
BUILD_DIR=""  # cluster.sh's; nothing is built here
PGBIN="${PGBIN:-/usr/lib/postgresql/15/bin}"
PGUSER_OS=postgres
BENCH_NAME=tier2_fetch_in_vm
# shellcheck source=bench/lib/cluster.sh
source "$SRC_DIR/bench/lib/cluster.sh"
# setpriv, not cluster.sh's runuser: runuser's PAM session (pam_limits) would
# reset the memlock limit the verbs buffer pool needs (tests/rxe/tap_in_vm.sh).
as_pg() { setpriv --reuid="$PGUSER_OS" --regid="$PGUSER_OS" --init-groups env HOME=/tmp "$@"; }
COPIER=""  # the log copier below
# cluster.sh's cleanup runs this before it removes $WORK: it stops the
# instances of a mode's subshell cut short by the watchdog, and keeps the logs.
# shellcheck disable=SC2317  # called indirectly, by cleanup
cluster_on_exit() {
    local d
    if [[ -n "$COPIER" ]]; then kill "$COPIER" 2>/dev/null || true; fi
    for d in "$WORK"/n[0-9]*/; do
        if [[ -d "$d" ]]; then
            as_pg "$PGBIN/pg_ctl" -D "$d" -m immediate -w -t 30 stop >/dev/null 2>&1 || true
        fi
    done
    mkdir -p "$OUT/logs"
    cp "$WORK"/*.log "$OUT/logs/" 2>/dev/null || true
}

mkdir -p "$OUT"
rm -f "$OUT/ib_write_lat.tsv" "$OUT/fetch.tsv" "$OUT/warmup.tsv" "$OUT/counters.txt"
: >"$OUT/fetch.tsv"
cd /tmp  # the postgres user may not be able to read the host's working directory
# The verbs buffer pool of each instance is ~51 MB: allow locking it, and give
# it 2 MB hugepages (the instances take ~26 each).
ulimit -l unlimited
echo 64 >/proc/sys/vm/nr_hugepages 2>/dev/null || true
{
    echo "vcpus $(nproc)"
    echo "cpu $(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -1)"
    echo "kernel $(uname -r)"
} >"$OUT/guest.txt"
cluster_traps  # the exit trap (stops the instances, keeps the logs) and the MAX_SECONDS watchdog
FAILED=0

# ---- ib_write_lat on rxe0, 64 B and 8192 B (each side bounded by timeout)
# column NAME SIZE FILE: the column NAME (t_typical, t_min) of SIZE's row.
column() {
    awk -v c="$1" -v s="$2" '
        /t_typical/ { for (i = 1; i <= NF; i++) if ($i ~ "^" c) col = i; next }
        col && $1 == s { print $col; exit }' "$3"
}
# write_lat PASS FIRST_PORT: both sizes, "PASS SIZE t_typical t_min" lines in
# ib_write_lat.tsv; ib_write_lat_SIZE_PASS.txt (_srv: the server's output).
write_lat() {
    local pass=$1 port=$2 size srv ok t m f
    for size in 64 8192; do
        f="$OUT/ib_write_lat_${size}_$pass"
        log "ib_write_lat -s $size -n 1000 on rxe0 ($ADDR, GID index $GID), $pass the modes"
        timeout 120 ib_write_lat -d rxe0 -x "$GID" -s "$size" -n 1000 -p "$port" -F \
            >"${f}_srv.txt" 2>&1 &
        srv=$!
        ok=0
        for _ in 1 2 3 4 5 6 7 8 9 10; do
            sleep 1
            if timeout 120 ib_write_lat -d rxe0 -x "$GID" -s "$size" -n 1000 -p "$port" -F \
                "$ADDR" >"$f.txt" 2>&1; then
                ok=1
                break
            fi
        done
        wait "$srv" || true
        t=$(column t_typical "$size" "$f.txt")
        m=$(column t_min "$size" "$f.txt")
        if [[ $ok -eq 1 && -n "$t" && -n "$m" ]]; then
            printf '%s\t%s\t%s\t%s\n' "$pass" "$size" "$t" "$m" >>"$OUT/ib_write_lat.tsv"
            log "ib_write_lat $size B: t_typical $t us (t_min $m us)"
        else
            log "ib_write_lat $size B failed:"
            tail -5 "$f.txt" >&2 || true
            FAILED=1
        fi
        port=$((port + 1))
    done
}

# ---- the fetch, one fresh cluster per mode: cluster.sh's start_node, at tier2
# on rxe0's address (no TCP listener for clients: the unix socket), with a
# start timeout for TCG; max_connections small, as for every bench cluster.
start_tier2_node() {
    CLUSTER_TIER=tier2 CLUSTER_LISTEN='' CLUSTER_START_TIMEOUT=300 \
        CLUSTER_NODES="1@$ADDR:$IC1,2@$ADDR:$IC2" start_node "$1" "$2" "max_connections = 20
$3"
}

# run_mode LABEL MODE TSV: one cluster under cluster.wire_protection MODE, its
# figures appended to TSV (LABEL names it in the log and counters.txt).
run_mode() {
    local label=$1 mode=$2 tsv=$3 st r p50 p99 bps done_ prot poll
    # MODE is a protection, or PROTECTION-send (every reply SENT, none written
    # into the lane's landing slot), or PROTECTION-poll (every process polls
    # for 10 ms before it sleeps, as both ends of ib_write_lat spin).
    local conf="cluster.wire_protection = ${mode%%-*}"
    case $mode in
        *-send) conf+=$'\ncluster.rdma_write_min = 0' ;;
        *-poll) conf+=$'\ncluster.busy_poll_us = 10000' ;;
    esac
    cluster_ports
    start_tier2_node 1 "$PG1" "$conf"
    start_tier2_node 2 "$PG2" "$conf"
    psql_n "$PG1" "CREATE EXTENSION pgrac_ic"
    psql_n "$PG2" "CREATE EXTENSION pgrac_ic"
    wait_peers_up
    for p in "$PG1" "$PG2"; do
        st=$(psql_n "$p" "SELECT tier || ' (' || coalesce(tier_reason, '') || '), ' || hca_name
                              || ', hugepages ' || coalesce(hugepage_size, '-')
                         FROM pg_cluster_rdma_status")
        log "$label: port $p runs $st"
        [[ $st == tier2* ]] || { log "$label: not tier2"; return 1; }
    done
    psql_n "$PG2" "SELECT pg_prewarm('fetch_t', 'buffer')" >/dev/null
    [[ $(psql_n "$PG1" "SELECT length(pgrac_fetch_block(2, 'fetch_t', 1))") == 8192 ]] ||
        { log "$label: pgrac_fetch_block does not return 8192 bytes"; return 1; }
    psql_n "$PG1" "SELECT iterations_done FROM pgrac_fetch_block_bench(2, 'fetch_t', 200, 1)" >/dev/null
    # Node 2's verbs receive completions: the requests came over rxe0.
    local recvs="SELECT verbs_recvs FROM pg_cluster_rdma_counters WHERE peer_node_id IS NULL"
    local before after
    before=$(psql_n "$PG2" "$recvs")
    # The host watches for this line and the result's: what else ran on the
    # host in between (bench/run_tier2_fetch_vm.sh).
    log "$label: measuring"
    # PGRAC_FETCH_PERF=1: a profile of the whole VM while it runs (cpu-clock:
    # TCG has no PMU), for bench/run_tier2_fetch_vm.sh --profile.
    local perf_pid=""
    if [[ -n ${PGRAC_FETCH_PERF:-} ]] && command -v perf >/dev/null; then
        perf record -q -a -g -e cpu-clock -F 2000 -o "$OUT/perf-$label.data" >/dev/null 2>&1 &
        perf_pid=$!
    fi
    r=$(psql_n "$PG1" "SELECT round(p50_us::numeric, 1) || '|' || round(p99_us::numeric, 1) || '|'
                              || round(blocks_per_sec::numeric) || '|' || iterations_done
                         FROM pgrac_fetch_block_bench(2, 'fetch_t', $ITERATIONS, 1)")
    if [[ -n $perf_pid ]]; then
        kill -INT "$perf_pid" 2>/dev/null || true
        wait "$perf_pid" 2>/dev/null || true
    fi
    after=$(psql_n "$PG2" "$recvs")
    IFS='|' read -r p50 p99 bps done_ <<<"$r"
    prot=$(psql_n "$PG1" "SHOW cluster.wire_protection")
    poll=$(psql_n "$PG1" "SHOW cluster.busy_poll_us")
    log "$label: fetch 8 KiB x $done_: p50 $p50 us, p99 $p99 us, $bps blocks/s" \
        "(node 2 verbs recvs +$((after - before)); wire_protection $prot, busy_poll_us $poll)"
    # For the reader: both nodes' transport counters after the bench (the MR
    # cache, RDMA writes, zero-copy sends), one JSON row each.
    for p in "$PG1" "$PG2"; do
        printf '%s port %s: %s\n' "$label" "$p" "$(psql_n "$p" "SELECT row_to_json(c)
            FROM pg_cluster_rdma_counters c WHERE peer_node_id IS NULL")" >>"$OUT/counters.txt"
    done
    [[ $done_ == "$ITERATIONS" ]] || { log "$label: $done_ of $ITERATIONS fetches"; return 1; }
    if [[ $((after - before)) -lt $ITERATIONS ]]; then
        log "$label: warning: node 2 counted fewer verbs receives than fetches"
    fi
    printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$mode" "$p50" "$p99" "$bps" "$done_" "$prot" \
        "$poll" tier2 "$((after - before))" >>"$tsv"
}

# run_isolated LABEL MODE TSV: run_mode in a subshell, so that a failure
# (cluster.sh's waits exit) ends only that cluster; errexit holds in it
# because it is no condition, and its exit trap stops its instances. Sets
# ISO_RC.
run_isolated() {
    local label=$1
    set +e
    (
        set -e
        trap 'stop_nodes "$label"' EXIT
        run_mode "$@"
    )
    ISO_RC=$?
    set -e
}

# ---- the run
log "initdb and the table (node 2's blocks, the same relfilenode on both copies)"
cluster_ports  # prepare_base picks a port other than these
cluster_init pgrac-t2fetch
# The logs go out every 30 s too: a VM cut by its own time limit keeps them.
mkdir -p "$OUT/logs"
(
    trap 'kill "$nap" 2>/dev/null; exit 0' TERM
    while :; do
        sleep 30 &
        nap=$!
        wait "$nap"
        cp "$WORK"/*.log "$OUT/logs/" 2>/dev/null || true
    done
) &
COPIER=$!
# ~9 rows of 800 B per block: about 220 blocks, all in shared_buffers.
prepare_base "CREATE EXTENSION pg_prewarm" \
    "CREATE TABLE fetch_t AS SELECT g AS id, repeat(md5(g::text), 25) AS pad
       FROM generate_series(1, 2000) g"

# The first cluster of a boot runs slow for a minute or so under TCG (a trial:
# secure measured first 4.0 ms p50 and 208 blocks/s, crc after it 0.94 ms and
# 998; in other boots crc, measured first, was the slow one): a whole cluster
# and its bench first, not reported (warmup.tsv).
log "---- warm-up cluster (cluster.wire_protection = secure), not measured"
run_isolated warmup secure "$OUT/warmup.tsv"
[[ $ISO_RC -eq 0 ]] || log "warm-up: FAILED (exit $ISO_RC); measuring anyway"
# Both ends of ib_write_lat spin: with the VM's vCPUs short of host CPUs
# (another VM, a build, the boot's first minute) the median lands on
# preemptions. Before and after the modes; the report takes the lower of the
# two and checks it against t_min.
write_lat before 18515
if [[ -n "$VERBS_PINGPONG" ]]; then
    if [[ -x "$VERBS_PINGPONG" ]]; then
        log "verbs_pingpong (reference, not recorded)"
        timeout 300 "$VERBS_PINGPONG" --addr "$ADDR" --sizes 64,8192 --iters 1000 \
            >"$OUT/verbs_pingpong.txt" 2>&1 || log "verbs_pingpong failed (see verbs_pingpong.txt)"
    else
        log "no $VERBS_PINGPONG: no verbs_pingpong reference"
    fi
fi
for mode in $MODES; do
    log "---- cluster.wire_protection = $mode"
    run_isolated "$mode" "$mode" "$OUT/fetch.tsv"
    if [[ $ISO_RC -ne 0 ]]; then
        log "$mode: FAILED (exit $ISO_RC)"
        FAILED=1
    fi
done
kill "$COPIER" 2>/dev/null || true
write_lat after 18525
log "done: $(wc -l <"$OUT/fetch.tsv") of $(wc -w <<<"$MODES") modes measured"
exit "$FAILED"
