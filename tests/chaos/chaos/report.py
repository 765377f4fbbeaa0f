"""Prints the summary of a run and decides pass or fail."""

import collections

from . import check
from .util import rel

PER_INCIDENT = 5  # conflicting pairs printed per incident (all of them in violations.txt)


def _hold_text(h):
    op = h["op"]
    cut = "" if h["why"] == "released" else " (cut at %s: %s)" % (rel(h["end"]), h["why"])
    return "node %d pid %s %s granted %s released %s%s" % (
        op["node"], op["pid"], op["mode"], rel(op["granted_at"]), rel(op["released_at"]), cut)


def _fault_text(f):
    peer = "->%d" % f["peer"] if f.get("peer") else ""
    return "%s node %d%s %s-%s" % (f["kind"], f["node"], peer, rel(f["start"]), rel(f["end"]))


def violation_text(k, v):
    near = v["near"]
    return ("V%d resource %s: overlap %.1f ms from %s; near %s\n     %s\n     %s" % (
        k, v["resource"], (v["to"] - v["from"]) * 1000, rel(v["from"]),
        ", ".join(_fault_text(f) for f in near[:3]) if near else "no fault (none within 10 s)",
        _hold_text(v["a"]), _hold_text(v["b"])))


def incidents(vs, gap=1.0):
    """Violations grouped in time: a new incident starts when an overlap begins more
    than `gap` s after every overlap of the current one ended."""
    out = []
    for v in sorted(vs, key=lambda v: v["from"]):
        if not out or v["from"] > out[-1]["to"] + gap:
            out.append({"from": v["from"], "to": v["to"], "vs": []})
        out[-1]["to"] = max(out[-1]["to"], v["to"])
        out[-1]["vs"].append(v)
    return out


def _incident_text(k, inc):
    vs = inc["vs"]
    res = sorted({v["resource"] for v in vs})
    nodes = sorted({v[x]["op"]["node"] for v in vs for x in "ab"})
    near = vs[0]["near"]
    return ("incident %d: %s-%s, %d conflicting pairs on %s, holders on nodes %s; latest fault: %s"
            % (k, rel(inc["from"]), rel(inc["to"]), len(vs), ", ".join(res),
               ",".join(map(str, nodes)), _fault_text(near[0]) if near else "none within 10 s"))


def _delivery(meta, d, faults, p):
    """Prints the delivery probes' part of the summary; returns the reasons to fail."""
    if d is None:
        p("delivery probes: not run%s" % (": " + meta["probes"] if meta.get("probes") else ""))
        return []
    seq, notes = d["seq"], d["notes"]
    t = seq["total"]
    p("rpc probes (pgrac_ic_seq_rpc, one client per pair, seq 1, 2, ... every %.0f ms):"
      % (1000 * meta.get("probe_pause_s", 0.02)))
    p("  probe calls: %d  applied %d, failed %d, duplicates %d, reordered %d%s" % (
        t["calls"], t["applied"], t["failed"], t["duplicate"], t["reordered"],
        ", unexpected answers %d" % t["unexpected"] if t["unexpected"] else ""))
    if seq["failed_why"]:
        p("  failed (ran or not, unknown): " + ", ".join(
            "%s %d" % kv for kv in seq["failed_why"].most_common(8)))
    for (src, dst), c in seq["pairs"].items():
        p("  %d->%d stream %2d: %6d calls, %6d applied, %5d failed, %d duplicate, %d reordered%s%s"
          % (src, dst, c["stream"], c["calls"], c["applied"], c["failed"], c["duplicate"],
             c["reordered"], ", %d unexpected" % c["unexpected"] if c["unexpected"] else "",
             "; receiver restarts: %d" % c["receiver_restarts"]
             if c.get("receiver_restarts") else ""))
    if t["calls"] and not t["applied"]:
        p("  WARNING: no probe call returned 'applied': the check saw nothing")
    for c in seq["bad"][:20]:
        near = check.attribute({"from": c["t0"]}, faults)
        p("  %s: %d->%d stream %d seq %d, call %s-%s (pid %s); near %s" % (
            c["res"].upper() if c["res"] in ("duplicate", "reordered") else
            "UNEXPECTED %r" % c["res"], c["src"], c["dst"], c["stream"], c["seq"],
            rel(c["t0"]), rel(c["t1"]), c["pid"],
            ", ".join(_fault_text(f) for f in near[:3]) if near else "no fault within 10 s"))
    if len(seq["bad"]) > 20:
        p("  ... %d more in probes.jsonl" % (len(seq["bad"]) - 20))

    p("notes (pgrac_ic_broadcast every %.0f ms per node; sent = calls issued, received ="
      " notes_recv at the receiver):" % (1000 * meta.get("probe_pause_s", 0.02)))
    for src, errs in sorted(notes["errors"].items()):
        if errs:
            p("  broadcasts from node %d that failed (may have reached some nodes): %s" % (
                src, ", ".join("%s %d" % kv for kv in
                               sorted(errs.items(), key=lambda kv: -kv[1])[:5])))
    for (src, dst), r in notes["pairs"].items():
        if r["received"] is None:
            p("  %d->%d: sent %s, counters of node %d never read: not judged" % (
                src, dst, r["sent"], dst))
            continue
        extra = ""
        if r["restarts"]:
            extra = " by its last incarnation, >= %d by %d earlier ones" % (
                r["earlier"], r["restarts"])
        p("  %d->%d: sent %d, received %d%s%s  %s" % (
            src, dst, r["sent"], r["received"], extra,
            "" if r["final"] else " (last sample, no final read)",
            "ok" if r["ok"] else "DUPLICATES: %d more than sent" % r["excess"]))

    reasons = []
    if t["duplicate"]:
        reasons.append("%d duplicate RPCs" % t["duplicate"])
    if t["reordered"]:
        reasons.append("%d reordered RPCs" % t["reordered"])
    if t["unexpected"]:
        reasons.append("%d unexpected probe answers" % t["unexpected"])
    if notes["bad"]:
        reasons.append("notes received more often than sent on %d pairs" % len(notes["bad"]))
    return reasons


