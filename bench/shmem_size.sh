#!/bin/bash
# Shared memory that pgrac_ic allocates at max_connections 100 and 5000 (docs/performance.md#memory):
# one stub-tier instance of the installed extension (or PGBIN=.../bin), as root; prints pg_shmem_allocations.
#   bench/shmem_size.sh LABEL
set -e
d=/tmp/shm-$$; rm -rf $d; mkdir -p $d; chown postgres $d
runuser -u postgres -- ${PGBIN:-/usr/lib/postgresql/15/bin}/initdb -D $d/data >/dev/null
cat >> $d/data/postgresql.conf <<CONF
shared_preload_libraries='pgrac_ic'
cluster.interconnect_tier = stub
port = 54999
unix_socket_directories = '$d'
listen_addresses = ''
CONF
for mc in 100 5000; do
  runuser -u postgres -- ${PGBIN:-/usr/lib/postgresql/15/bin}/pg_ctl -D $d/data -o "-c max_connections=$mc" -l $d/log -w start >/dev/null
  echo "$1 max_connections=$mc: $(runuser -u postgres -- psql -h $d -p 54999 -d postgres -Atc "select name, pg_size_pretty(allocated_size) from pg_shmem_allocations where name like 'pgrac%' order by 1" | tr '\n' ' ') total=$(runuser -u postgres -- psql -h $d -p 54999 -d postgres -Atc "select pg_size_pretty(sum(allocated_size)) from pg_shmem_allocations")"
  runuser -u postgres -- ${PGBIN:-/usr/lib/postgresql/15/bin}/pg_ctl -D $d/data -m fast -w stop >/dev/null
done
rm -rf $d
