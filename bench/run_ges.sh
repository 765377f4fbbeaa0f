#!/usr/bin/env bash
# GES against its like-for-like baselines (issue 27), in one run on one machine,
# on a temporary three-instance tier3 cluster (127.0.0.1). Per round, each
# pair measured in the same round, the order of the two sides alternating
# from round to round:
#   1. cached: on node 1, one session, a plpgsql loop of N x (pgrac_ges_lock(r,
#      'EX', -1) + pgrac_ges_unlock(r)) on a resource only node 1 uses and node
#      1 masters, against the same loop of pg_advisory_lock(k) +
#      pg_advisory_unlock(k); the same GES loop on a resource mastered on node 2
#      for the note. Each loop is timed with clock_timestamp() before and after
#      it, in the backend: mean per iteration.
#   2. fresh: on node 1, a loop over M resources never locked before, each
#      locked EX and unlocked once, against the same loop of pgrac_ic_ping(2).
#   3. ping-pong: one resource, homed on node 3 (which hands it to node 1 or 2 after cluster.ges_remaster_after requests), taken EX by node 1 and
#      node 2 in turn (each side: unlock, lock, again); per transfer = the p50
#      of node 1's iterations (each is two transfers, 1 -> 2 -> 1) / 2, against
#      the p50 of pgrac_ic_bench(2, 64) on node 1. Alternation: the master's
#      FIFO queue, and a side granted twice in a row (its token's grant number
#      at most its previous one's + 1) releases and asks again within the iteration; checked
#      afterwards on the merged tokens (an iteration in which node 2 did not
#      hold the lock exactly once is left out and counted). Also with the
#      master on node 1, for the note.
#   4. affinity: pgbench -M prepared on each node concurrently, C clients each,
#      every transaction EX lock + unlock of a random one of 10,000 bigint
#      resources, 90 % of them from the node's own third; total tps against the
#      same three pgbench processes (same clients, same script but
#      pg_advisory_lock + pg_advisory_unlock) on node 1 alone.
# Then the records ges.cached-vs-advisory, ges.fresh-vs-ping,
# ges.pingpong-vs-rpc64 and ges.affinity-pgbench (scripts/scoreboard), each with
# its per-round pairs. Runs as root (PostgreSQL as postgres); removes its
# cluster on exit. About 4 minutes with the defaults on 2 CPUs (estimate).
#
#   bench/run_ges.sh [--build-dir DIR] [--iterations 3000] [--fresh N/3]
#                    [--rounds 5] [--seconds 15] [--clients 4]
#                    [--markdown FILE] [--keep-logs DIR] [--max-seconds 900]
# --iterations: the cached loops, the ping-pong and the RPC p50; --fresh: fresh
# resources per round (default a third of --iterations); --seconds, --clients:
# each pgbench run, clients per node. --build-dir is accepted for a command line
# like the other scripts' (this one needs no tool from it).
# Environment: PGRAC_BENCH_CONF, extra postgresql.conf lines for every instance;
# SCOREBOARD_RESULTS=DIR sends the records elsewhere (a trial run).
set -euo pipefail

SRC_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD_DIR="$SRC_DIR/build-bench"
ITER=3000
FRESH=""
ROUNDS=5
SECS=15
CLIENTS=4
MARKDOWN=""
KEEP_LOGS=""
MAX_SECONDS=900
KEYS=10000     # affinity: resources 0..KEYS-1, node k's own third [lo_k, lo_k + own_k)
AFFINITY=90    # percent of a client's picks from its node's own third
PGBIN="${PGBIN:-/usr/lib/postgresql/15/bin}"
PGUSER_OS=postgres

ARGS="$*"  # for the records' command line, before the options are shifted away
usage() {
    sed -n '2,37p' "$0" | sed 's/^# \{0,1\}//'
    exit 2
}
while [[ $# -gt 0 ]]; do
    case "$1" in
        --build-dir) BUILD_DIR="$2"; shift 2 ;;
        --iterations) ITER="$2"; shift 2 ;;
        --fresh) FRESH="$2"; shift 2 ;;
        --rounds) ROUNDS="$2"; shift 2 ;;
        --seconds) SECS="$2"; shift 2 ;;
        --clients) CLIENTS="$2"; shift 2 ;;
        --markdown) MARKDOWN="$2"; shift 2 ;;
        --keep-logs) KEEP_LOGS="$2"; shift 2 ;;
        --max-seconds) MAX_SECONDS="$2"; shift 2 ;;
        -h | --help) usage ;;
        *) echo "unknown argument: $1" >&2; usage ;;
    esac
