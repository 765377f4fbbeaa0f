#!/bin/bash
# Regenerates the recorded trees here (only the files pgrac_ctl and src/tiers read),
# following the kernel layouts of Documentation/ABI/stable/sysfs-class-infiniband,
# sysfs-kernel-mm-hugepages, sysfs-devices-node and proc(5) /proc/irq. Run from anywhere.
cd "$(dirname "$0")" && rm -rf no_hca mlx5_ib_good mlx5_roce_wrong_numa non_mlx5
set -e
w() { mkdir -p "$(dirname "$1")"; printf '%s\n' "$2" > "$1"; }
# pci_dev ROOT PCIPATH VENDOR DEVICE NODE DRIVER IRQ_FIRST IRQ_LAST
pci_dev() {
  local r=$1 p=$2
  w "$r/sys/devices/$p/vendor" "$3"; w "$r/sys/devices/$p/device" "$4"; w "$r/sys/devices/$p/numa_node" "$5"
  # (no empty directories: git would drop them) the driver's dir links to its module
  mkdir -p "$r/sys/bus/pci/drivers/$6"; w "$r/sys/module/$6/initstate" live
  ln -s "../../../../module/$6" "$r/sys/bus/pci/drivers/$6/module"
  ln -s "../../../../bus/pci/drivers/$6" "$r/sys/devices/$p/driver"
  for i in $(seq "$7" "$8"); do w "$r/sys/devices/$p/msi_irqs/$i" msix; done
}
# ib_dev ROOT PCIPATH NAME UVERBS
ib_dev() {
  local r=$1 p=$2 n=$3 d="$1/sys/devices/$2/infiniband/$3"
  mkdir -p "$d" "$r/sys/class/infiniband"
  ln -s "../../devices/$p/infiniband/$n" "$r/sys/class/infiniband/$n"
  ln -s "../../../$(basename "$p")" "$d/device"
  w "$d/node_type" "1: CA"
  mkdir -p "$r/sys/devices/$p/infiniband_verbs/$4" "$r/sys/class/infiniband_verbs"
  w "$r/sys/devices/$p/infiniband_verbs/$4/ibdev" "$n"
  ln -s "../../devices/$p/infiniband_verbs/$4" "$r/sys/class/infiniband_verbs/$4"
  w "$r/sys/class/infiniband_verbs/abi_version" 6
}
# port ROOT PCIPATH NAME STATE LINK_LAYER RATE LID
port() {
  local d="$1/sys/devices/$2/infiniband/$3/ports/1"
  w "$d/state" "$4"; w "$d/phys_state" "5: LinkUp"; w "$d/link_layer" "$5"; w "$d/rate" "$6"; w "$d/lid" "$7"
}
# roce_gids ROOT PCIPATH NAME NETDEV IPV4HEX(2 groups)
roce_gids() {
  local d="$1/sys/devices/$2/infiniband/$3/ports/1"
  w "$d/gids/0" "fe80:0000:0000:0000:0e42:a1ff:fe5c:7d10"; w "$d/gid_attrs/types/0" "IB/RoCE v1"
  w "$d/gids/1" "fe80:0000:0000:0000:0e42:a1ff:fe5c:7d10"; w "$d/gid_attrs/types/1" "RoCE v2"
  w "$d/gids/2" "0000:0000:0000:0000:0000:ffff:$5"; w "$d/gid_attrs/types/2" "IB/RoCE v1"
  w "$d/gids/3" "0000:0000:0000:0000:0000:ffff:$5"; w "$d/gid_attrs/types/3" "RoCE v2"
  w "$d/gids/4" "0000:0000:0000:0000:0000:0000:0000:0000"
  for i in 0 1 2 3; do w "$d/gid_attrs/ndevs/$i" "$4"; done
  w "$1/sys/devices/$2/net/$4/operstate" up; mkdir -p "$1/sys/class/net"
  ln -s "../../devices/$2/net/$4" "$1/sys/class/net/$4"
}
hp() { w "$1/sys/kernel/mm/hugepages/hugepages-2048kB/nr_hugepages" "$2"; w "$1/sys/kernel/mm/hugepages/hugepages-2048kB/free_hugepages" "$3"
       w "$1/sys/kernel/mm/hugepages/hugepages-1048576kB/nr_hugepages" "$4"; w "$1/sys/kernel/mm/hugepages/hugepages-1048576kB/free_hugepages" "$5"; }
node() { w "$1/sys/devices/system/node/node$2/cpulist" "$3"; }
irqs() { local r=$1 first=$2 last=$3; shift 3; local i=0; local aff=("$@")
  for n in $(seq "$first" "$last"); do w "$r/proc/irq/$n/smp_affinity_list" "${aff[$((i % ${#aff[@]}))]}"; i=$((i+1)); done; }
kernel() { w "$1/proc/sys/kernel/osrelease" "6.1.0-56-amd64"; }
# maps ROOT RDMA_CORE: the libibverbs that pgrac_ctl (or the postmaster) has mapped, as
# proc/self/maps shows it; its file name carries rdma-core's version (libibverbs.so.1.14.<v>)
maps() { local lib="/usr/lib/x86_64-linux-gnu/libibverbs.so.1.14.$2"
  printf '%s\n' "55d0c0a00000-55d0c0a9c000 r--p 00000000 fe:01 1311033                    /usr/local/bin/pgrac_ctl" \
    "7f2b4c1d0000-7f2b4c1d6000 r--p 00000000 fe:01 1050962                    $lib" \
    "7f2b4c1d6000-7f2b4c1e9000 r-xp 00006000 fe:01 1050962                    $lib" \
    "7ffd5e3f1000-7ffd5e412000 rw-p 00000000 00:00 0                          [stack]" > "$1/proc/self/maps.tmp"
  mv "$1/proc/self/maps.tmp" "$1/proc/self/maps"; }
