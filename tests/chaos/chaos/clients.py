"""The workload: per node, a few client threads that lock, hold and unlock global
locks in a loop and record every operation.

Times are wall clock (time.time()). granted_at is taken AFTER pgrac_ges_lock returned
true and released_at BEFORE pgrac_ges_unlock is called, so a recorded hold is a
subset of the real one: any overlap of two recorded holds is a real violation.

Lock value blocks (docs/ges.md), where the extension has them: every grant records the
value it brought (value_read: the text, or None when invalid), and two of three EX holds
set a value of their own, unique in the run, before they unlock (value_written)."""

import random
import re
import threading
import time

import psycopg2
import psycopg2.extensions

RESOURCES = ["chaos:a", "chaos:b", "chaos:c", "chaos:d"]
LOCK_TIMEOUT_MS = 2000
STATEMENT_TIMEOUT_MS = 5000
EX_SHARE = 0.75
ERROR_PAUSE_S = 0.02


def classify(exc):
    """A short, stable name for an error ending an operation."""
    if isinstance(exc, psycopg2.extensions.QueryCanceledError):
        return "statement_timeout"
    msg = (getattr(exc, "pgerror", None) or str(exc) or type(exc).__name__).strip()
    low = msg.lower()
    for named in ("no quorum", "fenced", "lock lost", "deadlock detected"):
        if named in low:
            return named.replace(" ", "_")
    if isinstance(exc, psycopg2.OperationalError) and (
            "server closed" in low or "terminating connection" in low or "connection" in low
            or "no connection" in low or "could not" in low or "timeout expired" in low):
        return "connection_lost"
    if isinstance(exc, psycopg2.InterfaceError):
        return "connection_lost"
    first = msg.splitlines()[0] if msg else type(exc).__name__
    first = re.sub(r"^(ERROR|FATAL):\s*", "", first)
    first = re.sub(r'"[^"]*"', '"…"', first)
    first = re.sub(r"\d+", "N", first)
    return "error: " + first[:110]


VALUE_WRITE_SHARE = 2 / 3
INVALID = None  # value_read of a grant whose value block is invalid


class Client(threading.Thread):
    def __init__(self, node, index, seed, stop, progress, values=False):
        super().__init__(daemon=True, name="client-%d-%d" % (node.i, index))
        self.node = node
        self.rng = random.Random(seed)
        self.stop = stop
        self.progress = progress  # node id -> wall time of its last grant
        self.ops = []
        self.current = None  # the op in flight, if any
        self.conn = None
        self.pid = None
        self.connect_failures = 0
        self.values = values
        self.index = index
        self.writes = 0

    def _connect(self):
        try:
            self.conn = self.node.connect(timeout=5, statement_timeout_ms=STATEMENT_TIMEOUT_MS)
            self.pid = self.conn.get_backend_pid()
            return True
        except psycopg2.Error:
            self.conn = None
            self.connect_failures += 1
            self.stop.wait(0.2)
            return False

    def _drop(self):
        if self.conn is not None:
            try:
                self.conn.close()
            except Exception:
                pass
        self.conn = None

    def _call(self, sql, args):
        with self.conn.cursor() as cur:
            cur.execute(sql, args)
            return cur.fetchone()[0]

    def run(self):
        while not self.stop.is_set():
            if self.conn is None and not self._connect():
                continue
            self._one_op()

    def _one_op(self):
        res = self.rng.choice(RESOURCES)
        mode = "EX" if self.rng.random() < EX_SHARE else "PR"
        op = {"node": self.node.i, "pid": self.pid, "resource": res, "mode": mode,
              "requested_at": time.time(), "lock_returned_at": None, "granted_at": None,
              "released_at": None, "unlock_returned_at": None, "outcome": None}
        self.current = op
        try:
            if self.values:
                # CASE reads the value only once the lock is granted ('' is valid and empty).
                got = self._call(
                    "SELECT CASE WHEN pgrac_ges_lock(%s, %s, %s) THEN"
                    " coalesce('v' || convert_from(pgrac_ges_lock_value(%s), 'UTF8'), 'i') END",
                    (res, mode, LOCK_TIMEOUT_MS, res))
                ok = got is not None
                if ok:
                    op["value_read"] = got[1:] if got.startswith("v") else INVALID
            else:
                ok = self._call("SELECT pgrac_ges_lock(%s, %s, %s)", (res, mode, LOCK_TIMEOUT_MS))
        except Exception as e:  # noqa: BLE001 - every error ends the op
            op["lock_returned_at"] = time.time()
            op["outcome"] = classify(e)
            return self._finish(op, drop=True)
        t = time.time()
        op["lock_returned_at"] = t
        if not ok:
            op["outcome"] = "timeout"
            return self._finish(op)
        op["granted_at"] = t
        self.progress[self.node.i] = t
        time.sleep(self.rng.uniform(0.001, 0.030))
        write = (self.values and mode == "EX" and self.rng.random() < VALUE_WRITE_SHARE)
        if write:
            self.writes += 1
            op["value_written"] = "n%dc%dw%d" % (self.node.i, self.index, self.writes)
        op["released_at"] = time.time()
        try:
            self.conn.notices.clear()
            if write:
                released = self._call("SELECT pgrac_ges_set_lock_value(%s, %s::bytea);"
                                      " SELECT pgrac_ges_unlock(%s)",
                                      (res, op["value_written"], res))
            else:
                released = self._call("SELECT pgrac_ges_unlock(%s)", (res,))
        except Exception as e:  # noqa: BLE001
            op["unlock_returned_at"] = time.time()
            op["outcome"] = "granted; unlock: " + classify(e)
            return self._finish(op, drop=True)
        op["unlock_returned_at"] = time.time()
        op["outcome"] = "granted" if released else "granted; unlock: not held (lock lost)"
        self._finish(op)

    def _finish(self, op, drop=False):
        self.ops.append(op)
        self.current = None
        if drop:
            self._drop()
        if op["outcome"] not in ("granted", "timeout"):
            self.stop.wait(ERROR_PAUSE_S)  # no busy loop on an error that comes at once


class Workload:
    def __init__(self, cluster, per_node, seed, values=False):
        self.stop = threading.Event()
        self.progress = {}
        self.values = values
        self.clients = [Client(node, k, seed * 1000 + node.i * 10 + k, self.stop, self.progress,
                               values)
                        for node in cluster.nodes for k in range(per_node)]

    def start(self):
        for c in self.clients:
            c.start()

    def finish(self, grace):
        """Stops the clients; those still in a call after grace seconds leave that op
        unfinished (it counts as hung). Returns (ops, unfinished ops)."""
        self.stop.set()
        end = time.time() + grace
        for c in self.clients:
            c.join(max(0.0, end - time.time()))
        ops, unfinished = [], []
        for c in self.clients:
            ops.extend(c.ops)
            if c.is_alive() and c.current is not None:
                op = dict(c.current)
                op["outcome"] = "unfinished"
                unfinished.append(op)
        return ops, unfinished

    def last_grant(self, node_id):
        return self.progress.get(node_id, 0.0)
