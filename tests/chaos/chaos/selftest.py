"""The checker on made-up records whose answer is known (no root, no cluster):

    cd tests/chaos && PYTHONPATH=. /usr/bin/python3 -m chaos.selftest"""

import io
import sys

from . import check, delivery, report


def op(node, mode, s, e, res="r", **kw):
    d = {"node": node, "pid": 100 + node, "resource": res, "mode": mode, "requested_at": s - 0.01,
         "lock_returned_at": s, "granted_at": s, "released_at": e, "unlock_returned_at": e + 0.001,
         "outcome": "granted"}
    d.update(kw)
    return d


def fault(kind, node, start, end, **kw):
    d = {"kind": kind, "node": node, "peer": None, "detail": "", "start": start, "end": end,
         "killed_at": None, "frozen": False, "error": None}
    d.update(kw)
    return d


def run_check(ops, faults=(), fenced=None, unfinished=()):
    return check.check(list(ops), list(unfinished), list(faults), fenced or {}, 2, 10.0, 5.0,
                       run_end=100.0)


def cases():
    yield "EX/EX overlap", 1, [op(1, "EX", 1.0, 2.0), op(2, "EX", 1.5, 2.5)], (), None
    yield "EX/PR overlap", 1, [op(1, "PR", 1.0, 2.0), op(2, "EX", 1.9, 2.5)], (), None
    yield "PR/PR is compatible", 0, [op(1, "PR", 1.0, 2.0), op(2, "PR", 1.5, 2.5)], (), None
    yield "touching is no overlap", 0, [op(1, "EX", 1.0, 2.0), op(2, "EX", 2.0, 3.0)], (), None
    yield "other resource", 0, [op(1, "EX", 1.0, 2.0), op(2, "EX", 1.5, 2.5, res="s")], (), None
    yield "three holders, three pairs", 3, [op(1, "EX", 1.0, 3.0), op(2, "EX", 1.5, 2.5),
                                            op(1, "PR", 2.0, 2.2)], (), None
    yield "holder cut by kill of its instance", 0, [op(1, "EX", 1.0, 5.0), op(2, "EX", 3.0, 4.0)], \
        [fault("kill", 1, 2.0, 2.9, killed_at=2.0)], None
    yield "kill of the other instance does not cut", 1, [op(1, "EX", 1.0, 5.0),
                                                         op(2, "EX", 3.0, 4.0)], \
        [fault("kill", 2, 2.0, 2.9, killed_at=2.0)], None
    yield "holder cut by its lease", 0, [op(1, "EX", 1.0, 5.0), op(2, "EX", 3.0, 4.0)], (), {1: [2.5]}
    yield "lease ran out after the overlap", 1, [op(1, "EX", 1.0, 5.0), op(2, "EX", 3.0, 4.0)], (), \
        {1: [3.5]}
    yield "not granted is no hold", 0, [op(1, "EX", 1.0, 2.0),
                                        op(2, "EX", 1.5, 2.5, granted_at=None, released_at=None,
                                           outcome="timeout")], (), None


def value_cases():
    """(name, want violations, ops): EX holds that write, grants that read."""
    w1 = op(1, "EX", 1.0, 2.0, value_written="a")            # unlock returns at 2.001
    w2 = op(2, "EX", 3.0, 4.0, value_written="b")            # unlock returns at 4.001
    yield "latest value read", 0, [w1, w2, op(1, "PR", 5.0, 6.0, value_read="b")]
    yield "the older value while the newer write was still releasing", 0, \
        [w1, w2, op(1, "PR", 4.0005, 6.0, value_read="a", requested_at=4.0)]
    yield "stale value after a newer write returned", 1, \
        [w1, w2, op(1, "PR", 5.0, 6.0, value_read="a")]
    yield "a value never written", 1, [w1, op(2, "PR", 5.0, 6.0, value_read="zz")]
    yield "read before its writer released", 1, [op(2, "PR", 1.5, 1.8, value_read="a"), w1]
    yield "invalid and empty are always allowed", 0, \
        [w1, w2, op(1, "PR", 5.0, 6.0, value_read=None), op(2, "PR", 7.0, 8.0, value_read="")]
    yield "a failed unlock's write may or may not count", 0, \
        [w1, op(2, "EX", 3.0, 4.0, value_written="b", outcome="granted; unlock: connection_lost"),
         op(1, "PR", 5.0, 6.0, value_read="a"), op(1, "PR", 7.0, 8.0, value_read="b")]


