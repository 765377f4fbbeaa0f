# shellcheck shell=bash
# Shared by the benchmark scripts (run_tier3.sh, run_lms.sh, run_scaling.sh): a
# temporary tier3 cluster on 127.0.0.1, made from one initdb'd base directory
# (copies share the system identifier), and its cleanup.
#
# Source it after option parsing. The script sets before sourcing:
#   BENCH_NAME   prefix of log lines, e.g. run_tier3
#   PGBIN, PGUSER_OS, MAX_SECONDS, SRC_DIR, BUILD_DIR
# and may define cluster_on_exit (run by the exit trap before the temporary
# directory is removed, e.g. to keep logs).
# Then, two instances: cluster_traps; cluster_ports; cluster_init PREFIX;
# start_node N PORT [CONF]; wait_peers_up.
# N instances: cluster_ports_n N (arrays PGP and ICP, 1..N) before
# cluster_init; start_node I "${PGP[I]}" for each; wait_all_up "${PGP[@]:1}";
# stop_nodes TAG ends them, and cluster_ports_n M then starts another cluster
# from the same base.
# Result records (bench/README.md, "Records and the scoreboard"): at its end a
# script calls scoreboard_record once per target it measured, with the
# settings scoreboard_settings reads from an instance.

log() { echo "[$BENCH_NAME $(date +%H:%M:%S)] $*" >&2; }
as_pg() { runuser -u "$PGUSER_OS" -- "$@"; }
kv() { sed -n "s/.*[[:space:]]$1=\([^[:space:]]*\).*/\1/p"; }

# ---- cleanup: every instance started here is stopped, the temp dir removed
WORK=""
STARTED=()
WATCHDOG=""
cleanup() {
    local rc=$?
    trap - EXIT INT TERM
    for d in "${STARTED[@]}"; do
        as_pg "$PGBIN/pg_ctl" -D "$d" -m immediate -w -t 30 stop >/dev/null 2>&1 || true
    done
    if [[ -n "$WORK" && -d "$WORK" ]]; then
        if declare -F cluster_on_exit >/dev/null; then cluster_on_exit; fi
        rm -rf "$WORK"
    fi
    if [[ -n "$WATCHDOG" ]]; then kill "$WATCHDOG" 2>/dev/null || true; fi
    exit "$rc"
}

# The exit trap, and a watchdog that bounds the whole run to MAX_SECONDS (it
# ends the script, and so the trap cleans up).
cluster_traps() {
    trap cleanup EXIT
    trap 'log "interrupted"; exit 130' INT TERM
    (
        trap 'kill "$sleeper" 2>/dev/null; exit 0' TERM
        sleep "$MAX_SECONDS" &
        sleeper=$!
        wait "$sleeper"
        echo "[$BENCH_NAME] over --max-seconds $MAX_SECONDS: stopping" >&2
        kill -TERM $$
    ) &
    WATCHDOG=$!
}

# Builds the client tools (tcp_pingpong, libpq_latency) in BUILD_DIR.
build_bench_tools() {
    log "building tcp_pingpong and libpq_latency in $BUILD_DIR"
    timeout 900 cmake -S "$SRC_DIR" -B "$BUILD_DIR" -DCMAKE_BUILD_TYPE=RelWithDebInfo \
        -DPGRAC_BUILD_TESTS=OFF >/dev/null
    timeout 900 cmake --build "$BUILD_DIR" -j2 --target tcp_pingpong libpq_latency >/dev/null
}

# ---- ports: free ones from the ranges reserved for benchmarks
port_free() { ! ss -Htan "( sport = :$1 )" 2>/dev/null | grep -q .; }
pick_port() {  # pick_port LOW HIGH [EXCLUDE...]
    local low=$1 high=$2 p
    shift 2
    for _ in $(seq 1 200); do
        p=$((low + RANDOM % (high - low + 1)))
        if port_free "$p" && [[ " $* " != *" $p "* ]]; then
            echo "$p"
            return 0
        fi
    done
    echo "no free port in $low-$high" >&2
    return 1
}
# PG1/PG2: the instances' postgres ports; IC1/IC2: their interconnect ports.
cluster_ports() {
    PG1=$(pick_port 56000 56999)
    PG2=$(pick_port 56000 56999 "$PG1")
    IC1=$(pick_port 57000 57999)
    IC2=$(pick_port 57000 57999 "$IC1")
    log "postgres ports $PG1/$PG2, interconnect ports $IC1/$IC2"
}
# cluster_ports_n N: PGP[1..N] and ICP[1..N], the postgres and interconnect
# ports of N instances (PG1/PG2/IC1/IC2 the first two), and CLUSTER_NODES, the
# cluster.nodes setting that start_node gives them.
PGP=()
ICP=()
CLUSTER_NODES=""
cluster_ports_n() {
    local n=$1 i
    PGP=("")
    ICP=("")
    CLUSTER_NODES=""
    for i in $(seq 1 "$n"); do
        PGP[i]=$(pick_port 56000 56999 "${PGP[@]}")
        ICP[i]=$(pick_port 57000 57999 "${ICP[@]}")
        CLUSTER_NODES+="${CLUSTER_NODES:+,}$i@127.0.0.1:${ICP[i]}"
    done
    PG1=${PGP[1]} PG2=${PGP[2]:-} IC1=${ICP[1]} IC2=${ICP[2]:-}
    log "$n instances: postgres ports ${PGP[*]:1}, interconnect ports ${ICP[*]:1}"
}

