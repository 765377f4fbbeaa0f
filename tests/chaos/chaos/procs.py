"""Process trees from /proc: an instance is its postmaster and every descendant.

PostgreSQL children may call setsid, so process groups are never used; the tree is
found by walking parent pids."""

import os
import signal
import time


def _stat(pid):
    """(ppid, state) of pid, or None if it is gone."""
    try:
        with open("/proc/%d/stat" % pid) as f:
            s = f.read()
    except OSError:
        return None
    rest = s[s.rindex(")") + 2:].split()
    return int(rest[1]), rest[0]


def alive(pid):
    st = _stat(pid)
    return st is not None and st[1] not in ("Z", "X")


def all_pids():
    return [int(d) for d in os.listdir("/proc") if d.isdigit()]


def descendants(root):
    """Every live descendant of root (not root itself)."""
    children = {}
    for pid in all_pids():
        st = _stat(pid)
        if st and st[1] not in ("Z", "X"):
            children.setdefault(st[0], []).append(pid)
    out, todo = [], [root]
    while todo:
        p = todo.pop()
        for c in children.get(p, []):
            out.append(c)
            todo.append(c)
    return out


def signal_pids(pids, sig):
    for p in pids:
        try:
            os.kill(p, sig)
        except ProcessLookupError:
            pass


def stop_tree(root):
    """SIGSTOPs root, then its descendants until no new one appears; returns all pids.

    The root is stopped first so that it cannot start new children meanwhile."""
    signal_pids([root], signal.SIGSTOP)
    stopped = {root}
    for _ in range(5):
        new = [p for p in descendants(root) if p not in stopped]
        if not new:
            break
        signal_pids(new, signal.SIGSTOP)
        stopped.update(new)
    return sorted(stopped)


def cont_tree(root, pids=()):
    """SIGCONTs the given pids and whatever is now in root's tree."""
    signal_pids(set(pids) | set(descendants(root)) | {root}, signal.SIGCONT)


def kill_tree(root):
    """SIGKILLs root's whole tree (stopped first so nothing escapes); returns the wall
    time taken just before the first SIGKILL was sent."""
    pids = stop_tree(root)
    t = time.time()
    signal_pids([p for p in pids if p != root], signal.SIGKILL)
    signal_pids([root], signal.SIGKILL)
    signal_pids(pids, signal.SIGCONT)  # a stopped process dies of SIGKILL anyway
    return t, pids


def become_subreaper():
    """Orphans of our descendants (a postmaster, once pg_ctl exits; its children, once
    it is killed) become our children, so that we reap them: a zombie's pid still
    'exists' for a new postmaster's lock file checks, and init here reaps late."""
    import ctypes
    PR_SET_CHILD_SUBREAPER = 36
    libc = ctypes.CDLL(None, use_errno=True)
    return libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0


def _reap(pid):
    try:
        os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        pass


def wait_gone(pids, timeout=10.0):
    """Waits until every pid has exited and was reaped (by us, if it is our child)."""
    end = time.time() + timeout
    while time.time() < end:
        for p in pids:
            _reap(p)
        if not any(os.path.exists("/proc/%d" % p) for p in pids):
            return True
        time.sleep(0.05)
    return not any(alive(p) for p in pids)


def pids_with_cwd_under(path):
    """Processes whose working directory is under path (PostgreSQL processes run in
    their data directory): the precise set of a run's server processes."""
    path = os.path.realpath(path).rstrip("/") + "/"
    out = []
    for pid in all_pids():
        try:
            cwd = os.readlink("/proc/%d/cwd" % pid)
        except OSError:
            continue
        if (cwd.rstrip("/") + "/").startswith(path):
            out.append(pid)
    return out
