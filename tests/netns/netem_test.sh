#!/usr/bin/env bash
# Two engines in two network namespaces joined by a veth pair with netem
# (delay 2ms, loss 5%) on both ends: runs the gtest case
# EngineNetem.StreamIsExactlyOnceAndInOrderUnderLossAndDelay once per namespace
# (node 1 streams messages and RPCs and breaks its connections now and then;
# node 2 checks exactly-once, in-order delivery and reports the verdict).
#
#   bash tests/netns/netem_test.sh [path/to/pgrac_unit_tests]
#
# The binary defaults to $PGRAC_UNIT_TESTS, else build/pgrac_unit_tests under
# the source tree. Exit 0 = pass, 77 = skipped (not root, no netns, no netem,
# no binary), anything else = failure. The namespaces (and the veth pair,
# which lives in them) are removed on every exit. Bounded: < 2 minutes.
# Where the host kernel has no sch_netem, tests/vm/netem_in_vm.sh runs it in
# the project's test VM, whose kernel has it.
set -uo pipefail

here=$(cd "$(dirname "$0")" && pwd)
src=$(cd "$here/../.." && pwd)
bin=${1:-${PGRAC_UNIT_TESTS:-$src/build/pgrac_unit_tests}}
filter='EngineNetem.*'
ns1="pgrac_netem1_$$"
ns2="pgrac_netem2_$$"
addr1=10.231.0.1
addr2=10.231.0.2
port=${PGRAC_NETEM_PORT:-7491}
limit_s=100

skip() {
    echo "netem_test: SKIP: $*"
    exit 77
}
fail() {
    echo "netem_test: FAIL: $*"
    exit 1
}

[[ $(id -u) == 0 ]] || skip "needs root (network namespaces, tc)"
command -v ip >/dev/null || skip "no ip(8)"
command -v tc >/dev/null || skip "no tc(8)"
[[ -x $bin ]] || skip "no test binary at $bin (build pgrac_unit_tests first)"

cleanup() {
    ip netns del "$ns1" 2>/dev/null
    ip netns del "$ns2" 2>/dev/null
}
trap cleanup EXIT
trap 'exit 130' INT TERM

ip netns add "$ns1" 2>/dev/null || skip "ip netns add is not permitted here"
ip netns add "$ns2" 2>/dev/null || skip "ip netns add is not permitted here"
ip -n "$ns1" link add veth_pgrac1 type veth peer name veth_pgrac2 netns "$ns2" ||
    skip "cannot create a veth pair"
ip -n "$ns1" addr add "$addr1/24" dev veth_pgrac1 || fail "address on ns1"
ip -n "$ns2" addr add "$addr2/24" dev veth_pgrac2 || fail "address on ns2"
for ns in "$ns1" "$ns2"; do
    ip -n "$ns" link set lo up || fail "lo up in $ns"
done
ip -n "$ns1" link set veth_pgrac1 up || fail "veth up in ns1"
ip -n "$ns2" link set veth_pgrac2 up || fail "veth up in ns2"
ip netns exec "$ns1" tc qdisc add dev veth_pgrac1 root netem delay 2ms loss 5% 2>/dev/null ||
    skip "tc netem is not available (sch_netem module?)"
ip netns exec "$ns2" tc qdisc add dev veth_pgrac2 root netem delay 2ms loss 5% ||
    fail "netem on ns2"
if command -v ping >/dev/null; then
    ip netns exec "$ns1" ping -c 5 -i 0.2 -W 2 "$addr2" >/dev/null 2>&1 ||
        fail "no connectivity between the namespaces"
fi

run_node() {
    local ns=$1 node=$2 log=$3
    ip netns exec "$ns" env PGRAC_NETEM_NODE="$node" PGRAC_NETEM_ADDR1="$addr1" \
        PGRAC_NETEM_ADDR2="$addr2" PGRAC_NETEM_PORT="$port" \
        timeout -k 5 "$limit_s" "$bin" --gtest_filter="$filter" --gtest_brief=0 >"$log" 2>&1
}

logdir=$(mktemp -d /tmp/pgrac_netem.XXXXXX)
start=$(date +%s)
run_node "$ns2" 2 "$logdir/node2.log" &
pid2=$!
run_node "$ns1" 1 "$logdir/node1.log" &
pid1=$!
wait "$pid1"
rc1=$?
wait "$pid2"
rc2=$?
took=$(($(date +%s) - start))

show() {
    echo "---- node $1 (last 40 lines)"
    tail -40 "$logdir/node$1.log"
}
if grep -q '\[  SKIPPED \]' "$logdir/node1.log" && ! grep -q '\[       OK \]' "$logdir/node1.log"; then
    show 1
    rm -rf "$logdir"
    skip "the test binary skipped the case (environment not seen?)"
fi
if [[ $rc1 != 0 || $rc2 != 0 ]] || ! grep -q '\[       OK \]' "$logdir/node1.log" ||
    ! grep -q '\[       OK \]' "$logdir/node2.log"; then
    show 1
    show 2
    echo "netem_test: FAIL (node 1 exit $rc1, node 2 exit $rc2, ${took}s; logs in $logdir)"
    exit 1
fi
rm -rf "$logdir"
echo "netem_test: PASS (${took}s, delay 2ms loss 5% each way)"
exit 0
