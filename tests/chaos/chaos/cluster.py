"""The test cluster: N PostgreSQL instances, physical copies of one initdb'd data
directory, reached by clients over its unix socket.

At tier3 each instance runs inside its own network namespace (the unix socket works
across namespaces) at 10.77.0.i:7400. At tier1/tier2 (verbs) every instance runs in
the root namespace on the RDMA netdev's address with a port of its own (IC_PORT + i),
with cluster.interconnect_strict = on: soft-RoCE's UDP socket lives in the initial
namespace, so instances in other namespaces could not reach it (tests/chaos/README.md)."""

import os
import pwd
import secrets
import shutil
import time

import psycopg2

from . import netns, procs
from .util import as_postgres, log, run

IC_PORT = 7400
PG_PORT_BASE = 5400

SETTINGS = """
listen_addresses = ''
max_connections = 40
shared_buffers = 16MB
fsync = off
synchronous_commit = off
full_page_writes = off
log_line_prefix = '%m [%p] %b '
shared_preload_libraries = 'pgrac_ic'
cluster.rpc_timeout = 5s
cluster.lms_workers = 2
# Mastership that follows use, as often as it can happen: a resource's home
# looks at every 4 requests and hands it over whenever one node sent 2.
cluster.ges_remaster_after = 4
"""

VERBS_TIERS = ("tier1", "tier2")

# (heartbeat_interval, peer_timeout in s) per tier. The verbs tiers run in the soft-RoCE
# VM under TCG, where one LMS round trip can take a second: a longer peer timeout there
# keeps a loaded emulator from looking like a dead node. freeze_short stays below the
# peer timeout and freeze_long above it (faults.py) on both.
TIMING = {"tier3": ("300ms", 3.0), "verbs": ("500ms", 5.0)}

# The values the drift fault (faults.py) reloads cluster.peer_timeout to, in s: below
# and above the tier's base, at most 10 s (faults.py argues why the run's bounds hold
# with it). At the verbs tiers the lowest stays at 5 heartbeats.
DRIFT_TIMEOUTS = {"tier3": (1.5, 6.0, 10.0), "verbs": (2.5, 10.0)}

# The impostor (faults.py, kind impostor): a spare instance, a copy of the same initdb,
# started with a live member's cluster.node_id in a namespace of its own behind that
# member's (netns.attach_impostor). Its PostgreSQL port only names its unix socket.
IMPOSTOR_PG_PORT = PG_PORT_BASE + 50


