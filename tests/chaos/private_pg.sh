#!/usr/bin/env bash
# A private PostgreSQL 15 tree with pgrac_ic built from one git revision, so that the
# chaos test can run against that code without `make install` into the system (and
# without being disturbed by someone else's install):
#
#   tests/chaos/private_pg.sh DEST [REV]     # REV defaults to HEAD; takes a few minutes
#   tests/chaos/run.sh --pgbin DEST/lib/postgresql/15/bin --duration 120
#
# PostgreSQL finds its share and lib directories relative to its binaries, so a copy of
# /usr/lib/postgresql/15 and /usr/share/postgresql/15 under DEST/{lib,share}/postgresql
# with pgrac_ic installed into it (make install DESTDIR=...) is a complete, separate
# installation. As root (the build runs cmake and PGXS as in the README).
set -euo pipefail

dest=${1:?usage: private_pg.sh DEST [REV]}
rev=${2:-HEAD}
repo=$(cd "$(dirname "$0")/../.." && pwd)
mkdir -p "$dest"
dest=$(cd "$dest" && pwd)

rm -rf "$dest/src" "$dest/stage" "$dest/lib" "$dest/share"
mkdir -p "$dest/src" "$dest/lib/postgresql" "$dest/share/postgresql"
git -C "$repo" archive "$rev" | tar -x -C "$dest/src"
make -C "$dest/src" -j"$(nproc)" >"$dest/build.log" 2>&1 || {
    tail -30 "$dest/build.log"
    exit 1
}
make -C "$dest/src" install DESTDIR="$dest/stage" >>"$dest/build.log" 2>&1
cp -a /usr/lib/postgresql/15 "$dest/lib/postgresql/"
cp -a /usr/share/postgresql/15 "$dest/share/postgresql/"
cp -a "$dest/stage/usr/lib/postgresql/15/." "$dest/lib/postgresql/15/"
cp -a "$dest/stage/usr/share/postgresql/15/." "$dest/share/postgresql/15/"
chmod -R a+rX "$dest/lib" "$dest/share"
chmod a+x "$dest"
got=$("$dest/lib/postgresql/15/bin/pg_config" --pkglibdir)
[[ $got == "$dest/lib/postgresql/15/lib" ]] || {
    echo "private_pg: the copied pg_config reports $got: not relocatable here"
    exit 1
}
echo "pgrac_ic $(git -C "$repo" rev-parse --short "$rev") in $dest"
echo "run: tests/chaos/run.sh --pgbin $dest/lib/postgresql/15/bin"
