# Second stage of the pgrac test VM (tests/vm/run-in-vm.sh), run by /init
# with /bin/sh chrooted in the host's root filesystem, so the host's userland
# (ip, rdma, tc, libibverbs and its rxe provider) does the work.
#
# Sets up lo and dummy0 (10.254.0.1/24), binds a soft-RoCE device rxe0 to
# dummy0 and waits until its port is ACTIVE with an IPv4-mapped GID, then runs
# the command with bash. Writes the command's exit status to state/rc last: the
# host takes a missing rc for a setup failure.
#
# What the command sees: RXEVM=1, RXEVM_NETDEV, RXEVM_IPADDR, RXEVM_IBDEV
# (rxe0) and RXEVM_GID_INDEX when rxe0 is up, RXEVM_OUT with --out.
state=/run/pgrac-vm/state
. $state/settings
export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
export HOME=/root LANG=C.UTF-8 TERM=dumb RXEVM=1
warn() { echo "pgrac-vm: $*" >&2; }

ip link set lo up
# dummy.ko already made dummy0 (numdummies defaults to 1).
[ -e /sys/class/net/dummy0 ] || ip link add dummy0 type dummy
ip addr add 10.254.0.1/24 dev dummy0
ip link set dummy0 up
export RXEVM_NETDEV=dummy0 RXEVM_IPADDR=10.254.0.1

# The GID table has 1024 entries: under emulation every fork costs ~0.1 s, so
# the wait below reads them with shell builtins only.
rxe_ready() {
    port=/sys/class/infiniband/rxe0/ports/1
    tries=0
    while [ $tries -lt 100 ]; do
        st=""
        read -r st <$port/state 2>/dev/null
        case $st in *ACTIVE*)
            for f in $port/gids/*; do
                gid=""
                read -r gid <"$f" 2>/dev/null
                case $gid in 0000:0000:0000:0000:0000:ffff:*)
                    RXEVM_GID_INDEX=${f##*/}
                    return 0 ;;
                esac
            done ;;
        esac
        tries=$((tries + 1))
        sleep 0.1
    done
    return 1
}
if [ "$VM_RXE" = 1 ]; then
    if rdma link add rxe0 type rxe netdev dummy0 >$state/rxe.log 2>&1; then
        export RXEVM_IBDEV=rxe0
        if rxe_ready; then
            export RXEVM_GID_INDEX
        else
            warn "rxe0: no ACTIVE port with an IPv4 GID after 10 s"
        fi
    else
        warn "rdma link add rxe0 type rxe netdev dummy0 failed:"
        cat $state/rxe.log >&2
    fi
fi
[ -n "$VM_OUT" ] && export RXEVM_OUT="$VM_OUT"

cd "$VM_CWD" 2>/dev/null || cd /
cut -d' ' -f1 /proc/uptime >$state/started
bash $state/command
rc=$?
cut -d' ' -f1 /proc/uptime >$state/ended
echo $rc >$state/rc.new && mv $state/rc.new $state/rc
sync
