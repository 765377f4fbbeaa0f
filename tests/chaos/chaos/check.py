"""The checker: merges every client's records with the fault log and the fenced
times, and finds

* violations: two holds of one resource that overlap in conflicting modes (PR/PR is
  compatible, anything with EX conflicts). A hold is [granted_at, released_at], cut
  short at the moment its instance was killed, or at the moment its node's lease ran
  out (a 'fenced' row of pg_cluster_membership_history);
* hung calls: a lock or unlock call that took longer than its bound (the time its
  instance was frozen or down does not count), or never returned;
* progress: after each heal, how long until every node had a grant again;
* value violations (lock value blocks, docs/ges.md): a grant that brought a valid value
  that no EX hold wrote, that its writer had not begun to release when the grant
  returned, or that is older than a write whose unlock returned before the grant was
  asked for (a stale value reported as valid). Invalid (NULL) is always allowed, and so
  is the empty value (a resource no lock keeps anywhere is forgotten, value and all).

The delivery probes' records (exactly-once RPCs, at-most-once notes) are checked by
delivery.py.

Also runnable on a kept results directory: python3 -m chaos.check DIR"""

import bisect
import json
import os
import sys

ATTRIBUTION_WINDOW_S = 10.0


def conflicts(m1, m2):
    return not (m1 == "PR" and m2 == "PR")


def _node_times(faults, key):
    out = {}
    for f in faults:
        if f.get(key) is not None:
            out.setdefault(f["node"], []).append(f[key])
    return {k: sorted(v) for k, v in out.items()}


def _paused_windows(faults):
    """node -> [(from, to)] during which the instance could not answer: frozen, or
    killed until restarted."""
    out = {}
    for f in faults:
        if f.get("frozen"):
            out.setdefault(f["node"], []).append((f["start"], f["end"]))
        elif f.get("killed_at") is not None:
            out.setdefault(f["node"], []).append((f["killed_at"], f["end"]))
        # A fault that freezes a node for part of its time (drift, impostor).
        for node, a, b in f.get("paused") or []:
            out.setdefault(node, []).append((a, b))
    return out


def _paused(windows, a, b):
    return sum(max(0.0, min(b, y) - max(a, x)) for x, y in windows)


def holds(ops, faults, fenced):
    """Every granted op as a hold dict with its effective end and why it ends there."""
    kills = _node_times(faults, "killed_at")
    out = []
    for op in ops:
        s, e = op.get("granted_at"), op.get("released_at")
        if s is None or e is None:
            continue
        end, why = e, "released"
        for t in kills.get(op["node"], []):
            if s < t < end:
                end, why = t, "instance killed"
        for t in fenced.get(op["node"], []):
            if s < t < end:
                end, why = t, "lease ran out"
        out.append({"op": op, "start": s, "end": end, "why": why})
    return out


def find_violations(hs):
    by_res = {}
    for h in hs:
        by_res.setdefault(h["op"]["resource"], []).append(h)
    out = []
    for res, lst in sorted(by_res.items()):
        lst.sort(key=lambda h: h["start"])
        active = []
        for h in lst:
            active = [a for a in active if a["end"] > h["start"]]
            for a in active:
                if conflicts(a["op"]["mode"], h["op"]["mode"]):
                    out.append({"resource": res, "a": a, "b": h, "from": h["start"],
                                "to": min(a["end"], h["end"])})
            active.append(h)
    return out


def attribute(v, faults):
    """The faults active at, or healed at most ATTRIBUTION_WINDOW_S before, the start
    of the overlap (the latest first)."""
    near = [f for f in faults
            if f["start"] - 1.0 <= v["from"] <= f["end"] + ATTRIBUTION_WINDOW_S]
    return sorted(near, key=lambda f: -f["start"])


def find_hung(ops, unfinished, faults, bound_s):
    paused = _paused_windows(faults)
    out = []
    for op in ops:
        w = paused.get(op["node"], [])
        calls = [("lock", op["requested_at"], op.get("lock_returned_at"))]
        if op.get("released_at") is not None:
            calls.append(("unlock", op["released_at"], op.get("unlock_returned_at")))
        for name, a, b in calls:
            if b is None:
                continue
            took = b - a - _paused(w, a, b)
            if took > bound_s:
                out.append({"op": op, "call": name, "took": took})
    for op in unfinished:
        out.append({"op": op, "call": "unlock" if op.get("granted_at") else "lock",
                    "took": None})
    return out


