#!/usr/bin/env bash
# GES safety under faults: a 3-instance pgrac_ic cluster in network namespaces, lock
# clients on every node, faults (worker kills, TCP resets, freezes, kill -9, partitions,
# packet loss, rolling peer_timeout reloads, a second instance with a member's node id),
# then a check that no global lock was ever held in conflicting modes by
# two holders at once, and that no interconnect RPC probe ran twice or out of order and no
# one-way note was delivered twice. See tests/chaos/README.md.
#
#   tests/chaos/run.sh [--seed N] [--duration SECONDS] [--nodes 3] [--keep] [--pgbin DIR] [...]
#   tests/chaos/run.sh --tier tier2 [--ic-addr ADDR] ...   (verbs: see in_vm.sh)
#
# As root, against the installed extension (or the one of the PostgreSQL tree of --pgbin,
# see private_pg.sh). --tier tier2 runs every node in this namespace on the RDMA netdev's
# address (--ic-addr, default $PGRAC_RDMA_ADDR or $RXEVM_IPADDR) with the process faults
# only; tests/chaos/in_vm.sh runs it in the soft-RoCE VM. Exit 0 = safe and live, 1 = violations,
# hung calls, no progress or duplicate/reordered delivery, 2 = the harness failed,
# 77 = cannot run here.
set -uo pipefail

here=$(cd "$(dirname "$0")" && pwd)
py=/usr/bin/python3
pgbin=/usr/lib/postgresql/15/bin

skip() {
    echo "chaos: SKIP: $*"
    exit 77
}

duration=480
tier=tier3
ic_addr=${PGRAC_RDMA_ADDR:-${RXEVM_IPADDR:-}}
args=("$@")
for ((k = 0; k < ${#args[@]}; k++)); do
    case ${args[k]} in
    --duration) duration=${args[k + 1]:-480} ;;
    --duration=*) duration=${args[k]#--duration=} ;;
    --pgbin) pgbin=${args[k + 1]:-$pgbin} ;;
    --pgbin=*) pgbin=${args[k]#--pgbin=} ;;
    --tier) tier=${args[k + 1]:-} ;;
    --tier=*) tier=${args[k]#--tier=} ;;
    --ic-addr) ic_addr=${args[k + 1]:-} ;;
    --ic-addr=*) ic_addr=${args[k]#--ic-addr=} ;;
    -h | --help) PYTHONPATH=$here exec $py -m chaos.main --help --workdir x --tag x ;;
    esac
done
duration=${duration%.*}
[[ $duration =~ ^[0-9]+$ ]] || { echo "chaos: --duration must be a number of seconds"; exit 2; }

case $tier in
tier3) verbs=0 ;;
tier1 | tier2) verbs=1 ;;
*) echo "chaos: --tier must be tier3, tier2 or tier1"; exit 2 ;;
esac
if [[ $verbs == 1 ]]; then
    [[ $(id -u) == 0 ]] || skip "needs root (setpriv to postgres with the memlock limit, signals to postgres)"
    for tool in setpriv timeout; do
        command -v $tool >/dev/null || skip "no $tool(1) (apt-get install -y util-linux coreutils)"
    done
    [[ -n $ic_addr ]] || skip "$tier needs the RDMA netdev's address (--ic-addr, PGRAC_RDMA_ADDR or RXEVM_IPADDR)"
    ls /sys/class/infiniband/* >/dev/null 2>&1 || skip "no RDMA device (/sys/class/infiniband is empty): $tier runs in the soft-RoCE VM, tests/chaos/in_vm.sh"
else
    [[ $(id -u) == 0 ]] || skip "needs root (network namespaces, iptables, runuser, signals to postgres)"
    for tool in ip iptables ss runuser timeout; do
        command -v $tool >/dev/null || skip "no $tool(8) (apt-get install -y iproute2 iptables util-linux coreutils)"
    done
fi
[[ -x $py ]] || skip "no $py"
$py -c 'import psycopg2' 2>/dev/null || skip "no psycopg2 for $py (apt-get install -y python3-psycopg2)"
id postgres >/dev/null 2>&1 || skip "no postgres user (scripts/setup)"
[[ -x $pgbin/initdb && -x $pgbin/pg_config ]] || skip "no PostgreSQL 15 in $pgbin"
pkglib=$($pgbin/pg_config --pkglibdir 2>/dev/null)
[[ -f $pkglib/pgrac_ic.so ]] || skip "pgrac_ic is not installed in $pkglib (make && make install)"

PYTHONDONTWRITEBYTECODE=1 PYTHONPATH=$here $py -m chaos.selftest >/dev/null || {
    echo "chaos: the checker's self-test fails (PYTHONPATH=$here $py -m chaos.selftest)"
    exit 2
}

tag="pgchaos$$"
if [[ $verbs == 0 ]]; then
    probe="${tag}probe"
    ip netns add "$probe" 2>/dev/null || skip "ip netns add is not permitted here"
    probe_ok=1
    ip -n "$probe" link add br0 type bridge 2>/dev/null || probe_ok="no bridge device support"
    if [[ $probe_ok == 1 ]]; then
        ip netns exec "$probe" iptables -w 5 -A OUTPUT -m statistic --mode random --probability 0.1 \
            -j DROP 2>/dev/null || probe_ok="iptables (with the statistic match) does not work in a namespace"
    fi
    ip netns del "$probe"
    [[ $probe_ok == 1 ]] || skip "$probe_ok"
fi

workdir=$(mktemp -d /tmp/pgchaos.XXXXXX)
child=
cleanup() {
    if [[ -n $child ]] && kill -0 "$child" 2>/dev/null; then
        kill -TERM "$child" 2>/dev/null
        for _ in $(seq 1 60); do kill -0 "$child" 2>/dev/null || break; sleep 1; done
        kill -KILL "$child" 2>/dev/null
    fi
    PYTHONDONTWRITEBYTECODE=1 PYTHONPATH=$here timeout 120 $py -m chaos.cleanup "$workdir" "$tag"
}
trap cleanup EXIT
trap 'exit 130' INT TERM HUP

# Setup, faults that run past the end of the load, the drain and teardown: 10 minutes
# on top of the load is far more than they take.
limit=$((duration + 600))
PYTHONDONTWRITEBYTECODE=1 PYTHONPATH=$here timeout -k 30 $limit \
    $py -m chaos.main --workdir "$workdir" --tag "$tag" "$@" &
child=$!
wait "$child"
rc=$?
child=
case $rc in
124) echo "chaos: the run did not finish within $limit s"; rc=2 ;;
137) echo "chaos: the run was killed"; rc=2 ;;
esac
exit $rc