def summary(meta, ops, unfinished, faults, fenced, res, out, violations_file=None,
            delivery=None):
    p = lambda *a: print(*a, file=out)  # noqa: E731
    vs = sorted(res["violations"], key=lambda v: v["from"])
    hung, prog = res["hung"], res["progress"]
    outcomes = collections.Counter(op["outcome"] for op in ops)
    grants = collections.Counter(op["node"] for op in ops if op.get("granted_at"))

    p("")
    tier = meta.get("tier", "tier3")
    p("=== pgrac_ic GES chaos summary: seed %s, %s, %d nodes, %d clients per node, %.0f s of load ==="
      % (meta["seed"], tier, meta["nodes"], meta["clients_per_node"],
         meta["run_end"] - meta["load_start"]))
    tier_bad = meta.get("tier_problems") or []
    p("tier: %s" % ("; ".join(tier_bad) if tier_bad else
                    "%s on every node at the start and the end (pg_cluster_rdma_status)" % tier))
    if meta.get("library"):
        p("pgrac_ic: %s sha256 %s" % (meta["library"], meta["library_start"]))
        if meta["library_end"] != meta["library_start"]:
            p("WARNING: the library CHANGED during the run (now %s): instances restarted after "
              "a kill ran other code than the rest" % meta["library_end"])
    p("operations: %d  (grants %d)" % (len(ops), sum(grants.values())))
    for name, c in outcomes.most_common():
        p("  %-58s %7d" % (name, c))
    late = [op for op in ops if op["outcome"] == "statement_timeout" and not op.get("granted_at")]
    if late:
        p("lock calls that outlived their timeout_ms (%d ms) and were ended by statement_timeout"
          " (%d ms): %d" % (meta["lock_timeout_ms"], meta["statement_timeout_ms"], len(late)))
    p("grants per node: " + ", ".join("%d: %d" % (i, grants.get(i, 0))
                                      for i in range(1, meta["nodes"] + 1)))

    by_kind = collections.Counter(f["kind"] for f in faults)
    failed = [f for f in faults if f.get("error")]
    p("faults: %d  (%s)" % (len(faults), ", ".join("%s %d" % kv for kv in sorted(by_kind.items()))))
    for f in failed:
        p("  could not inject: %s: %s" % (_fault_text(f), f["error"]))
    if meta.get("faults_only"):
        p("  only the kinds chosen by --faults: %s" % meta["faults_only"])
    for kind, why in sorted((meta.get("faults_left_out") or {}).items()):
        p("  SKIPPED at %s: %s: %s" % (tier, kind, why))
    drifts = [f for f in faults if f["kind"] == "drift" and f.get("drift")]
    if drifts:
        values = collections.Counter(f["drift"]["value_ms"] for f in drifts)
        isolations = collections.Counter(f["drift"]["isolation"] for f in drifts
                                         if f["drift"]["isolation"])
        p("  drift: rolling peer_timeout reloads to %s; the node just reloaded then %s" % (
            ", ".join("%g s %d" % (ms / 1000.0, c) for ms, c in sorted(values.items())),
            ", ".join("%s %d" % kv for kv in sorted(isolations.items())) or "never isolated"))
    end = meta.get("peer_timeout_end_ms")
    if end:
        base = int(round(meta["peer_timeout_s"] * 1000))
        off = {int(i): ms for i, ms in end.items() if ms != base}
        p("timing at the end: cluster.peer_timeout %s" % (
            "%d ms (the base) on every node" % base if not off else "NOT the base %d ms: %s" % (
                base, ", ".join("node %d %s" % (i, "unknown" if ms is None else "%d ms" % ms)
                                for i, ms in sorted(off.items())))))
    if not meta.get("history_view"):
        p("membership history: view pg_cluster_membership_history not there; no node fenced")
    else:
        p("membership history: fenced " + (", ".join(
            "node %d at %s" % (i, ", ".join(rel(t) for t in ts)) for i, ts in sorted(fenced.items()))
            or "never"))

    incs = incidents(vs)
    p("violations: %d  (%d incidents)" % (len(vs), len(incs)))
    if incs:
        kinds = collections.Counter(i["vs"][0]["near"][0]["kind"] if i["vs"][0]["near"]
                                    else "none" for i in incs)
        p("  incidents by the latest fault before them: " +
          ", ".join("%s %d" % kv for kv in kinds.most_common()))
    texts = [violation_text(k + 1, v) for k, v in enumerate(vs)]
    k = 0
    for n, inc in enumerate(incs, 1):
        p("  " + _incident_text(n, inc))
        for j, _ in enumerate(inc["vs"]):
            if j < PER_INCIDENT:
                p("    " + texts[k].replace("\n", "\n  "))
            k += 1
        if len(inc["vs"]) > PER_INCIDENT:
            p("    ... %d more pairs in this incident" % (len(inc["vs"]) - PER_INCIDENT))
    if violations_file and texts:
        with open(violations_file, "w") as f:
            f.write("\n".join(texts) + "\n")
        p("  every pair with both intervals: %s" % violations_file)

    rm = meta.get("remasters") or {}
    if rm:
        p("mastership that follows use (at the end, since each node's last start): " + ", ".join(
            "node %s %s" % (k, "not read" if v is None else "%d hand-offs, %d unacknowledged"
                            % (v[0], v[1])) for k, v in sorted(rm.items())))
        if any(v is not None and len(v) >= 5 for v in rm.values()):
            p("direct routing (at the end, since each node's last start): " + ", ".join(
                "node %s %s" % (k, "not read" if v is None or len(v) < 5 else
                                "%d grants taken by backends, %d served as master, %d redirected"
                                % (v[2], v[3], v[4])) for k, v in sorted(rm.items())))
        if any(v is not None and len(v) >= 6 for v in rm.values()):
            p("local waiters (requests that waited in their node for a local user of a cached "
              "lock): " + ", ".join("node %s %s" % (k, "not read" if v is None or len(v) < 6
                                                    else "%d" % v[5])
                                    for k, v in sorted(rm.items())))
    val = res.get("values") or {"violations": [], "reads": 0}
    if meta.get("values"):
        p("lock value blocks: not checked (%s)" % meta["values"])
    else:
        p("lock value blocks: %d grants read one (%d valid, %d empty, %d invalid), %d writes "
          "returned; violations: %d" % (val["reads"], val.get("valid", 0), val.get("empty", 0),
                                        val.get("invalid", 0), val.get("writes", 0),
                                        len(val["violations"])))
    for x in val["violations"][:20]:
        op = x["op"]
        p("  node %d pid %s %s %s granted %s read %r: %s%s" % (
            op["node"], op["pid"], op["mode"], op["resource"], rel(op["granted_at"]),
            op.get("value_read"), x["why"],
            "" if "newer" not in x else " (%r, unlock returned %s)" % (
                x["newer"]["value_written"], rel(x["newer"]["unlock_returned_at"]))))

    p("hung calls (over %.0f s, frozen/down time excluded, or never returned): %d"
      % (meta["hung_bound_s"], len(hung)))
    for h in hung[:20]:
        op = h["op"]
        p("  node %d pid %s %s %s requested %s: %s" % (
            op["node"], op["pid"], h["call"], op["resource"], rel(op["requested_at"]),
            "never returned" if h["took"] is None else "took %.1f s" % h["took"]))

    regained = [x for x in prog if x["regained_s"] is not None]
    lost = [x for x in prog if not x["ok"] and (x["observable"] or x is prog[-1])]
    if regained:
        worst = max(regained, key=lambda x: x["regained_s"])
        p("progress: longest time to regain progress after a heal: %.2f s (after %s)"
          % (worst["regained_s"], _fault_text(worst["fault"])))
    if prog:
        last = prog[-1]
        p("progress after the last heal: %s" % (
            "%.2f s" % last["regained_s"] if last["ok"]
            else "NONE within %.0f s" % meta["progress_bound_s"]))
    for x in lost:
        p("  no grant on every node within %.0f s after %s: %s" % (
            meta["progress_bound_s"], _fault_text(x["fault"]), ", ".join(
                "node %d %s" % (i, "never" if t is None else "only after %.1f s" % t)
                for i, t in sorted(x["late_nodes"].items()))))

    delivery_reasons = _delivery(meta, delivery, faults, p)

    ok_progress = bool(prog) and not lost
    ok = (not vs and not hung and ok_progress and not delivery_reasons and not tier_bad
          and not val["violations"])
    reasons = []
    if tier_bad:
        reasons.append("%d nodes not at %s" % (len(tier_bad), tier))
    if vs:
        reasons.append("%d violations" % len(vs))
    if hung:
        reasons.append("%d hung calls" % len(hung))
    if val["violations"]:
        reasons.append("%d lock value block violations" % len(val["violations"]))
    if not ok_progress:
        reasons.append("no progress within %.0f s after %d of %d heals"
                       % (meta["progress_bound_s"], len(lost), len(prog))
                       if prog else "no fault was injected")
    reasons.extend(delivery_reasons)
    p("RESULT: %s" % ("PASS" if ok else "FAIL (" + "; ".join(reasons) + ")"))
    return ok
