"""The delivery probes that run beside the lock clients: exactly-once RPCs and one-way
notes through the interconnect, plus a sampler of the receivers' note counters.

* SeqClient: one per ordered pair (source node, receiving node). It calls
  pgrac_ic_seq_rpc(receiver, stream, seq) on the source with seq = 1, 2, 3, ... (never
  reused, even across errors and reconnects), one call per PAUSE_S, and records every
  call: 'applied', 'duplicate', 'reordered', or failed (the error's name).
* NoteClient: one per node, pgrac_ic_broadcast() every PAUSE_S; counts every call it
  issued (a call that failed may still have sent the note to some nodes).
* Sampler: one per node, every SAMPLE_S reads notes_recv per source node and when the
  instance's interconnect shared memory was made (pg_cluster_rdma_status.started_at,
  or pg_postmaster_start_time() without it): that tells the receiver's incarnations
  apart, since the counters (and the probe's per-stream marks) restart at zero with it.

What the records prove is in delivery.py."""

import threading
import time

import psycopg2

from .clients import STATEMENT_TIMEOUT_MS, classify

PAUSE_S = 0.02     # one probe call per client per 20 ms: light next to the lock clients
SAMPLE_S = 1.0
SEQ_STREAMS = 16   # kSeqStreams in src/ic/session/seq_check.hpp
NOTE_BODY = b"\x01"

SAMPLE_SQL = ("SELECT coalesce((SELECT started_at::text FROM pg_cluster_rdma_status LIMIT 1), "
              "pg_postmaster_start_time()::text), node_id, notes_recv "
              "FROM pg_cluster_ic_peers WHERE NOT is_self")


def stream_for(src, dst, n):
    """The stream of pair (src, dst): distinct for every pair while n*n <= 16, and always
    distinct among one source's pairs (the receiver keeps one mark per source node and
    stream, so that is all that keeps two clients from sharing a mark)."""
    return ((src - 1) * n + (dst - 1)) % SEQ_STREAMS


def values_available(cluster):
    """None if the lock value block functions exist, else why not."""
    try:
        rows = cluster.node(1).query(
            "SELECT count(*) FROM pg_proc WHERE proname IN ('pgrac_ges_lock_value', "
            "'pgrac_ges_set_lock_value')", timeout=10)
    except psycopg2.Error as e:
        return "could not look for the value block functions: %s" % (
            str(e).strip().splitlines()[0])
    return None if rows[0][0] >= 2 else "pgrac_ges_lock_value is missing"


def available(cluster):
    """None if pgrac_ic_seq_rpc and pgrac_ic_broadcast exist, else why not."""
    try:
        rows = cluster.node(1).query(
            "SELECT count(*) FROM pg_proc WHERE proname IN ('pgrac_ic_seq_rpc', "
            "'pgrac_ic_broadcast')", timeout=10)
    except psycopg2.Error as e:
        return "could not look for the probe functions: %s" % str(e).strip().splitlines()[0]
    return None if rows[0][0] == 2 else "pgrac_ic_seq_rpc or pgrac_ic_broadcast is missing"


class _Conn:
    """A client connection to one instance that is reopened after any error."""

    def __init__(self, node, stop, statement_timeout_ms=STATEMENT_TIMEOUT_MS):
        self.node = node
        self.stop = stop
        self.timeout_ms = statement_timeout_ms
        self.conn = None
        self.pid = None

    def ensure(self):
        if self.conn is not None:
            return True
        try:
            self.conn = self.node.connect(timeout=5, statement_timeout_ms=self.timeout_ms)
            self.pid = self.conn.get_backend_pid()
            return True
        except psycopg2.Error:
            self.conn = None
            self.stop.wait(0.2)
            return False

    def after_error(self):
        """Keeps the connection after an error the server raised (the probes run in
        autocommit: nothing to roll back), so that a peer that stays unreachable does not
        make every call a new backend; drops it if it is broken."""
        if self.conn is not None and self.conn.closed:
            self.drop()

    def drop(self):
        if self.conn is not None:
            try:
                self.conn.close()
            except Exception:  # noqa: BLE001
                pass
        self.conn = None