def call(seq, res="applied", err=None, src=1, dst=2):
    return {"src": src, "dst": dst, "stream": 1, "seq": seq, "pid": 1, "t0": float(seq),
            "t1": seq + 0.01, "res": None if err else res, "err": err}


def sample(node, t, started, **recv):
    return {"node": node, "t": t, "started_at": started,
            "recv": {k.lstrip("n"): v for k, v in recv.items()}}


def delivery_cases():
    """(name, want ok, calls, notes, samples): 2 nodes, notes only from node 1 to 2."""
    notes = [{"src": 1, "sent": 100, "ok": 100, "errors": {}}, {"src": 2, "sent": 0, "ok": 0}]
    good = [call(1), call(2, err="statement_timeout"), call(3), call(4)]
    yield "all applied, one failed", True, good, notes, [sample(2, 1.0, "a", n1=100)]
    yield "duplicate answer", False, good + [call(5, "duplicate")], notes, []
    yield "reordered answer", False, good + [call(5, "reordered")], notes, []
    yield "unexpected answer", False, good + [call(5, "whatever")], notes, []
    yield "notes: more received than sent", False, good, notes, [sample(2, 1.0, "a", n1=101)]
    yield "notes: restart, both incarnations within sent", True, good, notes, \
        [sample(2, 1.0, "a", n1=40), sample(2, 2.0, "b", n1=5), sample(2, 3.0, "b", n1=60)]
    yield "notes: restart, one note counted by two incarnations", False, good, notes, \
        [sample(2, 1.0, "a", n1=41), sample(2, 3.0, "b", n1=60)]
    yield "notes: counter went down (shared memory made again)", False, good, notes, \
        [sample(2, 1.0, "a", n1=70), sample(2, 2.0, "a", n1=31)]
    yield "notes: counter went down, within sent", True, good, notes, \
        [sample(2, 1.0, "a", n1=70), sample(2, 2.0, "a", n1=30)]


