#!/usr/bin/env bash
# The guest half of tests/deb/package_in_vm.sh: runs as root inside the test
# VM (tests/vm), whose / is the host's under a throwaway tmpfs overlay.
#
#   smoke_in_guest.sh PACKAGE.deb PROBE
#
# 1. refuses to run anywhere but on the VM's overlay, and leaves the file
#    PROBE there (the host checks that it never appears on its own disk);
# 2. deletes from the overlay the files of the package that are already there
#    (a make install on the host), so that what is found after the install
#    was put there by dpkg;
# 3. apt-get install ./PACKAGE.deb (the VM has no network: every dependency
#    must already be installed on the host); dpkg --verify; dpkg -L;
# 4. as postgres: two instances (copies of one initdb) at tier3 on 127.0.0.1
#    with one key file and cluster.nodes, CREATE EXTENSION pgrac_ic, both
#    peers UP on both, pgrac_ic_ping both ways, the packaged .so mapped;
# 5. the packaged pgrac_ctl: verify rdma --device rxe0 --json (the host
#    checks the JSON);
# 6. the package's autopkgtest (debian/tests/control) against the installed
#    package: autopkgtest -B with the null virt server, on a copy of this
#    tree's debian/ (the tests use installed files only);
# 7. apt-get remove, then none of the package's files is left.
# Writes its logs, verify.json, verify.rc and autopkgtest/ (autopkgtest's
# --output-dir) to $RXEVM_OUT. Every wait is bounded. Exit: 0 pass, 1 a
# check failed.
set -uo pipefail

deb=${1:?usage: smoke_in_guest.sh PACKAGE.deb PROBE}
probe=${2:?usage: smoke_in_guest.sh PACKAGE.deb PROBE}
out=${RXEVM_OUT:?needs --out (RXEVM_OUT)}
pkg=postgresql-15-pgrac-ic
root=$(cd "$(dirname "$0")/../.." && pwd)
pgbin=/usr/lib/postgresql/15/bin
w=/tmp/pgrac-deb-smoke
export DEBIAN_FRONTEND=noninteractive

t0=$(cut -d' ' -f1 /proc/uptime)
say() { echo "guest [$(awk -v t0="$t0" '{ printf "%.0f", $1 - t0 }' /proc/uptime)s]: $*"; }
fail() {
    echo "guest: FAIL: $*"
    for f in "$w"/n*.log; do
        [[ -f $f ]] && { echo "---- $f (last 30 lines)"; tail -n 30 "$f"; cp "$f" "$out/"; }
    done
    exit 1
}

# ---- 1. only on the VM's throwaway root
# The VM's marks: RXEVM=1, / an overlay, and the run directory that
# tests/vm/guest/init mounts (a host whose / is an overlay has none).
[[ ${RXEVM:-} == 1 && $(stat -f -c %T /) == overlayfs && -f /run/pgrac-vm/state/settings ]] ||
    fail "/ is not the test VM's overlay (RXEVM=${RXEVM:-unset}, $(stat -f -c %T /)): refusing to install"
touch "$probe" || fail "cannot write $probe on the overlay"
say "/ is the VM's overlay ($(awk '$5 == "/" { print $9 }' /proc/self/mountinfo))"

# ---- 2. files of an earlier make install go, so the install must bring them
status=$(dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null)
[[ $status != *" installed" ]] || fail "$pkg is installed on the host (status: $status)"
dpkg-deb -c "$deb" | awk '$1 !~ /^d/ { sub(/^\./, "", $6); print $6 }' >"$w.files" ||
    fail "dpkg-deb -c $deb"
[[ -s $w.files ]] || fail "no files in $deb"
removed=0
while read -r f; do
    if [[ -e $f || -L $f ]]; then
        rm -f "$f"
        removed=$((removed + 1))
    fi
done <"$w.files"
say "$(wc -l <"$w.files") files in the package; $removed already on disk (make install) deleted first"

