"""Runs one chaos run: network, cluster, clients, faults, then the check and summary.

--tier tier3 (default): every node in a network namespace of its own, TCP, every fault
kind. --tier tier2 (the soft-RoCE VM, tests/chaos/in_vm.sh): every node in the root
namespace on the RDMA netdev's address, verbs (strict), the process faults only; the
network faults left out are printed with the reason at the start and in the summary.

Called by tests/chaos/run.sh (which makes the work directory and cleans up behind us
whatever happens); see tests/chaos/README.md."""

import argparse
import json
import os
import random
import shutil
import signal
import sys
import time

from . import check, clients, delivery, faults, history, library, netns, probes, procs, report
from .cluster import Cluster
from .util import PG_BIN, log, set_t0


def parse(argv):
    a = argparse.ArgumentParser(prog="run.sh")
    a.add_argument("--seed", type=int, default=None)
    a.add_argument("--duration", type=float, default=480.0, help="seconds of load (default 480)")
    a.add_argument("--nodes", type=int, default=3)
    a.add_argument("--clients", type=int, default=4, help="client connections per node")
    a.add_argument("--progress-bound", type=float, default=20.0,
                   help="seconds after a heal within which every node must get a grant")
    a.add_argument("--hung-bound", type=float, default=10.0,
                   help="seconds a lock or unlock call may take (frozen/down time excluded)")
    a.add_argument("--keep", action="store_true", help="keep the results directory on success")
    a.add_argument("--workdir", required=True, help="(set by run.sh) empty directory for the cluster")
    a.add_argument("--tag", required=True, help="(set by run.sh) prefix of the run's namespace names")
    a.add_argument("--results", default=None, help="where records and logs are kept")
    a.add_argument("--pgbin", default=PG_BIN,
                   help="PostgreSQL bin directory; its tree's pgrac_ic is the one tested")
    a.add_argument("--tier", choices=["tier3", "tier2", "tier1"], default="tier3",
                   help="cluster.interconnect_tier (tier1/tier2: strict, no namespaces, "
                        "process faults only)")
    a.add_argument("--ic-addr", default=os.environ.get("PGRAC_RDMA_ADDR")
                   or os.environ.get("RXEVM_IPADDR"),
                   help="tier1/tier2: the RDMA netdev's address every node listens on "
                        "(default $PGRAC_RDMA_ADDR, else $RXEVM_IPADDR)")
    a.add_argument("--faults", default=None,
                   help="only these fault kinds, comma-separated (to reproduce one; the "
                        "summary says so)")
    args = a.parse_args(argv)
    if args.tier != "tier3" and not args.ic_addr:
        a.error("--tier %s needs --ic-addr (the RDMA netdev's address)" % args.tier)
    if args.seed is None:
        args.seed = random.SystemRandom().randrange(1, 10 ** 6)
    if args.nodes < 2:
        a.error("--nodes must be at least 2")
    return args


def _on_signal(signum, _frame):
    raise SystemExit(128 + signum)


def tier_problems(cluster, when, must_answer=False):
    """Nodes that run another tier than the run's (pg_cluster_rdma_status), as text
    lines; logs what each node said, or why it could not be asked (a node that is down
    is the progress check's business, not this one's)."""
    bad = []
    for i, t in sorted(cluster.tiers().items()):
        if isinstance(t, str):
            log("node %d %s: tier %s" % (i, when, t))
            if must_answer:
                bad.append("node %d %s: tier %s" % (i, when, t))
            continue
        tier, requested, strict, reason = t
        log("node %d %s: tier %s (requested %s%s)%s" % (
            i, when, tier, requested, ", strict" if strict else "",
            ": " + reason if reason else ""))
        if tier != cluster.tier:
            bad.append("node %d %s: tier %s, not %s%s" % (
                i, when, tier, cluster.tier, " (%s)" % reason if reason else ""))
    return bad


