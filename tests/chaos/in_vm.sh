#!/usr/bin/env bash
# The GES chaos checker (tests/chaos/run.sh) at tier2, over verbs on soft-RoCE, in the
# project's VM (tests/vm/run-in-vm.sh): three instances in the VM's root namespace on
# rxe0's netdev address (RXEVM_IPADDR) with a port each, cluster.interconnect_strict = on,
# the process faults (listener and LMS kills, short and long freezes, kill -9 and
# restart, rolling peer_timeout reloads); the network faults and the impostor, which need
# a namespace per node, are left out and the run says so (tests/chaos/README.md). The results come back through --out.
#
#   tests/chaos/in_vm.sh [run.sh options]    e.g. --duration 120 --seed 7 --pgbin DIR
#
# As root. Without --pgbin the VM uses the installed extension (the host's /usr).
# Default load 120 s (TCG is slow: keep it short). Environment: RXE_VM (the VM
# harness), RXE_VM_TIMEOUT (seconds; default the load plus 840), CHAOS_VM_OUT (keep
# the log and the results directory there, also on success; otherwise a temporary
# directory, kept only when the run fails).
# Exit: run.sh's (0 pass, 1 fail, 2 harness failure, 77 cannot run inside the VM), or
# 1 if the VM gave no result, 77 if the VM cannot be started here.
set -uo pipefail

root=$(cd "$(dirname "$0")/../.." && pwd)
vm=${RXE_VM:-$root/tests/vm/run-in-vm.sh}
skip() { echo "chaos_in_vm: SKIP: $*"; exit 77; }
[[ -x $vm ]] || skip "$vm not found"
[[ $(id -u) == 0 ]] || skip "the VM tool needs root"

duration=120
args=("$@")
for ((k = 0; k < ${#args[@]}; k++)); do
    case ${args[k]} in
    --duration) duration=${args[k + 1]:-120} ;;
    --duration=*) duration=${args[k]#--duration=} ;;
    --tier | --tier=* | --ic-addr | --ic-addr=* | --results | --results=*)
        echo "chaos_in_vm: ${args[k]} is set by this script"; exit 2 ;;
    esac
done
duration=${duration%.*}
[[ $duration =~ ^[0-9]+$ ]] || { echo "chaos_in_vm: --duration must be a number of seconds"; exit 2; }
has_duration=0
for a in "$@"; do [[ $a == --duration || $a == --duration=* ]] && has_duration=1; done
[[ $has_duration == 1 ]] || set -- --duration "$duration" "$@"

keep=0
if [[ -n ${CHAOS_VM_OUT:-} ]]; then
    out=$CHAOS_VM_OUT
    keep=1
    mkdir -p "$out"
    set -- "$@" --keep
else
    out=$(mktemp -d /tmp/pgrac-chaos-vm.XXXXXX)
fi
rm -rf "$out/rc" "$out/chaos.log" "$out/results"
quoted=$(printf '%q ' "$@")

start=$(date +%s)
# The instances' verbs buffer pools (about 51 MB each) must be lockable: ulimit -l here,
# and run.sh starts them with setpriv, which keeps it (runuser's PAM session would not).
# 2 MB hugepages for them (about 26 each).
"$vm" --timeout "${RXE_VM_TIMEOUT:-$((duration + 840))}" --out "$out" -c "
ulimit -l unlimited
echo 96 > /proc/sys/vm/nr_hugepages 2>/dev/null || true
cd '$root'
bash tests/chaos/run.sh --tier tier2 --ic-addr \"\$RXEVM_IPADDR\" --results \"\$RXEVM_OUT/results\" \
    $quoted 2>&1 | tee \"\$RXEVM_OUT/chaos.log\"
echo \${PIPESTATUS[0]} > \"\$RXEVM_OUT/rc\"
"
vmrc=$?
took=$(($(date +%s) - start))

if [[ ! -f $out/rc ]]; then
    echo "chaos_in_vm: FAIL: the VM run produced no result (VM exit $vmrc, ${took}s; log and results in $out)"
    exit 1
fi
rc=$(cat "$out/rc")
case $rc in
0) echo "chaos_in_vm: PASS at tier2 in the soft-RoCE VM (${took}s)" ;;
77) echo "chaos_in_vm: could not run in the VM (${took}s; see above)" ;;
*) echo "chaos_in_vm: FAIL: run.sh exit $rc (${took}s); log and results in $out"; keep=1 ;;
esac
[[ $keep == 1 ]] || rm -rf "$out"
exit "$rc"