# cluster_init PREFIX: WORK=/tmp/PREFIX-XXXX (postgres-owned, 0700) with the
# interconnect key and an initdb'd base directory.
cluster_init() {
    WORK=$(mktemp -d "/tmp/$1-XXXX")
    chown "$PGUSER_OS": "$WORK"
    chmod 700 "$WORK"
    log "cluster in $WORK"
    as_pg bash -c "umask 077; openssl rand -hex 32 > '$WORK/key'"
    chmod 600 "$WORK/key"
    as_pg "$PGBIN/initdb" -D "$WORK/base" -A trust -U postgres --no-sync >"$WORK/initdb.log" 2>&1
}

# prepare_base [--pgbench SCALE] [SQL...]: runs the base directory once
# before it is copied (so every instance has what it makes): pgbench -i at
# SCALE, then each SQL statement, then stops it.
prepare_base() {
    local scale="" port sql
    if [[ "${1:-}" == --pgbench ]]; then
        scale=$2
        shift 2
    fi
    port=$(pick_port 56000 56999 "${PG1:-}" "${PG2:-}")
    as_pg "$PGBIN/pg_ctl" -D "$WORK/base" -l "$WORK/base.log" -w -t 60 \
        -o "-p $port -k $WORK -c listen_addresses=''" start >/dev/null
    if [[ -n "$scale" ]]; then
        as_pg "$PGBIN/pgbench" -i -s "$scale" -q -h "$WORK" -p "$port" postgres \
            >"$WORK/pgbench_i.log" 2>&1
    fi
    for sql in "$@"; do
        as_pg "$PGBIN/psql" -X -q -v ON_ERROR_STOP=1 -h "$WORK" -p "$port" -d postgres -c "$sql"
    done
    as_pg "$PGBIN/pg_ctl" -D "$WORK/base" -w -t 60 stop >/dev/null
}

# start_node N PGPORT [EXTRA_CONF]: copies the base to $WORK/nN and starts it
# as node N of the cluster, with EXTRA_CONF appended to its config. The
# cluster is tier3 on 127.0.0.1 unless CLUSTER_TIER, CLUSTER_LISTEN (the
# instance's listen_addresses) and CLUSTER_NODES say otherwise;
# CLUSTER_START_TIMEOUT bounds the start (s, default 60).
start_node() {
    local n=$1 port=$2 d="$WORK/n$1"
    as_pg cp -a "$WORK/base" "$d"
    cat >>"$d/postgresql.conf" <<CONF
# ---- $BENCH_NAME.sh
port = $port
listen_addresses = '${CLUSTER_LISTEN-127.0.0.1}'
unix_socket_directories = '$WORK'
shared_preload_libraries = 'pgrac_ic'
cluster.interconnect_tier = ${CLUSTER_TIER:-tier3}
cluster.node_id = $n
cluster.nodes = '${CLUSTER_NODES:-1@127.0.0.1:$IC1,2@127.0.0.1:$IC2}'
cluster.auth_key_file = '$WORK/key'
fsync = off
${3:-}
CONF
    STARTED+=("$d")
    as_pg "$PGBIN/pg_ctl" -D "$d" -l "$WORK/n$n.log" -w -t "${CLUSTER_START_TIMEOUT:-60}" start \
        >/dev/null
}

psql_n() {  # psql_n PGPORT SQL
    as_pg timeout 300 "$PGBIN/psql" -X -A -t -q -v ON_ERROR_STOP=1 -h "$WORK" -p "$1" \
        -d postgres -c "$2"
}