# proc_entry ROOT PID PPID UID CAPEFF MEMLOCK_SOFT MEMLOCK_HARD [COMM]: a process as
# pgrac_ctl's locked-memory check reads it (proc(5): comm, status, limits)
proc_entry() { local d="$1/proc/$2"
  w "$d/comm" "${8:-postgres}"
  printf 'Name:\t%s\nUmask:\t0077\nState:\tS (sleeping)\nTgid:\t%s\nPid:\t%s\nPPid:\t%s\nUid:\t%s\t%s\t%s\t%s\nGid:\t%s\t%s\t%s\t%s\nCapInh:\t0000000000000000\nCapPrm:\t%s\nCapEff:\t%s\n' \
    "${8:-postgres}" "$2" "$2" "$3" "$4" "$4" "$4" "$4" "$4" "$4" "$4" "$4" "$5" "$5" > "$d/status"
  printf '%-26s%-21s%-21s%-10s\n' "Limit" "Soft Limit" "Hard Limit" "Units" \
    "Max cpu time" unlimited unlimited seconds "Max open files" 1024 524288 files \
    "Max locked memory" "$6" "$7" bytes "Max address space" unlimited unlimited bytes > "$d/limits"; }

# no_hca: a four-CPU box without RDMA hardware
R=no_hca; hp $R 0 0 0 0; node $R 0 0-3; kernel $R; mkdir -p $R/proc/self; maps $R 44.0; w "$R/proc/irq/24/smp_affinity_list" 0-3

# mlx5_ib_good: ConnectX-6 InfiniBand on node 0, 2 MB hugepages, IRQs on node 0's CPUs
R=mlx5_ib_good; P=pci0000:00/0000:00:02.0/0000:3b:00.0
pci_dev $R $P 0x15b3 0x101b 0 mlx5_core 98 105; ib_dev $R $P mlx5_0 uverbs0
w "$R/sys/devices/$P/infiniband/mlx5_0/fw_ver" 20.39.1002
w "$R/sys/devices/$P/infiniband/mlx5_0/hca_type" MT4123
w "$R/sys/devices/$P/infiniband/mlx5_0/board_id" MT_0000000223
port $R $P mlx5_0 "4: ACTIVE" InfiniBand "200 Gb/sec (4X HDR)" 0x3
hp $R 1024 1000 0 0; node $R 0 0-7; node $R 1 8-15; kernel $R; mkdir -p $R/proc/self; maps $R 50.0
irqs $R 98 105 0 1 2 3 4 5 6 7
# a postmaster (systemd's child, LimitMEMLOCK=infinity) with one backend, and a second
# one whose limit is tiny but which has CAP_IPC_LOCK
w "$R/proc/1/comm" systemd
proc_entry $R 4242 1 109 0000000000000000 unlimited unlimited
proc_entry $R 4250 4242 109 0000000000000000 8388608 8388608
proc_entry $R 5151 1 110 0000000000004000 65536 65536

# mlx5_roce_wrong_numa: ConnectX-5 RoCE v2 on node 1, its IRQs on node 0, DCQCN on prio 3
R=mlx5_roce_wrong_numa; P=pci0000:ae/0000:ae:00.0/0000:af:00.0
pci_dev $R $P 0x15b3 0x1017 1 mlx5_core 130 137; ib_dev $R $P mlx5_0 uverbs0
w "$R/sys/devices/$P/infiniband/mlx5_0/fw_ver" 16.35.2000
w "$R/sys/devices/$P/infiniband/mlx5_0/hca_type" MT4119
w "$R/sys/devices/$P/infiniband/mlx5_0/board_id" MT_0000000080
port $R $P mlx5_0 "4: ACTIVE" Ethernet "100 Gb/sec (4X EDR)" 0x0
roce_gids $R $P mlx5_0 ens1f0np0 "c0a8:0a0b"
for dir in roce_np roce_rp; do for p in 0 1 2 3 4 5 6 7; do
  w "$R/sys/devices/$P/net/ens1f0np0/ecn/$dir/enable/$p" "$([ $p = 3 ] && echo 1 || echo 0)"; done; done
hp $R 512 512 4 4; node $R 0 0-7; node $R 1 8-15; kernel $R; mkdir -p $R/proc/self; maps $R 50.0
irqs $R 130 137 0 1 2 3 4 5 6 7
# a postmaster with systemd's default locked-memory limit (8 MiB): too little
proc_entry $R 3100 1 109 0000000000000000 8388608 8388608

# non_mlx5: Broadcom BCM57508 (bnxt_re) RoCE v2, no hugepages, IRQs spread over both nodes
R=non_mlx5; P=pci0000:00/0000:00:03.1/0000:41:00.0
pci_dev $R $P 0x14e4 0x1750 0 bnxt_en 60 63; ib_dev $R $P bnxt_re0 uverbs0
w "$R/sys/devices/$P/infiniband/bnxt_re0/fw_ver" 222.0.110.0
w "$R/sys/devices/$P/infiniband/bnxt_re0/hca_type" 0x1750
port $R $P bnxt_re0 "4: ACTIVE" Ethernet "100 Gb/sec (4X EDR)" 0x0
roce_gids $R $P bnxt_re0 ens2f0np0 "0a01:0005"
hp $R 0 0 0 0; node $R 0 0-3; node $R 1 4-7; kernel $R; mkdir -p $R/proc/self; maps $R 39.0
irqs $R 60 63 0-7 0-7 0-3 0-7
# a postmaster started from a login whose limit fits the pool (50 MiB), not the queues
proc_entry $R 2200 2190 109 0000000000000000 52428800 unlimited
w "$R/proc/2190/comm" bash
