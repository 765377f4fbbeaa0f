#!/bin/bash
# Runs `pgrac_ctl verify rdma --json` in the soft-RoCE VM and checks that it
# finds rxe0, reports the vendor as "other", runs the real verbs loopback test
# and reports tier2, with exit code 0 (warnings only).
#
#   tests/rxe/verify_rdma_in_vm.sh [path/to/pgrac_ctl]
#
# Environment: PGRAC_CTL (the binary), RXE_VM (run-in-rxe-vm.sh; default
# ../shared/tools/rxe-vm/run-in-rxe-vm.sh beside the repository).
# Exit: 0 pass, 1 a check failed, 77 the VM tool or the binary is missing.
set -euo pipefail

root=$(cd "$(dirname "$0")/../.." && pwd)
ctl=${1:-${PGRAC_CTL:-}}
if [ -z "$ctl" ]; then  # the most recently built of the usual build directories
    for c in "$root/build/bin/pgrac_ctl" "$root/build-ctl/bin/pgrac_ctl"; do
        if [ -x "$c" ] && { [ -z "$ctl" ] || [ "$c" -nt "$ctl" ]; }; then ctl=$c; fi
    done
fi
vm=${RXE_VM:-$root/../shared/tools/rxe-vm/run-in-rxe-vm.sh}
if [ -z "$ctl" ] || [ ! -x "$ctl" ]; then
    echo "verify_rdma_in_vm: SKIP: no pgrac_ctl binary (build it, or pass its path)" >&2
    exit 77
fi
if [ ! -x "$vm" ]; then
    echo "verify_rdma_in_vm: SKIP: $vm not found" >&2
    exit 77
fi
ctl=$(cd "$(dirname "$ctl")" && pwd)/$(basename "$ctl")

out=$(mktemp -d /tmp/pgrac-verify-rxe.XXXXXX)
trap 'rm -rf "$out"' EXIT
"$vm" --out "$out" -c "$ctl verify rdma --json > \$RXEVM_OUT/verify.json 2> \$RXEVM_OUT/verify.err; echo \$? > \$RXEVM_OUT/rc"

python3 - "$out" <<'PY'
import json, sys
out = sys.argv[1]
rc = int(open(f"{out}/rc").read().strip())
doc = json.load(open(f"{out}/verify.json"))
checks = {c["id"]: c for c in doc["checks"]}
lb = doc["loopback"] or {}
problems = []
def expect(cond, what):
    if not cond:
        problems.append(what)
expect(rc == 0, f"exit code {rc}, expected 0")
expect(doc["device"] == "rxe0", f"device {doc['device']!r}, expected 'rxe0'")
expect(doc["vendor"] == "other", f"vendor {doc['vendor']!r}, expected 'other'")
expect(doc["tier"] == "tier2", f"tier {doc['tier']!r}, expected 'tier2' ({doc['tier_reason']})")
expect(doc["live"] is True, "not a live run")
expect(checks["hca"]["result"] == "PASS", f"hca: {checks['hca']}")
expect(checks["loopback"]["result"] == "PASS", f"loopback: {checks['loopback']}")
expect(checks["tier"]["result"] == "PASS", f"tier: {checks['tier']}")
expect(lb.get("ok") is True, f"loopback did not run: {lb}")
expect(lb.get("latency_us_per_iter", 0) > 0, "no latency figure")
expect(lb.get("bandwidth_mb_per_s", 0) > 0, "no bandwidth figure")
for c in doc["checks"]:
    print(f"  {c['check']:<22} {c['result']}  {c['detail']}")
if problems:
    print("verify_rdma_in_vm: FAIL: " + "; ".join(problems))
    sys.exit(1)
print(f"verify_rdma_in_vm: PASS: rxe0, vendor other, tier2, loopback "
      f"{lb['latency_us_per_iter']:.1f} us/iter, {lb['bandwidth_mb_per_s']:.1f} MB/s")
PY
