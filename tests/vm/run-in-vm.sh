#!/usr/bin/env bash
# run-in-vm.sh - runs a command in a disposable qemu VM that boots Debian's
# packaged kernel (linux-image-amd64), for the tests that the host kernel
# cannot run: real verbs on soft-RoCE (rdma_rxe, device rxe0) and tc netem
# (sch_netem) between network namespaces (veth). See tests/vm/README.md.
#
# The guest's / is the host's / (9p, read-only) under a tmpfs overlay: it runs
# the host's binaries and libraries, and whatever it writes is thrown away,
# except in the directories given with --out or --rw.
#
# Usage: tests/vm/run-in-vm.sh [options] [--] CMD [ARG...]
#        tests/vm/run-in-vm.sh [options] -c 'shell snippet'
#        tests/vm/run-in-vm.sh --prepare
#
# Options:
#   -c SNIPPET        run SNIPPET with bash -c instead of CMD ARG...
#   --out DIR         host DIR, read-write at the same path in the guest (created
#                     if missing); the command finds it in $RXEVM_OUT
#   --rw DIR          another read-write host directory (repeatable)
#   --env NAME=VALUE  environment variable for the command (repeatable)
#   --no-rxe          no rxe0 (the modules are loaded all the same)
#   --no-overlay      the guest's / stays read-only (tmpfs on /tmp, /var/tmp)
#   --accel auto|kvm|tcg   auto (default): KVM if the CPU has vmx/svm, /dev/kvm is
#                     usable and a probe boot works (probed once, cached); TCG
#                     otherwise
#   --smp N           guest CPUs (default: the host's, at most 4)
#   --mem MB          guest memory (default 2048)
#   --timeout SEC     hard limit on the VM's wall time (default 900)
#   --prepare         only fetch the kernel and build the initramfs, then exit
#   -v, --verbose     the guest's console on stderr, then a timing line
#   -h, --help
#
# Environment: PGRAC_VM_CACHE (default /var/cache/pgrac-vm) keeps the kernel,
# its modules and the initramfs; PGRAC_VM_NO_APT=1 never calls apt-get;
# PGRAC_VM_APPEND adds kernel parameters.
#
# In the guest the command runs as root in the host's current directory, with
# RXEVM=1, RXEVM_NETDEV=dummy0, RXEVM_IPADDR=10.254.0.1, RXEVM_IBDEV=rxe0,
# RXEVM_GID_INDEX (its IPv4-mapped RoCE v2 GID) and RXEVM_OUT. Its stdout and
# stderr come back merged on stdout; its stdin is /dev/null.
#
# Exit status: the command's; 124 when the VM ran out of time; 125 when the VM
# could not be prepared or booted, or ended without the command's status.
set -euo pipefail

prog=${0##*/}
here=$(cd "$(dirname "$0")" && pwd)
layout=3 # bump when the cache's layout changes

die() {
    echo "$prog: error: $*" >&2
    exit 125
}
info() { if [[ $verbose == 1 ]]; then echo "$prog: $*" >&2; fi; }
usage() { sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; }

# ---------------------------------------------------------------- arguments
snippet="" out="" shares=() envs=() rxe=1 overlay=1 accel=auto smp="" mem=2048
timeout=900 verbose=0 prepare_only=0
while [[ $# -gt 0 ]]; do
    case $1 in
    -c) snippet=${2?-c needs a snippet}; shift 2 ;;
    --out) out=${2?--out needs a directory}; shift 2 ;;
    --rw) shares+=("${2?--rw needs a directory}"); shift 2 ;;
    --env) envs+=("${2?--env needs NAME=VALUE}"); shift 2 ;;
    --no-rxe) rxe=0; shift ;;
    --no-overlay) overlay=0; shift ;;
    --accel) accel=${2?}; shift 2 ;;
    --smp) smp=${2?}; shift 2 ;;
    --mem) mem=${2?}; shift 2 ;;
    --timeout) timeout=${2?}; shift 2 ;;
    --prepare) prepare_only=1; shift ;;
    -v | --verbose) verbose=1; shift ;;
    -h | --help) usage; exit 0 ;;
    --) shift; break ;;
    -*) die "unknown option $1 (see --help)" ;;
    *) break ;;
    esac
