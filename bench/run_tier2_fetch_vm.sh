#!/usr/bin/env bash
# Tier 2 (soft-RoCE) 8 KiB block fetch against perftest, in one boot of the
# project's VM (tests/vm/run-in-vm.sh); bench/lib/tier2_fetch_in_vm.sh runs
# there as root. After a warm-up cluster whose figures are dropped (the first
# cluster of a boot runs slow under TCG), before and after the modes,
# ib_write_lat on rxe0 at 64 B and 8192 B (server and client in the VM over
# RXEVM_IPADDR; its t_typical is the median one-way latency). In between, for
# each cluster.wire_protection of crc, mac and secure, a fresh two-instance
# tier2 cluster on rxe0's address, every other cluster.* setting at its
# default: a table lives on both copies of one base directory, node 2's blocks
# are prewarmed in its buffer pool, and node 1 runs
# pgrac_fetch_block_bench(2, 'fetch_t', ITERATIONS). The report gives per mode
# the fetch p50 against the sum of the two ib_write_lat medians (one request
# and one block, one-way each; per size the lower of its two runs) and their
# ratio, and records each (scripts/scoreboard; targets
# tier2.fetch8k.vs-ib-write-lat.*). Two last clusters, printed beside the
# others and not recorded: secure with cluster.rdma_write_min = 0 (every reply
# SENT, not written into the lane's landing slot), and crc with
# cluster.busy_poll_us = 10000 (every process polls, as ib_write_lat does). Only ratios within one boot count: TCG
# boots differ by tens of per cent. ib_write_lat spins on both ends: when the
# VM's vCPUs are short of host CPUs its median lands on preemptions, so a
# t_typical over 3x its t_min records nothing (exit 1); and a mode during whose
# bench other processes took over 25 % of the host's CPU time (another VM, a
# build: they slow the fetch too) is not recorded (exit 1).
#
#   bench/run_tier2_fetch_vm.sh [--out DIR] [--build-dir DIR] [--iterations 1000]
#                               [--timeout 1500] [--modes "crc mac secure ..."] [--profile]
#
# Run as root, with the extension installed (make install; the VM sees the
# host's /usr) and perftest installed. --out keeps the VM's output: vm.log,
# vm-console.log, fetch.tsv, ib_write_lat*.txt, counters.txt, host_load.tsv
# and the instances' logs.
# --build-dir: if DIR/bin/verbs_pingpong is built, it also runs at 64 B and
# 8192 B in the same boot, printed for reference and not recorded.
# --timeout bounds the VM's wall time (the boot took 95 to 150 s on an idle
# 2-CPU machine under TCG, 245 s beside another VM). RXE_VM replaces
# tests/vm/run-in-vm.sh (a stub that writes the files); RXE_VM_TIMEOUT is
# --timeout's default.
# --modes: the clusters to run (protections, and the variants PROT-send and
# PROT-poll). --profile: perf record -a -g -e cpu-clock in the VM while each
# mode's fetch is timed (perf-MODE.data in --out; read it with perf report on
# the host, whose binaries the guest ran). A profiled run is not recorded.
# SCOREBOARD_RESULTS sends the records elsewhere (a trial run).
set -euo pipefail

SRC_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD_DIR="$SRC_DIR/build"
OUT=""
ITERATIONS=1000
TIMEOUT="${RXE_VM_TIMEOUT:-1500}"
# Variants, printed and not recorded: secure-send (cluster.rdma_write_min = 0,
# every reply SENT: the RDMA WRITE path against the SEND path in the same
# boot) and crc-poll (cluster.busy_poll_us = 10000: polling like ib_write_lat).
MODES="crc mac secure secure-send crc-poll"
PROFILE=""
MAX_SPREAD=3  # ib_write_lat's t_typical over t_min beyond which it is contended
MAX_OTHER=25  # per cent of the host's CPU time others may take while a mode is measured
while [[ $# -gt 0 ]]; do
    case "$1" in
        --out) OUT="$2"; shift 2 ;;
        --build-dir) BUILD_DIR="$2"; shift 2 ;;
        --iterations) ITERATIONS="$2"; shift 2 ;;
        --timeout) TIMEOUT="$2"; shift 2 ;;
        --modes) MODES="$2"; shift 2 ;;
        --profile) PROFILE=1; shift ;;
        -h | --help) sed -n '2,42p' "$0" | sed 's/^# \{0,1\}//'; exit 2 ;;
        *) echo "unknown argument: $1" >&2; exit 2 ;;
    esac
