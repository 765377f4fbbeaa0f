# shellcheck shell=bash
# The results matrix of scripts/test: one line per suite and tier,
#   SUITE@TIER: N passed, N failed, N skipped
# then the totals. A skip is never a pass: every skipped count is printed with
# its reason, and under CI=true a suite@tier with skips fails the run unless
# tests/skips.allowed names it (with the reason it cannot run here).
#
#   source scripts/lib/matrix.sh; matrix_init
#   matrix_record SUITE TIER PASSED FAILED SKIPPED [REASON]
#   matrix_from_tap_logs LOGDIR PROVE_OUTPUT TIER     (PostgreSQL TAP logs)
#   matrix_from_regress OUTPUT TIER                   (pg_regress)
#   matrix_from_ctest OUTPUT TIER                     (ctest)
#   matrix_print; matrix_check_skips ALLOWLIST        (returns 1 on an unexplained skip)

MATRIX_FILE=""

matrix_init() {
    MATRIX_FILE=$(mktemp /tmp/pgrac-matrix.XXXXXX)
}

# One line per call; a suite@tier recorded twice keeps both lines.
matrix_record() {
    local suite=$1 tier=$2 p=$3 f=$4 s=$5 why=${6:-}
    printf '%s\t%s\t%d\t%d\t%d\t%s\n' "$suite" "$tier" "$p" "$f" "$s" "$why" >>"$MATRIX_FILE"
}

# Every t/*.pl that ran: its assertions from tmp_check/log/regress_log_NAME
# ("ok N", "not ok N", "ok N # skip ..."), at the tier the log names ("cluster
# of N instances at tier3", else TIER); a file skipped as a whole is read from
# prove's output ("t/NAME.pl .. skipped: REASON").
matrix_from_tap_logs() {
    local logdir=$1 prove_out=$2 tier=$3 name log p f s why line t
    local -A whole=()  # files skipped as a whole in this run
    while IFS= read -r line; do
        # "t/030_rdma.pl .. skipped: why", after a "[hh:mm:ss] " with --timer
        [[ $line =~ ^(\[[0-9:]+\]\ )?(t/[^ ]+)\.pl\ \.+\ skipped:\ (.*)$ ]] || continue
        name=$(basename "${BASH_REMATCH[2]}")
        whole[$name]=1
        matrix_record "tap/$name" "$tier" 0 0 1 "${BASH_REMATCH[3]}"
    done <"$prove_out"
    for log in "$logdir"/regress_log_*; do
        [[ -f $log ]] || continue
        name=${log##*/regress_log_}
        [[ -n ${whole[$name]:-} ]] && continue  # skipped as a whole: recorded above
        # The tier it ran at, as PgracCluster (or a single-node test) noted it.
        t=$(grep -oE 'instances? at (stub|tier[0-9])' "$log" | head -1 | awk '{print $3}')
        p=$(grep -cE '^\[[^]]*\]\([^)]*\) ok [0-9]+' "$log" || true)
        s=$(grep -ciE '^\[[^]]*\]\([^)]*\) ok [0-9]+ # skip' "$log" || true)
        f=$(grep -cE '^\[[^]]*\]\([^)]*\) not ok [0-9]+' "$log" || true)
        why=$(grep -iE '^\[[^]]*\]\([^)]*\) ok [0-9]+ # skip' "$log" | sed -E 's/.*# skip //I' |
            sort -u | paste -sd ';' - || true)
        # A script that died without a failed assertion (an exception, a
        # timeout) is in prove's summary with a nonzero wait status: one failure.
        if grep -qE "^t/$name\.pl +\(Wstat: [1-9]" "$prove_out" && [[ $f == 0 ]]; then
            f=1
        fi
        matrix_record "tap/$name" "${t:-$tier}" $((p - s)) "$f" "$s" "$why"
    done
}

# pg_regress: "ok 1 - name" (PG 16) or "test name ... ok" (PG 15).
matrix_from_regress() {
    local out=$1 tier=$2 p f
    p=$(grep -cE '^(test |     )?[0-9a-z_]+ +\.\.\. ok' "$out" || true)
    f=$(grep -cE '^(test |     )?[0-9a-z_]+ +\.\.\. FAILED' "$out" || true)
    matrix_record regress "$tier" "$p" "$f" 0
}

# ctest: "N% tests passed, F tests failed out of T", skipped cases listed
# under "The following tests did not run:" with "(Skipped)".
matrix_from_ctest() {
    local out=$1 tier=$2 total f s why
    total=$(sed -nE 's/.* tests failed out of ([0-9]+).*/\1/p' "$out" | tail -1)
    f=$(sed -nE 's/.* ([0-9]+) tests failed out of .*/\1/p' "$out" | tail -1)
    s=$(grep -c '(Skipped)' "$out" || true)
    why=$(grep '(Skipped)' "$out" | sed -E 's/.* - ([A-Za-z0-9_]+)\..*/\1/' | sort -u |
        paste -sd ',' - || true)
    [[ -n $total ]] || { matrix_record unit "$tier" 0 1 0 "ctest printed no summary"; return; }
    matrix_record unit "$tier" $((total - ${f:-0} - s)) "${f:-0}" "$s" "${why:+skipped: $why}"
}

matrix_print() {
    local tp=0 tf=0 ts=0 suite tier p f s why
    echo
    echo "results (suite@tier: passed, failed, skipped):"
    while IFS=$'\t' read -r suite tier p f s why; do
        printf '%s@%s: %d passed, %d failed, %d skipped%s\n' "$suite" "$tier" "$p" "$f" "$s" \
            "${why:+ ($why)}"
        tp=$((tp + p))
        tf=$((tf + f))
        ts=$((ts + s))
    done <"$MATRIX_FILE"
    printf '%d passed, %d failed, %d skipped\n' "$tp" "$tf" "$ts"
}

# Skips not named in the allow-list ("SUITE@TIER reason" lines, # comments).
matrix_check_skips() {
    local allow=$1 bad=0 suite tier p f s why
    while IFS=$'\t' read -r suite tier p f s why; do
        [[ $s -gt 0 ]] || continue
        if grep -qE "^${suite//\//\\/}@${tier}[[:space:]]+[^[:space:]]" "$allow" 2>/dev/null; then
            continue
        fi
        echo "unexplained skip: $suite@$tier ($s skipped${why:+: $why}); fix it or name it in $allow"
        bad=1
    done <"$MATRIX_FILE"
    return $bad
}
