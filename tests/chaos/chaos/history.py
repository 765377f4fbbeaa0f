"""Reads pg_cluster_membership_history from every node at the end of a run.

A row with event = 'fenced' says when that node's lease ran out (wall clock): from
then on none of its holders may believe it holds a lock. Without the view (older
code) no node is fenced.

The view lives in shared memory: a node's restart (a kill fault) empties it, and it
keeps the last 64 changes. Fences older than what a node's view still shows are
read from its server log instead (the listener logs each one; a logged fence
counts from the end of its logged millisecond, the latest it can have happened)."""

import calendar
import re
import time

import psycopg2
import psycopg2.errors

QUERY = ("SELECT extract(epoch FROM at)::float8, epoch, event, members, detail "
         "FROM pg_cluster_membership_history ORDER BY at")


FENCE_LINE = re.compile(r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d)(\.\d+)? UTC \[\d+\] "
                        r".*pgrac_ic: membership: fenced epoch (\d+)")


def log_fences(path, node):
    """The fences a node's server log records, as history rows (UTC log times)."""
    out = []
    try:
        with open(path, errors="replace") as f:
            for line in f:
                m = FENCE_LINE.match(line)
                if m is None:
                    continue
                at = calendar.timegm(time.strptime(m.group(1), "%Y-%m-%d %H:%M:%S"))
                # The log rounds down to the millisecond: the end of that
                # millisecond is when the fence had certainly happened.
                frac = m.group(2) or ".0"
                at += float(frac) + 10.0 ** -(len(frac) - 1)
                out.append({"node": node, "at": at,
                            "epoch": int(m.group(3)), "event": "fenced", "members": None,
                            "detail": "from the server log"})
    except OSError:
        pass
    return out


def merge_log_fences(rows, logged):
    """rows (from the views) plus each logged fence older than everything its
    node's view still shows (a millisecond of slack for the log's rounding)."""
    first = {}
    for r in rows:
        if r["at"] is not None:
            first[r["node"]] = min(first.get(r["node"], r["at"]), r["at"])
    extra = [x for x in logged if x["node"] not in first or x["at"] < first[x["node"]] - 0.001]
    return rows + extra


def collect(cluster):
    """Returns (available, rows, errors): rows are dicts with the reporting node."""
    rows, available, errors = [], False, []
    for node in cluster.nodes:
        try:
            got = node.query(QUERY, timeout=10)
        except psycopg2.errors.UndefinedTable:
            continue
        except psycopg2.Error as e:
            errors.append("node %d: %s" % (node.i, str(e).strip().splitlines()[0]))
            continue
        available = True
        for at, epoch, event, members, detail in got:
            rows.append({"node": node.i, "at": at, "epoch": epoch, "event": event,
                         "members": members, "detail": detail})
    if available:
        logged = []
        for node in cluster.nodes:
            logged += log_fences(node.logfile, node.i)
        rows = merge_log_fences(rows, logged)
    return available, rows, errors


def fenced_times(rows):
    """node id -> sorted wall times at which that node's lease ran out."""
    out = {}
    for r in rows:
        if r["event"] == "fenced" and r["at"] is not None:
            out.setdefault(r["node"], []).append(r["at"])
    return {k: sorted(v) for k, v in out.items()}
