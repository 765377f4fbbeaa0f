"""Faults: each one is injected, lasts a while, is healed, and is logged with its wall
times. The schedule is rounds of every kind in a random order (from the seed), one
fault at a time; after each heal it waits (bounded) until every node made progress
again, then a short random gap."""

import time

import psycopg2

from . import netns, procs
from .util import log, rel

KINDS = ["listener", "lms", "reset", "freeze_short", "freeze_long", "kill", "partition",
         "one_way", "loss"]
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
        log("fault %-12s node %d %s-%s %s%s" % (kind, i, rel(f["start"]), rel(f["end"]),
                                               f["detail"],
                                               "  ERROR: " + f["error"] if f["error"] else ""))
        got = wait_progress(workload, cluster.n, f["end"], progress_bound)
        if got is None:
            log("  no grant on every node within %.0f s of the heal" % progress_bound)
        time.sleep(rng.uniform(1.0, 3.0))
    return out
