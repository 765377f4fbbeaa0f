#!/usr/bin/env bash
# Mutation checks: a test that cannot fail proves nothing. Each mutant is one
# deliberate bug, compiled in by a -DPGRAC_MUTANT_<NAME> switch in the code;
# this builds the extension with it in a copy of the tree, installs it, runs
# the TAP test that must catch it (as the postgres user, with short poll
# timeouts) and expects that test to FAIL. Then it reinstalls the real build
# (also when interrupted). Exits 0 only if every mutant was caught.
#
# Mutants (name, the test that must catch it):
#   KEEP_AFTER_BAST  t/033_ges_cache.pl  a cached lock is kept after its BAST
#                    (the SPIN model's MUTANT_KEEP_AFTER_BAST, models/README.md)
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
mutants=("KEEP_AFTER_BAST t/033_ges_cache.pl")
work=$(mktemp -d /tmp/pgrac_mutants.XXXXXX)
restore() {
    echo "mutants: reinstalling the real build"
    make -C "$root" install >/dev/null
}
trap restore EXIT
status=0
for m in "${mutants[@]}"; do
    name=${m%% *}
    test=${m#* }
    rm -rf "$work/src"
    mkdir -p "$work/src"
    (cd "$root" && tar --exclude=./build --exclude='./build-*' --exclude=./.git -cf - .) |
        tar -C "$work/src" -xf -
    make -C "$work/src" -j"$(nproc)" PGRAC_CMAKE_FLAGS="-DCMAKE_CXX_FLAGS=-DPGRAC_MUTANT_$name" \
        >"$work/$name.build.log" 2>&1 || { tail -30 "$work/$name.build.log"; exit 1; }
    make -C "$work/src" install >/dev/null
    chown -R postgres: "$work"
    chmod 755 "$work"
    start=$(date +%s)
    if runuser -u postgres -- env PG_TEST_TIMEOUT_DEFAULT=15 timeout 600 \
        make -C "$work/src" installcheck PROVE_TESTS="$test" REGRESS= >"$work/$name.log" 2>&1; then
        echo "mutant $name: NOT caught: $test passed with it"
        status=1
    else
        failed=$(grep -h "^\[.*not ok\|^not ok" "$work/src/tmp_check/log/"regress_log_* 2>/dev/null |
            head -3 | sed 's/^\[[^]]*\]([^)]*) //')
        echo "mutant $name: caught by $test in $(($(date +%s) - start)) s; first failures:"
        echo "$failed" | sed 's/^/    /'
        [[ -n $failed ]] || { echo "    (no failed assertion found: see $work/$name.log)"; status=1; }
    fi
done
exit $status
