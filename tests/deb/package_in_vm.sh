#!/usr/bin/env bash
# Builds the Debian package on the host (scripts/build-deb: dpkg-buildpackage
# -us -uc -b from a copy, lintian), then installs, smoke-tests, runs its
# autopkgtest (debian/tests) and removes it in the project's test VM
# (tests/vm/run-in-vm.sh), never on the host: the
# VM's / is the host's under a tmpfs overlay that is thrown away at power-off.
# The guest half is smoke_in_guest.sh (what it checks is listed there).
#
#   tests/deb/package_in_vm.sh            (as root)
#
# The host checks afterwards that it was left alone: a probe file the guest
# wrote to its / is not on the host's disk, and the host's dpkg still has
# the package in the state it had before (not installed, normally).
#
# Environment: PGRAC_DEB (an already built .deb: skips the build),
# PGRAC_DEB_DIR (where scripts/build-deb builds; default /tmp/pgrac-deb),
# RXE_VM (the VM harness), DEB_VM_TIMEOUT (seconds for the VM, default 1200),
# PGRAC_VM_NO_APT=1 (never apt-get install autopkgtest on the host).
# Exit: 0 pass; 1 a check failed, the build failed, or the VM failed.
set -uo pipefail

root=$(cd "$(dirname "$0")/../.." && pwd)
vm=${RXE_VM:-$root/tests/vm/run-in-vm.sh}
timeout=${DEB_VM_TIMEOUT:-1200}
pkg=postgresql-15-pgrac-ic
say() { echo "package_in_vm: $*"; }
out=""
fail() {
    say "FAIL: $*"
    [[ -n $out ]] && say "the VM's logs are in $out"
    exit 1
}
[[ $(id -u) == 0 ]] || fail "run as root (the build's dependencies and the VM need it)"
start=$(date +%s)

host_status() { dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null || true; }
before=$(host_status)

# The guest runs the host's userland, so the autopkgtest it runs on the
# installed package (debian/tests) must be installed here.
if ! dpkg-query -W -f='${Status}' autopkgtest 2>/dev/null | grep -q "install ok installed"; then
    [[ ${PGRAC_VM_NO_APT:-0} != 1 ]] || fail "autopkgtest is not installed (scripts/setup installs it)"
    say "installing autopkgtest on the host (the guest runs it)"
    DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends autopkgtest \
        >/tmp/pgrac-deb-apt.log 2>&1 || {
        apt-get update >>/tmp/pgrac-deb-apt.log 2>&1
        DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends autopkgtest \
            >>/tmp/pgrac-deb-apt.log 2>&1
    } || fail "apt-get install autopkgtest failed (see /tmp/pgrac-deb-apt.log)"
fi

# ---- build on the host
deb=${PGRAC_DEB:-}
if [[ -z $deb ]]; then
    deb=$("$root/scripts/build-deb" "${PGRAC_DEB_DIR:-/tmp/pgrac-deb}" | tail -n 1) ||
        fail "scripts/build-deb failed (see above)"
fi
[[ -f $deb ]] || fail "no package at '$deb'"
say "package: $deb ($(($(date +%s) - start))s so far)"

# ---- install, smoke test and remove in the VM
out=$(mktemp -d /tmp/pgrac-deb-vm.XXXXXX) # kept when the test fails
cp "$deb" "$out/" # in the --out share: the guest reads it from there
probe=/pgrac-deb-overlay-probe.$$.$RANDOM
vm_start=$(date +%s)
"$vm" --timeout "$timeout" --out "$out" -- \
    bash "$root/tests/deb/smoke_in_guest.sh" "$out/$(basename "$deb")" "$probe" 2>&1 |
    tee "$out/vm.log"
vm_rc=${PIPESTATUS[0]}
say "VM run: exit $vm_rc in $(($(date +%s) - vm_start))s"

# ---- the host was left alone, whatever happened in the VM
[[ ! -e $probe ]] || { rm -f "$probe"; fail "the guest's probe $probe reached the host's disk"; }
after=$(host_status)
[[ $after == "$before" ]] || fail "the host's dpkg state of $pkg changed: '$before' -> '$after'"
say "the host is untouched (no probe file; $pkg: '${after:-not known to dpkg}')"

case $vm_rc in
0) ;;
124) fail "the VM ran out of time (${timeout}s)" ;;
125) fail "the VM could not be booted or gave no status" ;;
*) fail "the smoke test failed in the VM (exit $vm_rc)" ;;
esac

# ---- pgrac_ctl verify rdma, as the guest ran it
python3 - "$out" <<'PY' || fail "pgrac_ctl verify rdma on rxe0"
import json, sys
out = sys.argv[1]
rc = int(open(f"{out}/verify.rc").read())
try:
    doc = json.load(open(f"{out}/verify.json"))
except ValueError as e:
    print(f"no JSON from pgrac_ctl verify rdma (exit {rc}): {e}")
    print(open(f"{out}/verify.err").read())
    sys.exit(1)
lb = doc.get("loopback") or {}
problems = [what for ok, what in [
    (rc == 0, f"exit {rc}"),
    (doc.get("device") == "rxe0", f"device {doc.get('device')!r}"),
    (doc.get("tier") == "tier2", f"tier {doc.get('tier')!r} ({doc.get('tier_reason')})"),
    (lb.get("ok") is True, f"loopback {lb}"),
] if not ok]
if problems:
    print("verify rdma: " + "; ".join(problems))
    sys.exit(1)
print(f"package_in_vm: pgrac_ctl verify rdma: rxe0, tier2, loopback "
      f"{lb['latency_us_per_iter']:.1f} us/iter, {lb['bandwidth_mb_per_s']:.1f} MB/s")
PY
rm -rf "$out"
say "PASS in $(($(date +%s) - start))s"
