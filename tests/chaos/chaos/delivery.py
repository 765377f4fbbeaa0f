"""The delivery check: exactly-once RPCs and at-most-once notes, from the probe records
(probes.py).

RPCs. The receiver keeps, per (source node, stream), the highest seq applied, `last`
(shared memory, zero when the instance's shared memory is made), and seq_apply
(src/ic/session/seq_check.cpp) answers

    seq > last   'applied'    (and last := seq)
    seq == last  'duplicate'
    seq < last   'reordered'  (last unchanged)

Each stream has one client, which sends seq 1, 2, 3, ... one call at a time and never
reuses a number. So when call m executes, every seq ever sent on the stream is <= m,
and the only way last can be >= m is that m itself ran before (a double execution)
or that a later seq ran before m was sent (impossible for one sequential client unless
something reordered or mixed up replies). Hence: every call that RETURNED must have
returned 'applied'; 'duplicate' or 'reordered' is a violation.

A restart of the receiver only ever lowers last (to 0), and with last = 0 every seq
>= 1 is 'applied'; a restart can hide a double execution (the first run's mark is
gone) but never make a correct call look wrong. The assertion therefore needs no
exemption around restarts: it holds across them, from the first call after each one.

Failed calls (error, timeout, connection lost) may have run or not. Whether or when
they ran cannot be seen with this probe: a late run of a failed seq n either comes
before the next seq reached the receiver (last := n, and n+1 is still 'applied') or
after it ('reordered', last unchanged, the answer goes to nobody), and no later call,
whose seq is above n, can tell the two apart. What is asserted about failed calls is
only what the rule above already covers: they never make a later call anything but
'applied'. (A per-stream count of non-'applied' arrivals kept by the receiver would
make late runs visible; the probe has none.)

Notes. Every pgrac_ic_broadcast call issued by source s counts as one note sent to
each other node (an upper bound: a call that failed may have reached some nodes). The
receiver r counts notes per source in notes_recv, which restarts at zero with r's
shared memory. Samples of r's counters are grouped by r's incarnation (started_at).
A note is delivered at most once, to one incarnation or another, so

    final count of r's last incarnation + last count seen of each earlier one <= sent(s)

Each term is a lower bound of what that incarnation received (the last incarnation's
is exact, read at the end after the load stopped), so more than sent(s) means some note
was counted twice. For a receiver that never restarted this is simply count <= sent."""

import collections

OUTCOMES = ("applied", "duplicate", "reordered")


def _pair_key(x):
    return (x["src"], x["dst"])


def check_seq(calls):
    """Per pair (src, dst) and in total: calls, applied, failed, duplicate, reordered,
    unexpected (any other answer); bad: the calls that returned something else than
    'applied'."""
    pairs = collections.OrderedDict()
    total = collections.Counter()
    bad = []
    failed_why = collections.Counter()
    for c in sorted(calls, key=lambda c: (c["src"], c["dst"], c["seq"])):
        p = pairs.setdefault(_pair_key(c), collections.Counter(stream=c["stream"]))
        p["calls"] += 1
        total["calls"] += 1
        if c.get("err") is not None or c.get("res") is None:
            key = "failed"
            failed_why[c.get("err") or "no answer"] += 1
        elif c["res"] in OUTCOMES:
            key = c["res"]
        else:
            key = "unexpected"
        p[key] += 1
        total[key] += 1
        if key in ("duplicate", "reordered", "unexpected"):
            bad.append(c)
    return {"pairs": pairs, "total": total, "bad": bad, "failed_why": failed_why,
            "ok": not bad}


def incarnations(samples, node):
    """node's samples in time order, cut into incarnations: a new one when started_at
    changes, or when a counter goes down (shared memory made again)."""
    out = []
    prev = None
    for s in sorted((s for s in samples if s["node"] == node), key=lambda s: s["t"]):
        new = prev is None or s["started_at"] != prev["started_at"] or any(
            v < prev["recv"].get(k, 0) for k, v in s["recv"].items())
        if new:
            out.append([])
        out[-1].append(s)
        prev = s
    return out


def check_notes(notes, samples, n):
    """Per pair (src, receiver): sent, received by the last incarnation, at least
    received by earlier ones, restarts seen, ok."""
    sent = {r["src"]: r["sent"] for r in notes}
    pairs = collections.OrderedDict()
    for dst in range(1, n + 1):
        incs = incarnations(samples, dst)
        has_final = bool(incs) and any(s.get("final") for s in incs[-1])
        for src in range(1, n + 1):
            if src == dst:
                continue
            k = str(src)
            row = {"src": src, "dst": dst, "sent": sent.get(src), "received": None,
                   "earlier": 0, "restarts": max(0, len(incs) - 1), "final": has_final,
                   "ok": True}
            if incs and sent.get(src) is not None:
                row["received"] = incs[-1][-1]["recv"].get(k, 0)
                row["earlier"] = sum(inc[-1]["recv"].get(k, 0) for inc in incs[:-1])
                row["excess"] = row["received"] + row["earlier"] - row["sent"]
                row["ok"] = row["excess"] <= 0
            pairs[(src, dst)] = row
    pairs = collections.OrderedDict(sorted(pairs.items()))
    bad = [r for r in pairs.values() if not r["ok"]]
    return {"pairs": pairs, "bad": bad, "ok": not bad,
            "sent": sent, "errors": {r["src"]: r.get("errors", {}) for r in notes}}


def check(calls, notes, samples, n):
    seq = check_seq(calls)
    for (src, dst), p in seq["pairs"].items():
        p["receiver_restarts"] = max(0, len(incarnations(samples, dst)) - 1)
    nt = check_notes(notes, samples, n)
    return {"seq": seq, "notes": nt, "ok": seq["ok"] and nt["ok"]}