# stop_nodes TAG: stops every instance started so far (fast shutdown), keeps
# their logs as nI-TAG.log and removes their data directories.
stop_nodes() {
    local d n
    for d in "${STARTED[@]}"; do
        as_pg "$PGBIN/pg_ctl" -D "$d" -m fast -w -t 60 stop >/dev/null 2>&1 ||
            as_pg "$PGBIN/pg_ctl" -D "$d" -m immediate -w -t 30 stop >/dev/null 2>&1 || true
        n=${d##*/n}
        if [[ -f "$WORK/n$n.log" ]]; then mv "$WORK/n$n.log" "$WORK/n$n-$1.log"; fi
        rm -rf "$d"
    done
    STARTED=()
}

# Waits up to 60 s for both instances to see each other UP.
wait_peers_up() { wait_all_up "$PG1" "$PG2"; }

# wait_all_up PGPORT...: waits up to 60 s until every instance sees every
# other one UP, then (builds with the membership view) up to 60 s until each
# is a member of one view of them all.
wait_all_up() {
    local n=$# i p s ok
    for i in $(seq 1 120); do
        ok=1 s=""
        for p in "$@"; do
            s=$(psql_n "$p" "SELECT count(*) FROM pg_cluster_ic_peers
                             WHERE NOT is_self AND state = 'UP'" || true)
            [[ "$s" == "$((n - 1))" ]] || { ok=0; break; }
        done
        [[ $ok -eq 1 ]] && break
        [[ $i -eq 120 ]] && { echo "peers not UP after 60 s (port $p sees $s of $((n - 1)) UP)" >&2; exit 1; }
        sleep 0.5
    done
    # Global locks are served once all are members of one view (builds that
    # have the membership view; older ones serve at once).
    local q="SELECT coalesce((SELECT state = 'member' AND lease_valid AND cardinality(members) = $n
                              FROM pg_cluster_membership), true)"
    [[ $(psql_n "$1" "SELECT to_regclass('pg_cluster_membership') IS NOT NULL") == t ]] ||
        return 0
    for i in $(seq 1 120); do
        ok=1
        for p in "$@"; do
            [[ $(psql_n "$p" "$q" || true) == t ]] || { ok=0; break; }
        done
        [[ $ok -eq 1 ]] && return 0
        sleep 0.5
    done
    echo "no membership view of all $n nodes after 60 s" >&2
    exit 1
}

# ---- result records: bench/results/TARGET.json through scripts/scoreboard
# scoreboard_record TARGET ARGS...: one record of this run (ARGS: --figure X
# [--baseline Y] or --rounds "F/B F/B ...", --setting K=V ..., --note TEXT),
# with the command line COMMAND_LINE, PGRAC_BENCH_CONF in front when set. A
# record the scoreboard refuses (a setting its target is not measured with,
# say) is reported and the run goes on: the printed report stands either way.
scoreboard_record() {
    local cmd="$COMMAND_LINE" conf="${PGRAC_BENCH_CONF:-}"
    if [[ -n "$conf" ]]; then
        if [[ "$conf" =~ ^[^\"\$\`\\]*$ && "$conf" != *$'\n'* ]]; then
            cmd="PGRAC_BENCH_CONF=\"$conf\" $cmd"
        else
            cmd="PGRAC_BENCH_CONF=$(printf '%q' "$conf") $cmd"
        fi
    fi
    python3 "$SRC_DIR/scripts/scoreboard" record --target "$@" --command "$cmd" ||
        echo "[$BENCH_NAME] no record for $1 (above)" >&2
}
# scoreboard_settings PGPORT: "--setting K=V" for the settings the targets
# name, as the instance reports them (one word a line, for mapfile).
scoreboard_settings() {
    local k
    for k in cluster.wire_protection cluster.busy_poll_us; do
        printf -- '--setting\n%s=%s\n' "$k" "$(psql_n "$1" "SHOW $k")"
    done
}
# write_fetch_scripts NBLOCKS: the pgbench scripts $WORK/fetch.sql (node 2's
# random block through pgrac_fetch_block, run on node 1) and $WORK/raw.sql
# (the same block through get_raw_page): both return the whole 8 KiB page.
write_fetch_scripts() {
    as_pg tee "$WORK/fetch.sql" >/dev/null <<SQL
\set b random(0, $(($1 - 1)))
SELECT length(pgrac_fetch_block(2, 'pgbench_accounts', :b));
SQL
    as_pg tee "$WORK/raw.sql" >/dev/null <<SQL
\set b random(0, $(($1 - 1)))
SELECT length(get_raw_page('pgbench_accounts', :b));
SQL
}
