#!/usr/bin/env bash
# models/check.sh: checks models/ges_cache.pml with SPIN (models/README.md).
#
# Builds every run in a temporary directory (any cwd works), checks the
# correct model exhaustively in five configurations (expects 0 errors), runs
# each mutant (expects at least one error, and prints the start of SPIN's
# counterexample), and a witness run (expects every interesting event to be
# reached: the model is not vacuous). One summary line per run; exits
# non-zero on any unexpected result, a truncated search or a timeout.
#
# Two runs at a time (two cores), memory capped per run with pan's MEMLIM so
# that two runs together stay under 8 GiB; the whole check under a time
# budget (CHECK_BUDGET seconds, default 290).
#
# Environment: CHECK_BUDGET (s), CHECK_KEEP=1 keeps the work directory,
# CHECK_ONLY=name[,name...] runs only those runs (in one lane).
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
model="$here/ges_cache.pml"
budget="${CHECK_BUDGET:-290}"
start=$(date +%s)
deadline=$((start + budget))

for tool in spin gcc timeout; do
    command -v "$tool" >/dev/null 2>&1 || { echo "check.sh: $tool not found (Debian: apt-get install spin gcc coreutils)" >&2; exit 2; }
done
[ -f "$model" ] || { echo "check.sh: $model not found" >&2; exit 2; }

