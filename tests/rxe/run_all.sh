#!/usr/bin/env bash
# Runs every tests/rxe/*_in_vm.sh (real verbs on soft-RoCE in a qemu VM).
# A script that exits 77 was skipped (no VM tool, nothing built); any other
# non-zero status fails the run.
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
        77) echo "rxe $name: SKIP (${took}s)" ;;
        *) echo "rxe $name: FAIL, exit $status (${took}s)"; rc=1 ;;
    esac
done
exit $rc