def progress(ops, faults, n, bound_s, run_end):
    """Per heal: the time until every node had a grant again (regained_s, None if some
    node never had one), and ok: every node had one within bound_s."""
    grants = {i: sorted(op["granted_at"] for op in ops
                        if op["node"] == i and op.get("granted_at") is not None)
              for i in range(1, n + 1)}
    out = []
    for f in faults:
        heal = f["end"]
        firsts = {}
        for i in range(1, n + 1):
            g = grants[i]
            k = bisect.bisect_right(g, heal)
            firsts[i] = g[k] - heal if k < len(g) else None
        late = {i: t for i, t in firsts.items() if t is None or t > bound_s}
        known = [t for t in firsts.values() if t is not None]
        out.append({"fault": f, "late_nodes": late,
                    "regained_s": max(known) if len(known) == n else None,
                    "ok": not late, "observable": run_end - heal >= bound_s})
    return out


def find_value_violations(ops):
    """Grants whose valid value block is not one they may see (module doc); also
    counts what was read: {"violations": [...], "reads": n, "valid": n, "empty": n,
    "invalid": n, "writes": n}."""
    writers = {}  # (resource, value) -> the op that wrote it
    done = {}     # resource -> writes whose unlock returned true, by unlock_returned_at
    for op in ops:
        v = op.get("value_written")
        if v is None or op.get("granted_at") is None:
            continue
        writers[(op["resource"], v)] = op
        if op.get("outcome") == "granted" and op.get("unlock_returned_at") is not None:
            done.setdefault(op["resource"], []).append(op)
    for lst in done.values():
        lst.sort(key=lambda w: w["unlock_returned_at"])
    out = []
    stats = {"reads": 0, "valid": 0, "empty": 0, "invalid": 0,
             "writes": sum(len(x) for x in done.values())}
    for op in ops:
        if "value_read" not in op or op.get("granted_at") is None:
            continue
        stats["reads"] += 1
        v = op["value_read"]
        if v is None:
            stats["invalid"] += 1
            continue
        if v == "":
            stats["empty"] += 1
            continue
        stats["valid"] += 1
        w = writers.get((op["resource"], v))
        if w is None:
            out.append({"op": op, "why": "value %r was never written" % v})
            continue
        if w["released_at"] >= op["lock_returned_at"]:
            out.append({"op": op, "writer": w, "why": "read before its writer released"})
            continue
        since = w.get("unlock_returned_at") or w["released_at"]
        lst = done.get(op["resource"], [])
        k = bisect.bisect_left([x["unlock_returned_at"] for x in lst], op["requested_at"])
        newer = [x for x in lst[:k] if x is not w and x["released_at"] > since]
        if newer:
            out.append({"op": op, "writer": w, "newer": newer[-1],
                        "why": "stale: a newer write had returned before the lock was asked"})
    stats["violations"] = out
    return stats


def check(ops, unfinished, faults, fenced, n, hung_bound_s, progress_bound_s, run_end):
    hs = holds(ops + [u for u in unfinished if u.get("released_at")], faults, fenced)
    vs = find_violations(hs)
    for v in vs:
        v["near"] = attribute(v, faults)
    return {
        "holds": hs,
        "values": find_value_violations(ops),
        "violations": vs,
        "hung": find_hung(ops, unfinished, faults, hung_bound_s),
        "progress": progress(ops, faults, n, progress_bound_s, run_end),
    }


def load_dir(d):
    def jl(name):
        p = os.path.join(d, name)
        if not os.path.exists(p):
            return []
        with open(p) as f:
            return [json.loads(line) for line in f if line.strip()]
    with open(os.path.join(d, "run.json")) as f:
        meta = json.load(f)
    return meta, jl("ops.jsonl"), jl("unfinished.jsonl"), jl("faults.jsonl"), jl("history.jsonl")


def load_probes(d):
    """(calls, notes, samples) of a kept results directory, or None if it has none."""
    if not os.path.exists(os.path.join(d, "notes.jsonl")):
        return None
    out = []
    for name in ("probes.jsonl", "notes.jsonl", "samples.jsonl"):
        p = os.path.join(d, name)
        with open(p) as f:
            out.append([json.loads(line) for line in f if line.strip()])
    return tuple(out)


def main(argv):
    from . import delivery, history, report
    from .util import set_t0
    d = argv[1]
    meta, ops, unfinished, faults, hist = load_dir(d)
    set_t0(meta["t0"])
    fenced = history.fenced_times(hist)
    res = check(ops, unfinished, faults, fenced, meta["nodes"], meta["hung_bound_s"],
                meta["progress_bound_s"], meta["run_end"])
    probes = load_probes(d)
    dl = delivery.check(*probes, meta["nodes"]) if probes is not None else None
    ok = report.summary(meta, ops, unfinished, faults, fenced, res, out=sys.stdout, delivery=dl)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv))
