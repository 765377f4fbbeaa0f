#!/usr/bin/env bash
# Side-by-side variants in one run: one two-instance tier3 cluster per variant
# (a build, a setting, or both), all started together from one initdb'd base
# and measured in turns (A, B, C, A, B, C, ...) with the same functions, the
# same waiting policy (cluster.busy_poll_us, the default) and the same
# percentiles:
#   - 64 B RPC node 1 -> 2 (pgrac_ic_bench: backend -> listener -> TCP -> LMS
#     -> back, timed in the backend)
#   - 8 KiB block fetch node 1 -> 2 (pgrac_fetch_block_bench, 1 block)
# Each cell is the median over the rounds of the per-round p50 (and p99).
# A variant is NAME|PGBIN|CONF: PGBIN empty means the system PostgreSQL
# (/usr/lib/postgresql/15/bin with the installed pgrac_ic); a private tree made
# by tests/chaos/private_pg.sh DEST REV gives an older build
# (DEST/lib/postgresql/15/bin). CONF is appended to postgresql.conf.
# Runs as root (PostgreSQL parts as postgres); removes its clusters on exit.
#
#   bench/run_variants.sh --variant 'NAME|PGBIN|CONF' [--variant ...]
#                         [--iterations 5000] [--rounds 3] [--markdown FILE]
#                         [--max-seconds 900]
#   bench/run_protection.sh [...]: the three cluster.wire_protection modes
# With SCOREBOARD_PROTECTION=1 (run_protection.sh sets it) and variants named
# crc, mac and secure, it ends with the records protection.{rpc64,fetch8k}.
# {mac,secure}-vs-crc (scripts/scoreboard): each p50 against crc's, per round.
set -euo pipefail

SRC_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
ITER=5000
ROUNDS=3
MARKDOWN=""
MAX_SECONDS=900
VARIANTS=()
PGBIN="${PGBIN:-/usr/lib/postgresql/15/bin}"
PGUSER_OS=postgres
BUILD_DIR="$SRC_DIR/build-bench"

while [[ $# -gt 0 ]]; do
    case "$1" in
        --variant) VARIANTS+=("$2"); shift 2 ;;
        --iterations) ITER="$2"; shift 2 ;;
        --rounds) ROUNDS="$2"; shift 2 ;;
        --markdown) MARKDOWN="$2"; shift 2 ;;
        --max-seconds) MAX_SECONDS="$2"; shift 2 ;;
        -h | --help) sed -n '2,23p' "$0" | sed 's/^# \{0,1\}//'; exit 2 ;;
        *) echo "unknown argument: $1" >&2; exit 2 ;;
    esac