done
[[ $ITERATIONS =~ ^[0-9]+$ && $ITERATIONS -ge 10 && $ITERATIONS -le 1000000 ]] ||
    { echo "--iterations: 10..1000000" >&2; exit 2; }
[[ $TIMEOUT =~ ^[0-9]+$ && $TIMEOUT -ge 300 ]] || { echo "--timeout: at least 300 s" >&2; exit 2; }
VM="${RXE_VM:-$SRC_DIR/tests/vm/run-in-vm.sh}"
if [[ -z "${RXE_VM:-}" ]]; then
    [[ $(id -u) -eq 0 ]] || { echo "run_tier2_fetch_vm.sh: run as root (the VM tool needs it)" >&2; exit 2; }
    command -v pg_config >/dev/null || { echo "no pg_config" >&2; exit 2; }
    [[ -f "$(pg_config --pkglibdir)/pgrac_ic.so" ]] ||
        { echo "pgrac_ic is not installed (make install)" >&2; exit 2; }
    command -v ib_write_lat >/dev/null || { echo "no ib_write_lat (apt-get install perftest)" >&2; exit 2; }
    id postgres >/dev/null 2>&1 || { echo "no postgres user (scripts/setup)" >&2; exit 2; }
fi
# What the record names: the options that change what is measured.
COMMAND_LINE="bench/run_tier2_fetch_vm.sh"
if [[ $ITERATIONS -ne 1000 ]]; then COMMAND_LINE+=" --iterations $ITERATIONS"; fi
if [[ -n "$PROFILE" ]]; then COMMAND_LINE+=" --profile"; fi
BENCH_NAME=run_tier2_fetch_vm
# shellcheck source=bench/lib/cluster.sh
source "$SRC_DIR/bench/lib/cluster.sh"  # log, scoreboard_record (no cluster on the host)

if [[ -z "$OUT" ]]; then
    OUT=$(mktemp -d /tmp/pgrac-tier2-fetch.XXXXXX)
    trap 'rm -rf "$OUT"' EXIT
fi
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)  # the guest sees it at the same absolute path
rm -f "$OUT/fetch.tsv" "$OUT/ib_write_lat.tsv" "$OUT/guest.txt" "$OUT/verbs_pingpong.txt" \
    "$OUT/host_load.tsv"
VP="$BUILD_DIR/bin/verbs_pingpong"
[[ -x "$VP" ]] || VP=""

# The guest's command; the helper stops itself 2 minutes before the VM's limit
# so that the instances' logs get out.
cmd=$(printf 'bash %q --out %q --iterations %q --max-seconds %q --modes %q' \
    "$SRC_DIR/bench/lib/tier2_fetch_in_vm.sh" "$OUT" "$ITERATIONS" "$((TIMEOUT - 120))" "$MODES")