done
if [[ $prepare_only == 0 ]]; then
    [[ -n $snippet || $# -gt 0 ]] || die "no command (see --help)"
    [[ -z $snippet || $# -eq 0 ]] || die "give -c SNIPPET or CMD ARG..., not both"
fi
[[ $accel =~ ^(auto|kvm|tcg)$ ]] || die "--accel takes auto, kvm or tcg"
[[ $timeout =~ ^[0-9]+$ && $mem =~ ^[0-9]+$ ]] || die "--timeout and --mem take integers"
[[ -z $smp ]] && smp=$(($(nproc) > 4 ? 4 : $(nproc)))
[[ $smp =~ ^[0-9]+$ ]] || die "--smp takes an integer"
for e in "${envs[@]}"; do
    [[ $e =~ ^[A-Za-z_][A-Za-z0-9_]*= ]] || die "--env '$e' is not NAME=VALUE"
done
[[ $(id -u) == 0 ]] || die "run as root (9p reads the host's files with qemu's uid)"

cache=${PGRAC_VM_CACHE:-/var/cache/pgrac-vm}
mkdir -p "$cache" || die "cannot create $cache"
scratch="" run="" qemu_pid=""
cleanup() {
    if [[ -n $qemu_pid ]]; then kill "$qemu_pid" 2>/dev/null || true; fi
    rm -rf "$scratch" "$run"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# One preparation at a time per cache; the VMs themselves run in parallel.
exec 8>"$cache/.lock"
flock -w 900 8 || die "$cache/.lock is held by another run for 15 minutes"

# ---------------------------------------------------------------- packages
# On the host: qemu and what unpacks the kernel and packs the initramfs. In the
# guest (which runs the host's userland): ip, tc, rdma and the verbs stack.
host_packages=(qemu-system-x86 busybox-static cpio kmod xz-utils zstd gzip
    iproute2 rdma-core libibverbs1 ibverbs-providers ibverbs-utils rdmacm-utils)
ensure_packages() {
    local installed missing=() p
    installed=$(dpkg-query -W -f='${Package} ${Status}\n' "$@" 2>/dev/null || true)
    for p in "$@"; do
        grep -q "^$p install ok installed" <<<"$installed" || missing+=("$p")
    done
    [[ ${#missing[@]} -eq 0 ]] && return 0
    [[ ${PGRAC_VM_NO_APT:-0} == 1 ]] && die "missing packages: ${missing[*]} (scripts/setup installs them)"
    echo "$prog: installing ${missing[*]}" >&2
    export DEBIAN_FRONTEND=noninteractive
    if ! apt-get install -y --no-install-recommends "${missing[@]}" >"$cache/apt.log" 2>&1; then
        apt-get update >>"$cache/apt.log" 2>&1 || true
        apt-get install -y --no-install-recommends "${missing[@]}" >>"$cache/apt.log" 2>&1 ||
            die "apt-get install ${missing[*]} failed (see $cache/apt.log)"
    fi
}
ensure_packages "${host_packages[@]}"

# ---------------------------------------------------------------- kernel
# Modules loaded in the guest, with their dependencies. It has no modprobe, so
# nothing is loaded on demand: the crc32 modules are there because rxe asks for
# the "crc32" hash when the device is created (without one: "rdma link add"
# fails with ENOENT); crc32_pclmul is the faster of the two.
modules=(virtio_pci 9pnet_virtio 9p overlay dummy veth sch_netem
    crc32_generic crc32_pclmul rdma_rxe ib_uverbs rdma_ucm)
modules_key=$(echo "$layout ${modules[*]}" | sha256sum | cut -c1-10)

# linux-image-amd64 is a metapackage: it depends on linux-image-<abi>-amd64.
kernel_package() {
    apt-cache depends linux-image-amd64 2>/dev/null |
        sed -n 's/^ *Depends: \(linux-image-[0-9].*\)$/\1/p' | head -n 1
}

# Copies the dependency closure of $modules, in load order and uncompressed
# (busybox insmod reads plain .ko files), from an unpacked package at $1.
copy_modules() {
    local tree=$1 kver=$2 dest=$3 m path name
    for m in "${modules[@]}"; do
        modprobe -d "$tree" -S "$kver" --show-depends "$m" || die "no module $m in $kver"
    done | awk '$1 == "insmod" && !seen[$2]++ { print $2 }' | while read -r path; do
        name=${path##*/}
        case $name in
        *.ko) cp "$path" "$dest/$name" ;;
        *.ko.xz) name=${name%.xz}; xz -dc "$path" >"$dest/$name" ;;
        *.ko.zst) name=${name%.zst}; zstd -qdc "$path" >"$dest/$name" ;;
        *.ko.gz) name=${name%.gz}; gzip -dc "$path" >"$dest/$name" ;;
        *) die "unexpected module file $path" ;;
        esac
        echo "$name" >>"$dest/load-order"
    done
}

# qemu can boot an uncompressed ELF vmlinux at its PVH entry point, which
# skips the kernel's self-decompression (about 5 s under TCG). The payload is
# found by its compression magic inside the bzImage.
extract_vmlinux() {
    local bz=$1 dest=$2 magic tool at
    for magic in 'xz:\xfd7zXZ\x00' 'zstd:\x28\xb5\x2f\xfd' 'gzip:\x1f\x8b\x08'; do
        tool=${magic%%:*}
        at=$(LC_ALL=C grep -obUaP "${magic#*:}" "$bz" | head -n 1 | cut -d: -f1) || true
        [[ -n $at ]] || continue
        tail -c +$((at + 1)) "$bz" | "$tool" -dc 2>/dev/null >"$dest.tmp" || true
        if [[ $(head -c 4 "$dest.tmp" | od -An -tx1 | tr -d ' ') == 7f454c46 ]]; then
            mv "$dest.tmp" "$dest"
            return 0
        fi
    done
    rm -f "$dest.tmp"
    return 1
}

# Downloads the kernel package $1 into $scratch; fails if apt-get cannot.
download_kernel() {
    (cd "$scratch" && apt-get download "$1") >"$cache/download.log" 2>&1
}

# Unpacks the package in $scratch into the cache directory $1.
unpack_kernel() {
    local dir=$1 tree=$scratch/tree kver
    dpkg-deb -x "$scratch"/*.deb "$tree" || die "dpkg-deb -x failed"
    kver=$(ls "$tree/lib/modules")
    [[ -f $tree/boot/vmlinuz-$kver ]] || die "the package has no /boot/vmlinuz-$kver"
    depmod -b "$tree" "$kver" || die "depmod for $kver failed"
    rm -rf "$dir"
    mkdir -p "$dir/modules"
    cp "$tree/boot/vmlinuz-$kver" "$dir/vmlinuz"
    cp "$tree/boot/config-$kver" "$dir/config"
    echo "$kver" >"$dir/version"
    copy_modules "$tree" "$kver" "$dir/modules"
    if grep -q '^CONFIG_PVH=y' "$dir/config"; then
        extract_vmlinux "$dir/vmlinuz" "$dir/vmlinux" ||
            echo "$prog: found no vmlinux for PVH: booting the bzImage" >&2
    fi
    touch "$dir/complete"
}

pkg=$(kernel_package)
if [[ -z $pkg && ${PGRAC_VM_NO_APT:-0} != 1 ]]; then
    apt-get update >"$cache/apt.log" 2>&1 || true
    pkg=$(kernel_package)
fi
if [[ -n $pkg ]]; then
    kdir=$cache/$pkg-$modules_key
    if [[ ! -f $kdir/complete ]]; then
        echo "$prog: fetching $pkg into $cache (once)" >&2
        scratch=$(mktemp -d "$cache/unpack.XXXXXX")
        if ! download_kernel "$pkg"; then
            # The package lists may be older than the mirror: refresh, retry once.
            apt-get update >"$cache/apt.log" 2>&1 || true
            pkg=$(kernel_package)
            kdir=$cache/$pkg-$modules_key
            download_kernel "$pkg" || die "apt-get download $pkg failed (see $cache/download.log)"
        fi
        [[ -f $kdir/complete ]] || unpack_kernel "$kdir"
        rm -rf "$scratch"
        scratch=""
    fi
else # offline: the newest kernel already in the cache
    kdir=$(ls -1dt "$cache"/linux-image-*-"$modules_key" 2>/dev/null | head -n 1) || true
    [[ -n $kdir && -f $kdir/complete ]] ||
        die "cannot resolve linux-image-amd64 (apt-get update?) and no kernel is cached in $cache"
fi
kver=$(cat "$kdir/version")
kernel=$kdir/vmlinuz
[[ -f $kdir/vmlinux && ${PGRAC_VM_BZIMAGE:-0} != 1 ]] && kernel=$kdir/vmlinux

# ---------------------------------------------------------------- initramfs
# busybox, the modules, /init and /guest.sh; named by a hash of its contents.
busybox=$(command -v busybox) || die "no busybox (busybox-static)"
ldd "$busybox" >/dev/null 2>&1 && die "$busybox is linked dynamically: install busybox-static"
initrd_key=$({
    echo "$layout $kver"
    cat "$kdir/modules/load-order" "$here/guest/init" "$here/guest/guest.sh"
} | sha256sum | cut -c1-16)
initrd=$cache/initrd-$kver-$initrd_key.cpio.gz
if [[ ! -f $initrd ]]; then
    info "building $initrd"
    scratch=$(mktemp -d "$cache/initrd.XXXXXX")
    mkdir -p "$scratch"/{bin,dev,proc,sys,modules}
    cp "$busybox" "$scratch/bin/busybox"
    cp "$kdir"/modules/* "$scratch/modules/"
    install -m 755 "$here/guest/init" "$scratch/init"
    install -m 644 "$here/guest/guest.sh" "$scratch/guest.sh"
    (cd "$scratch" && find . | cpio -o -H newc --quiet | gzip -1) >"$initrd.tmp" ||
        die "cpio of the initramfs failed"
    mv "$initrd.tmp" "$initrd"
    rm -rf "$scratch"
    scratch=""
fi
# What this run uses is touched; what no run used for two weeks goes (kernels
# of older ABIs, initramfs images of older scripts). Under the lock: nothing
# is being unpacked.
touch "$initrd" "$kdir/complete"
for f in "$cache"/initrd-* "$cache"/linux-image-*; do
    stamp=$f
    [[ -d $f ]] && stamp=$f/complete
    if [[ ! -e $stamp || -n $(find "$stamp" -mtime +14) ]]; then rm -rf "$f"; fi
done
if [[ $prepare_only == 1 ]]; then
    echo "$prog: ready: kernel $kver ($kernel), initramfs $initrd"
    exit 0
fi

# ---------------------------------------------------------------- accelerator
# KVM only where it can work: a CPU with vmx/svm and a usable /dev/kvm (a
# software /dev/kvm such as kvm_pvm, without vmx/svm, hangs ordinary guests),
# and a probe boot that reaches the kernel's "no root" panic within 60 s.
kvm_works() {
    local log=$cache/kvm-probe.log
    grep -qwE 'vmx|svm' /proc/cpuinfo || return 1
    [[ -r /dev/kvm && -w /dev/kvm ]] || return 1
    rm -f "$log"
    timeout -k 5 60 qemu-system-x86_64 -accel kvm -cpu host -m 256 -display none \
        -monitor none -no-reboot -serial "file:$log" -kernel "$kdir/vmlinuz" \
        -append 'console=ttyS0 panic=-1 root=/dev/nonexistent' </dev/null >/dev/null 2>&1 || true
    grep -q 'Kernel panic\|VFS: Unable to mount root' "$log" 2>/dev/null
}
if [[ $accel == auto ]]; then
    verdict=$cache/accel-$(uname -r)-$kver
    if [[ ! -f $verdict ]]; then
        if kvm_works; then echo kvm >"$verdict"; else echo tcg >"$verdict"; fi
    fi
    accel=$(cat "$verdict")
fi
flock -u 8
if [[ $accel == kvm ]]; then
    accel_args=(-accel kvm -cpu host)
else
    # shellcheck disable=SC2054 # qemu's options have commas
    accel_args=(-accel tcg,thread=multi,tb-size=256 -cpu max)
fi

# ---------------------------------------------------------------- this run
# The run directory (9p tag pgrac_run) carries settings and the command in,
# and the status and timings out.
run=$(mktemp -d /tmp/pgrac-vm-run.XXXXXX) || die "mktemp failed"
sh_quote() { printf "'%s'" "${1//\'/\'\\\'\'}"; } # for the guest's POSIX sh
{
    for e in "${envs[@]}"; do printf 'export %s=%q\n' "${e%%=*}" "${e#*=}"; done
    if [[ -n $snippet ]]; then
        printf '%s\n' "$snippet"
    else
        printf '%q ' "$@"
        echo
    fi
} >"$run/command"
if [[ -n $out ]]; then
    mkdir -p "$out" || die "cannot create $out"
    out=$(cd "$out" && pwd -P)
    shares=("$out" "${shares[@]}")
fi
for i in "${!shares[@]}"; do
    [[ -d ${shares[$i]} ]] || die "--rw ${shares[$i]}: not a directory"
    shares[i]=$(cd "${shares[$i]}" && pwd -P)
done
{
    echo "VM_OVERLAY=$overlay VM_RXE=$rxe VM_NSHARES=${#shares[@]}"
    echo "VM_CWD=$(sh_quote "$PWD") VM_OUT=$(sh_quote "$out")"
    for i in "${!shares[@]}"; do echo "VM_SHARE_$i=$(sh_quote "${shares[$i]}")"; done
} >"$run/settings"

p9=security_model=none,multidevs=remap
# Under TCG the kernel finds the TSCs "unsynchronized" and falls back to the
# HPET, whose every read is an emulated device access; qemu's TSC is one clock
# for all vCPUs, and with it clock_gettime stays in the vDSO (3x the reads per
# second, the RDMA TAP test ~13 % faster).
clock=""
[[ $accel == tcg ]] && clock="clocksource=tsc tsc=reliable"
# shellcheck disable=SC2054
qemu=(qemu-system-x86_64 "${accel_args[@]}" -machine q35 -smp "$smp" -m "$mem"
    -nodefaults -no-reboot -display none -vga none -monitor none -nic none
    -kernel "$kernel" -initrd "$initrd"
    -append "console=ttyS1 loglevel=4 panic=-1 rdinit=/init mitigations=off $clock ${PGRAC_VM_APPEND:-}"
    -chardev stdio,id=out,signal=off -serial chardev:out
    -serial "file:$run/console.log"
    -virtfs "local,path=/,mount_tag=hostroot,readonly=on,$p9"
    -virtfs "local,path=${run//,/,,},mount_tag=pgrac_run,$p9")
for i in "${!shares[@]}"; do
    qemu+=(-virtfs "local,path=${shares[$i]//,/,,},mount_tag=pgrac_rw$i,$p9")
done

info "kernel $kver, accel $accel, $smp CPUs, ${mem} MB, timeout ${timeout}s"
tail_pid=""
if [[ $verbose == 1 ]]; then
    touch "$run/console.log"
    tail -n +1 -F "$run/console.log" >&2 2>/dev/null &
    tail_pid=$!
fi
t0=$(date +%s.%N)
# qemu writes the guest's ttyS0 straight to our stdout. Its stdin must not be
# a terminal, or qemu would put the terminal in raw mode.
set +e
timeout -k 10 "$timeout" "${qemu[@]}" </dev/null 2>"$run/qemu.err" &
qemu_pid=$!
wait "$qemu_pid"
qemu_rc=$?
qemu_pid=""
set -e
t1=$(date +%s.%N)
if [[ -n $tail_pid ]]; then
    sleep 0.3
    kill "$tail_pid" 2>/dev/null || true
    wait "$tail_pid" 2>/dev/null || true
fi

if [[ -s $run/rxe.log ]]; then
    echo "$prog: rdma link add said:" >&2
    cat "$run/rxe.log" >&2
fi
if [[ -f $run/rc ]]; then
    rc=$(cat "$run/rc")
    if [[ $verbose == 1 ]]; then
        awk -v t0="$t0" -v t1="$t1" -v s="$(cat "$run/started")" -v e="$(cat "$run/ended")" \
            -v a="$accel" -v rc="$rc" -v p="$prog" 'BEGIN {
            printf "%s: exit %s, accel %s, VM %.1f s, command started at %.1f s of uptime and took %.1f s\n",
                p, rc, a, t1 - t0, s, e - s }' >&2
    fi
    exit "$rc"
fi
if [[ $qemu_rc == 124 || $qemu_rc == 137 ]]; then
    echo "$prog: error: the VM ran out of time (${timeout}s, accel $accel); console tail:" >&2
    tail -n 20 "$run/console.log" >&2 2>/dev/null || true
    exit 124
fi
echo "$prog: error: the VM ended without the command's status (qemu exit $qemu_rc, accel $accel)" >&2
[[ $accel == kvm ]] && echo "$prog: hint: try --accel tcg" >&2
if [[ -s $run/qemu.err ]]; then
    echo "--- qemu stderr" >&2
    cat "$run/qemu.err" >&2
fi
echo "--- console tail" >&2
tail -n 30 "$run/console.log" >&2 2>/dev/null || true
exit 125
