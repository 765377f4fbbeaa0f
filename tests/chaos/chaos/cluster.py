"""The test cluster: N PostgreSQL instances, physical copies of one initdb'd data
directory, each started inside its own network namespace, reached by clients over
its unix socket (which works across namespaces)."""

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
cluster.interconnect_tier = tier3
cluster.heartbeat_interval = 300ms
cluster.peer_timeout = 3s
cluster.rpc_timeout = 5s
cluster.lms_workers = 2
"""


class Instance:
    def __init__(self, cluster, i):
        self.cluster = cluster
        self.i = i
        self.dir = os.path.join(cluster.workdir, "n%d" % i)
        self.data = os.path.join(self.dir, "data")
        self.logfile = os.path.join(self.dir, "server.log")
        self.port = PG_PORT_BASE + i
        self.ns = netns.node_ns(cluster.tag, i)

    def conf(self):
        c = self.cluster
        return SETTINGS + """
port = %d
unix_socket_directories = '%s'
cluster.node_id = %d
cluster.nodes = '%s'
cluster.auth_key_file = '%s'
""" % (self.port, self.dir, self.i, c.nodes_setting(), c.key_file)

    def pg_ctl(self, *args, timeout=90):
        return run(as_postgres([self.cluster.pgbin + "/pg_ctl", "-D", self.data, "-l", self.logfile]
                               + list(args), netns=self.ns), timeout=timeout + 10)

    def start(self):
        self.pg_ctl("start", "-w", "-t", "60", timeout=60)

    def stop(self):
        run(as_postgres([self.cluster.pgbin + "/pg_ctl", "-D", self.data, "stop", "-m", "immediate",
                         "-w", "-t", "20"]), timeout=30, check=False, quiet=True)

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

    def sees_all_up(self):
        try:
            rows = self.query("SELECT count(*) FROM pg_cluster_ic_peers WHERE state = 'UP'")
            return rows[0][0] == self.cluster.n
        except psycopg2.Error:
            return False


class Cluster:
    def __init__(self, workdir, tag, n, pgbin):
        self.workdir = workdir
        self.pgbin = pgbin
        self.tag = tag
        self.n = n
        self.key_file = os.path.join(workdir, "cluster.key")
        self.nodes = [Instance(self, i) for i in range(1, n + 1)]

    def node(self, i):
        return self.nodes[i - 1]

    def nodes_setting(self):
        return ",".join("%d@%s:%d" % (i, netns.addr(i), IC_PORT) for i in range(1, self.n + 1))

    def create(self):
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
                         "--no-sync"]), timeout=120)
        for node in self.nodes[1:]:
            run(["cp", "-a", first.data, node.data], timeout=60)
        for node in self.nodes:
            with open(os.path.join(node.data, "postgresql.conf"), "a") as f:
                f.write(node.conf())

    def start(self, up_timeout=60):
        for node in self.nodes:
            node.start()
        for node in self.nodes:
            node.query("CREATE EXTENSION IF NOT EXISTS pgrac_ic")
        self.wait_all_up(up_timeout)

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
        for node in self.nodes:
            pm = node.postmaster_pid()
            if pm:
                procs.cont_tree(pm)
        for node in self.nodes:
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
        shutil.rmtree(self.workdir, ignore_errors=True)
        log("cluster removed (%s)" % self.workdir)