def main():
    failed = 0
    ran = 0
    for name, want, calls, notes, samples in delivery_cases():
        got = delivery.check(calls, notes, samples, 2)["ok"]
        ok = got == want
        failed += not ok
        ran += 1
        print("%s  delivery: %s: %s (want %s)" % ("ok  " if ok else "FAIL", name,
                                                  "ok" if got else "flagged",
                                                  "ok" if want else "flagged"))
    for name, want, ops, faults, fenced in cases():
        got = len(run_check(ops, faults, fenced)["violations"])
        ok = got == want
        failed += not ok
        print("%s  %s: %d violations (want %d)" % ("ok  " if ok else "FAIL", name, got, want))
    for name, want, ops in value_cases():
        got = len(run_check(ops)["values"]["violations"])
        ok = got == want
        failed += not ok
        ran += 1
        print("%s  value: %s: %d violations (want %d)" % ("ok  " if ok else "FAIL", name, got,
                                                          want))
    # Hung: a call over the bound, and the same call when its instance was frozen.
    slow = op(1, "EX", 1.0, 1.1, requested_at=-12.0)
    h1 = len(run_check([slow])["hung"])
    h2 = len(run_check([slow], [fault("freeze_long", 1, -11.0, -5.0, frozen=True)])["hung"])
    h3 = len(run_check([], unfinished=[op(1, "EX", 1.0, 1.1, outcome="unfinished")])["hung"])
    # A drift or impostor fault freezes a node for part of its time (f["paused"]).
    h4 = len(run_check([slow], [fault("drift", 2, -20.0, 5.0, paused=[[1, -11.0, -5.0]])])["hung"])
    h5 = len(run_check([slow], [fault("drift", 1, -20.0, 5.0, paused=[[2, -11.0, -5.0]])])["hung"])
    for name, got, want in (("slow call is hung", h1, 1), ("frozen time excluded", h2, 0),
                            ("unfinished is hung", h3, 1),
                            ("time frozen within a drift fault excluded", h4, 0),
                            ("another node's freeze not excluded", h5, 1)):
        failed += got != want
        print("%s  %s: %d (want %d)" % ("ok  " if got == want else "FAIL", name, got, want))
    # Fences a node's view lost (a restart) come from its server log: only those
    # older than what the view still shows, each from the end of its millisecond.
    import os
    import tempfile
    from . import history
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "server.log")
        with open(path, "w") as f:
            f.write("2026-11-27 21:14:12.612 UTC [3985] pgrac_ic listener LOG:  pgrac_ic: "
                    "membership: fenced epoch 52 {2,3}: epoch 53 was committed without our vote\n"
                    "2026-11-27 21:16:56.051 UTC [6758] pgrac_ic listener LOG:  pgrac_ic: "
                    "membership: fenced epoch 212 {1,2,3}: lease expired\n"
                    "2026-11-27 21:16:57.000 UTC [6758] pgrac_ic listener LOG:  other\n")
        logged = history.log_fences(path, 3)
        at0 = 1795814052.613  # 21:14:12.613 UTC
        view = [{"node": 3, "at": at0 + 100.0, "epoch": 99, "event": "committed"},
                {"node": 3, "at": 1795814216.0511, "epoch": 212, "event": "fenced"}]
        merged = history.fenced_times(history.merge_log_fences(view, logged))
        good = (len(logged) == 2 and abs(logged[0]["at"] - at0) < 1e-6 and
                len(merged[3]) == 2 and abs(merged[3][0] - at0) < 1e-6)
        failed += not good
        print("%s  fences from the server log before the view's first row" %
              ("ok  " if good else "FAIL"))
    # Progress: node 2 has no grant within the bound after the heal.
    p = run_check([op(1, "EX", 11.0, 11.1), op(2, "EX", 30.0, 30.1)],
                  [fault("partition", 1, 4.0, 10.0)])["progress"][0]
    good = not p["ok"] and p["late_nodes"] == {2: 20.0}
    failed += not good
    print("%s  late progress is seen: %s" % ("ok  " if good else "FAIL", p["late_nodes"]))
    # The summary: a fault kind left out is printed as a skip; a node at another tier
    # than the run's fails the run.
    ops = [op(1, "EX", 11.0, 11.1), op(2, "EX", 11.2, 11.3)]
    kill = [fault("kill", 1, 4.0, 10.0, killed_at=4.0)]
    res = run_check(ops, kill)
    meta = {"seed": 1, "nodes": 2, "clients_per_node": 1, "load_start": 0.0, "run_end": 100.0,
            "hung_bound_s": 10.0, "progress_bound_s": 5.0, "history_view": True,
            "lock_timeout_ms": 2000, "statement_timeout_ms": 5000, "tier": "tier2",
            "faults_left_out": {"partition": "why"}, "tier_problems": []}
    for name, bad, want_ok in (("tier2 run passes, its skip printed", [], True),
                               ("a node at another tier fails", ["node 2 at the end: tier3"],
                                False)):
        out = io.StringIO()
        got = report.summary(dict(meta, tier_problems=bad), ops, [], kill, {}, res, out=out)
        good = got == want_ok and "SKIPPED at tier2: partition: why" in out.getvalue()
        failed += not good
        ran += 1
        print("%s  %s: %s" % ("ok  " if good else "FAIL", name, "pass" if got else "fail"))
    # The summary counts drift faults with their values and isolations, and says
    # whether every node has the base peer_timeout at the end.
    drift = [fault("drift", 1, 4.0, 10.0, drift={"value_ms": 10000, "isolation": "partition"})]
    for name, end, want in (("drift summary, timing back", {"1": 3000, "2": 3000},
                             "3000 ms (the base) on every node"),
                            ("drift summary, timing left behind", {"1": 3000, "2": 10000},
                             "NOT the base 3000 ms: node 2 10000 ms")):
        out = io.StringIO()
        report.summary(dict(meta, tier="tier3", faults_left_out={}, peer_timeout_s=3.0,
                            peer_timeout_end_ms=end), ops, [], drift, {},
                       run_check(ops, drift), out=out)
        text = out.getvalue()
        good = ("faults: 1  (drift 1)" in text and "reloads to 10 s 1; the node just reloaded "
                "then partition 1" in text and want in text)
        failed += not good
        ran += 1
        print("%s  %s" % ("ok  " if good else "FAIL", name))
    print("%d passed, %d failed" % (len(list(cases())) + 6 + ran - failed, failed))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
