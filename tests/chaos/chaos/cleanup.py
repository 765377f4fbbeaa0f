"""Backstop cleanup, run by run.sh's trap whatever happened to the Python run:

    python3 -m chaos.cleanup WORKDIR TAG

SIGCONTs and SIGKILLs every process whose working directory is under WORKDIR (the
run's PostgreSQL processes, frozen or not), deletes every network namespace whose
name starts with TAG (with them go the veths, the bridge and the iptables rules),
and removes WORKDIR. Idempotent."""

import os
import shutil
import signal
import sys

from . import procs
from .util import run


def main(argv):
    workdir, tag = argv[1], argv[2]
    if os.path.isdir(workdir):
        for _ in range(3):
            pids = procs.pids_with_cwd_under(workdir)
            if not pids:
                break
            procs.signal_pids(pids, signal.SIGCONT)
            procs.signal_pids(pids, signal.SIGKILL)
            procs.wait_gone(pids, 5)
    p = run(["ip", "netns", "list"], check=False, quiet=True)
    for line in p.stdout.splitlines():
        if line.strip() and line.split()[0].startswith(tag):
            run(["ip", "netns", "del", line.split()[0]], check=False, quiet=True)
    shutil.rmtree(workdir, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
