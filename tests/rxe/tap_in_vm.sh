#!/bin/bash
# Runs the RDMA TAP test(s) (default t/030_rdma.pl) in the soft-RoCE VM: the
# installed pgrac_ic (make install on the host; the VM sees the host's /usr)
# with PostgreSQL instances at tier2 over rxe0. The VM's / is the host's,
# read-only under a tmpfs overlay, so the tree is copied to a postgres-owned
# directory in the VM's /tmp; the TAP logs come back through --out.
#
#   tests/rxe/tap_in_vm.sh [t/030_rdma.pl ...]      (as root; also: make check-rdma)
#
# Environment: RXE_VM (the VM harness; default tests/vm/run-in-vm.sh),
# RXE_VM_TIMEOUT (seconds, default 600), PGRAC_TAP_OUT (keep
# the logs there instead of a temporary directory), PGRAC_RXE_PERF=1 (then also
# run ibv_rc_pingpong, and PGRAC_VERBS_PINGPONG if set, on rxe0 in the same VM),
# PGRAC_TEST_CONF (extra postgresql.conf lines for every instance of the test),
# PGRAC_TEST_TIER (the cluster suites' tier, e.g. tier2: t/PgracCluster.pm),
# PGRAC_VM_TEST_TIMEOUT (PG_TEST_TIMEOUT_DEFAULT in the VM, default 30 s; the
# cluster suites need more under TCG).
# Exit: 0 pass, 1 fail, 77 skipped (no VM tool, extension not installed, not root).
set -euo pipefail

root=$(cd "$(dirname "$0")/../.." && pwd)
tests=${*:-t/030_rdma.pl}
vm=${RXE_VM:-$root/tests/vm/run-in-vm.sh}
skip() { echo "tap_in_vm: SKIP: $*" >&2; exit 77; }
[ -x "$vm" ] || skip "$vm not found"
[ "$(id -u)" = 0 ] || skip "the VM tool needs root"
id postgres >/dev/null 2>&1 || skip "no postgres user (scripts/setup)"
command -v pg_config >/dev/null || skip "no pg_config"
[ -f "$(pg_config --pkglibdir)/pgrac_ic.so" ] || skip "pgrac_ic is not installed (make install)"

if [ -n "${PGRAC_TAP_OUT:-}" ]; then
    out=$PGRAC_TAP_OUT
    mkdir -p "$out"
else
    out=$(mktemp -d /tmp/pgrac-tap-rxe.XXXXXX)
    trap 'rm -rf "$out"' EXIT
fi
rm -f "$out/rc" "$out/tap.log"

start=$(date +%s)
"$vm" --timeout "${RXE_VM_TIMEOUT:-600}" --out "$out" -c "
set -u
# The verbs buffer pool of each instance is ~51 MB: allow locking it, and give
# it 2 MB hugepages (the instances take ~26 each).
ulimit -l unlimited
echo 64 > /proc/sys/vm/nr_hugepages 2>/dev/null || true
w=/tmp/pgrac_tap_rxe
rm -rf \$w; mkdir -p \$w/src
cd '$root' && tar --exclude=./build --exclude='./build-*' --exclude=./.git --exclude=./tmp_check \
    --exclude=./tmp_check_regress -cf - . | tar -C \$w/src -xf -
chown -R postgres: \$w
# setpriv, not runuser: runuser's PAM session (pam_limits) would reset memlock.
as_pg() { setpriv --reuid=postgres --regid=postgres --init-groups env HOME=\$w \"\$@\"; }
as_pg sh -c 'echo \"memlock as postgres: \$(ulimit -l)\"' > \$RXEVM_OUT/tap.log
# Copy the instances' logs out while the suites run, so a run cut by the VM's
# time limit still leaves them behind.
mkdir -p \$RXEVM_OUT/log
( while sleep 15; do cp -r \$w/src/tmp_check/log/. \$RXEVM_OUT/log/ 2>/dev/null; done ) &
copier=\$!
as_pg env RXEVM=1 PGRAC_RDMA_ADDR=\$RXEVM_IPADDR PG_TEST_TIMEOUT_DEFAULT=${PGRAC_VM_TEST_TIMEOUT:-30} \
    PGRAC_TEST_TIER='${PGRAC_TEST_TIER:-}' PGRAC_TEST_CONF='${PGRAC_TEST_CONF:-}' PGRAC_RXE_PERF='${PGRAC_RXE_PERF:-}' \
    make -C \$w/src installcheck REGRESS= PROVE_TESTS='$tests' PROVE_FLAGS='--timer -v' \
    >> \$RXEVM_OUT/tap.log 2>&1
echo \$? > \$RXEVM_OUT/rc
kill \$copier 2>/dev/null
if [ -n '${PGRAC_RXE_PERF:-}' ]; then
    # Baselines on the same rxe0 in the same VM (docs/performance.md).
    g=\${RXEVM_GID_INDEX:-1}
    for s in 64 8192 65536; do
        n=500; [ \$s = 65536 ] && n=50
        timeout 120 ibv_rc_pingpong -d rxe0 -g \$g -s \$s -n \$n -p 18600 > \$RXEVM_OUT/ibv_srv_\$s.txt 2>&1 &
        for try in 1 2 3 4 5 6 7 8 9 10; do
            sleep 1
            timeout 120 ibv_rc_pingpong -d rxe0 -g \$g -s \$s -n \$n -p 18600 127.0.0.1 > \$RXEVM_OUT/ibv_cli_\$s.txt 2>&1 && break
        done
        wait
    done
    vp='${PGRAC_VERBS_PINGPONG:-}'
    [ -x \"\$vp\" ] && timeout 300 \$vp --addr \$RXEVM_IPADDR --sizes 64,8192,65536 --iters 500 > \$RXEVM_OUT/verbs_pingpong.txt 2>&1
fi
mkdir -p \$RXEVM_OUT/log
cp -r \$w/src/tmp_check/log/. \$RXEVM_OUT/log/ 2>/dev/null || true
" || true
took=$(( $(date +%s) - start ))

if [ ! -f "$out/rc" ]; then
    echo "tap_in_vm: FAIL: the VM run produced no result (${took}s)"
    [ -f "$out/tap.log" ] && tail -60 "$out/tap.log"
    exit 1
fi
rc=$(cat "$out/rc")
grep -E '^(ok|not ok|# |t/|All tests|Files=|Result)' "$out/tap.log" | grep -vE '^# (Running|Checking|Setting|initializing|Postmaster|connection|executing|Removing|waiting|server|Received|### )' || true
if [ "$rc" != 0 ] || ! grep -q '^Result: PASS' "$out/tap.log"; then
    echo "tap_in_vm: FAIL: exit $rc (${took}s)"
    for f in "$out"/log/*.log; do
        [ -f "$f" ] || continue
        echo "---- $f (last 40 lines)"
        tail -40 "$f"
    done
    exit 1
fi
echo "tap_in_vm: PASS: $tests in the soft-RoCE VM (${took}s)"