def write_results(d, meta, ops, unfinished, fault_log, hist, probe_records=None):
    def jl(name, rows):
        with open(os.path.join(d, name), "w") as f:
            for r in rows:
                f.write(json.dumps(r, default=str) + "\n")
    with open(os.path.join(d, "run.json"), "w") as f:
        json.dump(meta, f, indent=1)
    jl("ops.jsonl", ops)
    jl("unfinished.jsonl", unfinished)
    jl("faults.jsonl", fault_log)
    jl("history.jsonl", hist)
    if probe_records is not None:
        calls, notes, samples = probe_records
        jl("probes.jsonl", calls)
        jl("notes.jsonl", notes)
        jl("samples.jsonl", samples)


def run(args):
    t0 = time.time()
    set_t0(t0)
    tail = args.progress_bound + 5.0
    log("seed %d, %s, %d nodes, %d clients per node, %.0f s of load; work dir %s, results %s"
        % (args.seed, args.tier, args.nodes, args.clients, args.duration, args.workdir,
           args.results))
    rng = random.Random(args.seed)
    so = library.path(args.pgbin)
    so_start = library.fingerprint(so)
    log("pgrac_ic: %s sha256 %s" % (so, so_start))
    cluster = Cluster(args.workdir, args.tag, args.nodes, args.pgbin, args.tier, args.ic_addr)
    workload = None
    prober = None
    ok = False
    left_out = {}
    try:
        if cluster.verbs:
            left_out = faults.process_faults_only(args.tier)
            log("%s: no namespaces; every node in this namespace at %s, ports %d..%d, "
                "cluster.interconnect_strict = on" % (
                    args.tier, args.ic_addr, cluster.ic_endpoint(1)[1],
                    cluster.ic_endpoint(args.nodes)[1]))
            for kind, why in sorted(left_out.items()):
                log("SKIP fault %s at %s: %s" % (kind, args.tier, why))
            log("faults at %s: %s" % (args.tier, ", ".join(faults.KINDS)))
        else:
            netns.setup(args.tag, args.nodes)
            log("namespaces %s* up (nodes at %s.1..%d)" % (args.tag, netns.SUBNET, args.nodes))
            if netns.netem_available(args.tag, 1):
                faults.enable_netem()
                log("network faults include tc netem (delay, jitter, reordering, loss)")
            else:
                log("network faults without tc netem: this kernel has no sch_netem "
                    "(iptables loss and drops only)")
        if args.faults:
            want = [k for k in args.faults.split(",") if k]
            unknown = [k for k in want if k not in faults.KINDS]
            if unknown:
                raise RuntimeError("--faults: %s not among this run's kinds (%s)"
                                   % (",".join(unknown), ",".join(faults.KINDS)))
            faults.KINDS[:] = want
            log("faults restricted by --faults to: %s" % ", ".join(want))
        cluster.create(with_impostor="impostor" in faults.KINDS)
        cluster.start()
        log("cluster up: every node sees %d nodes UP" % args.nodes)
        bad = tier_problems(cluster, "at the start", must_answer=True)
        if bad:
            raise RuntimeError("not every node runs %s: %s" % (args.tier, "; ".join(bad)))

        values_not = probes.values_available(cluster)
        if values_not:
            log("lock value blocks not checked: " + values_not)
        workload = clients.Workload(cluster, args.clients, args.seed, values=not values_not)
        why_not = probes.available(cluster)
        if why_not:
            log("delivery probes not run: " + why_not)
        else:
            prober = probes.Probes(cluster)
        load_start = time.time()
        workload.start()
        if prober is not None:
            prober.start()
        if faults.wait_progress(workload, args.nodes, load_start, 30.0) is None:
            log("WARNING: not every node got a grant in the first 30 s")
        time.sleep(3.0)
        fault_log = faults.run_faults(cluster, workload, rng,
                                      until=load_start + max(10.0, args.duration - tail),
                                      progress_bound=args.progress_bound)
        last_heal = fault_log[-1]["end"] if fault_log else time.time()
        stop_at = max(load_start + args.duration, last_heal + tail)
        time.sleep(max(0.0, stop_at - time.time()))
        run_end = time.time()
        if prober is not None:
            prober.stop.set()
        ops, unfinished = workload.finish(grace=args.hung_bound + 5.0)
        log("load stopped: %d operations, %d unfinished" % (len(ops), len(unfinished)))
        probe_records = prober.finish(grace=5.0) if prober is not None else None
        if probe_records is not None:
            log("probes stopped: %d rpc probe calls, %d broadcasts, %d counter samples"
                % (len(probe_records[0]), sum(r["sent"] for r in probe_records[1]),
                   len(probe_records[2])))

        tier_bad = tier_problems(cluster, "at the end")
        timing_end = faults.restore_timing(cluster)
        remasters = ges_remasters(cluster)
        available, hist, herr = history.collect(cluster)
        for e in herr:
            log("membership history not read: " + e)
        fenced = history.fenced_times(hist)
        meta = {"seed": args.seed, "nodes": args.nodes, "clients_per_node": args.clients,
                "t0": t0, "load_start": load_start, "run_end": run_end,
                "hung_bound_s": args.hung_bound, "progress_bound_s": args.progress_bound,
                "history_view": available, "lock_timeout_ms": clients.LOCK_TIMEOUT_MS,
                "statement_timeout_ms": clients.STATEMENT_TIMEOUT_MS,
                "library": so, "library_start": so_start,
                "library_end": library.fingerprint(so),
                "probes": why_not, "probe_pause_s": probes.PAUSE_S,
                "values": values_not,
                "tier": args.tier, "faults_left_out": left_out, "faults_only": args.faults,
                "tier_problems": tier_bad,
                "peer_timeout_s": cluster.peer_timeout_s,
                "peer_timeout_end_ms": timing_end,
                "remasters": remasters}
        write_results(args.results, meta, ops, unfinished, fault_log, hist, probe_records)
        res = check.check(ops, unfinished, fault_log, fenced, args.nodes, args.hung_bound,
                          args.progress_bound, run_end)
        dl = (delivery.check(*probe_records, args.nodes)
              if probe_records is not None else None)
        ok = report.summary(meta, ops, unfinished, fault_log, fenced, res, out=sys.stdout,
                            violations_file=os.path.join(args.results, "violations.txt"),
                            delivery=dl)
    finally:
        if workload is not None:
            workload.stop.set()
        if prober is not None:
            prober.stop.set()
        try:
            cluster.destroy(keep_logs_in=args.results)
        finally:
            if not cluster.verbs:
                netns.teardown(args.tag, args.nodes)
                log("namespaces removed")
        if ok and not args.keep:
            shutil.rmtree(args.results, ignore_errors=True)
        else:
            log("records, fault log and server logs kept in %s "
                "(re-check: python3 -m chaos.check %s)" % (args.results, args.results))
    return 0 if ok else 1


def ges_remasters(cluster):
    """Per node, (remasters, remaster_timeouts, direct_taken, direct_served, direct_redirected,
    local_waits) from pg_cluster_ges_stats at the end (since the node's last start), or None
    where it cannot be read."""
    out = {}
    for node in cluster.nodes:
        try:
            rows = node.query("SELECT remasters, remaster_timeouts, direct_taken, direct_served, "
                              "direct_redirected, local_waits FROM pg_cluster_ges_stats",
                              timeout=10)
            out[str(node.i)] = list(rows[0])
        except Exception:  # noqa: BLE001 - an older extension, a node down: not counted
            out[str(node.i)] = None
    return out


def main(argv):
    args = parse(argv)
    if args.results is None:
        args.results = "/tmp/pgchaos-results-%d-%d" % (args.seed, int(time.time()))
    os.makedirs(args.results, exist_ok=True)
    procs.become_subreaper()
    for s in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(s, _on_signal)
    try:
        return run(args)
    except SystemExit:
        raise
    except Exception as e:  # noqa: BLE001 - a harness failure is not a verdict
        log("HARNESS ERROR: %s" % e)
        return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
