"""Reads pg_cluster_membership_history from every node at the end of a run.

A row with event = 'fenced' says when that node's lease ran out (wall clock): from
then on none of its holders may believe it holds a lock. Without the view (older
code) no node is fenced."""

import psycopg2
import psycopg2.errors

QUERY = ("SELECT extract(epoch FROM at)::float8, epoch, event, members, detail "
         "FROM pg_cluster_membership_history ORDER BY at")


def collect(cluster):
    """Returns (available, rows): rows are dicts with the reporting node."""
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
    return available, rows, errors


def fenced_times(rows):
    """node id -> sorted wall times at which that node's lease ran out."""
    out = {}
    for r in rows:
        if r["event"] == "fenced" and r["at"] is not None:
            out.setdefault(r["node"], []).append(r["at"])
    return {k: sorted(v) for k, v in out.items()}
