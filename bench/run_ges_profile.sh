#!/usr/bin/env bash
# Where the time goes in two GES paths (issue 27's missed targets ges.fresh-vs-ping
# and ges.pingpong-vs-rpc64), measured, on a temporary three-instance tier3
# cluster (127.0.0.1) of the installed extension. For each operation:
#   fresh.m2   node 1, one session: N resources never locked before, all mastered
#              on node 2, each pgrac_ges_lock(r, 'EX', -1) + pgrac_ges_unlock(r)
#   fresh.m1   the same, all mastered on node 1 (the local master, for the sum)
#   fresh.mix  the same with names as bench/run_ges.sh makes them (masters by hash,
#              about a third on node 1): the scoreboard's loop
#   pingpong   one resource mastered on node 3, taken EX by node 1 and node 2 in
#              turn (bench/run_ges.sh's loop: unlock, lock, the token forcing
#              alternation); an operation is one transfer
#   ping       pgrac_ic_ping(2) on node 1, the baseline of ges.fresh-vs-ping
# per process of the three instances (the looping backends, each listener, each
# LMS worker, the rest of each instance together): wakeups per operation
# (voluntary context switches, /proc/PID/status), CPU per operation (on-CPU
# time, /proc/PID/schedstat, ns; utime + stime of /proc/PID/stat alongside, in
# 10 ms ticks), time runnable but waiting for a CPU (schedstat), involuntary
# switches (a sched_yield() that gives the CPU away counts there). The backend
# reads every counter itself right before and after its loop (pg_read_file), so
# the window is the loop; ROUNDS rounds, operations in a rotating order, medians
# and min-max over rounds. An idle second per round gives the background.
# Then, unless --no-perf or perf cannot record here, a short loop of each of
# fresh.m2, pingpong and ping under `perf record -a` of the scheduler events
# (sched_switch, sched_waking) and the wire system calls (sendto, sendmsg,
# recvfrom): who wakes whom per operation, the delay from a wakeup to running,
# and the time between hops of each operation (medians over its operations).
# Runs as root (PostgreSQL as postgres); removes its cluster on exit. About 30
# seconds with the defaults on 2 CPUs (26-39 s in the runs of 2026-11-27).
#
#   bench/run_ges_profile.sh [--iterations 1000] [--rounds 7] [--perf-ops 300]
#                            [--no-perf] [--markdown FILE] [--keep-logs DIR]
#                            [--max-seconds 600]
# --iterations: operations per loop (ping-pong: transfers); --perf-ops: the
# same for the loops under perf. Environment: PGRAC_BENCH_CONF, extra
# postgresql.conf lines for every instance. Writes no scoreboard record.
set -euo pipefail

SRC_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
ITER=1000
ROUNDS=7
PERF_OPS=300
NO_PERF=0
MARKDOWN=""
KEEP_LOGS=""
MAX_SECONDS=600
PGBIN="${PGBIN:-/usr/lib/postgresql/15/bin}"
PGUSER_OS=postgres
BUILD_DIR=""  # cluster.sh's contract; unused here

ARGS="$*"
usage() {
    sed -n '2,36p' "$0" | sed 's/^# \{0,1\}//'
    exit 2
}
while [[ $# -gt 0 ]]; do
    case "$1" in
        --iterations) ITER="$2"; shift 2 ;;
        --rounds) ROUNDS="$2"; shift 2 ;;
        --perf-ops) PERF_OPS="$2"; shift 2 ;;
        --no-perf) NO_PERF=1; shift ;;
        --markdown) MARKDOWN="$2"; shift 2 ;;
        --keep-logs) KEEP_LOGS="$2"; shift 2 ;;
        --max-seconds) MAX_SECONDS="$2"; shift 2 ;;
        -h | --help) usage ;;
        *) echo "unknown argument: $1" >&2; usage ;;
    esac