if [[ -n "$VP" ]]; then cmd+=$(printf ' --verbs-pingpong %q' "$VP"); fi
if [[ -n "$PROFILE" ]]; then cmd="PGRAC_FETCH_PERF=1 $cmd"; fi
# CPU time in clock ticks: the host's busy and total (/proc/stat), and the
# VM's qemu (found by its 9p share of $OUT), all threads.
host_ticks() {
    awk '/^cpu / { print $2 + $3 + $4 + $7 + $8 + $9, $2 + $3 + $4 + $5 + $6 + $7 + $8 + $9 }' /proc/stat
}
qemu_ticks() {
    local p cmd st
    for p in $(pgrep qemu-system || true); do
        cmd=$(tr '\0' ' ' <"/proc/$p/cmdline" 2>/dev/null) || continue
        if [[ "$cmd" == *"path=$OUT,"* ]]; then
            st=$(<"/proc/$p/stat")
            read -r -a f <<<"${st##*) }"
            echo $((f[11] + f[12]))
            return
        fi
    done
    echo 0
}
# watch_windows: passes the guest's output on, and for each "LABEL: measuring"
# ... "LABEL: fetch 8 KiB x" window writes "LABEL<TAB>per cent of the host's
# CPU time that was neither idle nor the VM" to host_load.tsv (another VM or a
# build there slows the fetch; only ib_write_lat's own spread shows it).
watch_windows() {
    local line label="" b0 t0 q0 b1 t1 q1
    while IFS= read -r line; do
        line=${line%$'\r'}
        printf '%s\n' "$line"
        if [[ "$line" =~ \]\ ([a-z-]+):\ measuring$ ]]; then
            label=${BASH_REMATCH[1]}
            read -r b0 t0 < <(host_ticks)
            q0=$(qemu_ticks)
        elif [[ -n "$label" && "$line" == *"] $label: fetch 8 KiB x "* ]]; then
            read -r b1 t1 < <(host_ticks)
            q1=$(qemu_ticks)
            awk -v l="$label" -v b=$((b1 - b0)) -v t=$((t1 - t0)) -v q=$((q1 - q0)) \
                'BEGIN { x = (t > 0 ? 100 * (b - q) / t : 0); printf "%s\t%.0f\n", l, (x < 0 ? 0 : x) }' \
                >>"$OUT/host_load.tsv"
            label=""
        fi
    done
}
other_of() { awk -F'\t' -v m="$1" '$1 == m { x = $2 } END { print x }' "$OUT/host_load.tsv" 2>/dev/null; }
log "one VM boot (limit ${TIMEOUT}s): ib_write_lat, then the fetch under $MODES ($OUT)"
start=$(date +%s)
set +e
# -v: the guest's console on stderr (kept in vm-console.log), then the
# harness's timing line (the accelerator); the guest's output is on stdout.
"$VM" -v --timeout "$TIMEOUT" --out "$OUT" -c "$cmd" 2>"$OUT/vm-console.log" | watch_windows |
    tee "$OUT/vm.log"
vm_rc=${PIPESTATUS[0]}
set -e
took=$(($(date +%s) - start))
timing=$(grep -E '^run-in-vm\.sh: (exit|error)' "$OUT/vm-console.log" || true)
log "VM: exit $vm_rc after ${took}s${timing:+; $timing}"
if [[ $vm_rc -ne 0 ]]; then tail -20 "$OUT/vm-console.log" >&2 || true; fi

# ---- report
ACCEL=$(sed -n 's/^run-in-vm\.sh: exit .*, accel \([a-z]*\),.*/\1/p' "$OUT/vm-console.log" | head -1)
VCPUS=$(sed -n 's/^vcpus //p' "$OUT/guest.txt" 2>/dev/null || true)
HOST_KIND="soft-RoCE VM (qemu ${ACCEL:-tcg}, ${VCPUS:-?} vCPUs)"
HOST_KIND=${HOST_KIND/qemu tcg/qemu TCG}
HOST_KIND=${HOST_KIND/qemu kvm/qemu KVM}
# best SIZE: "t_typical t_min pass" of the pass with the lower t_typical.
best() {
    awk -v s="$1" '$2 == s && (t == "" || $3 + 0 < t + 0) { t = $3; m = $4; p = $1 }
                   END { if (t != "") print t, m, p }' "$OUT/ib_write_lat.tsv" 2>/dev/null
}
read -r L64 M64 P64 < <(best 64) || true
read -r L8K M8K P8K < <(best 8192) || true
BASE="" CONTENDED=""
if [[ -n "${L64:-}" && -n "${L8K:-}" ]]; then
    BASE=$(awk -v a="$L64" -v b="$L8K" 'BEGIN { printf "%.2f", a + b }')
    # Uncontended, t_typical is within a few per cent of t_min; a median on
    # the preemptions of two spinning ends is no baseline.
    CONTENDED=$(awk -v a="$L64" -v am="$M64" -v b="$L8K" -v bm="$M8K" -v k="$MAX_SPREAD" \
        'BEGIN { if (a > k * am) printf "64 B: t_typical %s > %sx t_min %s. ", a, k, am
                 if (b > k * bm) printf "8192 B: t_typical %s > %sx t_min %s.", b, k, bm }')
fi
echo
if [[ -s "$OUT/ib_write_lat.tsv" ]]; then
    echo "ib_write_lat on rxe0, t_typical (one-way median) / t_min, µs:" \
        "$(awk '{ printf "%s%s the modes %s B %s / %s", sep, $1, $2, $3, $4; sep = "; " }' \
            "$OUT/ib_write_lat.tsv")"