# ---- 3. install
say "apt-get install ./$(basename "$deb")"
apt-get install -y -o Dpkg::Use-Pty=0 "$deb" >"$out/apt-install.log" 2>&1 ||
    { tail -n 30 "$out/apt-install.log"; fail "apt-get install $deb"; }
status=$(dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null)
[[ $status == "install ok installed" ]] || fail "after the install $pkg is '$status'"
bad=$(dpkg --verify "$pkg" 2>&1) || true
[[ -z $bad ]] || fail "dpkg --verify $pkg: $bad"
dpkg -L "$pkg" >"$w.listed"
missing=0
while read -r f; do
    grep -qxF "$f" "$w.listed" || { echo "not listed by dpkg -L: $f"; missing=1; }
    [[ -e $f ]] || { echo "missing: $f"; missing=1; }
done <"$w.files"
[[ $missing == 0 ]] || fail "the installed files differ from the package's"
for f in $pgbin/pgrac_ctl /usr/lib/postgresql/15/lib/pgrac_ic.so \
    /usr/share/postgresql/15/extension/pgrac_ic.control \
    /usr/include/postgresql/15/server/extension/pgrac_ic/pgrac_ic.h; do
    [[ $(dpkg -S "$f" 2>/dev/null) == "$pkg: $f" ]] || fail "$f does not belong to $pkg"
done
say "installed: $(dpkg-query -W -f='${Package} ${Version}' "$pkg"), dpkg --verify clean, every file present"

# ---- 4. a two-instance cluster at tier3, as postgres
as_pg() { runuser -u postgres -- "$@"; }
q() { # q NODE SQL: one value, bounded
    timeout 60 runuser -u postgres -- $pgbin/psql -X -At -v ON_ERROR_STOP=1 -h "$w" \
        -p "549$1" -d postgres -c "$2"
}
rm -rf "$w"
install -d -o postgres -g postgres -m 0700 "$w"
as_pg sh -c "umask 077; openssl rand -base64 48 >'$w/cluster.key'" || fail "key file"
say "initdb"
as_pg $pgbin/initdb -D "$w/n1" -A trust -U postgres --no-sync >"$w/initdb.log" 2>&1 ||
    { cat "$w/initdb.log"; fail "initdb"; }
# One database system: node 2 is a physical copy (same system identifier).
as_pg cp -a "$w/n1" "$w/n2" || fail "copy of the data directory"
for i in 1 2; do
    cat >>"$w/n$i/postgresql.conf" <<EOF
port = 549$i
listen_addresses = ''
unix_socket_directories = '$w'
max_connections = 20
shared_preload_libraries = 'pgrac_ic'
cluster.interconnect_tier = tier3
cluster.node_id = $i
cluster.nodes = '1@127.0.0.1:7491,2@127.0.0.1:7492'
cluster.auth_key_file = '$w/cluster.key'
cluster.rpc_timeout = 30s
EOF
done
for i in 1 2; do
    as_pg $pgbin/pg_ctl -D "$w/n$i" -l "$w/n$i.log" -w -t 180 start >/dev/null ||
        fail "node $i did not start"
done
say "both instances started"
for i in 1 2; do
    q $i "CREATE EXTENSION pgrac_ic" >/dev/null || fail "CREATE EXTENSION pgrac_ic on node $i"
    v=$(q $i "SELECT extversion FROM pg_extension WHERE extname = 'pgrac_ic'")
    [[ $v == 0.1.0 ]] || fail "node $i has pgrac_ic '$v', not 0.1.0"
    pid=$(head -n 1 "$w/n$i/postmaster.pid")
    grep -q " /usr/lib/postgresql/15/lib/pgrac_ic.so$" "/proc/$pid/maps" ||
        fail "node $i's postmaster has not mapped the packaged pgrac_ic.so"
done
deadline=$((SECONDS + 180))
for i in 1 2; do
    until [[ $(q $i "SELECT count(*) FROM pg_cluster_ic_peers WHERE state = 'UP'") == 2 ]]; do
        ((SECONDS < deadline)) || {
            q $i "SELECT node_id, address, state FROM pg_cluster_ic_peers"
            fail "node $i does not see both nodes UP within 180 s"
        }
        sleep 1
    done
