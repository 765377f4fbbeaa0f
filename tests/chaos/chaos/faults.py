"""Faults: each one is injected, lasts a while, is healed, and is logged with its wall
times. The schedule is rounds of every kind in a random order (from the seed), one
fault at a time; after each heal it waits (bounded) until every node made progress
again, then a short random gap."""

import time

import psycopg2

from . import netns, procs
from .util import log, rel

KINDS = ["listener", "lms", "reset", "freeze_short", "freeze_long", "kill", "partition",
         "one_way", "loss", "drift", "impostor"]
# Delay, jitter, reordering and loss by tc netem: added to KINDS by enable_netem()
# where the kernel has sch_netem (the run logs whether it does).
NETEM_KIND = "netem"


# The faults that need the network of a node of its own (iptables chains in its
# namespace, TCP connections to kill, a veth for netem), with why they cannot run at
# the verbs tiers, where every instance shares the root namespace and rxe0.
_NO_NS = ("needs iptables in a network namespace of the node's own; at %s the nodes share "
          "the root namespace and one address, and rxe carries their packets inside the "
          "device, past netfilter (tests/chaos/README.md)")
NETWORK_KINDS = {
    "reset": "ss -K kills TCP connections; the verbs tiers have none (rdma_cm, RC queue pairs)",
    "partition": _NO_NS,
    "one_way": _NO_NS,
    "loss": _NO_NS,
    NETEM_KIND: "needs tc netem on a veth of the node's own; at %s rxe carries the nodes' "
                "packets inside the device, past every qdisc",
    "impostor": "needs a network namespace of its own behind the node's, where it binds the "
                "node's address and port and whose packets the node forwards with SNAT; at %s "
                "every node shares the root namespace, so it could only clash with the node's "
                "port",
}


def enable_netem():
    if NETEM_KIND not in KINDS:
        KINDS.append(NETEM_KIND)


def process_faults_only(tier):
    """Leaves only the process faults in KINDS (the verbs tiers); returns
    {kind: why it is left out} for the run's output and summary."""
    left_out = {k: NETWORK_KINDS[k].replace("%s", tier)
                for k in KINDS + [NETEM_KIND] if k in NETWORK_KINDS}
    KINDS[:] = [k for k in KINDS if k not in NETWORK_KINDS]
    return left_out


FREEZE_SHORT_S = 1.0   # shorter than cluster.peer_timeout (3 s at tier3, 5 s at tier2)
FREEZE_OVER_S = 2.0    # freeze_long lasts cluster.peer_timeout plus this
PARTITION_S = 6.0

# drift: a rolling reload of cluster.peer_timeout (ALTER SYSTEM + pg_reload_conf() on
# one node after another, a random pause between two) to a value of
# cluster.DRIFT_TIMEOUTS, then the same back to the base value in another random order.
# In two thirds of them (one half at the verbs tiers, which have no partitions) the node
# just reloaded in one of the two rounds, not the last of it, so that the others still
# have the other value, is then partitioned or frozen for a random time between the
# smaller and the larger of the two values + 2 s (past every window in force, so the
# others exclude it), while the round goes on with the others. That is the combination
# that granted twice before the timing was exchanged (issue 25: a reload on one node,
# then its isolation).
#
# Why the run's bounds keep their meaning with timeouts up to 10 s (3.3 times the base):
# * --hung-bound (10 s) does not depend on cluster.peer_timeout: a lock or unlock call
#   waits on its latch with CHECK_FOR_INTERRUPTS (src/capi/ges/lock_wait.cpp), so the clients'
#   statement_timeout (5 s, clients.py) ends it whatever the timeouts, and its cancel is
#   sent with a 1 s bound; the bound is that plus slack, so it is left as it is. The time
#   the victim is frozen is excluded, as for the freeze faults (f["paused"]).
# * --progress-bound (20 s) is measured from the fault's end, which is when the last node
#   has the base value back, every isolation healed before; and the fault returns only
#   once the largest old value has passed after that (a node whose timeout went down
#   keeps excluding by the old value that long), so the next fault also starts with
#   the base timing in force everywhere, and a 6 s partition still outlives it. While
#   the fault runs no progress is asserted (as during any fault): resources mastered on
#   an isolated victim wait for up to the largest timeout in force.
# * The values are capped at 10 s so that one drift fault (two rounds of at most 3 s
#   pauses, an isolation of at most 12 s, 11 s of settling) stays well inside the tail
#   the schedule keeps after the last fault (--progress-bound + 5 s, main.py extends
#   the load past a fault that ends later).
DRIFT_PAUSE_S = (0.2, 3.0)
DRIFT_OVER_S = 2.0     # the longest isolation: the larger of the two values plus this

