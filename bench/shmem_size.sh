#!/bin/bash
# Shared memory that pgrac_ic allocates at max_connections 100 and 5000 (docs/performance/2026-11-25-memory.md):
# one stub-tier instance of the installed extension (or PGBIN=.../bin), as root; prints pg_shmem_allocations,
# then records the pgrac_ic entry at 5000 against 100 (scripts/scoreboard, memory.shmem.max-connections-5000).
#   bench/shmem_size.sh LABEL
set -e
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
d=/tmp/shm-$$; rm -rf $d; mkdir -p $d; chown postgres $d
runuser -u postgres -- ${PGBIN:-/usr/lib/postgresql/15/bin}/initdb -D $d/data >/dev/null
cat >> $d/data/postgresql.conf <<CONF
shared_preload_libraries='pgrac_ic'
cluster.interconnect_tier = stub
port = 54999
unix_socket_directories = '$d'
listen_addresses = ''
CONF
declare -A mib  # the pgrac_ic entry in MiB, per max_connections
for mc in 100 5000; do
  runuser -u postgres -- ${PGBIN:-/usr/lib/postgresql/15/bin}/pg_ctl -D $d/data -o "-c max_connections=$mc" -l $d/log -w start >/dev/null
  echo "$1 max_connections=$mc: $(runuser -u postgres -- psql -h $d -p 54999 -d postgres -Atc "select name, pg_size_pretty(allocated_size) from pg_shmem_allocations where name like 'pgrac%' order by 1" | tr '\n' ' ') total=$(runuser -u postgres -- psql -h $d -p 54999 -d postgres -Atc "select pg_size_pretty(sum(allocated_size)) from pg_shmem_allocations")"
  mib[$mc]=$(runuser -u postgres -- psql -h $d -p 54999 -d postgres -Atc "select round(allocated_size / 1048576.0, 1) from pg_shmem_allocations where name = 'pgrac_ic'")
  runuser -u postgres -- ${PGBIN:-/usr/lib/postgresql/15/bin}/pg_ctl -D $d/data -m fast -w stop >/dev/null
done
rm -rf $d
python3 "$here/../scripts/scoreboard" record --target memory.shmem.max-connections-5000 \
  --figure "${mib[5000]}" --baseline "${mib[100]}" --command "bench/shmem_size.sh $*" ||
  echo "shmem_size.sh: no record (above)" >&2