work="$(mktemp -d "${TMPDIR:-/tmp}/ges_model.XXXXXX")"
cleanup() {
    # stop our own runs if we are interrupted, then remove the work directory
    local p
    for p in $(jobs -p); do kill "$p" 2>/dev/null || true; done
    if [ "${CHECK_KEEP:-0}" = 1 ]; then echo "work directory kept: $work"; else rm -rf "$work"; fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# Configurations (spin -D flags). Bounds: models/README.md, "Bounds".
CFG_A="-DMAXE=2 -DACQMAX=3"                          # main: 3 nodes, 2 resources, 1 view change
CFG_B="-DMAXE=3 -DACQMAX=2"                          # two view changes
CFG_C="-DONE_RES -DMAXE=2 -DACQMAX=3 -DCANCEL"       # waiting backends may give up
CFG_C0="-DONE_RES -DMAXE=2 -DACQMAX=3"               # small: witnesses, one mutant
CFG_D="-DONE_RES -DMAXE=1 -DACQMAX=6"                # long runs of one resource: the S4 bound
CFG_L="-DLIVENESS -DNO_EVICT -DMAXE=2 -DACQMAX=3"     # bounded progress, no loss
# events the witness run must reach (ges_cache.pml, "Witnesses")
WITNESSES="cache_regrant old_range bast_in_use refresh moved_grant moved_cache early_bast reorder bast_giveback conversion"

# run NAME EXPECT "SPIN FLAGS" HASHBITS MEMLIM_MB TIMEOUT_S [PROPERTY]
#   EXPECT: pass (0 errors, complete search), fail (>= 1 error; PROPERTY, if
#   given, must be the one reported), witness (all witnesses, no property error)
run() {
    local name="$1" expect="$2" flags="$3" wbits="$4" memlim="$5" tmax="$6" want="${7:-}"
    local d="$work/$name" res="$work/$name.result" log="$work/$name.log"
    mkdir -p "$d"
    cp "$model" "$d/ges_cache.pml"
    local now left
    now=$(date +%s); left=$((deadline - now))
    if [ "$left" -lt 5 ]; then
        echo "FAIL  $name: not run, the time budget ($budget s) is used up" > "$res"; return
    fi
    [ "$tmax" -gt "$left" ] && tmax=$left
    local cflags="-O2 -w -DSAFETY -DMEMLIM=$memlim"
    local panargs="-m10000 -E -n -w$wbits"
    if [ "$expect" = witness ]; then panargs="$panargs -c0"; else panargs="$panargs -c1"; fi
    local t0 t1 rc=0
    t0=$(date +%s)
    if ! (cd "$d" && spin $flags -a ges_cache.pml > spin.out 2>&1 && gcc $cflags -o pan pan.c > gcc.out 2>&1); then
        { echo "FAIL  $name: build failed"; sed 's/^/    | /' "$d/spin.out" "$d/gcc.out" | head -20 || true; } > "$res"; return
    fi
    (cd "$d" && timeout "$tmax" ./pan $panargs > pan.out 2>&1) || rc=$?
    t1=$(date +%s)
    local out="$d/pan.out"
    local errors states trans depth mem secs
    errors=$(sed -n 's/.*errors: \([0-9]*\).*/\1/p' "$out" | tail -1)
    states=$(sed -n 's/^ *\([0-9.e+]*\) states, stored.*/\1/p' "$out" | tail -1)
    trans=$(sed -n 's/^ *\([0-9.e+]*\) transitions.*/\1/p' "$out" | tail -1)
    depth=$(sed -n 's/.*depth reached \([0-9]*\).*/\1/p' "$out" | tail -1)
    mem=$(sed -n 's/^ *\([0-9.]*\).*total actual memory usage.*/\1/p' "$out" | tail -1)
    secs=$(sed -n 's/^pan: elapsed time \([0-9.e+]*\).*/\1/p' "$out" | tail -1)
    local stats="states=${states:-?} transitions=${trans:-?} depth=${depth:-?} memory=${mem:-?}MB pan=${secs:-?}s wall=$((t1 - t0))s"
    local verdict="" note=""
    if [ "$rc" = 124 ]; then
        verdict=FAIL; note="timeout after ${tmax}s"
    elif grep -q "max search depth too small" "$out"; then
        verdict=FAIL; note="search truncated (depth bound)"
    elif grep -qiE "out of memory|MEMLIM|memory limit" "$out"; then
        verdict=FAIL; note="memory limit ${memlim}MB reached"
    elif [ -z "$errors" ]; then
        verdict=FAIL; note="pan gave no result (exit $rc)"
    fi
    # which property (the named always-true flag in the failed assertion)
    local prop
    prop=$(grep -m1 "assertion violated" "$out" | grep -oE '\b(S[1-5]|L1)\b' | head -1 || true)
    if [ -z "$verdict" ]; then
        case "$expect" in
        pass)
            if [ "$errors" = 0 ]; then verdict=PASS; note="0 errors, exhaustive"
            else verdict=FAIL; note="$errors error(s): ${prop:-?} violated"; fi ;;
        fail)
            if [ "$errors" -ge 1 ] && { [ -z "$want" ] || [ "$prop" = "$want" ]; }; then
                verdict=PASS; note="caught: ${prop:-?} violated"
            elif [ "$errors" -ge 1 ]; then
                verdict=FAIL; note="caught by ${prop:-?}, expected $want"
            else
                verdict=FAIL; note="NOT caught (0 errors)"
            fi ;;
        witness)
            local w missing="" got
            got=$(grep "assertion violated" "$out" | grep -oE 'WITNESS_&&[a-z_]+' | sed 's/WITNESS_&&//' | sort -u | tr '\n' ' ' || true)
            for w in $want; do
                case " $got " in *" $w "*) ;; *) missing="$missing $w" ;; esac
            done
            if grep "assertion violated" "$out" | grep -qE '\b(S[1-5]|L1)\b'; then
                verdict=FAIL; note="a property is violated"
            elif [ -n "$missing" ]; then
                verdict=FAIL; note="not reached:$missing"
            else
                verdict=PASS; note="all reached: $got"
            fi ;;
        esac
    fi
    {
        printf '%-4s  %-28s %-40s %s\n' "$verdict" "$name" "$note" "$stats"
        if [ "$expect" = fail ] && [ -n "$errors" ] && [ "$errors" -ge 1 ] && [ -f "$d/ges_cache.pml.trail" ]; then
            (cd "$d" && spin $flags -t ges_cache.pml 2>&1) > "$d/trail.txt" || true
            # the steps SPIN replays (the model's printf lines), up to the violation
            awk 'NF { print } /trail ends after/ { exit }' "$d/trail.txt" | head -45 | sed 's/^ */    | /' || true
        fi
        if [ "$verdict" = FAIL ]; then sed 's/^/    | /' "$out" | head -30 || true; fi
    } > "$res"
    cp "$out" "$log" 2>/dev/null || true
}

