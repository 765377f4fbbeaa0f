#!/bin/bash
# Runs the verbs transport's unit tests (gtest filter Verbs*) in the
# soft-RoCE VM, over rxe0's address, with a few 2 MB hugepages reserved so the
# buffer pool takes its hugepage path. Passes only if every test ran and
# passed: a skip (no device) is a failure here.
#
#   tests/rxe/verbs_transport_in_vm.sh [path/to/test-binary]
#
# Environment: PGRAC_UNIT_TESTS (the binary; default: the newest of
# build*/pgrac_unit_tests and build-verbs/verbs_unit_tests that has the verbs
# tests), RXE_VM (the VM harness; default tests/vm/run-in-vm.sh), VERBS_FILTER (gtest filter; default Verbs* except the
# no-device test, which skips where a device exists).
# Exit: 0 pass, 1 a test failed or was skipped, 77 the VM tool or binary is missing.
set -euo pipefail

root=$(cd "$(dirname "$0")/../.." && pwd)
bin=${1:-${PGRAC_UNIT_TESTS:-}}
if [ -z "$bin" ]; then
    for c in "$root"/build*/pgrac_unit_tests "$root/build-verbs/verbs_unit_tests"; do
        [ -x "$c" ] || continue
        "$c" --gtest_list_tests --gtest_filter='VerbsPair.*' 2>/dev/null | grep -q PingPong || continue
        if [ -z "$bin" ] || [ "$c" -nt "$bin" ]; then bin=$c; fi
    done
fi
vm=${RXE_VM:-$root/tests/vm/run-in-vm.sh}
filter=${VERBS_FILTER:-Verbs*-VerbsTransport.FactoryFailsClearlyWithoutDevice}
if [ -z "$bin" ] || [ ! -x "$bin" ]; then
    echo "verbs_transport_in_vm: SKIP: no test binary with the verbs tests (build it, or pass its path)" >&2
    exit 77
fi
if [ ! -x "$vm" ]; then
    echo "verbs_transport_in_vm: SKIP: $vm not found" >&2
    exit 77
fi
bin=$(cd "$(dirname "$bin")" && pwd)/$(basename "$bin")

out=$(mktemp -d /tmp/pgrac-verbs-rxe.XXXXXX)
trap 'rm -rf "$out"' EXIT
"$vm" --timeout "${RXE_VM_TIMEOUT:-600}" --out "$out" -c "
echo 16 > /proc/sys/vm/nr_hugepages 2>/dev/null || true
ulimit -l unlimited 2>/dev/null || true
PGRAC_VERBS_ADDR=\$RXEVM_IPADDR $bin --gtest_filter='$filter' --gtest_output=xml:\$RXEVM_OUT/verbs.xml > \$RXEVM_OUT/verbs.log 2>&1
echo \$? > \$RXEVM_OUT/rc" || true

if [ ! -f "$out/rc" ]; then
    echo "verbs_transport_in_vm: FAIL: the VM run produced no result"
    [ -f "$out/verbs.log" ] && tail -50 "$out/verbs.log"
    exit 1
fi
grep -E '^\[ *(status|latency|burst|mr cache|overflow) *\]|^\[  (PASSED|FAILED|SKIPPED) |^\[==========\]' "$out/verbs.log" || true
rc=$(cat "$out/rc")
python3 - "$out/verbs.xml" "$rc" "$out/verbs.log" <<'PY'
import sys, xml.etree.ElementTree as ET
xml_path, rc, log = sys.argv[1], int(sys.argv[2]), sys.argv[3]
try:
    root = ET.parse(xml_path).getroot()
except Exception as e:
    print(f"verbs_transport_in_vm: FAIL: no test report ({e}), exit {rc}")
    print(open(log).read()[-4000:])
    sys.exit(1)
ran = failed = skipped = 0
names = []
for tc in root.iter("testcase"):
    if tc.get("result") == "suppressed" or tc.get("status") == "notrun":
        continue
    ran += 1
    if tc.find("failure") is not None:
        failed += 1
        names.append("FAILED " + tc.get("classname") + "." + tc.get("name"))
    elif tc.find("skipped") is not None or tc.get("result") == "skipped":
        skipped += 1
        names.append("SKIPPED " + tc.get("classname") + "." + tc.get("name"))
transport = sum(1 for tc in root.iter("testcase") if tc.get("classname") == "VerbsPair")
for n in names:
    print("  " + n)
if rc != 0 or failed or skipped or ran == 0 or transport == 0:
    print(f"verbs_transport_in_vm: FAIL: exit {rc}, {ran} ran, {failed} failed, {skipped} skipped")
    if failed or rc != 0:
        print(open(log).read()[-6000:])
    sys.exit(1)
print(f"verbs_transport_in_vm: PASS: {ran} tests ran and passed in the VM ({transport} over rxe0)")
PY
