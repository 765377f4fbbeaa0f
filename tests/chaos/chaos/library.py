"""Which pgrac_ic the run uses: the library of the PostgreSQL tree of --pgbin, and its
checksum at the start and the end. Another `make install` during a run would make the
instances restarted after a kill load other code than the rest: the summary says so."""

import hashlib
import os

from .util import run


def path(pgbin):
    libdir = run([os.path.join(pgbin, "pg_config"), "--pkglibdir"], timeout=10).stdout.strip()
    return os.path.join(libdir, "pgrac_ic.so")


def fingerprint(so_path):
    h = hashlib.sha256()
    try:
        with open(so_path, "rb") as f:
            for block in iter(lambda: f.read(1 << 20), b""):
                h.update(block)
        st = os.stat(so_path)
    except OSError as e:
        return "unreadable (%s)" % e.strerror
    return "%s (%d bytes)" % (h.hexdigest()[:16], st.st_size)