done
say "pg_cluster_ic_peers on node 1:"
q 1 "SELECT node_id, address, is_self, state, tier FROM pg_cluster_ic_peers ORDER BY node_id" |
    sed 's/^/    /'
for i in 1 2; do
    tier=$(q $i "SELECT tier FROM pg_cluster_rdma_status")
    [[ $tier == tier3 ]] || fail "node $i runs '$tier', not tier3"
done
for from in 1 2; do
    to=$((3 - from))
    rtt=$(q $from "SELECT round(pgrac_ic_ping($to)::numeric, 1)") ||
        fail "pgrac_ic_ping($to) on node $from"
    if ! [[ $rtt =~ ^[0-9.]+$ ]] || ! awk -v r="$rtt" 'BEGIN { exit !(r > 0) }'; then
        fail "pgrac_ic_ping($to) on node $from returned '$rtt'"
    fi
    say "pgrac_ic_ping($to) on node $from: $rtt us"
done
for i in 1 2; do
    as_pg $pgbin/pg_ctl -D "$w/n$i" -m fast -t 60 stop >/dev/null || fail "node $i did not stop"
    cp "$w/n$i.log" "$out/"
done

# ---- 5. the packaged pgrac_ctl against rxe0
[[ ${RXEVM_IBDEV:-} == rxe0 ]] || fail "the VM has no rxe0"
$pgbin/pgrac_ctl verify rdma --device rxe0 --json >"$out/verify.json" 2>"$out/verify.err"
echo $? >"$out/verify.rc"
say "pgrac_ctl verify rdma --device rxe0: exit $(cat "$out/verify.rc") (the host checks the JSON)"

# ---- 6. the autopkgtest, as autopkgtest itself runs it on an installed testbed
# -B: the package is already installed (step 3), so nothing is built and the
# test's dependencies (@) are satisfied as they are; null: this VM is the
# testbed. A skipped test (exit 2) fails too.
adt_src=$w-adt/pgrac-ic
mkdir -p "$adt_src" && cp -a "$root/debian" "$adt_src/" || fail "copy of $root/debian"
say "autopkgtest -B $adt_src -- null (debian/tests/control: $(grep -h '^Tests:' "$root/debian/tests/control" | cut -d' ' -f2- | tr '\n' ' '))"
timeout 600 autopkgtest -B --timeout-test=300 --output-dir "$out/autopkgtest" "$adt_src" \
    -- null >"$out/autopkgtest.log" 2>&1
adt_rc=$?
grep -E '^smoke: ' "$out/autopkgtest.log" | sed 's/^/    /'
[[ -f $out/autopkgtest/summary ]] && sed 's/^/    summary: /' "$out/autopkgtest/summary"
[[ $adt_rc == 0 ]] || {
    tail -n 30 "$out/autopkgtest.log"
    fail "autopkgtest exited $adt_rc (2 skipped, 4 failed, 8 no tests, 12 bad package, 16 testbed, 124 timeout)"
}
say "autopkgtest: every test of debian/tests/control passed against the installed package"

# ---- 7. remove
apt-get remove -y -o Dpkg::Use-Pty=0 "$pkg" >"$out/apt-remove.log" 2>&1 ||
    { tail -n 30 "$out/apt-remove.log"; fail "apt-get remove $pkg"; }
status=$(dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null)
[[ -z $status || $status == *not-installed ]] || fail "after the removal $pkg is '$status'"
left=0
while read -r f; do
    [[ -e $f || -L $f ]] && { echo "left behind: $f"; left=1; }
done <"$w.files"
[[ $left == 0 ]] || fail "apt-get remove left files of $pkg"
for d in /usr/include/postgresql/15/server/extension/pgrac_ic /usr/share/doc/$pkg; do
    [[ ! -e $d ]] || fail "apt-get remove left $d"
done
say "removed: none of its $(wc -l <"$w.files") files is left"
echo "guest: PASS"
