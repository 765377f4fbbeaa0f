#!/usr/bin/env bash
# Runs every tests/rxe/*_in_vm.sh (real verbs on soft-RoCE in the project's
# test VM, tests/vm). A skip is not a pass: a script that exits 77 (nothing
# built, extension not installed, not root) fails the run like any other
# non-zero status, with its reason above.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
rc=0
for t in "$here"/*_in_vm.sh; do
    name=$(basename "$t" .sh)
    start=$(date +%s)
    bash "$t"
    status=$?
    took=$(( $(date +%s) - start ))
    case $status in
        0) echo "rxe $name: PASS (${took}s)" ;;
        77) echo "rxe $name: SKIP, which fails the run (${took}s)"; rc=1 ;;
        *) echo "rxe $name: FAIL, exit $status (${took}s)"; rc=1 ;;
    esac
done
exit $rc