done
[[ $(id -u) -eq 0 ]] || { echo "run_variants.sh: run as root" >&2; exit 2; }
[[ ${#VARIANTS[@]} -ge 1 ]] || { echo "run_variants.sh: give at least one --variant" >&2; exit 2; }
COMMAND_LINE="${COMMAND_LINE:-bench/run_variants.sh $(printf "%q " "$@")}"
COMMAND_LINE="${COMMAND_LINE% }"
BENCH_NAME=run_variants
# shellcheck source=bench/lib/cluster.sh
source "$SRC_DIR/bench/lib/cluster.sh"
cluster_traps

MODES=()
declare -A VBIN VCONF
for v in "${VARIANTS[@]}"; do
    IFS='|' read -r name bin conf <<<"$v"
    MODES+=("$name")
    VBIN[$name]=${bin:-$PGBIN}
    VCONF[$name]=$conf
done
cluster_ports  # only to pick PG1 etc. for the base; each variant gets its own below
cluster_init pgrac-var
prepare_base --pgbench 1

declare -A VPGP  # VPGP[mode,n]: postgres port of node n of that mode's cluster
used=()
for m in "${MODES[@]}"; do
    ic1=$(pick_port 57000 57999 "${used[@]}")
    used+=("$ic1")
    ic2=$(pick_port 57000 57999 "${used[@]}")
    used+=("$ic2")
    for n in 1 2; do
        p=$(pick_port 56000 56999 "${used[@]}")
        used+=("$p")
        VPGP[$m,$n]=$p
        d="$WORK/$m$n"
        as_pg cp -a "$WORK/base" "$d"
        cat >>"$d/postgresql.conf" <<CONF
# ---- run_variants.sh: $m
port = $p
listen_addresses = '127.0.0.1'
unix_socket_directories = '$WORK'
shared_preload_libraries = 'pgrac_ic'
shared_buffers = 64MB
max_connections = 20
cluster.interconnect_tier = tier3
cluster.node_id = $n
cluster.nodes = '1@127.0.0.1:$ic1,2@127.0.0.1:$ic2'
cluster.auth_key_file = '$WORK/key'
cluster.lms_workers = 1
fsync = off
${VCONF[$m]}
CONF
        STARTED+=("$d")
        as_pg "${VBIN[$m]}/pg_ctl" -D "$d" -l "$WORK/$m$n.log" -w -t 60 start >/dev/null
        psql_n "$p" "CREATE EXTENSION pgrac_ic"
    done
done
for m in "${MODES[@]}"; do
    for i in $(seq 1 120); do
        s=$(psql_n "${VPGP[$m,1]}" "SELECT state FROM pg_cluster_ic_peers WHERE node_id = 2" || true)
        [[ "$s" == UP ]] && break
        [[ $i -eq 120 ]] && { echo "$m cluster not UP: $s" >&2; exit 1; }
        sleep 0.5
    done
    # What the session runs with (builds that show it).
    prot=$(psql_n "${VPGP[$m,1]}" "SELECT to_jsonb(p) ->> 'wire_protection' FROM pg_cluster_ic_peers p
                                  WHERE node_id = 2")
    log "$m: UP, wire protection ${prot:-(not shown by this build)}"
    psql_n "${VPGP[$m,2]}" "SELECT count(*) FROM pgbench_accounts" >/dev/null  # warm node 2
    psql_n "${VPGP[$m,1]}" "SELECT count(*) FROM pgrac_ic_bench(2, 64, 1000)" >/dev/null
    psql_n "${VPGP[$m,1]}" "SELECT count(*) FROM pgrac_fetch_block_bench(2, 'pgbench_accounts', 1000, 1)" >/dev/null
done
log "all ${#MODES[@]} clusters UP; $ROUNDS rounds of $ITER iterations per measurement"

declare -A R  # R[mode,what]: one "p50 p99" line per round
for r in $(seq 1 "$ROUNDS"); do
    for m in "${MODES[@]}"; do
        p=${VPGP[$m,1]}
        rpc=$(psql_n "$p" "SELECT round(p50_us::numeric, 1) || ' ' || round(p99_us::numeric, 1)
                           FROM pgrac_ic_bench(2, 64, $ITER)")
        blk=$(psql_n "$p" "SELECT round(p50_us::numeric, 1) || ' ' || round(p99_us::numeric, 1)
                           FROM pgrac_fetch_block_bench(2, 'pgbench_accounts', $ITER, 1)")
        R[$m,rpc]+="$rpc"$'\n'
        R[$m,blk]+="$blk"$'\n'
        log "round $r $m: rpc 64 B p50/p99 $rpc µs; fetch 8 KiB p50/p99 $blk µs"
    done
done

# Median of column $1 of the lines on stdin.
median() { awk -v c="$1" 'NF {print $c}' | sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
TABLE="| what"
sep="| ---"
for col in p50 p99; do
    for m in "${MODES[@]}"; do
        TABLE="$TABLE | $m $col"
        sep="$sep | ---:"
    done
done
TABLE="$TABLE |
$sep |"
for what in rpc blk; do
    label="64 B RPC node 1 → 2 (pgrac_ic_bench)"
    [[ $what == blk ]] && label="8 KiB block fetch node 1 → 2 (pgrac_fetch_block_bench, 1 block)"
    line="| $label"
    for col in 1 2; do
        for m in "${MODES[@]}"; do line="$line | $(printf '%s' "${R[$m,$what]}" | median "$col")"; done
    done
    TABLE="$TABLE
$line |"
done
echo "$TABLE"
if [[ -n "$MARKDOWN" ]]; then
    {
        echo "Command: \`$COMMAND_LINE\` ($(date -u +%Y-%m-%d), $(nproc) cores: $(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -1))"
        echo
        echo "$TABLE"
    } >"$MARKDOWN"
fi

# ---- records (scripts/scoreboard), for run_protection.sh
if [[ "${SCOREBOARD_PROTECTION:-}" == 1 && -n "${R[crc,rpc]:-}" ]]; then
    p50s() { printf '%s' "$1" | awk 'NF { print $1 }'; }
    for what in rpc blk; do
        id=rpc64
        if [[ $what == blk ]]; then id=fetch8k; fi
        for m in mac secure; do
            [[ -n "${R[$m,$what]:-}" ]] || continue
            rounds=$(paste -d/ <(p50s "${R[$m,$what]}") <(p50s "${R[crc,$what]}") | paste -sd' ')
            scoreboard_record "protection.$id.$m-vs-crc" --rounds "$rounds" \
                --setting "cluster.wire_protection=$m"
        done
    done
fi
