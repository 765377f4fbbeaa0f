#!/bin/bash
# Runs `pgrac_ctl verify rdma` in the soft-RoCE VM and checks that it finds
# rxe0, reports the vendor as "other", runs the real verbs loopback test (RC
# queue pair to itself) and reports tier2, with exit code 0 (warnings only).
# In the same boot it runs the live GoogleTests that skip on a machine without
# RDMA (CtlLoopback.*, RdmaDetect.Live*), when pgrac_unit_tests is built.
#
#   tests/rxe/verify_rdma_in_vm.sh [path/to/pgrac_ctl]
#
# Environment: PGRAC_CTL (the binary), PGRAC_UNIT_TESTS (the test binary;
# default: pgrac_unit_tests in the build directory of pgrac_ctl), RXE_VM
# (the VM harness; default tests/vm/run-in-vm.sh), RXE_TIMEOUT (seconds for the whole VM run, default 420).
# Exit: 0 pass; 1 a check failed, or the VM failed or timed out; 77 only when
# the VM tool or the pgrac_ctl binary is missing.
set -uo pipefail

root=$(cd "$(dirname "$0")/../.." && pwd)
ctl=${1:-${PGRAC_CTL:-}}
if [ -z "$ctl" ]; then  # the most recently built of the usual build directories
    for c in "$root/build/bin/pgrac_ctl" "$root/build-ctl/bin/pgrac_ctl"; do
        if [ -x "$c" ] && { [ -z "$ctl" ] || [ "$c" -nt "$ctl" ]; }; then ctl=$c; fi
    done
fi
vm=${RXE_VM:-$root/tests/vm/run-in-vm.sh}
if [ -z "$ctl" ] || [ ! -x "$ctl" ]; then
    echo "verify_rdma_in_vm: SKIP: no pgrac_ctl binary (build it, or pass its path)" >&2
    exit 77
fi
if [ ! -x "$vm" ]; then
    echo "verify_rdma_in_vm: SKIP: $vm not found" >&2
    exit 77
fi
ctl=$(cd "$(dirname "$ctl")" && pwd)/$(basename "$ctl")
tests=${PGRAC_UNIT_TESTS:-$(dirname "$(dirname "$ctl")")/pgrac_unit_tests}
[ -x "$tests" ] || tests=""
timeout=${RXE_TIMEOUT:-420}

out=$(mktemp -d /tmp/pgrac-verify-rxe.XXXXXX)
trap 'rm -rf "$out"' EXIT
snippet="$ctl verify rdma --json > \$RXEVM_OUT/verify.json 2> \$RXEVM_OUT/verify.err; echo \$? > \$RXEVM_OUT/rc
$ctl verify rdma > \$RXEVM_OUT/verify.txt 2>&1; echo \$? > \$RXEVM_OUT/rc_table"
if [ -n "$tests" ]; then
    snippet="$snippet
$tests --gtest_filter='CtlLoopback.*:RdmaDetect.Live*' > \$RXEVM_OUT/gtest.txt 2>&1; echo \$? > \$RXEVM_OUT/rc_gtest"
fi
start=$(date +%s)
"$vm" --timeout "$timeout" --out "$out" -c "$snippet" > "$out/vm.log" 2>&1
vm_rc=$?
took=$(( $(date +%s) - start ))
if [ "$vm_rc" -ne 0 ] || [ ! -s "$out/rc" ]; then
    case $vm_rc in
        124) why="timed out after ${timeout}s" ;;
        125) why="VM setup or qemu failure" ;;
        *) why="exit $vm_rc" ;;
    esac
    echo "verify_rdma_in_vm: FAIL: the VM run failed ($why, ${took}s); its output:" >&2
    tail -n 40 "$out/vm.log" >&2
    exit 1
fi
echo "verify_rdma_in_vm: VM run took ${took}s"
cat "$out/verify.txt"
echo "(table exit code $(cat "$out/rc_table"))"

python3 - "$out" "${tests:+gtest}" <<'PY'
import json, os, sys
out, want_gtest = sys.argv[1], sys.argv[2] == "gtest"
problems = []
def expect(cond, what):
    if not cond:
        problems.append(what)
rc = int(open(f"{out}/rc").read().strip())
try:
    doc = json.load(open(f"{out}/verify.json"))
except ValueError as e:
    print(f"verify_rdma_in_vm: FAIL: no JSON from verify rdma --json (exit {rc}): {e}")
    print(open(f"{out}/verify.err").read())
    sys.exit(1)
checks = {c["id"]: c for c in doc["checks"]}
lb = doc["loopback"] or {}
expect(rc == 0, f"exit code {rc}, expected 0")
expect(int(open(f"{out}/rc_table").read().strip()) == rc, "the table run's exit code differs")
expect(doc["device"] == "rxe0", f"device {doc['device']!r}, expected 'rxe0'")
expect(doc["vendor"] == "other", f"vendor {doc['vendor']!r}, expected 'other'")
expect(doc["tier"] == "tier2", f"tier {doc['tier']!r}, expected 'tier2' ({doc['tier_reason']})")
expect(doc["live"] is True, "not a live run")
expect([c["id"] for c in doc["checks"]] ==
       ["hca", "vendor", "driver", "hugepages", "numa", "pfc_ecn", "memlock", "loopback", "tier"],
       "checks out of order")
expect(checks["hca"]["result"] == "PASS", f"hca: {checks['hca']}")
expect(checks["vendor"]["detail"].startswith("other: rxe0"), f"vendor: {checks['vendor']}")
expect(checks["loopback"]["result"] == "PASS", f"loopback: {checks['loopback']}")
# No postmaster runs in the VM and pgrac_ctl runs as root: nothing to judge.
expect(checks["memlock"]["result"] == "SKIP", f"memlock: {checks['memlock']}")
expect(checks["tier"]["result"] == "PASS", f"tier: {checks['tier']}")
expect(lb.get("ok") is True, f"loopback did not run: {lb}")
expect(lb.get("device") == "rxe0", f"loopback on {lb.get('device')!r}")
expect(lb.get("gid_index", -1) >= 0, "loopback not addressed by GID (RoCE)")
expect(lb.get("latency_us_per_iter", 0) > 0, "no latency figure")
expect(lb.get("bandwidth_mb_per_s", 0) > 0, "no bandwidth figure")
if want_gtest:
    grc = int(open(f"{out}/rc_gtest").read().strip())
    log = open(f"{out}/gtest.txt").read()
    ran = [l for l in log.splitlines() if l.startswith("[       OK ]") or "SKIPPED ]" in l
           or l.startswith("[  FAILED  ]")]
    print("gtest in the VM:\n  " + "\n  ".join(ran))
    expect(grc == 0, f"live GoogleTests failed (exit {grc}):\n{log[-3000:]}")
    expect("SKIPPED ]" not in log, "a live GoogleTest skipped inside the VM")
if problems:
    print("verify_rdma_in_vm: FAIL: " + "; ".join(problems))
    sys.exit(1)
print(f"verify_rdma_in_vm: PASS: rxe0, vendor other, tier2, loopback "
      f"{lb['latency_us_per_iter']:.1f} us/iter ({lb['latency_iters']} x {lb['latency_size']} B), "
      f"{lb['bandwidth_mb_per_s']:.1f} MB/s ({lb['bandwidth_iters']} x {lb['bandwidth_size']} B), "
      f"path MTU {lb['path_mtu']}")
PY