fi
echo "baseline: 64 B ${L64:-?} µs (${P64:-?}) + 8192 B ${L8K:-?} µs (${P8K:-?}) = ${BASE:-?} µs;" \
    "$HOST_KIND, one boot of ${took}s."
if [[ -s "$OUT/verbs_pingpong.txt" ]]; then
    echo "verbs_pingpong (reference, round trip): $(grep '^size' "$OUT/verbs_pingpong.txt" |
        awk '{ printf "%s%s B p50 %s us", sep, $2, $7; sep = ", " }')"
fi
echo
echo "| cluster.wire_protection | fetch 8 KiB p50 µs | ib_write_lat 64 B + 8192 B µs | ratio |"
echo "|---|---:|---:|---:|"
missing=0
for mode in $MODES; do
    row=$(awk -F'\t' -v m="$mode" '$1 == m' "$OUT/fetch.tsv" 2>/dev/null | head -1)
    if [[ -z "$row" ]]; then
        echo "| $mode | failed | ${BASE:-?} | – |"
        missing=1
        continue
    fi
    IFS=$'\t' read -r _ p50 _ <<<"$row"
    ratio="–"
    if [[ -n "$BASE" ]]; then ratio=$(awk -v f="$p50" -v b="$BASE" 'BEGIN { printf "%.2fx", f / b }'); fi
    echo "| $mode | $p50 | ${L64:-?} + ${L8K:-?} = ${BASE:-?} | $ratio |"
done
if [[ -s "$OUT/fetch.tsv" ]]; then
    echo
    echo "per mode: fetch p99 µs, blocks/s, and the share of the host's CPU time that others" \
        "(not the VM) took while it was measured:"
    while IFS=$'\t' read -r mode _ p99 bps _; do
        echo "  $mode: p99 $p99, $bps blocks/s, others $(other_of "$mode")%"
    done <"$OUT/fetch.tsv"
fi
echo

# ---- records: one per measured mode, against this boot's baseline
if [[ -z "$BASE" ]]; then
    echo "no ib_write_lat baseline (see $OUT/ib_write_lat_*.txt): nothing recorded" >&2
    exit 1
fi
if [[ -n "$CONTENDED" ]]; then
    echo "the baseline is contended (the VM's vCPUs were short of host CPUs): ${CONTENDED}" \
        "Nothing recorded; run again on a quieter machine." >&2
    exit 1
fi
[[ -f "$OUT/fetch.tsv" ]] || : >"$OUT/fetch.tsv"
while IFS=$'\t' read -r mode p50 p99 bps iters prot poll tier recvs; do
    [[ -n "$mode" ]] || continue
    [[ $mode == *-* ]] && continue  # a variant (secure-send, crc-poll): printed above only
    [[ -z "$PROFILE" ]] || continue  # perf took CPU from what was timed
    other=$(other_of "$mode")
    if [[ -z "$other" || $other -gt $MAX_OTHER ]]; then
        echo "[$BENCH_NAME] $mode: other processes took ${other:-an unknown share}% of the host's" \
            "CPU time while it was measured (over ${MAX_OTHER}%; another VM, a build): not" \
            "recorded; run again on a quieter machine" >&2
        missing=1
        continue
    fi
    if [[ "$prot" != "$mode" ]]; then
        echo "[$BENCH_NAME] $mode: the instance reports wire_protection $prot: not recorded" >&2
        missing=1
        continue
    fi
    scoreboard_record "tier2.fetch8k.vs-ib-write-lat.$mode" --figure "$p50" --baseline "$BASE" \
        --host-kind "$HOST_KIND" \
        --setting "cluster.wire_protection=$prot" --setting "cluster.busy_poll_us=$poll" \
        --note "pgrac_fetch_block_bench(2, rel, $iters) on node 1 at $tier: p50 $p50 µs, p99 $p99 µs, $bps blocks/s (node 2: $recvs verbs receives); baseline: ib_write_lat t_typical 64 B $L64 µs + 8192 B $L8K µs on rxe0 in the same boot (the lower of its runs before and after the modes); others took ${other}% of the host's CPU time while it was measured."
done <"$OUT/fetch.tsv"
if [[ $missing -ne 0 ]]; then exit 1; fi
exit "$vm_rc"