done
whole() { [[ $1 =~ ^[0-9]+$ ]] && ((10#$1 >= $2 && 10#$1 <= $3)); }
whole "$ITER" 20 100000 || { echo "--iterations: 20..100000" >&2; exit 2; }
whole "$ROUNDS" 1 50 || { echo "--rounds: 1..50" >&2; exit 2; }
whole "$PERF_OPS" 20 10000 || { echo "--perf-ops: 20..10000" >&2; exit 2; }
whole "$MAX_SECONDS" 60 7200 || { echo "--max-seconds: 60..7200" >&2; exit 2; }
[[ $(id -u) -eq 0 ]] || { echo "run_ges_profile.sh: run as root (it uses runuser -u postgres)" >&2; exit 2; }
: "$BUILD_DIR"
COMMAND_LINE="bench/run_ges_profile.sh $ARGS"
COMMAND_LINE="${COMMAND_LINE% }"

BENCH_NAME=run_ges_profile
# shellcheck source=bench/lib/cluster.sh
source "$SRC_DIR/bench/lib/cluster.sh"
PERF_PID=""
cluster_on_exit() {
    if [[ -n "$PERF_PID" ]]; then kill -INT "$PERF_PID" 2>/dev/null || true; fi
    if [[ -n "$KEEP_LOGS" ]]; then
        mkdir -p "$KEEP_LOGS"
        cp "$WORK"/*.log "$WORK"/*.tsv "$WORK"/*.txt "$KEEP_LOGS"/ 2>/dev/null || true
    fi
}
cluster_traps
RUN_START=$(date +%s)
die() { echo "[$BENCH_NAME] $*" >&2; exit 1; }
left() {
    local l=$((MAX_SECONDS - ($(date +%s) - RUN_START) - 5))
    echo $((l > 1 ? l : 1))
}
sql_at() {  # sql_at PGPORT SQL...: each SQL its own -c, bounded by what is left
    local l port=$1 s args=()
    shift
    for s in "$@"; do args+=(-c "$s"); done
    l=$(left)
    as_pg env PGOPTIONS="-c statement_timeout=${l}s" timeout "$l" "$PGBIN/psql" -X -A -t -q \
        -v ON_ERROR_STOP=1 -h "$WORK" -p "$port" -d postgres "${args[@]}"
}

# ---- the cluster
cluster_ports_n 3
cluster_init pgrac-gesprof
for attempt in 1 2 3; do
    # The installed extension may be in the middle of being replaced: retry.
    ok=1
    for i in 1 2 3; do
        start_node "$i" "${PGP[i]}" "shared_buffers = 32MB
max_connections = 40
${PGRAC_BENCH_CONF:-}" || { ok=0; break; }
    done
    [[ $ok -eq 1 ]] && break
    log "a node did not start (attempt $attempt): $(tail -n 3 "$WORK"/n*.log 2>/dev/null | tr '\n' ' ')"
    stop_nodes "failed$attempt"
    [[ $attempt -eq 3 ]] && die "the cluster did not start"
    sleep 60
    cluster_ports_n 3
done

HELPERS=$(cat <<'SQL'
CREATE EXTENSION pgrac_ic;
-- One line per pid: pid exec_ns runq_wait_ns timeslices utime stime vcsw nvcsw
-- (schedstat; stat fields 14 and 15 in ticks; status). A pid that is gone is skipped.
CREATE FUNCTION prof_snap(pids int[]) RETURNS text LANGUAGE plpgsql AS $$
DECLARE p int; acc text := ''; ss text; st text; stt text; f text[]; c bigint[];
BEGIN
    -- pid 0: the whole machine, /proc/stat's cpu line in ticks: busy, idle + iowait
    c := string_to_array(regexp_replace(split_part(pg_read_file('/proc/stat'), E'\n', 1),
                                        '^cpu\s+', ''), ' ')::bigint[];
    acc := '0 ' || (c[1] + c[2] + c[3] + c[6] + c[7] + c[8]) || ' ' || (c[4] + c[5]) || ' 0 0 0 0 0;';
    FOREACH p IN ARRAY pids LOOP
        BEGIN
            ss := pg_read_file('/proc/' || p || '/schedstat');
            st := pg_read_file('/proc/' || p || '/stat');
            stt := pg_read_file('/proc/' || p || '/status');
        EXCEPTION WHEN OTHERS THEN CONTINUE;
        END;
        f := string_to_array(substring(st from '^.*\) (.*)$'), ' ');
        acc := acc || p || ' ' || btrim(ss, E' \n') || ' ' || f[12] || ' ' || f[13] || ' '
            || substring(stt from E'\nvoluntary_ctxt_switches:\\s+(\\d+)') || ' '
            || substring(stt from E'nonvoluntary_ctxt_switches:\\s+(\\d+)') || ';';
    END LOOP;
    RETURN acc;
END $$;
-- Result of a measured loop: me|other pid|ops|elapsed µs|retries|snap before|snap after
CREATE FUNCTION prof_fresh(names text[], pids int[]) RETURNS text LANGUAGE plpgsql AS $$
DECLARE t0 timestamptz; t1 timestamptz; s0 text; s1 text; r text; me int := pg_backend_pid();
BEGIN
    s0 := prof_snap(pids || me);
    t0 := clock_timestamp();
    FOREACH r IN ARRAY names LOOP
        PERFORM pgrac_ges_lock(r, 'EX', -1);
        PERFORM pgrac_ges_unlock(r);
    END LOOP;
    t1 := clock_timestamp();
    s1 := prof_snap(pids || me);
    RETURN me || '|0|' || cardinality(names) || '|' || extract(epoch FROM t1 - t0) * 1000000
        || '|0|' || s0 || '|' || s1;
END $$;
CREATE FUNCTION prof_ping(node int, n int, pids int[]) RETURNS text LANGUAGE plpgsql AS $$
DECLARE t0 timestamptz; t1 timestamptz; s0 text; s1 text; me int := pg_backend_pid();
BEGIN
    s0 := prof_snap(pids || me);
    t0 := clock_timestamp();
    FOR i IN 1..n LOOP
        PERFORM pgrac_ic_ping(node);
    END LOOP;
    t1 := clock_timestamp();
    s1 := prof_snap(pids || me);
    RETURN me || '|0|' || n || '|' || extract(epoch FROM t1 - t0) * 1000000 || '|0|' || s0 || '|' || s1;
END $$;
CREATE FUNCTION prof_idle(secs float8, pids int[]) RETURNS text LANGUAGE plpgsql AS $$
DECLARE t0 timestamptz; t1 timestamptz; s0 text; s1 text; me int := pg_backend_pid();
BEGIN
    s0 := prof_snap(pids || me);
    t0 := clock_timestamp();
    PERFORM pg_sleep(secs);
    t1 := clock_timestamp();
    s1 := prof_snap(pids || me);
    RETURN me || '|0|1|' || extract(epoch FROM t1 - t0) * 1000000 || '|0|' || s0 || '|' || s1;
END $$;
-- One side of the ping-pong (bench/run_ges.sh's bench_pingpong: a token whose
-- grant number is at most the previous one's + 1 means the side was granted
-- twice in a row; it releases and asks again). The lead (peer > 0) holds r,
-- waits until node PEER's request waits, reads that backend's pid from
-- pg_cluster_ges_locks, and measures its n iterations (2n transfers).
CREATE FUNCTION prof_pingpong(r text, n int, peer int, pids int[]) RETURNS text LANGUAGE plpgsql AS $$
DECLARE
    deadline timestamptz := clock_timestamp() + interval '30 seconds';
    prev bigint; t bigint; retries int := 0; other int := 0;
    t0 timestamptz; t1 timestamptz; s0 text := ''; s1 text := ''; me int := pg_backend_pid();
BEGIN
    PERFORM pgrac_ges_lock(r, 'EX', -1);
    IF peer > 0 THEN
        LOOP
            SELECT l.pid INTO other FROM pg_cluster_ges_locks l
             WHERE l.resource = r AND l.node_id = peer AND l.state = 'waiting' LIMIT 1;
            EXIT WHEN other IS NOT NULL;
            IF clock_timestamp() > deadline THEN
                RAISE EXCEPTION 'ping-pong: node % did not ask for % within 30 s', peer, r;
            END IF;
            PERFORM pg_sleep(0.005);
        END LOOP;
        s0 := prof_snap(pids || me || other);
    END IF;
    t0 := clock_timestamp();
    prev := pgrac_ges_lock_token(r);
    FOR i IN 1..n LOOP
        LOOP
            PERFORM pgrac_ges_unlock(r);
            PERFORM pgrac_ges_lock(r, 'EX', -1);
            t := pgrac_ges_lock_token(r);
            EXIT WHEN (t >> 8) > (prev >> 8) + 1;
            prev := t;
            retries := retries + 1;
        END LOOP;
        prev := t;
    END LOOP;
    t1 := clock_timestamp();
    IF peer > 0 THEN
        s1 := prof_snap(pids || me || other);
    END IF;
    PERFORM pgrac_ges_unlock(r);
    RETURN me || '|' || coalesce(other, 0) || '|' || 2 * n || '|' || extract(epoch FROM t1 - t0) * 1000000
        || '|' || retries || '|' || s0 || '|' || s1;
END $$;
SQL
)
for i in 1 2 3; do sql_at "${PGP[i]}" "$HELPERS" >/dev/null; done
log "waiting for the three nodes to be UP and members of one view"
wait_all_up "${PGP[@]:1}"
for i in 1 2 3; do
    for t in $(seq 1 30); do
        [[ $(sql_at "${PGP[i]}" "SELECT pgrac_ges_lock('warmup', 'EX', 1000) AND pgrac_ges_unlock('warmup')" \
            2>/dev/null || true) == t ]] && break
        [[ $t -eq 30 ]] && die "node $i: no global lock granted within 30 tries"
        sleep 1
    done
done

# ---- the processes: node, pid, backend_type (the loops' backends come with
# their results)
PROCS="$WORK/procs.tsv"
: >"$PROCS"
for i in 1 2 3; do
    sql_at "${PGP[i]}" "SELECT $i || E'\t' || pid || E'\t' || backend_type FROM pg_stat_activity
                        WHERE pid <> pg_backend_pid()" >>"$PROCS"
done
PIDS="{$(cut -f2 "$PROCS" | paste -sd,)}"
log "processes: $(awk -F'\t' '$3 ~ /pgrac_ic/ { printf "n%s %s %s, ", $1, $3, $2 }' "$PROCS")"
while IFS=$'\t' read -r _ p _; do
    [[ $(find "/proc/$p/task" -mindepth 1 -maxdepth 1 2>/dev/null | wc -l) -le 1 ]] ||
        log "note: pid $p has several threads; /proc/PID counters are its main thread's"
done <"$PROCS"

pick() {  # pick PREFIX MASTER: the first PREFIXn mastered on node MASTER
    local r
    r=$(sql_at "$PG1" "SELECT n FROM generate_series(1, 1000) g, LATERAL (SELECT '$1' || g AS n) s,
                       LATERAL pgrac_ges_resource(n) m WHERE m.master_node = $2 LIMIT 1")
    [[ -n $r ]] || die "no resource $1* mastered on node $2"
    echo "$r"
}
RES_PP=$(pick pingpong- 3)
# names PREFIX COUNT MASTER: an array expression of COUNT fresh names mastered
# on MASTER (0: any, as bench/run_ges.sh makes them)
names() {
    if [[ $3 -eq 0 ]]; then
        echo "ARRAY(SELECT '$1' || g FROM generate_series(1, $2) g)"
    else
        echo "ARRAY(SELECT n FROM generate_series(1, $((8 * $2))) g, LATERAL (SELECT '$1' || g AS n) s,
                    LATERAL pgrac_ges_resource(n) m WHERE m.master_node = $3 ORDER BY g LIMIT $2)"
    fi
}
RESULTS="$WORK/results.tsv"  # kind, round, result line
: >"$RESULTS"
# Each loop in a session of its own, after 20 untimed operations of the same kind.
run_fresh() {  # run_fresh KIND ROUND MASTER N
    local out
    out=$(sql_at "$PG1" "SELECT count(*) FROM (SELECT prof_fresh($(names "w$2-$1-" 20 "$3"), '{}')) s" \
        "SELECT prof_fresh($(names "f$2-$1-" "$4" "$3"), '$PIDS')" | tail -1)
    printf '%s\t%s\t%s\n' "$1" "$2" "$out" >>"$RESULTS"
}
run_ping() {  # run_ping ROUND N
    local out
    out=$(sql_at "$PG1" "SELECT count(*) FROM (SELECT prof_ping(2, 20, '{}')) s" \
        "SELECT prof_ping(2, $2, '$PIDS')" | tail -1)
    printf 'ping\t%s\t%s\n' "$1" "$out" >>"$RESULTS"
}
run_idle() {  # run_idle ROUND
    printf 'idle\t%s\t%s\n' "$1" "$(sql_at "$PG1" "SELECT prof_idle(1.0, '$PIDS')")" >>"$RESULTS"
}
run_pingpong() {  # run_pingpong ROUND TRANSFERS [on-start-command]
    local r=$1 n=$(($2 / 2)) l lead follow t
    l=$(left)
    as_pg env PGOPTIONS="-c statement_timeout=${l}s" timeout "$l" "$PGBIN/psql" -X -A -t -q \
        -v ON_ERROR_STOP=1 -h "$WORK" -p "$PG1" -d postgres \
        -c "SELECT prof_pingpong('$RES_PP', $n, 2, '$PIDS')" >"$WORK/pp-lead.out" 2>"$WORK/pp-lead.err" &
    lead=$!
    for t in $(seq 1 300); do
        [[ $(sql_at "$PG1" "SELECT count(*) FROM pg_cluster_ges_locks
                            WHERE resource = '$RES_PP' AND node_id = 1 AND state = 'granted'") == 1 ]] && break
        [[ $t -eq 300 ]] && die "ping-pong: node 1 was not granted $RES_PP (300 tries)"
        sleep 0.1
    done
    as_pg env PGOPTIONS="-c statement_timeout=${l}s" timeout "$l" "$PGBIN/psql" -X -A -t -q \
        -v ON_ERROR_STOP=1 -h "$WORK" -p "$PG2" -d postgres \
        -c "SELECT prof_pingpong('$RES_PP', $n, 0, '{}')" >"$WORK/pp-follow.out" 2>"$WORK/pp-follow.err" &
    follow=$!
    wait "$lead" || die "ping-pong, node 1: $(cat "$WORK/pp-lead.err")"
    wait "$follow" || die "ping-pong, node 2: $(cat "$WORK/pp-follow.err")"
    printf 'pingpong\t%s\t%s\n' "$r" "$(cat "$WORK/pp-lead.out")" >>"$RESULTS"
    printf 'pingpong.follower\t%s\t%s\n' "$r" "$(cat "$WORK/pp-follow.out")" >>"$RESULTS"
}
run_kind() {  # run_kind KIND ROUND
    case "$1" in
        fresh.m2) run_fresh fresh.m2 "$2" 2 "$ITER" ;;
        fresh.m1) run_fresh fresh.m1 "$2" 1 "$ITER" ;;
        fresh.mix) run_fresh fresh.mix "$2" 0 "$ITER" ;;
        pingpong) run_pingpong "$2" "$ITER" ;;
        ping) run_ping "$2" "$ITER" ;;
        idle) run_idle "$2" ;;
    esac
}

KINDS=(fresh.m2 fresh.m1 fresh.mix pingpong ping idle)
log "$ROUNDS rounds of ${KINDS[*]}, $ITER operations each"
for r in $(seq 1 "$ROUNDS"); do
    for k in $(seq 0 $((${#KINDS[@]} - 1))); do
        kind=${KINDS[$(((k + r - 1) % ${#KINDS[@]}))]}
        run_kind "$kind" "$r"
    done
    log "round $r: $(awk -F'\t' -v r="$r" '$2 == r && $1 != "idle" && $1 != "pingpong.follower" {
        split($3, a, "|"); printf "%s %.1f µs, ", $1, a[4] / a[3] }' "$RESULTS")"
done

# ---- perf: the scheduler and the wire, per operation
PERF_OK=0
PERF_EVENTS=(-e sched:sched_switch -e sched:sched_waking -e syscalls:sys_enter_sendto
    -e syscalls:sys_enter_sendmsg -e syscalls:sys_exit_recvfrom)
if [[ $NO_PERF -eq 0 ]] && command -v perf >/dev/null; then
    if timeout 20 perf record -q -o "$WORK/probe.data" -a "${PERF_EVENTS[@]}" -- sleep 0.1 \
        >/dev/null 2>"$WORK/perf-probe.txt"; then
        PERF_OK=1
    else
        log "perf cannot record here: $(head -3 "$WORK/perf-probe.txt")"
    fi
fi
PERF_KINDS=(fresh.m2 pingpong ping)
if [[ $PERF_OK -eq 1 ]]; then
    for kind in "${PERF_KINDS[@]}"; do
        # The same loop without perf first (what perf adds), then under perf.
        case "$kind" in
            fresh.m2) run_fresh fresh.m2 "p0" 2 "$PERF_OPS" ;;
            pingpong) run_pingpong "p0" "$PERF_OPS" ;;
            ping) run_ping "p0" "$PERF_OPS" ;;
        esac
        timeout "$(left)" perf record -q -m 16M -o "$WORK/perf-$kind.data" -a "${PERF_EVENTS[@]}" \
            >/dev/null 2>"$WORK/perf-$kind.txt" &
        PERF_PID=$!
        sleep 1
        case "$kind" in
            fresh.m2) run_fresh fresh.m2 "p1" 2 "$PERF_OPS" ;;
            pingpong) run_pingpong "p1" "$PERF_OPS" ;;
            ping) run_ping "p1" "$PERF_OPS" ;;
        esac
        kill -INT "$PERF_PID"
        wait "$PERF_PID" || true
        PERF_PID=""
        perf script --ns -i "$WORK/perf-$kind.data" -F tid,cpu,time,event,trace 2>/dev/null \
            >"$WORK/perf-$kind.script.txt" || true
        rm -f "$WORK/perf-$kind.data"
        log "perf, $kind: $(wc -l <"$WORK/perf-$kind.script.txt") events" \
            "($(grep -ci lost "$WORK/perf-$kind.txt" || true) lost-event notices)"
    done
fi

# ---- the report
python3 - "$RESULTS" "$PROCS" "$WORK" "$PERF_OK" "$ITER" "$PERF_OPS" <<'PY' | tee "$WORK/report.txt"
import collections, os, re, statistics, sys
results, procs_path, work, perf_ok, ITER, PERF_OPS = sys.argv[1:7]
NCPU = os.cpu_count()
perf_ok = perf_ok == "1"
procs = {}
for line in open(procs_path):
    node, pid, btype = line.rstrip("\n").split("\t")
    procs[int(pid)] = (int(node), btype)
def label(pid, me=None, other=None):
    if pid == me:
        return "n1 backend (the loop)"
    if pid == other:
        return "n2 backend (the other side)"
    if pid not in procs:
        return "?"
    node, btype = procs[pid]
    if btype.startswith("pgrac_ic"):
        return f"n{node} {btype.replace('pgrac_ic ', '')}"
    return f"n{node} other processes"
def parse_snap(s):
    out = {}
    for rec in s.split(";"):
        f = rec.split()
        if len(f) == 8:
            out[int(f[0])] = [int(x) for x in f[1:]]
    return out
runs = collections.defaultdict(dict)  # kind -> round -> dict
for line in open(results):
    kind, rnd, res = line.rstrip("\n").split("\t", 2)
    if kind == "pingpong.follower":
        runs[kind][rnd] = {"retries": int(res.split("|")[4])}
        continue
    me, other, n, el, retries, s0, s1 = res.split("|")
    me, other, n, el = int(me), int(other), int(n), float(el)
    a, b = parse_snap(s0), parse_snap(s1)
    per = collections.defaultdict(lambda: [0.0] * 7)
    for pid in b:
        if pid in a:
            lab = "machine" if pid == 0 else label(pid, me, other)
            for i in range(7):
                per[lab][i] += b[pid][i] - a[pid][i]
    runs[kind][rnd] = {"n": n, "el": el, "retries": int(retries), "per": per, "me": me, "other": other}
# per process, per operation: wakeups (vcsw), CPU µs (exec ns), run-queue wait µs,
# involuntary switches, utime+stime µs (ticks of 10 ms)
def per_op(d, lab):
    v = d["per"].get(lab)
    if v is None:
        return None
    n = d["n"]
    return {"wake": v[5] / n, "cpu": v[0] / 1000 / n, "rq": v[1] / 1000 / n, "invol": v[6] / n,
            "ticks": (v[3] + v[4]) * 10000 / n}
def fmt(xs, nd=1):
    xs = [x for x in xs if x is not None]
    if not xs:
        return "–"
    m = statistics.median(xs)
    return f"{m:.{nd}f} ({min(xs):.{nd}f}–{max(xs):.{nd}f})" if len(xs) > 1 else f"{m:.{nd}f}"
order = lambda lab: (lab.split()[0], 0 if "backend" in lab else 1 if "listener" in lab else
                     2 if "lms" in lab else 3, lab)
print(f"Counters from /proc, per operation: median over rounds (min–max); {ITER} operations per loop.\n")
idle = runs.get("idle", {})
for kind, what in (("fresh.m2", "fresh resource mastered on node 2: EX lock + unlock, node 1"),
                   ("fresh.m1", "fresh resource mastered on node 1 (local master): EX lock + unlock"),
                   ("fresh.mix", "fresh resources as bench/run_ges.sh names them (masters by hash)"),
                   ("pingpong", "ping-pong transfer (master node 3, nodes 1 ⇄ 2)"),
                   ("ping", "pgrac_ic_ping(2) on node 1")):
    rs = [d for k, d in sorted(runs.get(kind, {}).items()) if not k.startswith("p")]
    if not rs:
        continue
    lat = [d["el"] / d["n"] for d in rs]
    print(f"### {kind}: {what}\n")
    extra = ""
    if kind == "pingpong":
        fol = [runs["pingpong.follower"][k]["retries"] for k in sorted(runs["pingpong"]) if not k.startswith("p")]
        extra = (f"; retries (a side granted twice in a row) node 1 by round: "
                 f"{', '.join(str(d['retries']) for d in rs)}, node 2: {', '.join(map(str, fol))}")
    print(f"Per operation: {fmt(lat)} µs (mean of the loop){extra}.\n")
    print("| process | wakeups / op | CPU µs / op | runnable, waiting for a CPU, µs / op | involuntary switches / op | utime+stime µs / op (10 ms ticks) |")
    print("|---|---:|---:|---:|---:|---:|")
    labs = sorted({lab for d in rs for lab in d["per"] if lab not in ("?", "machine")}, key=order)
    tot = {"wake": [], "cpu": [], "rq": [], "invol": [], "ticks": []}
    for i, d in enumerate(rs):
        for key in tot:
            tot[key].append(sum((per_op(d, lab) or {key: 0})[key] for lab in labs))
    for lab in labs:
        xs = [per_op(d, lab) for d in rs]
        print(f"| {lab} | {fmt([x and x['wake'] for x in xs], 2)} | {fmt([x and x['cpu'] for x in xs])} | "
              f"{fmt([x and x['rq'] for x in xs])} | {fmt([x and x['invol'] for x in xs], 2)} | "
              f"{fmt([x and x['ticks'] for x in xs], 0)} |")
    print(f"| **all** | {fmt(tot['wake'], 2)} | {fmt(tot['cpu'])} | {fmt(tot['rq'])} | "
          f"{fmt(tot['invol'], 2)} | {fmt(tot['ticks'], 0)} |")
    busy = [c / (l * NCPU) * 100 for c, l in zip(tot["cpu"], lat)]
    mach = [d["per"]["machine"][0] / (d["per"]["machine"][0] + d["per"]["machine"][1]) * 100
            for d in rs if "machine" in d["per"] and d["per"]["machine"][0] + d["per"]["machine"][1] > 0]
    print(f"\nCPU of these processes / (time per operation × {NCPU} CPUs): {fmt(busy, 0)} %; the whole "
          f"machine busy in the loop (/proc/stat, 10 ms ticks): {fmt(mach, 0)} %.\n")
if idle:
    rs = [d for k, d in sorted(idle.items())]
    print("### idle: one second of pg_sleep on node 1, per second\n")
    print("| process | wakeups / s | CPU µs / s |")
    print("|---|---:|---:|")
    labs = sorted({lab for d in rs for lab in d["per"] if lab not in ("?", "machine")}, key=order)
    for lab in labs:
        w = [d["per"][lab][5] / (d["el"] / 1e6) for d in rs if lab in d["per"]]
        c = [d["per"][lab][0] / 1000 / (d["el"] / 1e6) for d in rs if lab in d["per"]]
        print(f"| {lab} | {fmt(w, 1)} | {fmt(c, 0)} |")
    print()
if not perf_ok:
    print("perf: not recorded (--no-perf, or perf cannot record here).")
    sys.exit(0)

# ---- perf: events of our processes
ev_re = re.compile(r"^\s*(\d+)\s+\[(\d+)\]\s+([\d.]+):\s+(\S+):\s*(.*)$")
def load(kind):
    evs = []
    for line in open(os.path.join(work, f"perf-{kind}.script.txt"), errors="replace"):
        m = ev_re.match(line)
        if m:
            evs.append((float(m.group(3)) * 1e6, int(m.group(1)), m.group(4), m.group(5), int(m.group(2))))
    evs.sort(key=lambda e: e[0])
    return evs
def kv(s, k):
    m = re.search(rf"\b{k}[=:]\s*(\S+)", s)
    return m.group(1) if m else None
def retval(s):
    try:
        v = int(s.split()[-1], 16)
    except ValueError:
        return -1
    return v if v < 1 << 63 else v - (1 << 64)
print(f"## perf record -a (sched_switch, sched_waking, sendto, sendmsg, recvfrom): {PERF_OPS} operations\n")
def role(kind, d):
    me, other = d["me"], d["other"]
    r = {}
    for pid, (node, btype) in procs.items():
        if btype.startswith("pgrac_ic"):
            r[pid] = f"n{node} {btype.replace('pgrac_ic ', '')}"
    r[me] = "n1 backend"
    if other:
        r[other] = "n2 backend"
    return r
def first(evs, i0, pred):
    for j in range(i0, len(evs)):
        if pred(evs[j]):
            return j
    return None
for kind in ("fresh.m2", "pingpong", "ping"):
    if kind not in runs or "p1" not in runs[kind]:
        continue
    d, d0 = runs[kind]["p1"], runs[kind].get("p0")
    names = role(kind, d)
    byname = {v: k for k, v in names.items()}
    evs = load(kind)
    B1 = d["me"]
    B2 = d["other"]
    L = {n: byname.get(f"n{n} listener") for n in (1, 2, 3)}
    wake = lambda e, tgt: e[2] == "sched:sched_waking" and kv(e[3], "pid") == str(tgt)
    # operation boundaries
    if kind == "fresh.m2":
        bounds = [i for i, e in enumerate(evs) if wake(e, B1)]
    elif kind == "pingpong":
        # a transfer ends when the other side is woken (a side woken again
        # before that, for anything else, is not a boundary)
        bounds, last = [], None
        for i, e in enumerate(evs):
            for b in (B1, B2):
                if wake(e, b) and b != last:
                    bounds.append(i)
                    last = b
    else:
        bounds = [i for i, e in enumerate(evs) if e[1] == B1 and e[2] == "syscalls:sys_enter_sendto"]
    if len(bounds) < 20:
        print(f"### {kind}: too few operation boundaries in the trace ({len(bounds)})\n")
        continue
    bounds = bounds[5:-5]  # leave out the loop's start and end
    ops = len(bounds) - 1
    t_a, t_b = evs[bounds[0]][0], evs[bounds[-1]][0]
    gaps = sorted(evs[bounds[k + 1]][0] - evs[bounds[k]][0] for k in range(ops))
    lat_perf = gaps[len(gaps) // 2]
    print(f"### {kind}\n")
    print(f"{ops} operations in the trace, p50 {lat_perf:.1f} µs between the boundaries "
          f"(the loop under perf: {d['el'] / d['n']:.1f} µs; the same loop just before without perf: "
          f"{d0['el'] / d0['n']:.1f} µs).\n" if d0 else "\n")
    # CPU in the window: the instances' processes against everything else
    # (perf itself, the psql clients, other work on the machine)
    ours = set(procs) | {B1, B2}
    cur, runt = {}, collections.Counter()
    for e in evs:
        if e[2] != "sched:sched_switch":
            continue
        prev, nxt = int(kv(e[3], "prev_pid") or 0), int(kv(e[3], "next_pid") or 0)
        if e[4] in cur:
            p0, since = cur[e[4]]
            lo, hi = max(since, t_a), min(e[0], t_b)
            if hi > lo and p0 == prev:
                runt["idle" if prev == 0 else "ours" if prev in ours else "other"] += hi - lo
        cur[e[4]] = (nxt, e[0])
    span = (t_b - t_a) * NCPU
    if span > 0:
        print(f"Of the {NCPU} CPUs over the traced operations (from sched_switch): the three instances "
              f"{runt['ours'] / span * 100:.0f} %, everything else (perf, psql, other work) "
              f"{runt['other'] / span * 100:.0f} %, idle {runt['idle'] / span * 100:.0f} %.\n")
    # who wakes whom, per operation; delay from waking to running
    pair = collections.Counter()
    delays = collections.defaultdict(list)
    pending = {}
    for e in evs[bounds[0]:bounds[-1] + 1]:
        t, tid, ev, rest = e[:4]
        if ev == "sched:sched_waking":
            tgt = int(kv(rest, "pid") or 0)
            if tgt in names:
                pair[(names.get(tid, "other/irq" if tid == 0 else "other"), names[tgt])] += 1
                pending.setdefault(tgt, t)
        elif ev == "sched:sched_switch":
            # a task woken while still on its CPU (it had not gone to sleep
            # yet) switches out before it is switched in: no delay to count
            pending.pop(int(kv(rest, "prev_pid") or 0), None)
            nxt = int(kv(rest, "next_pid") or 0)
            if nxt in pending:
                delays[names[nxt]].append(t - pending.pop(nxt))
    print("| waker → woken | per operation | woken's delay from waking to running, µs: p50 (p90) |")
    print("|---|---:|---:|")
    for (a, b), c in sorted(pair.items(), key=lambda x: -x[1]):
        if c / ops < 0.02:
            continue
        ds = sorted(delays[b])
        dl = f"{ds[len(ds) // 2]:.1f} ({ds[int(len(ds) * 0.9)]:.1f})" if ds else "–"
        print(f"| {a} → {b} | {c / ops:.2f} | {dl} |")
    print("\n(The waker is the task on the CPU when the wakeup was made: for a wakeup from the loopback "
          "network's softirq or a timer that can be a process unrelated to the message.)")
    woken = collections.Counter()
    for (a, b), c in pair.items():
        woken[b] += c
    print(f"\nWakeups per operation, all: {sum(woken.values()) / ops:.2f} "
          f"({', '.join(f'{k} {v / ops:.2f}' for k, v in sorted(woken.items(), key=lambda x: -x[1]))}).\n")
    # hops: milestones in order within each operation
    is_ = lambda pid, ev: (lambda e: e[1] == pid and e[2] == ev)
    recv = lambda pid: (lambda e: e[1] == pid and e[2] == "syscalls:sys_exit_recvfrom" and retval(e[3]) > 0)
    send = lambda pid: (lambda e: e[1] == pid and e[2] in ("syscalls:sys_enter_sendmsg", "syscalls:sys_enter_sendto"))
    run = lambda pid: (lambda e: e[2] == "sched:sched_switch" and kv(e[3], "next_pid") == str(pid))
    sleep = lambda pid: (lambda e: e[2] == "sched:sched_switch" and kv(e[3], "prev_pid") == str(pid)
                         and kv(e[3], "prev_state") not in ("R", "R+"))
    if kind == "fresh.m2":
        steps = [("backend woken → running", run(B1)),
                 ("backend running → asleep (unlock, loop, next lock sent)", sleep(B1)),
                 ("→ node 1's listener sends (node 1 LMS, listener)", send(L[1])),
                 ("→ node 2's listener has it (wire, wakeup)", recv(L[2])),
                 ("→ node 2's listener sends the answer (node 2 listener, LMS, listener)", send(L[2])),
                 ("→ node 1's listener has it (wire, wakeup)", recv(L[1])),
                 ("→ the backend is woken (node 1 listener, LMS)", None)]
    elif kind == "pingpong":
        steps = None  # built per operation: the side woken at the start releases
    else:
        steps = [("→ node 2's listener has the request (wire, wakeup)", recv(L[2])),
                 ("→ node 2's listener sends the reply (served in place)", send(L[2])),
                 ("→ the backend has it (wire, wakeup or poll)", recv(B1)),
                 ("→ the backend sends the next ping (plpgsql loop)", None)]
    segs = collections.defaultdict(list)
    labels_seen = []
    complete = 0
    for k in range(ops):
        i0, i1 = bounds[k], bounds[k + 1]
        st = steps
        if kind == "pingpong":
            who = int(kv(evs[i0][3], "pid"))
            a, b = (1, 2) if who == B1 else (2, 1)
            st = [(f"holder woken → running", run(who)),
                  (f"→ holder's listener sends (release: backend, LMS, listener)", send(L[a])),
                  ("→ node 3's listener has it (wire, wakeup)", recv(L[3])),
                  ("→ node 3's listener sends (listener, LMS: release, grant, listener)", send(L[3])),
                  (f"→ waiter's listener has it (wire, wakeup)", recv(L[b])),
                  ("→ the waiter is woken (listener, LMS)", None)]
        t_prev, j, ok, cur = evs[i0][0], i0, True, []
        for name, pred in st:
            if pred is None:
                cur.append((name, evs[i1][0] - t_prev))
                break
            jj = first(evs[:i1], j + 1, pred)
            if jj is None:
                ok = False
                break
            cur.append((name, evs[jj][0] - t_prev))
            t_prev, j = evs[jj][0], jj
        if ok:
            complete += 1
            for name, dt in cur:
                segs[name].append(dt)
                if name not in labels_seen:
                    labels_seen.append(name)
    print(f"Time between hops (each operation's first matching event after the previous hop; "
          f"{complete} of {ops} operations had every hop):\n")
    print("| from the operation's start (the previous operation's end) | µs, p50 | p10–p90 | mean |")
    print("|---|---:|---:|---:|")
    for name in labels_seen:
        xs = sorted(segs[name])
        print(f"| {name} | {xs[len(xs) // 2]:.1f} | {xs[len(xs) // 10]:.1f}–{xs[len(xs) * 9 // 10]:.1f} | "
              f"{statistics.mean(xs):.1f} |")
    tot = sorted(sum(v) for v in zip(*(segs[n] for n in labels_seen)))
    print(f"| **sum** | {tot[len(tot) // 2]:.1f} | {tot[len(tot) // 10]:.1f}–{tot[len(tot) * 9 // 10]:.1f} | "
          f"{statistics.mean(tot):.1f} |\n")
PY

{
    echo "Run: \`$COMMAND_LINE\` ($(date -u '+%Y-%m-%d %H:%M UTC'), commit $(git -C "$SRC_DIR" rev-parse --short HEAD 2>/dev/null || echo '?'))"
    echo
    echo "Machine: $(nproc) CPUs, kernel $(uname -r), load average before the report: $(cut -d' ' -f1-3 /proc/loadavg)"
    echo
    cat "$WORK/report.txt"
} >"$WORK/report.md"
if [[ -n "$MARKDOWN" ]]; then cp "$WORK/report.md" "$MARKDOWN"; fi
log "done in $(($(date +%s) - RUN_START)) s"