class Instance:
    def __init__(self, cluster, i):
        self.cluster = cluster
        self.i = i
        self.dir = os.path.join(cluster.workdir, "n%d" % i)
        self.data = os.path.join(self.dir, "data")
        self.logfile = os.path.join(self.dir, "server.log")
        self.port = PG_PORT_BASE + i
        self.ns = None if cluster.verbs else netns.node_ns(cluster.tag, i)

    def conf(self):
        c = self.cluster
        return SETTINGS + """
port = %d
unix_socket_directories = '%s'
cluster.interconnect_tier = %s
cluster.interconnect_strict = %s
cluster.heartbeat_interval = %s
cluster.peer_timeout = %ds
cluster.node_id = %d
cluster.nodes = '%s'
cluster.auth_key_file = '%s'
""" % (self.port, self.dir, c.tier, "on" if c.verbs else "off", c.heartbeat,
       c.peer_timeout_s, self.i, c.nodes_setting(), c.key_file)

    def pg_ctl(self, *args, timeout=90):
        return run(as_postgres([self.cluster.pgbin + "/pg_ctl", "-D", self.data, "-l", self.logfile]
                               + list(args), netns=self.ns, keep_limits=self.cluster.verbs),
                   timeout=timeout + 10)

    def start(self):
        self.pg_ctl("start", "-w", "-t", "60", timeout=60)

    def stop(self):
        run(as_postgres([self.cluster.pgbin + "/pg_ctl", "-D", self.data, "stop", "-m", "immediate",
                         "-w", "-t", "20"], keep_limits=self.cluster.verbs),
            timeout=30, check=False, quiet=True)

    def postmaster_pid(self):
        try:
            with open(os.path.join(self.data, "postmaster.pid")) as f:
                pid = int(f.readline().strip())
        except (OSError, ValueError):
            return None
        return pid if procs.alive(pid) else None

    def remove_stale_pidfile(self):
        """After a kill -9: the postmaster may linger as a zombie until init reaps it,
        and a zombie's pid still 'exists' for the new postmaster's lock file check."""
        if self.postmaster_pid() is None:
            try:
                os.unlink(os.path.join(self.data, "postmaster.pid"))
            except FileNotFoundError:
                pass

    def connect(self, timeout=5, statement_timeout_ms=5000):
        conn = psycopg2.connect(host=self.dir, port=self.port, user="postgres",
                                dbname="postgres", connect_timeout=timeout,
                                options="-c statement_timeout=%d" % statement_timeout_ms)
        conn.autocommit = True
        return conn

    def query(self, sql, args=None, timeout=5):
        """One query on a fresh connection; returns all rows."""
        conn = self.connect(timeout=timeout, statement_timeout_ms=timeout * 1000)
        try:
            with conn.cursor() as cur:
                cur.execute(sql, args)
                return cur.fetchall() if cur.description else []
        finally:
            conn.close()

    def setting_ms(self, name="cluster.peer_timeout"):
        """The value a new backend of this instance has (the postmaster's, after a
        reload), in the setting's unit (ms for the timeouts)."""
        return int(self.query("SELECT setting FROM pg_settings WHERE name = %s", (name,))[0][0])

    def set_peer_timeout(self, ms):
        """ALTER SYSTEM + pg_reload_conf() (None: RESET, back to postgresql.conf's value);
        returns when a new backend sees the value (or raises after 5 s)."""
        if ms is None:
            self.query("ALTER SYSTEM RESET cluster.peer_timeout")
            ms = int(self.cluster.peer_timeout_s * 1000)
        else:
            self.query("ALTER SYSTEM SET cluster.peer_timeout = %s", ("%dms" % ms,))
        self.query("SELECT pg_reload_conf()")
        end = time.time() + 5.0
        while True:
            got = self.setting_ms()
            if got == ms:
                return
            if time.time() > end:
                raise RuntimeError("node %d: cluster.peer_timeout is %d ms 5 s after the reload "
                                   "to %d ms" % (self.i, got, ms))
            time.sleep(0.05)

    def sees_all_up(self):
        try:
            rows = self.query("SELECT count(*) FROM pg_cluster_ic_peers WHERE state = 'UP'")
            return rows[0][0] == self.cluster.n
        except psycopg2.Error:
            return False


class Impostor(Instance):
    """A second instance that claims node `claims`'s id: its own data directory (so
    another instance and location than the real node), the real node's cluster.node_id,
    the same cluster.nodes, key and settings, in namespace <tag>x (netns.py)."""

    def __init__(self, cluster):
        super().__init__(cluster, 0)
        self.dir = os.path.join(cluster.workdir, "impostor")
        self.data = os.path.join(self.dir, "data")
        self.logfile = os.path.join(self.dir, "server.log")
        self.port = IMPOSTOR_PG_PORT
        self.ns = netns.impostor_ns(cluster.tag)
        self.base_conf = None
        self.extension = False

    def configure(self, claims):
        self.i = claims
        with open(os.path.join(self.data, "postgresql.conf"), "w") as f:
            f.write(self.base_conf + Instance.conf(self))

    def start(self):
        super().start()
        if not self.extension:
            self.query("CREATE EXTENSION IF NOT EXISTS pgrac_ic")
            self.extension = True


