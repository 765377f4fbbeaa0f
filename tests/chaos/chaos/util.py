"""Small helpers shared by the chaos harness: bounded commands, logging, time."""

import subprocess
import sys
import time

PG_BIN = "/usr/lib/postgresql/15/bin"

_t0 = time.time()


def set_t0(t):
    """The run's time origin: every printed time is seconds since it."""
    global _t0
    _t0 = t


def rel(t):
    """A wall-clock time as seconds since the run started, for printing."""
    return "-" if t is None else "%.3f" % (t - _t0)


def log(msg):
    print("[%8.3f] %s" % (time.time() - _t0, msg), flush=True)


def run(cmd, timeout=30, check=True, quiet=False, **kw):
    """Runs argv with a time limit; returns CompletedProcess (text).

    check: raise RuntimeError on a non-zero exit or a timeout."""
    try:
        p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                           text=True, timeout=timeout, **kw)
    except subprocess.TimeoutExpired:
        if check:
            raise RuntimeError("timed out after %ss: %s" % (timeout, " ".join(cmd)))
        return subprocess.CompletedProcess(cmd, 124, "", "timeout")
    if p.returncode != 0 and check:
        raise RuntimeError("%s -> exit %d: %s" % (" ".join(cmd), p.returncode,
                                                 (p.stderr or p.stdout).strip()[-500:]))
    if p.returncode != 0 and not quiet and not check:
        print("  (%s -> exit %d: %s)" % (" ".join(cmd), p.returncode,
                                         (p.stderr or "").strip()[-200:]),
              file=sys.stderr, flush=True)
    return p


def as_postgres(cmd, netns=None, keep_limits=False):
    """argv that runs cmd as the postgres user, inside netns if given.

    keep_limits: with setpriv instead of runuser, whose PAM session (pam_limits) would
    reset the locked-memory limit that the verbs tiers' buffer pool needs."""
    if keep_limits:
        argv = ["setpriv", "--reuid=postgres", "--regid=postgres", "--init-groups",
                "env", "HOME=/tmp"] + cmd
    else:
        argv = ["runuser", "-u", "postgres", "--"] + cmd
    if netns:
        argv = ["ip", "netns", "exec", netns] + argv
    return argv
