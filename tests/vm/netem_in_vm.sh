#!/usr/bin/env bash
# Runs tests/netns/netem_test.sh (two engines in two network namespaces, a veth
# pair with tc netem delay and loss) inside the VM of tests/vm/run-in-vm.sh,
# whose kernel has sch_netem and veth, with the test binary built on the host.
# Inside the VM the test must pass: a skip there is a failure here.
#
#   tests/vm/netem_in_vm.sh [path/to/pgrac_unit_tests]      (as root)
#
# Environment: PGRAC_UNIT_TESTS (the binary; default build/pgrac_unit_tests),
# RXE_VM (the VM harness; default tests/vm/run-in-vm.sh), NETEM_VM_TIMEOUT
# (seconds for the whole VM run, default 600).
# Exit: 0 pass; 1 the test failed or skipped in the VM, or the VM failed;
# 77 only when the binary is missing or this is not root.
set -uo pipefail

root=$(cd "$(dirname "$0")/../.." && pwd)
bin=${1:-${PGRAC_UNIT_TESTS:-$root/build/pgrac_unit_tests}}
vm=${RXE_VM:-$root/tests/vm/run-in-vm.sh}
limit=${NETEM_VM_TIMEOUT:-600}
skip() {
    echo "netem_in_vm: SKIP: $*"
    exit 77
}
[[ $(id -u) == 0 ]] || skip "the VM needs root"
[[ -x $bin ]] || skip "no test binary at $bin (build pgrac_unit_tests first)"
bin=$(cd "$(dirname "$bin")" && pwd)/$(basename "$bin")

start=$(date +%s)
"$vm" --no-rxe --timeout "$limit" bash "$root/tests/netns/netem_test.sh" "$bin"
rc=$?
took=$(($(date +%s) - start))
case $rc in
0) echo "netem_in_vm: PASS (${took}s, VM included)" ;;
77) echo "netem_in_vm: FAIL: netem_test.sh skipped inside the VM (${took}s)" ;;
124) echo "netem_in_vm: FAIL: the VM ran out of time (${limit}s)" ;;
125) echo "netem_in_vm: FAIL: the VM could not be set up or booted (${took}s)" ;;
*) echo "netem_in_vm: FAIL: netem_test.sh exited $rc in the VM (${took}s)" ;;
esac
[[ $rc == 0 ]] || exit 1