class SeqClient(threading.Thread):
    def __init__(self, node, dst, n, stop):
        super().__init__(daemon=True, name="seq-%d-%d" % (node.i, dst))
        self.src, self.dst = node.i, dst
        self.stream = stream_for(node.i, dst, n)
        self.c = _Conn(node, stop)
        self.stop = stop
        self.seq = 0
        self.calls = []
        self.current = None

    def run(self):
        while not self.stop.is_set():
            if not self.c.ensure():
                continue
            self.seq += 1  # a seq is used once, whatever became of the call before
            call = {"src": self.src, "dst": self.dst, "stream": self.stream, "seq": self.seq,
                    "pid": self.c.pid, "t0": time.time(), "t1": None, "res": None, "err": None}
            self.current = call
            try:
                with self.c.conn.cursor() as cur:
                    cur.execute("SELECT pgrac_ic_seq_rpc(%s, %s, %s)",
                                (self.dst, self.stream, self.seq))
                    call["res"] = cur.fetchone()[0]
                    if call["res"] is None:
                        call["res"] = "NULL"
            except Exception as e:  # noqa: BLE001 - every error is a failed call
                call["err"] = classify(e)
                self.c.after_error()
            call["t1"] = time.time()
            self.calls.append(call)
            self.current = None
            self.stop.wait(PAUSE_S)
        self.c.drop()


class NoteClient(threading.Thread):
    def __init__(self, node, stop):
        super().__init__(daemon=True, name="notes-%d" % node.i)
        self.src = node.i
        self.c = _Conn(node, stop)
        self.stop = stop
        self.sent = 0      # calls issued: each may have sent one note to every other node
        self.ok = 0
        self.errors = {}

    def run(self):
        while not self.stop.is_set():
            if not self.c.ensure():
                continue
            self.sent += 1  # counted before the call: an upper bound of the notes sent
            try:
                with self.c.conn.cursor() as cur:
                    cur.execute("SELECT pgrac_ic_broadcast(%s)", (psycopg2.Binary(NOTE_BODY),))
                    cur.fetchone()
                self.ok += 1
            except Exception as e:  # noqa: BLE001
                name = classify(e)
                self.errors[name] = self.errors.get(name, 0) + 1
                self.c.after_error()
            self.stop.wait(PAUSE_S)
        self.c.drop()

    def record(self):
        return {"src": self.src, "sent": self.sent, "ok": self.ok, "errors": self.errors}


def sample(node, conn=None):
    """One reading of node's note counters: {"node", "t", "started_at", "recv": {src: n}}.
    Raises psycopg2.Error."""
    own = conn is None
    if own:
        conn = node.connect(timeout=5, statement_timeout_ms=5000)
    try:
        with conn.cursor() as cur:
            cur.execute(SAMPLE_SQL)
            rows = cur.fetchall()
    finally:
        if own:
            conn.close()
    t = time.time()
    started = rows[0][0] if rows else None
    return {"node": node.i, "t": t, "started_at": started,
            "recv": {str(src): int(c) for _, src, c in rows if c is not None}}


class Sampler(threading.Thread):
    def __init__(self, node, stop):
        super().__init__(daemon=True, name="sampler-%d" % node.i)
        self.node = node
        self.c = _Conn(node, stop, statement_timeout_ms=5000)
        self.stop = stop
        self.samples = []

    def run(self):
        while not self.stop.is_set():
            if self.c.ensure():
                try:
                    self.samples.append(sample(self.node, self.c.conn))
                except psycopg2.Error:
                    self.c.drop()
            self.stop.wait(SAMPLE_S)
        self.c.drop()


class Probes:
    def __init__(self, cluster):
        self.cluster = cluster
        self.stop = threading.Event()
        n = cluster.n
        self.seq = [SeqClient(node, j, n, self.stop)
                    for node in cluster.nodes for j in range(1, n + 1) if j != node.i]
        self.notes = [NoteClient(node, self.stop) for node in cluster.nodes]
        self.samplers = [Sampler(node, self.stop) for node in cluster.nodes]

    def threads(self):
        return self.seq + self.notes + self.samplers

    def start(self):
        for t in self.threads():
            t.start()

    def finish(self, grace, settle=2.0):
        """Stops every probe (a call still running after grace s is recorded as failed:
        its outcome is unknown), waits `settle` s for notes in flight, then reads every
        node's counters a last time. Returns (calls, notes, samples)."""
        self.stop.set()
        end = time.time() + grace
        for t in self.threads():
            t.join(max(0.0, end - time.time()))
        calls, samples = [], []
        for c in self.seq:
            calls.extend(c.calls)
            cur = c.current
            if c.is_alive() and cur is not None:
                cur = dict(cur)
                cur["err"] = "unfinished"
                calls.append(cur)
        time.sleep(settle)
        for s in self.samplers:
            samples.extend(s.samples)
        for node in self.cluster.nodes:
            try:
                last = sample(node)
                last["final"] = True
                samples.append(last)
            except psycopg2.Error:
                pass
        return calls, [c.record() for c in self.notes], samples