done
whole() { [[ $1 =~ ^[0-9]+$ ]] && ((10#$1 >= $2 && 10#$1 <= $3)); }
whole "$ITER" 10 10000000 || { echo "--iterations: 10..10000000" >&2; exit 2; }
FRESH=${FRESH:-$((ITER / 3))}
whole "$FRESH" 1 1000000 || { echo "--fresh: 1..1000000" >&2; exit 2; }
whole "$ROUNDS" 1 100 || { echo "--rounds: 1..100" >&2; exit 2; }
whole "$SECS" 1 3600 || { echo "--seconds: 1..3600" >&2; exit 2; }
whole "$CLIENTS" 1 100 || { echo "--clients: 1..100 (per node)" >&2; exit 2; }
whole "$MAX_SECONDS" 30 86400 || { echo "--max-seconds: 30..86400" >&2; exit 2; }
[[ $(id -u) -eq 0 ]] || { echo "run_ges.sh: run as root (it uses runuser -u postgres)" >&2; exit 2; }
: "$BUILD_DIR"  # accepted, unused (see above)
COMMAND_LINE="bench/run_ges.sh $ARGS"
COMMAND_LINE="${COMMAND_LINE% }"

BENCH_NAME=run_ges
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
die() { echo "[$BENCH_NAME] $*" >&2; exit 1; }
# Seconds left before --max-seconds, for the bound of each client (the watchdog
# ends the script at MAX_SECONDS anyway; this makes each wait end before it).
left() {
    local l=$((MAX_SECONDS - ($(date +%s) - RUN_START) - 5))
    echo $((l > 1 ? l : 1))
}
# sql_at PGPORT SQL...: psql_n, bounded by what is left of the run rather than
# 300 s, with statement_timeout to match (a GES wait that never ends is
# cancelled by it, and the client is killed by timeout if not). Each SQL is
# its own -c: run in that order, each in its own transaction, each printed.
sql_at() {
    local l port=$1 s args=()
    shift
    for s in "$@"; do args+=(-c "$s"); done
    l=$(left)
    as_pg env PGOPTIONS="-c statement_timeout=${l}s" timeout "$l" "$PGBIN/psql" -X -A -t -q \
        -v ON_ERROR_STOP=1 -h "$WORK" -p "$port" -d postgres "${args[@]}"
}

# ---- the cluster: three instances from one initdb
cluster_ports_n 3
cluster_init pgrac-ges
NODE_CONF="shared_buffers = 32MB
max_connections = $((3 * CLIENTS + 20))
${PGRAC_BENCH_CONF:-}"
for i in 1 2 3; do start_node "$i" "${PGP[i]}" "$NODE_CONF"; done

# The loops, on every node. Each is one statement in one backend, timed with
# clock_timestamp() in it; the two sides of a pair have the same shape.
HELPERS=$(cat <<'SQL'
CREATE EXTENSION pgrac_ic;
-- 1. N x lock + unlock of one resource: mean per iteration, µs
CREATE FUNCTION bench_ges_loop(r text, n int) RETURNS float8 LANGUAGE plpgsql AS $$
DECLARE t0 timestamptz;
BEGIN
    t0 := clock_timestamp();
    FOR i IN 1..n LOOP
        PERFORM pgrac_ges_lock(r, 'EX', -1);
        PERFORM pgrac_ges_unlock(r);
    END LOOP;
    RETURN extract(epoch FROM clock_timestamp() - t0) * 1000000 / n;
END $$;
CREATE FUNCTION bench_adv_loop(k bigint, n int) RETURNS float8 LANGUAGE plpgsql AS $$
DECLARE t0 timestamptz;
BEGIN
    t0 := clock_timestamp();
    FOR i IN 1..n LOOP
        PERFORM pg_advisory_lock(k);
        PERFORM pg_advisory_unlock(k);
    END LOOP;
    RETURN extract(epoch FROM clock_timestamp() - t0) * 1000000 / n;
END $$;
-- 2. n resources PREFIX1..PREFIXn, each lock + unlock once; the same loop of
-- pings (the name is made in both loops, unused by the ping)
CREATE FUNCTION bench_ges_fresh(prefix text, n int) RETURNS float8 LANGUAGE plpgsql AS $$
DECLARE t0 timestamptz; r text;
BEGIN
    t0 := clock_timestamp();
    FOR i IN 1..n LOOP
        r := prefix || i;
        PERFORM pgrac_ges_lock(r, 'EX', -1);
        PERFORM pgrac_ges_unlock(r);
    END LOOP;
    RETURN extract(epoch FROM clock_timestamp() - t0) * 1000000 / n;
END $$;
CREATE FUNCTION bench_ping_loop(prefix text, node int, n int) RETURNS float8 LANGUAGE plpgsql AS $$
DECLARE t0 timestamptz; r text;
BEGIN
    t0 := clock_timestamp();
    FOR i IN 1..n LOOP
        r := prefix || i;
        PERFORM pgrac_ic_ping(node);
    END LOOP;
    RETURN extract(epoch FROM clock_timestamp() - t0) * 1000000 / n;
END $$;
-- 3. one side of the ping-pong: holds r, then n x (unlock, lock), one
-- clock_timestamp() and one fencing token per iteration into preallocated
-- arrays; returns each iteration's µs, the n + 1 tokens and the retries. The
-- lead (peer > 0) takes r first and starts only once node PEER's request waits
-- for it (untimed). Alternation is forced by the token: r's master worker
-- numbers its grants in an epoch one by one (bits 8..31; bits 0..7 number a
-- cached lock's local takes, docs/ges.md), so a token whose grant number is at
-- most the side's previous one + 1 (its own node's cached grant) was not
-- preceded by the other side's (nothing else is locked meanwhile): the side
-- releases and asks again (a retry, inside the iteration's time).
CREATE FUNCTION bench_pingpong(r text, n int, peer int, OUT us text, OUT tk text, OUT retries int)
LANGUAGE plpgsql AS $$
DECLARE
    ts timestamptz[] := array_fill(NULL::timestamptz, ARRAY[n + 1], ARRAY[0]);
    tok bigint[] := array_fill(NULL::bigint, ARRAY[n + 1], ARRAY[0]);
    deadline timestamptz := clock_timestamp() + interval '30 seconds';
    prev bigint;
    t bigint;
BEGIN
    retries := 0;
    PERFORM pgrac_ges_lock(r, 'EX', -1);
    IF peer > 0 THEN
        WHILE NOT EXISTS (SELECT 1 FROM pg_cluster_ges_locks l
                           WHERE l.resource = r AND l.node_id = peer AND l.state = 'waiting') LOOP
            IF clock_timestamp() > deadline THEN
                RAISE EXCEPTION 'ping-pong: node % did not ask for % within 30 s', peer, r;
            END IF;
            PERFORM pg_sleep(0.005);
        END LOOP;
    END IF;
    ts[0] := clock_timestamp();
    prev := pgrac_ges_lock_token(r);
    tok[0] := prev;
    FOR i IN 1..n LOOP
        LOOP
            PERFORM pgrac_ges_unlock(r);
            PERFORM pgrac_ges_lock(r, 'EX', -1);
            t := pgrac_ges_lock_token(r);
            EXIT WHEN (t >> 8) > (prev >> 8) + 1;
            prev := t;
            retries := retries + 1;
            -- The other side stopped asking (it counted an iteration this
            -- one did not see): fail the round rather than spin.
            IF clock_timestamp() > deadline + interval '90 seconds' THEN
                RAISE EXCEPTION 'ping-pong: % not handed over within 120 s (% retries)', r, retries;
            END IF;
        END LOOP;
        ts[i] := clock_timestamp();
        tok[i] := t;
        prev := t;
    END LOOP;
    PERFORM pgrac_ges_unlock(r);
    us := (SELECT string_agg(round((extract(epoch FROM ts[i] - ts[i - 1]) * 1000000)::numeric, 2)::text,
                             ' ' ORDER BY i) FROM generate_series(1, n) i);
    tk := array_to_string(tok, ' ');
END $$;
-- The same bookkeeping around pgrac_ic_ping (for the report: what timing in
-- plpgsql adds to a round trip): p50 of the iterations, µs.
CREATE FUNCTION bench_ping_samples(node int, n int) RETURNS float8 LANGUAGE plpgsql AS $$
DECLARE
    ts timestamptz[] := array_fill(NULL::timestamptz, ARRAY[n + 1], ARRAY[0]);
    tok bigint[] := array_fill(NULL::bigint, ARRAY[n + 1], ARRAY[0]);
BEGIN
    ts[0] := clock_timestamp();
    FOR i IN 1..n LOOP
        PERFORM pgrac_ic_ping(node);
        ts[i] := clock_timestamp();
        tok[i] := i;
    END LOOP;
    RETURN (SELECT percentile_disc(0.5) WITHIN GROUP (ORDER BY extract(epoch FROM ts[i] - ts[i - 1]))
              FROM generate_series(1, n) i) * 1000000;
END $$;
SQL
)
for i in 1 2 3; do sql_at "${PGP[i]}" "$HELPERS" >/dev/null; done
log "waiting for the three nodes to be UP and members of one view"
wait_all_up "${PGP[@]:1}"
mapfile -t SETTINGS < <(scoreboard_settings "$PG1")  # for the records
# The GES start-up replay barrier is over once a lock is answered (bounded).
for i in 1 2 3; do
    for t in $(seq 1 30); do
        [[ $(sql_at "${PGP[i]}" "SELECT pgrac_ges_lock('warmup', 'EX', 1000) AND pgrac_ges_unlock('warmup')" \
            2>/dev/null || true) == t ]] && break
        [[ $t -eq 30 ]] && die "node $i: no global lock granted within 30 tries"
        sleep 1
    done
done

# ---- resources, chosen by their master (pgrac_ges_resource: rendezvous hashing
# over the live members, the same on every node)
pick() {  # pick PREFIX MASTER: the first PREFIXn mastered on node MASTER
    local r
    r=$(sql_at "$PG1" "SELECT n FROM generate_series(1, 1000) g, LATERAL (SELECT '$1' || g AS n) s,
                       LATERAL pgrac_ges_resource(n) m WHERE m.master_node = $2 LIMIT 1")
    [[ -n $r ]] || die "no resource $1* mastered on node $2"
    echo "$r"
}
RES_OWN=$(pick own- 1)        # 1: only node 1 uses it, node 1 masters it
RES_REMOTE=$(pick remote- 2)  # 1, for the note: mastered on node 2
RES_PP=$(pick pingpong- 3)    # 3: neither side masters it
RES_PP1=$(pick pingpong1- 1)  # 3, for the note: mastered on node 1 (the lead)
RES_BENCH=$(pick gesbench- 2) # pgrac_ges_bench, master on node 2 (report only)
log "resources: $RES_OWN (master 1), $RES_REMOTE (master 2), ping-pong $RES_PP (master 3)" \
    "and $RES_PP1 (master 1), $RES_BENCH (master 2)"

RESULTS="$WORK/results.tsv"  # key, round, value
: >"$RESULTS"
put() { printf '%s\t%s\t%s\n' "$1" "$2" "$3" >>"$RESULTS"; }
WARM=$((ITER / 10 > 100 ? ITER / 10 : 100))
log "warm-up ($WARM iterations of each loop)"
sql_at "$PG1" "SELECT bench_ges_loop('$RES_OWN', $WARM)" "SELECT bench_adv_loop(1, $WARM)" \
    "SELECT bench_ges_fresh('warm-', $WARM)" "SELECT bench_ping_loop('warm-', 2, $WARM)" \
    "SELECT count(*) FROM pgrac_ic_bench(2, 64, $WARM)" >/dev/null

# 1 and 2: one session on node 1 per round, one statement per loop; the order
# of the two sides of each pair alternates from round to round.
loops_run() {  # loops_run ROUND
    local r=$1 out g a rm f p loc
    local G="SELECT bench_ges_loop('$RES_OWN', $ITER)" A="SELECT bench_adv_loop(1, $ITER)"
    local F="SELECT bench_ges_fresh('fresh-$r-', $FRESH)" P="SELECT bench_ping_loop('fresh-$r-', 2, $FRESH)"
    local RM="SELECT bench_ges_loop('$RES_REMOTE', $ITER)"
    # First, untimed, every path once in this new session (its wait slot, its
    # requester lane, its first RPC to each node): no side pays a session's set-up.
    local W="SELECT 'warm' FROM (SELECT bench_ges_loop('$RES_OWN', 20), bench_adv_loop(1, 20),
                 bench_ges_loop('$RES_REMOTE', 20), bench_ges_fresh('warm-$r-', 20),
                 bench_ping_loop('warm-$r-', 2, 20)) s"
    if ((r % 2)); then
        out=$(sql_at "$PG1" "$W" "$G" "$A" "$RM" "$F" "$P" | tr '\n' ' ')
        read -r _ g a rm f p <<<"$out"
    else
        out=$(sql_at "$PG1" "$W" "$A" "$G" "$RM" "$P" "$F" | tr '\n' ' ')
        read -r _ a g rm p f <<<"$out"
    fi
    [[ -n $f && -n $p ]] || die "round $r: the loops printed: $out"
    # How many of this round's fresh resources node 1 masters (the rest: nodes 2, 3).
    loc=$(sql_at "$PG1" "SELECT count(*) FROM generate_series(1, $FRESH) g,
                         LATERAL pgrac_ges_resource('fresh-$r-' || g) m WHERE m.master_node = 1")
    put cached.ges "$r" "$g"
    put cached.adv "$r" "$a"
    put cached.remote "$r" "$rm"
    put fresh.ges "$r" "$f"
    put fresh.ping "$r" "$p"
    put fresh.local "$r" "$loc"
    log "round $r: cached $g µs vs advisory $a µs (master node 2: $rm µs);" \
        "fresh $f µs ($loc of $FRESH mastered on node 1) vs ping $p µs"
}

# 3: ping-pong of RES between node 1 (lead) and node 2, then the two sides'
# samples and tokens go to pingpong.py.
PP_PY="$WORK/pingpong.py"
cat >"$PP_PY" <<'PY'
# pingpong.py LEAD_OUT FOLLOW_OUT: each file "us...|tokens..." from bench_pingpong.
# Prints "p50 strict n follower_p50 mean retries": per transfer µs (p50 of node
# 1's iterations in which node 2 held the lock exactly once by the recorded
# tokens, / 2), how many iterations were so (all of them, unless something
# else was granted on the master worker and so defeated the forcing), of how
# many, the same p50 from node 2's side, node 1's mean per transfer over all
# its iterations (the whole loop / 2n), and both sides' retries.
import bisect, sys
def load(path):
    us, tk, retries = open(path).read().strip().split("|")
    return [float(x) for x in us.split()], [int(x) for x in tk.split()], int(retries)
def p50(xs):  # nearest rank, as pgrac_ic_bench takes it
    xs = sorted(xs)
    return xs[int(0.5 * (len(xs) - 1) + 0.5)] if xs else float("nan")
def strict(us, mine, other):
    other = sorted(other)
    keep = []
    for i in range(1, len(mine)):
        # grants of the other side between this side's grants i-1 and i
        between = bisect.bisect_left(other, mine[i]) - bisect.bisect_right(other, mine[i - 1])
        if between == 1:
            keep.append(us[i - 1])
    return keep
lus, ltk, lre = load(sys.argv[1])
fus, ftk, fre = load(sys.argv[2])
assert len(ltk) == len(lus) + 1 and len(ftk) == len(fus) + 1, "sample and token counts"
assert len(set(ltk) | set(ftk)) == len(ltk) + len(ftk), "a fencing token given twice"
lk, fk = strict(lus, ltk, ftk), strict(fus, ftk, ltk)
print(f"{p50(lk) / 2:.2f} {len(lk)} {len(lus)} {p50(fk) / 2:.2f} {sum(lus) / len(lus) / 2:.2f} "
      f"{lre + fre}")
PY
pingpong_run() {  # pingpong_run ROUND KEY RES
    local r=$1 key=$2 res=$3 l lead follow t out p50 nstrict n f50 mean retries
    l=$(left)
    as_pg env PGOPTIONS="-c statement_timeout=${l}s" timeout "$l" "$PGBIN/psql" -X -A -t -q \
        -v ON_ERROR_STOP=1 -h "$WORK" -p "$PG1" -d postgres \
        -c "SELECT * FROM bench_pingpong('$res', $ITER, 2)" >"$WORK/pp-lead.out" 2>"$WORK/pp-lead.err" &
    lead=$!
    # Node 2 starts once node 1 holds the resource (so node 1 is granted first).
    for t in $(seq 1 300); do
        [[ $(sql_at "$PG1" "SELECT count(*) FROM pg_cluster_ges_locks
                            WHERE resource = '$res' AND node_id = 1 AND state = 'granted'") == 1 ]] && break
        [[ $t -eq 300 ]] && die "ping-pong: node 1 was not granted $res (300 tries)"
        sleep 0.1
    done
    as_pg env PGOPTIONS="-c statement_timeout=${l}s" timeout "$l" "$PGBIN/psql" -X -A -t -q \
        -v ON_ERROR_STOP=1 -h "$WORK" -p "$PG2" -d postgres \
        -c "SELECT * FROM bench_pingpong('$res', $ITER, 0)" >"$WORK/pp-follow.out" 2>"$WORK/pp-follow.err" &
    follow=$!
    wait "$lead" || die "ping-pong, node 1: $(cat "$WORK/pp-lead.err")"
    wait "$follow" || die "ping-pong, node 2: $(cat "$WORK/pp-follow.err")"
    out=$(python3 "$PP_PY" "$WORK/pp-lead.out" "$WORK/pp-follow.out")
    read -r p50 nstrict n f50 mean retries <<<"$out"
    put "$key" "$r" "$p50"
    put "$key.strict" "$r" "$nstrict"
    put "$key.follower" "$r" "$f50"
    put "$key.mean" "$r" "$mean"
    put "$key.retries" "$r" "$retries"
    log "round $r: ping-pong ($res) $p50 µs per transfer, p50 ($nstrict of $n iterations" \
        "alternated, $retries retries; node 2's side $f50 µs; mean $mean µs)"
    # Fewer than 90 % strictly alternating iterations: the round is left out of the record.
    ((nstrict * 10 >= n * 9)) || log "round $r: $res alternated in only $nstrict of $n iterations"
}
rpc_run() {  # rpc_run ROUND
    local r=$1 out rpc ping gb
    out=$(sql_at "$PG1" "SELECT count(*) FROM pgrac_ic_bench(2, 64, 200)" \
        "SELECT round(p50_us::numeric, 2) FROM pgrac_ic_bench(2, 64, $ITER)" \
        "SELECT round(bench_ping_samples(2, $ITER)::numeric, 2)" \
        "SELECT round(p50_us::numeric, 2) FROM pgrac_ges_bench('$RES_BENCH', 'EX', $ITER)" | tr '\n' ' ')
    read -r _ rpc ping gb <<<"$out"
    [[ -n $gb ]] || die "round $r: the RPC rows printed: $out"
    put rpc64 "$r" "$rpc"
    put ping.plpgsql "$r" "$ping"
    put gesbench.remote "$r" "$gb"
    log "round $r: pgrac_ic_bench(2, 64) p50 $rpc µs; pgrac_ic_ping(2) timed as the ping-pong" \
        "$ping µs; pgrac_ges_bench (master 2) p50 $gb µs"
}

# 4: pgbench on three nodes (GES) or three pgbench processes on node 1 (advisory).
for k in 1 2 3; do
    lo=$(((k - 1) * KEYS / 3))
    own=$((k * KEYS / 3 - lo))
    AFF_VARS[k]="-D lo=$lo -D own=$own -D others=$((KEYS - own)) -D affinity=$AFFINITY"
done
for kind in ges adv; do
    if [[ $kind == ges ]]; then
        stmt="SELECT pgrac_ges_lock(:key::bigint, 'EX', -1), pgrac_ges_unlock(:key::bigint);"
    else
        stmt="SELECT pg_advisory_lock(:key::bigint), pg_advisory_unlock(:key::bigint);"
    fi
    cat >"$WORK/aff-$kind.sql" <<EOF
\\set p random(1, 100)
\\set x random(0, :others - 1)
\\set key CASE WHEN :p <= :affinity THEN :lo + random(0, :own - 1) WHEN :x < :lo THEN :x ELSE :x + :own END
$stmt
EOF
done
chown "$PGUSER_OS": "$WORK"/aff-*.sql
pgbench_run() {  # pgbench_run ROUND ges|adv
    local r=$1 kind=$2 k port pids=() tps total=0 each=""
    for k in 1 2 3; do
        port=${PGP[k]}
        [[ $kind == adv ]] && port=$PG1
        # shellcheck disable=SC2086  # AFF_VARS: several words on purpose
        as_pg timeout $((SECS + 120)) "$PGBIN/pgbench" -n -M prepared -c "$CLIENTS" -j "$CLIENTS" \
            -T "$SECS" ${AFF_VARS[k]} -f "$WORK/aff-$kind.sql" -h "$WORK" -p "$port" postgres \
            >"$WORK/pgbench-$kind-$k.log" 2>&1 &
        pids+=($!)
    done
    for k in 1 2 3; do
        wait "${pids[k - 1]}" || die "pgbench ($kind, node $k): $(tail -5 "$WORK/pgbench-$kind-$k.log")"
        tps=$(sed -n 's/^tps = \([0-9.]*\).*/\1/p' "$WORK/pgbench-$kind-$k.log")
        [[ -n $tps ]] || die "pgbench ($kind, node $k) printed no tps: $(tail -5 "$WORK/pgbench-$kind-$k.log")"
        total=$(awk -v a="$total" -v b="$tps" 'BEGIN { printf "%.1f", a + b }')
        each+="${each:+ + }${tps%.*}"
    done
    put "aff.$kind" "$r" "$total"
    log "round $r: pgbench $kind: $total tps ($each)"
}

log "$ROUNDS rounds: $ITER iterations, $FRESH fresh resources, pgbench ${SECS}s x $CLIENTS clients per node"
for r in $(seq 1 "$ROUNDS"); do
    loops_run "$r"
    if ((r % 2)); then
        pingpong_run "$r" pp.m3 "$RES_PP"
        rpc_run "$r"
    else
        rpc_run "$r"
        pingpong_run "$r" pp.m3 "$RES_PP"
    fi
    pingpong_run "$r" pp.m1 "$RES_PP1"
    if ((r % 2)); then
        pgbench_run "$r" ges
        pgbench_run "$r" adv
    else
        pgbench_run "$r" adv
        pgbench_run "$r" ges
    fi
done

# ---- report, and the records' pairs and notes
REPORT=$(python3 - "$RESULTS" "$WORK/records.tsv" "$ITER" "$FRESH" "$SECS" "$CLIENTS" \
    "$RES_OWN" "$RES_REMOTE" "$RES_PP" "$RES_PP1" <<'PY'
import statistics, sys
res, out, ITER, FRESH, SECS, CLIENTS, OWN, REMOTE, PP, PP1 = sys.argv[1:11]
v = {}
for line in open(res):
    k, r, x = line.rstrip("\n").split("\t")
    v.setdefault(k, {})[int(r)] = float(x)
rounds = sorted(v.get("cached.ges", {}))
FRESH_LOCAL = ", ".join(f"{v['fresh.local'][r]:g}" for r in rounds)
med = lambda k: statistics.median(v[k].values())
def ok(k, r):  # a ping-pong round counts if >= 90 % of its iterations alternated
    return v[k + ".strict"][r] * 10 >= int(ITER) * 9 if k.startswith("pp.") else True
def pairs(fk, bk):
    return [(v[fk][r], v[bk][r]) for r in rounds if r in v[fk] and r in v[bk] and ok(fk, r)]
def ratio(ps):
    rs = [f / b for f, b in ps]
    return f"{statistics.median(rs):.2f}x ({min(rs):.2f}–{max(rs):.2f})" if rs else "–"
def row(what, fk, bk, unit):
    ps = pairs(fk, bk)
    f = statistics.median(p[0] for p in ps) if ps else float("nan")
    b = statistics.median(p[1] for p in ps) if ps else float("nan")
    per = " ".join(f"{a:g}/{c:g}" for a, c in ps)
    print(f"| {what} | {f:.2f} {unit} | {b:.2f} {unit} | {ratio(ps)} | {per} |")
print("| what | GES, median of rounds | baseline, median | ratio, median of rounds (min–max) | rounds: GES/baseline |")
print("|---|---:|---:|---:|---|")
row(f"1. `{OWN}` (master node 1), EX lock + unlock ×{ITER}, per iteration / `pg_advisory_lock` + unlock",
    "cached.ges", "cached.adv", "µs")
row(f"   the same GES loop, `{REMOTE}` (master node 2) / `pg_advisory_lock` + unlock",
    "cached.remote", "cached.adv", "µs")
row(f"2. {FRESH} fresh resources (of them mastered on node 1, by round: {FRESH_LOCAL}), EX lock + unlock once, per "
    "iteration / `pgrac_ic_ping(2)`", "fresh.ges", "fresh.ping", "µs")
row(f"3. ping-pong `{PP}` (master node 3) nodes 1 ⇄ 2, per transfer (p50) / `pgrac_ic_bench(2, 64)` p50",
    "pp.m3", "rpc64", "µs")
row(f"   the same, `{PP1}` (master node 1)", "pp.m1", "rpc64", "µs")
row(f"4. pgbench, {CLIENTS} clients on each of 3 nodes, {SECS} s, EX on 1 of 10,000 (90 % own third) / "
    f"the same 3×{CLIENTS} clients on node 1 with `pg_advisory_lock` + unlock", "aff.ges", "aff.adv", "tps")
print()
for k, what in (("pp.m3.strict", f"ping-pong `{PP}`: iterations that alternated strictly, of {ITER}"),
                ("pp.m3.retries", f"ping-pong `{PP}`: retries (a side granted twice in a row), both sides"),
                ("pp.m1.strict", f"ping-pong `{PP1}`: iterations that alternated strictly, of {ITER}"),
                ("pp.m1.retries", f"ping-pong `{PP1}`: retries, both sides"),
                ("pp.m3.follower", "ping-pong, master node 3, per transfer from node 2's side (µs, p50)"),
                ("pp.m3.mean", "ping-pong, master node 3, node 1's mean per transfer, every iteration (µs)"),
                ("ping.plpgsql", "`pgrac_ic_ping(2)` timed as the ping-pong's iterations are (µs, p50)"),
                ("gesbench.remote", "`pgrac_ges_bench`, master node 2 (µs, p50; timed in C)")):
    if k in v:
        print(f"- {what}: " + ", ".join(f"{v[k][r]:g}" for r in rounds if r in v[k]))
# Records: target, pairs, note.
def note_pp():
    left_out = [r for r in rounds if not ok("pp.m3", r)]
    return (f"Resource {PP}, homed on node 3 (handed to node 1 or 2 after cluster.ges_remaster_after = 32 requests: mastership that follows use); node 1 and node 2 each loop unlock + lock EX ({ITER} times), "
            "each iteration stamped by clock_timestamp() and its grant's fencing token read in the backend; the "
            "figure is the p50 of node 1's iterations (each two transfers, 1 → 2 → 1) / 2. Alternation: each side "
            "asks again right after its release, while the other's request waits at the master (FIFO); a side "
            "whose token's grant number (bits 8..31) is at most its previous one's + 1 (the master worker numbers "
            "its grants one by one, its own node's cached grant being the + 1, and nothing else is locked "
            "meanwhile) was granted twice in a row, and releases and asks again inside the same "
            "iteration (retries per round, both sides: "
            + ", ".join(f"{v['pp.m3.retries'][r]:g}" for r in rounds) + "); the merged tokens then show node 2 "
            "holding the lock exactly once in "
            + ", ".join(f"{v['pp.m3.strict'][r]:g}" for r in rounds) + f" of {ITER} iterations per round"
            + (f"; rounds {left_out} left out (under 90 %)" if left_out else "")
            + ". Baseline: pgrac_ic_bench(2, 64) p50 on node 1, timed per RPC in C. Waiting: the GES backends "
            "sleep on their latches, the RPC polls cluster.busy_poll_us first. "
            f"Master on node 1 instead: {med('pp.m1'):.1f} µs per transfer; pgrac_ic_ping(2) timed as the "
            f"ping-pong is: {med('ping.plpgsql'):.1f} µs (medians of rounds).")
recs = [
    ("ges.cached-vs-advisory", pairs("cached.ges", "cached.adv"),
     f"Resource {OWN}, mastered on node 1, used by node 1 alone; {ITER} iterations per loop, both loops in one "
     "session on node 1 (order alternating by round), timed by clock_timestamp() before and after each loop. "
     f"The same GES loop on {REMOTE} (mastered on node 2): {med('cached.remote'):.1f} µs (median of rounds)."),
    ("ges.fresh-vs-ping", pairs("fresh.ges", "fresh.ping"),
     f"{FRESH} resources per round, never locked before (of them mastered on node 1, by round: {FRESH_LOCAL}; "
     "the rest on nodes 2 and 3); both loops in one session on node 1 (order alternating by round), timed by "
     "clock_timestamp() before and after each loop; the ping loop builds the same names."),
    ("ges.pingpong-vs-rpc64", pairs("pp.m3", "rpc64"), None),
    ("ges.affinity-pgbench", pairs("aff.ges", "aff.adv"),
     f"pgbench -M prepared -T {SECS}, {CLIENTS} clients on each of nodes 1–3 at once, each transaction "
     "SELECT pgrac_ges_lock(key, 'EX', -1), pgrac_ges_unlock(key) on a bigint key of 10,000, 90 % from the "
     "node's own third; baseline: the same three pgbench processes and script on node 1 with "
     "pg_advisory_lock + pg_advisory_unlock (session-level, as GES locks are); tps summed over the three; "
     "order alternating by round."),
]
with open(out, "w") as f:
    for tid, ps, note in recs:
        if ps:
            f.write(f"{tid}\t{' '.join(f'{a:g}/{b:g}' for a, b in ps)}\t{note or note_pp()}\n")
PY
)
machine_cpu=$(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -1)
{
    echo "Run: \`$COMMAND_LINE\` ($(date -u '+%Y-%m-%d %H:%M UTC'))"
    echo
    echo "Machine: $(nproc) CPUs ($machine_cpu), kernel $(uname -r); three instances, tier3;" \
        "$ROUNDS rounds"
    echo
    echo "$REPORT"
} | tee "$WORK/report.md"
if [[ -n "$MARKDOWN" ]]; then cp "$WORK/report.md" "$MARKDOWN"; fi

# ---- records (scripts/scoreboard), per-round pairs
echo
while IFS=$'\t' read -r target pairs note; do
    scoreboard_record "$target" --rounds "$pairs" --note "$note" "${SETTINGS[@]}"
done <"$WORK/records.tsv"
log "done in $(($(date +%s) - RUN_START)) s"