# lane 1: the two big searches, one after the other
lane1() {
    run correct_A pass "$CFG_A" 25 6144 240
    touch "$work/A.done"
    run correct_B pass "$CFG_B" 25 4608 200
}
# lane 2: small runs while lane 1 runs A, then C next to B
lane2() {
    run correct_D_bound pass "$CFG_D" 24 1536 120
    run correct_L_progress pass "$CFG_L" 24 1536 120
    run witnesses witness "$CFG_C0 -DPROBES" 24 1536 120 "$WITNESSES"
    run mutant_KEEP_AFTER_BAST fail "$CFG_A -DMUTANT_KEEP_AFTER_BAST" 24 1536 120
    run mutant_KEEP_AFTER_BAST_S1 fail "$CFG_A -DMUTANT_KEEP_AFTER_BAST -DNO_S5" 24 1536 120 S1
    run mutant_NO_LEASE_FENCE fail "$CFG_A -DMUTANT_NO_LEASE_FENCE" 24 1536 120 S3
    run mutant_TOKEN_REUSE fail "$CFG_A -DMUTANT_TOKEN_REUSE" 24 1536 120 S2
    run mutant_NO_BARRIER fail "$CFG_A -DMUTANT_NO_BARRIER" 24 1536 120
    run mutant_EARLY_GIVEBACK fail "$CFG_A -DMUTANT_EARLY_GIVEBACK" 24 1536 120 S1
    run mutant_NO_SEQ fail "$CFG_C0 -DMUTANT_NO_SEQ" 24 1536 120
    run mutant_REFRESH_IGNORES_WAITERS fail "$CFG_D -DMUTANT_REFRESH_IGNORES_WAITERS" 24 1536 120 S4
    run mutant_IGNORE_BAST fail "$CFG_L -DMUTANT_IGNORE_BAST" 24 1536 120 L1
    run bound_is_tight fail "$CFG_D -DBOUND=3" 24 1536 120 S4
    while [ ! -e "$work/A.done" ]; do
        [ "$(date +%s)" -ge "$deadline" ] && break
        sleep 1
    done
    run correct_C_cancel pass "$CFG_C" 24 3072 160
}

order="correct_A correct_B correct_C_cancel correct_D_bound correct_L_progress witnesses
mutant_KEEP_AFTER_BAST mutant_KEEP_AFTER_BAST_S1 mutant_NO_LEASE_FENCE mutant_TOKEN_REUSE
mutant_NO_BARRIER mutant_EARLY_GIVEBACK mutant_NO_SEQ mutant_REFRESH_IGNORES_WAITERS
mutant_IGNORE_BAST bound_is_tight"

echo "spin: $(spin -V 2>&1 | head -1); model: $model; budget ${budget}s; work: $work"
if [ -n "${CHECK_ONLY:-}" ]; then
    order="$(echo "$CHECK_ONLY" | tr ',' ' ')"
    # run the named runs one after the other, with the arguments lane1/lane2 use
    for n in $order; do
        line=$(declare -f lane1 lane2 | grep -E "^\s+run $n " | head -1 | sed 's/^ *//' || true)
        [ -n "$line" ] || { echo "check.sh: no run named $n" >&2; exit 2; }
        eval "$line"
    done
else
    lane1 & p1=$!
    lane2 & p2=$!
    wait $p1 || true
    wait $p2 || true
fi

status=0
for n in $order; do
    f="$work/$n.result"
    if [ -f "$f" ]; then
        cat "$f"
        head -1 "$f" | grep -q '^PASS' || status=1
    else
        echo "FAIL  $n: no result"; status=1
    fi
done
echo "total wall time $(( $(date +%s) - start ))s; $( [ $status = 0 ] && echo 'all results as expected' || echo 'UNEXPECTED RESULTS' )"
exit $status