# impostor: a second instance with a live member's cluster.node_id (cluster.Impostor),
# reaching the others from the member's address (netns.attach_impostor), for 8-12 s;
# in half of them the real member is frozen for peer_timeout + 2 s meanwhile, starting
# 1-3 s after the impostor (issue 25: after such a freeze one node admitted the impostor
# and refused the real member, another kept the real one: a permanent replay deadlock).
IMPOSTOR_S = (8.0, 12.0)


def _wait_worker_back(node, backend_type, old_pids, timeout=15.0):
    """Waits until a process of backend_type runs again with a new pid; its time."""
    end = time.time() + timeout
    while time.time() < end:
        try:
            rows = node.query("SELECT pid FROM pg_stat_activity WHERE backend_type = %s",
                              (backend_type,), timeout=3)
            if any(r[0] not in old_pids for r in rows):
                return time.time()
        except psycopg2.Error:
            pass
        time.sleep(0.1)
    return None


def _terminate(node, f, pattern, rng):
    rows = node.query("SELECT pid, backend_type FROM pg_stat_activity WHERE backend_type LIKE %s",
                      (pattern,))
    if not rows:
        raise RuntimeError("no process with backend_type like '%s'" % pattern)
    pid, btype = rng.choice(sorted(rows))
    f["detail"] = "%s pid %d" % (btype, pid)
    f["start"] = time.time()
    node.query("SELECT pg_terminate_backend(%s)", (pid,))
    back = _wait_worker_back(node, btype, {pid})
    f["detail"] += ", back" if back else ", NOT back within 15 s"
    return back


