#!/usr/bin/env bash
# Tier 2 (soft-RoCE) in the project's VM, as a benchmark: one VM boot of
# tests/rxe/tap_in_vm.sh t/030_rdma.pl with PGRAC_RXE_PERF=1 (t/030 prints its
# pgrac_ic_bench(2, size) figures as "# bench tier2 ..." lines; then
# verbs_pingpong, the verbs transport alone, both ends polling, runs on the
# same rxe0), the p50s side by side, and the record of the 64 B ratio
# (scripts/scoreboard; targets tier2.rpc64.vs-verbs.*). Only ratios within one
# boot count: TCG boots differ by tens of per cent.
#
#   bench/run_tier2_vm.sh [--like-for-like] [--build-dir DIR] [--out DIR]
#
# --like-for-like: pgrac_ic as verbs_pingpong runs, no encryption and polling
# throughout (cluster.wire_protection = crc, cluster.busy_poll_us = 10000);
# without it, the defaults (secure, 200). As root, with the extension
# installed (make install) and verbs_pingpong built (DIR/bin, default build).
# --out keeps the VM's output (tap.log, verbs_pingpong.txt, the logs).
# RXE_TAP replaces tests/rxe/tap_in_vm.sh (scripts/scoreboard selftest runs
# this script with a stub that writes the two files).
set -euo pipefail

SRC_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD_DIR="$SRC_DIR/build"
OUT=""
LFL=0
while [[ $# -gt 0 ]]; do
    case "$1" in
        --like-for-like) LFL=1; shift ;;
        --build-dir) BUILD_DIR="$2"; shift 2 ;;
        --out) OUT="$2"; shift 2 ;;
        -h | --help) sed -n '2,18p' "$0" | sed 's/^# \{0,1\}//'; exit 2 ;;
        *) echo "unknown argument: $1" >&2; exit 2 ;;
    esac
done
# What the record names: the options that change what is measured.
COMMAND_LINE="bench/run_tier2_vm.sh"
if [[ $LFL -eq 1 ]]; then COMMAND_LINE+=" --like-for-like"; fi
BENCH_NAME=run_tier2_vm
# shellcheck source=bench/lib/cluster.sh
source "$SRC_DIR/bench/lib/cluster.sh"  # log, scoreboard_record (no cluster here)

if [[ -z "$OUT" ]]; then
    OUT=$(mktemp -d /tmp/pgrac-tier2-bench.XXXXXX)
    trap 'rm -rf "$OUT"' EXIT
fi
mkdir -p "$OUT"
if [[ $LFL -eq 1 ]]; then
    CONF=$'cluster.busy_poll_us = 10000\ncluster.wire_protection = crc'
    PROT=crc POLL=10000 TARGET=tier2.rpc64.vs-verbs.crc-polling
else
    CONF="" PROT=secure POLL=200 TARGET=tier2.rpc64.vs-verbs.defaults
fi

log "one VM boot: t/030_rdma.pl with PGRAC_RXE_PERF=1, then verbs_pingpong ($OUT)"
PGRAC_TAP_OUT="$OUT" PGRAC_RXE_PERF=1 PGRAC_TEST_CONF="$CONF" \
    PGRAC_VERBS_PINGPONG="${PGRAC_VERBS_PINGPONG:-$BUILD_DIR/bin/verbs_pingpong}" \
    "${RXE_TAP:-$SRC_DIR/tests/rxe/tap_in_vm.sh}" t/030_rdma.pl

# "# bench tier2 64 B x 500: p50 162.7 us, ..." (the default path: requester
# lanes; the lines with "requester lanes off" are the other paths).
ic_p50() { sed -n "s/^# bench tier2 $1 B x [0-9]*: p50 \([0-9.]*\) us.*/\1/p" "$OUT/tap.log" | head -1; }
# "size     64 B  iters   500  p50     80.6 us  ..."
verbs_p50() {
    sed -n "s/^size *$1 B .* p50 *\([0-9.]*\) us.*/\1/p" "$OUT/verbs_pingpong.txt" 2>/dev/null | head -1
}
echo "| p50 µs, one boot ($([[ $LFL -eq 1 ]] && echo "crc, both polling" || echo "the defaults")) | pgrac_ic_bench | verbs_pingpong |"
echo "|---|---:|---:|"
for size in 64 8192 65536; do
    echo "| $size B | $(ic_p50 $size) | $(verbs_p50 $size) |"
done
ic=$(ic_p50 64)
vp=$(verbs_p50 64)
[[ -n "$ic" && -n "$vp" ]] || { echo "no 64 B figure in $OUT/tap.log or $OUT/verbs_pingpong.txt" >&2; exit 1; }
scoreboard_record "$TARGET" --figure "$ic" --baseline "$vp" --host-kind "soft-RoCE VM (qemu TCG, 2 vCPUs)" \
    --setting "cluster.wire_protection=$PROT" --setting "cluster.busy_poll_us=$POLL"