class Cluster:
    def __init__(self, workdir, tag, n, pgbin, tier="tier3", ic_addr=None):
        self.workdir = workdir
        self.pgbin = pgbin
        self.tag = tag
        self.n = n
        self.tier = tier
        self.verbs = tier in VERBS_TIERS
        if self.verbs and not ic_addr:
            raise ValueError("%s needs the RDMA netdev's address (--ic-addr)" % tier)
        self.ic_addr = ic_addr
        self.heartbeat, self.peer_timeout_s = TIMING["verbs" if self.verbs else "tier3"]
        self.key_file = os.path.join(workdir, "cluster.key")
        self.nodes = [Instance(self, i) for i in range(1, n + 1)]
        self.drift_timeouts = DRIFT_TIMEOUTS["verbs" if self.verbs else "tier3"]
        self.impostor = None  # made by create(with_impostor=True)

    def node(self, i):
        return self.nodes[i - 1]

    def ic_endpoint(self, i):
        """(address, port) of node i's interconnect."""
        if self.verbs:
            return self.ic_addr, IC_PORT + i
        return netns.addr(i), IC_PORT

    def nodes_setting(self):
        return ",".join("%d@%s:%d" % ((i,) + self.ic_endpoint(i)) for i in range(1, self.n + 1))

    def create(self, with_impostor=False):
        pw = pwd.getpwnam("postgres")
        os.chown(self.workdir, pw.pw_uid, pw.pw_gid)
        with open(self.key_file, "w") as f:
            f.write(secrets.token_hex(32) + "\n")
        os.chmod(self.key_file, 0o600)
        os.chown(self.key_file, pw.pw_uid, pw.pw_gid)
        first = self.nodes[0]
        for node in self.nodes:
            os.makedirs(node.dir)
            os.chown(node.dir, pw.pw_uid, pw.pw_gid)
        run(as_postgres([self.pgbin + "/initdb", "-D", first.data, "-A", "trust", "-U", "postgres",
                         "--no-sync"], keep_limits=self.verbs), timeout=300)
        for node in self.nodes[1:]:
            run(["cp", "-a", first.data, node.data], timeout=60)
        if with_impostor:
            imp = Impostor(self)
            os.makedirs(imp.dir)
            os.chown(imp.dir, pw.pw_uid, pw.pw_gid)
            run(["cp", "-a", first.data, imp.data], timeout=60)
            with open(os.path.join(imp.data, "postgresql.conf")) as f:
                imp.base_conf = f.read()
            self.impostor = imp
        for node in self.nodes:
            with open(os.path.join(node.data, "postgresql.conf"), "a") as f:
                f.write(node.conf())

    def start(self, up_timeout=None):
        if up_timeout is None:
            up_timeout = 180 if self.verbs else 60
        for node in self.nodes:
            node.start()
        for node in self.nodes:
            node.query("CREATE EXTENSION IF NOT EXISTS pgrac_ic")
        self.wait_all_up(up_timeout)

    def tiers(self):
        """{node: (tier, tier_requested, strict, tier_reason)} from pg_cluster_rdma_status,
        or {node: error text} for a node that could not be asked."""
        out = {}
        for node in self.nodes:
            try:
                rows = node.query("SELECT tier, tier_requested, strict, coalesce(tier_reason, '') "
                                  "FROM pg_cluster_rdma_status", timeout=15)
                out[node.i] = tuple(rows[0])
            except psycopg2.Error as e:
                out[node.i] = "not asked: %s" % str(e).strip().splitlines()[0]
        return out

    def wait_all_up(self, timeout):
        end = time.time() + timeout
        while time.time() < end:
            if all(node.sees_all_up() for node in self.nodes):
                return True
            time.sleep(0.3)
        raise RuntimeError("the nodes did not all see each other UP within %ds" % timeout)

    def destroy(self, keep_logs_in=None):
        """Stops every instance (SIGCONT first: one may be frozen), SIGKILLs whatever of
        the run still runs, copies the server logs if asked, removes the directory."""
        everyone = self.nodes + ([self.impostor] if self.impostor else [])
        for node in everyone:
            pm = node.postmaster_pid()
            if pm:
                procs.cont_tree(pm)
        for node in everyone:
            if node.postmaster_pid():
                node.stop()
        left = procs.pids_with_cwd_under(self.workdir)
        for p in left:
            procs.cont_tree(p)
        procs.signal_pids(left, 9)
        procs.wait_gone(left, 10)
        if keep_logs_in:
            for node in self.nodes:
                if os.path.exists(node.logfile):
                    shutil.copy(node.logfile, os.path.join(keep_logs_in, "server%d.log" % node.i))
            if self.impostor and os.path.exists(self.impostor.logfile):
                shutil.copy(self.impostor.logfile, os.path.join(keep_logs_in, "impostor.log"))
        shutil.rmtree(self.workdir, ignore_errors=True)
        log("cluster removed (%s)" % self.workdir)