def inject(kind, cluster, i, rng):
    """Runs one fault against node i to its heal; returns the fault record."""
    node = cluster.node(i)
    tag = cluster.tag
    f = {"kind": kind, "node": i, "peer": None, "detail": "", "start": time.time(),
         "end": None, "killed_at": None, "frozen": False, "error": None}
    try:
        if kind == "listener":
            f["end"] = _terminate(node, f, "pgrac_ic listener", rng)
        elif kind == "lms":
            f["end"] = _terminate(node, f, "pgrac_ic lms%", rng)
        elif kind == "reset":
            f["start"] = time.time()
            f["detail"] = "%d TCP connections killed" % netns.reset_tcp(tag, i)
        elif kind in ("freeze_short", "freeze_long"):
            secs = (FREEZE_SHORT_S if kind == "freeze_short"
                    else cluster.peer_timeout_s + FREEZE_OVER_S)
            pm = node.postmaster_pid()
            if not pm:
                raise RuntimeError("no postmaster")
            f["start"] = time.time()
            f["frozen"] = True
            pids = procs.stop_tree(pm)
            f["detail"] = "%d processes SIGSTOPped for %.0f s" % (len(pids), secs)
            time.sleep(secs)
            procs.cont_tree(pm, pids)
        elif kind == "kill":
            pm = node.postmaster_pid()
            if not pm:
                raise RuntimeError("no postmaster")
            f["start"] = time.time()
            f["killed_at"], pids = procs.kill_tree(pm)
            gone = procs.wait_gone(pids, 10)
            f["detail"] = "%d processes SIGKILLed%s; restarted" % (
                len(pids), "" if gone else " (some still there after 10 s)")
            time.sleep(0.5)
            node.remove_stale_pidfile()
            node.start()
        elif kind == "partition":
            f["start"] = time.time()
            netns.partition(tag, i)
            f["detail"] = "node %d cut from all for %.0f s" % (i, PARTITION_S)
            time.sleep(PARTITION_S)
        elif kind == "one_way":
            j = rng.choice([k for k in range(1, cluster.n + 1) if k != i])
            secs = rng.uniform(4.0, 6.0)
            f["peer"] = j
            f["start"] = time.time()
            netns.one_way(tag, i, j)
            f["detail"] = "node %d -> node %d dropped for %.1f s" % (i, j, secs)
            time.sleep(secs)
        elif kind == NETEM_KIND:
            delay = rng.randint(10, 60)
            loss = rng.uniform(1.0, 5.0)
            secs = rng.uniform(5.0, 10.0)
            f["start"] = time.time()
            netns.netem(tag, i, delay, delay // 2, 25, loss)
            f["detail"] = ("node %d: netem delay %d±%d ms, 25%% reordered, %.1f%% lost for %.1f s"
                           % (i, delay, delay // 2, loss, secs))
            time.sleep(secs)
        elif kind == "drift":
            _drift(cluster, f, rng)
        elif kind == "impostor":
            _impostor(cluster, f, rng)
        elif kind == "loss":
            p = rng.uniform(0.10, 0.20)
            secs = rng.uniform(5.0, 10.0)
            f["start"] = time.time()
            netns.loss(tag, i, p)
            f["detail"] = "node %d loses %.0f%% each way for %.1f s" % (i, p * 100, secs)
            time.sleep(secs)
        else:
            raise ValueError(kind)
    except Exception as e:  # noqa: BLE001 - a fault that could not be made is logged
        f["error"] = str(e).strip().splitlines()[0][:200] if str(e).strip() else repr(e)
    finally:
        if kind in ("partition", "one_way", "loss", NETEM_KIND):
            netns.heal(tag, i)
        if f["frozen"]:
            pm = node.postmaster_pid()
            if pm:
                procs.cont_tree(pm)
        if f["end"] is None:
            f["end"] = time.time()
    return f


def schedule(rng, n):
    """An endless sequence of (kind, node): rounds of every kind, shuffled."""
    while True:
        kinds = list(KINDS)
        rng.shuffle(kinds)
        for k in kinds:
            yield k, rng.randint(1, n)


def wait_progress(workload, n, since, bound):
    """Waits until every node had a grant after `since`; returns that time or None."""
    end = since + bound
    while time.time() < end:
        if all(workload.last_grant(i) > since for i in range(1, n + 1)):
            return max(workload.last_grant(i) for i in range(1, n + 1))
        time.sleep(0.05)
    return None


def ensure_running(cluster):
    """Starts any instance that is not running (a restart after a kill that failed), so
    that one harness hiccup does not leave a node down for the rest of the run."""
    for node in cluster.nodes:
        if node.postmaster_pid() is None:
            log("HARNESS: node %d is not running; starting it" % node.i)
            try:
                node.remove_stale_pidfile()
                node.start()
            except Exception as e:  # noqa: BLE001
                log("HARNESS: node %d did not start: %s" % (node.i, e))


def run_faults(cluster, workload, rng, until, progress_bound, stop_event=None):
    """Injects faults until wall time `until` (a fault that starts before it runs to
    its heal). Returns the fault log."""
    out = []
    for kind, i in schedule(rng, cluster.n):
        if time.time() >= until or (stop_event is not None and stop_event.is_set()):
            break
        ensure_running(cluster)
        f = inject(kind, cluster, i, rng)
        out.append(f)
        log("fault %-12s node %d %s-%s %s%s" % (kind, f["node"], rel(f["start"]), rel(f["end"]),
                                               f["detail"],
                                               "  ERROR: " + f["error"] if f["error"] else ""))
        got = wait_progress(workload, cluster.n, f["end"], progress_bound)
        if got is None:
            log("  no grant on every node within %.0f s of the heal" % progress_bound)
        time.sleep(rng.uniform(1.0, 3.0))
    restore_timing(cluster)
    return out


# ---- drift


def _secs(ms):
    return "%g s" % (ms / 1000.0)


class _Isolation:
    """A partition or freeze of one node that the drift round heals when its time is up."""

    def __init__(self, cluster, f, kind, node, secs):
        self.cluster, self.f, self.kind, self.node = cluster, f, kind, node
        self.pm, self.pids = None, []
        self.start = time.time()
        self.until = self.start + secs
        self.active = True
        if kind == "partition":
            netns.partition(cluster.tag, node)
        else:
            self.pm = cluster.node(node).postmaster_pid()
            if not self.pm:
                self.active = False
                raise RuntimeError("node %d: no postmaster to freeze" % node)
            self.pids = procs.stop_tree(self.pm)

    def heal(self):
        if not self.active:
            return
        self.active = False
        if self.kind == "partition":
            netns.heal(self.cluster.tag, self.node)
        else:
            procs.cont_tree(self.pm, self.pids)
            self.f.setdefault("paused", []).append([self.node, self.start, time.time()])

    def sleep(self, secs):
        """Sleeps secs, healing the isolation when its time is up meanwhile."""
        end = time.time() + secs
        while True:
            now = time.time()
            if self.active and now >= self.until:
                self.heal()
            if now >= end:
                return
            time.sleep(min(0.05, end - now))

    def finish(self):
        """Waits until the isolation's time is up and heals it."""
        self.sleep(max(0.0, self.until - time.time()))


class _NoIsolation(_Isolation):
    def __init__(self):  # noqa: D107 - nothing to make
        self.active = False
        self.until = 0.0

    def heal(self):
        pass


def _config_drift_total(cluster):
    """config_drift summed over pg_cluster_rdma_error_totals of every node, or None."""
    total = 0
    for node in cluster.nodes:
        try:
            rows = node.query("SELECT coalesce(sum(total), 0) FROM pg_cluster_rdma_error_totals "
                              "WHERE type = 'config_drift'")
        except psycopg2.Error:
            return None
        total += int(rows[0][0])
    return total


def _peers_show(cluster, want_ms, timeout=5.0):
    """Whether (and when) every node's pg_cluster_ic_peers shows want_ms as every
    other node's peer_timeout_ms (what the heartbeats carried), as text."""
    t0 = time.time()
    while True:
        bad = []
        for node in cluster.nodes:
            try:
                rows = node.query("SELECT node_id, peer_timeout_ms FROM pg_cluster_ic_peers "
                                  "WHERE NOT is_self ORDER BY node_id")
            except psycopg2.Error as e:
                bad.append("node %d: %s" % (node.i, str(e).strip().splitlines()[0][:80]))
                continue
            bad.extend("node %d shows node %d at %s ms" % (node.i, j, ms)
                       for j, ms in rows if ms != want_ms)
        if not bad:
            return "every node shows %s for every peer after %.1f s" % (
                _secs(want_ms), time.time() - t0)
        if time.time() - t0 > timeout:
            return "NOT every node shows %s after %.0f s: %s" % (
                _secs(want_ms), timeout, "; ".join(bad[:3]))
        time.sleep(0.2)


def _drift(cluster, f, rng):
    n = cluster.n
    base = int(round(cluster.peer_timeout_s * 1000))
    value = int(round(rng.choice(cluster.drift_timeouts) * 1000))
    up = rng.sample(range(1, n + 1), n)
    back = rng.sample(range(1, n + 1), n)
    combos = ["freeze", None] if cluster.verbs else ["partition", "freeze", None]
    combo = rng.choice(combos)
    phase = rng.choice(["up", "back"])
    pos = rng.randrange(n - 1)
    victim = (up if phase == "up" else back)[pos]
    f["node"] = victim
    f["drift"] = {"base_ms": base, "value_ms": value, "up": up, "back": back,
                  "isolation": combo, "victim": victim if combo else None}
    in_force = {i: base for i in range(1, n + 1)}
    notes = []
    f["detail"] = "peer_timeout %s -> %s on %s, back on %s" % (
        _secs(base), _secs(value), ",".join(map(str, up)), ",".join(map(str, back)))
    drift_before = _config_drift_total(cluster)
    iso = _NoIsolation()
    done = False
    f["start"] = time.time()
    try:
        for name, order, target in (("up", up, value), ("back", back, base)):
            if name == "back":
                iso.sleep(rng.uniform(*DRIFT_PAUSE_S))
            for k, i in enumerate(order):
                if k > 0:
                    iso.sleep(rng.uniform(*DRIFT_PAUSE_S))
                cluster.node(i).set_peer_timeout(None if name == "back" else target)
                in_force[i] = target
                if combo and name == phase and k == pos:
                    secs = rng.uniform(min(base, value) / 1000.0,
                                       max(base, value) / 1000.0 + DRIFT_OVER_S)
                    iso = _Isolation(cluster, f, combo, i, secs)
                    notes.append("node %d %s for %.1f s from %s, just after its reload to %s, "
                                 "the others at %s" % (
                                     i, "partitioned" if combo == "partition" else "frozen",
                                     secs, rel(iso.start), _secs(target), ", ".join(
                                         "%d: %s" % (j, _secs(in_force[j]))
                                         for j in sorted(in_force) if j != i)))
            iso.finish()
            if name == "up":
                notes.append(_peers_show(cluster, value))
        done = True
    finally:
        iso.heal()
        if not done:
            # A step failed: every node back to the base value, whatever happened.
            for node in cluster.nodes:
                try:
                    node.set_peer_timeout(None)
                except Exception as e:  # noqa: BLE001
                    notes.append("node %d not reset: %s" % (node.i, e))
        f["end"] = time.time()
        if value > base:
            # A node whose timeout went down keeps the old window that long.
            time.sleep(value / 1000.0 + 1.0)
        f["settled"] = time.time()
        if done:
            notes.append(_peers_show(cluster, base))
        drift_after = _config_drift_total(cluster)
        if drift_before is not None and drift_after is not None:
            notes.append("config_drift +%d" % (drift_after - drift_before))
        f["detail"] += "; " + "; ".join(notes) + "; settled at %s" % rel(f["settled"])


def restore_timing(cluster):
    """Every node back to the base cluster.peer_timeout (ALTER SYSTEM RESET), should a
    drift fault have left one behind; returns {node: ms} as new backends see it."""
    base = int(round(cluster.peer_timeout_s * 1000))
    out = {}
    for node in cluster.nodes:
        try:
            ms = node.setting_ms()
            if ms != base:
                log("HARNESS: node %d has cluster.peer_timeout %d ms; back to %d ms"
                    % (node.i, ms, base))
                node.set_peer_timeout(None)
                ms = node.setting_ms()
            out[node.i] = ms
        except Exception as e:  # noqa: BLE001
            log("HARNESS: cluster.peer_timeout of node %d not read or reset: %s" % (node.i, e))
            out[node.i] = None
    return out


# ---- impostor


def _peer_row(node, k):
    """(instance, state, duplicate_refusals) of node k as `node` sees it, or None."""
    try:
        rows = node.query("SELECT instance, state, duplicate_refusals FROM pg_cluster_ic_peers "
                          "WHERE node_id = %s", (k,), timeout=3)
    except psycopg2.Error:
        return None
    return tuple(rows[0]) if rows else None


def _self_instance(node):
    return node.query("SELECT instance FROM pg_cluster_ic_peers WHERE is_self")[0][0]


def _impostor(cluster, f, rng):
    imp = cluster.impostor
    if imp is None:
        raise RuntimeError("no impostor instance in this run")
    n = cluster.n
    # It dials the nodes above the id it claims (the lower id dials): never the highest.
    k = f["node"] if f["node"] < n else rng.randint(1, n - 1)
    f["node"] = k
    watchers = list(range(k + 1, n + 1))
    real = cluster.node(k)
    secs = rng.uniform(*IMPOSTOR_S)
    freeze = rng.random() < 0.5
    before = {j: _peer_row(cluster.node(j), k) for j in watchers}
    notes = []
    frozen = None  # (pm, pids, start)
    netns.attach_impostor(cluster.tag, k)
    try:
        imp.configure(k)
        f["start"] = time.time()
        imp.start()
        mine = _self_instance(imp)
        theirs = _self_instance(real)
        f["detail"] = "instance %s claims node %d (instance %s) from %s for %.1f s" % (
            mine, k, theirs, netns.addr(k), secs)
        end = f["start"] + secs
        freeze_at = f["start"] + rng.uniform(1.0, 3.0) if freeze else None
        thaw_at = None
        admitted = {}
        while True:
            now = time.time()
            if freeze_at is not None and now >= freeze_at:
                freeze_at = None
                pm = real.postmaster_pid()
                if pm:
                    frozen = (pm, procs.stop_tree(pm), time.time())
                    thaw_at = frozen[2] + cluster.peer_timeout_s + FREEZE_OVER_S
                    end = max(end, thaw_at + rng.uniform(2.0, 4.0))
            if frozen is not None and now >= thaw_at:
                procs.cont_tree(frozen[0], frozen[1])
                f.setdefault("paused", []).append([k, frozen[2], time.time()])
                notes.append("real node %d frozen %s-%s" % (k, rel(frozen[2]), rel(time.time())))
                frozen = None
            if now >= end and frozen is None:
                break
            for j in watchers:
                row = _peer_row(cluster.node(j), k)
                if row and row[0] == mine and row[1] == "UP" and j not in admitted:
                    admitted[j] = now
            time.sleep(0.25)
        for j in watchers:
            b, a = before[j], _peer_row(cluster.node(j), k)
            if b and a:
                notes.append("node %d refused it %d times (duplicate_refusals)" % (j, a[2] - b[2]))
        # Connected (its instance on the node's row, UP) is not yet a member: a view
        # binds each id to one instance, which the impostor's own history shows.
        notes.append("connected as node %d by: %s" % (k, ", ".join(
            "node %d at %s" % (j, rel(t)) for j, t in sorted(admitted.items())) or "no node"))
        try:
            ev = imp.query("SELECT event, count(*) FROM pg_cluster_membership_history "
                           "GROUP BY event ORDER BY event")
            notes.append("its membership history: %s" % (
                ", ".join("%s %d" % tuple(r) for r in ev) or "empty"))
        except psycopg2.Error as e:
            notes.append("its membership history not read: %s" % str(e).strip().splitlines()[0])
    finally:
        if frozen is not None:
            procs.cont_tree(frozen[0], frozen[1])
            f.setdefault("paused", []).append([k, frozen[2], time.time()])
        pm = imp.postmaster_pid()
        if pm:
            imp.stop()
            if imp.postmaster_pid():
                _, pids = procs.kill_tree(imp.postmaster_pid())
                procs.wait_gone(pids, 10)
        netns.detach_impostor(cluster.tag, k)
        f["end"] = time.time()
        f["detail"] += ("; " if f["detail"] else "") + "; ".join(notes)
