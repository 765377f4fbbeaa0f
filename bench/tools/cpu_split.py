#!/usr/bin/env python3
"""CPU per transaction, split by process, while pgbench runs one script.

Reads utime + stime of every process from /proc/PID/stat twice during a pgbench
run (after a warm-up, and before the end), attributes each process to pgbench,
or to an instance (by its postmaster's pid) as backend, listener, LMS or other,
and divides the CPU used between the two reads by the transactions in that
window (pgbench's tps times the window). Prints one line per group, and a
machine-readable "split" line.

usage: cpu_split.py --pgbench PATH --host DIR --port P --script FILE --clients C
                    --seconds S --postmaster N=PID [--postmaster N=PID ...]
                    [--as-user postgres] [--label TEXT]
"""
import argparse
import os
import re
import subprocess
import time

TICK = os.sysconf("SC_CLK_TCK")


def snapshot():
    out = {}
    for p in os.listdir("/proc"):
        if not p.isdigit():
            continue
        try:
            with open(f"/proc/{p}/stat") as f:
                st = f.read()
            with open(f"/proc/{p}/cmdline") as f:
                cmd = f.read().replace("\0", " ")
        except OSError:
            continue
        fields = st.rsplit(")", 1)[1].split()
        # fields[1] = ppid, [11] = utime, [12] = stime (after the comm field)
        out[int(p)] = (int(fields[11]) + int(fields[12]), cmd, int(fields[1]))
    return out


def group(cmd, ppid, postmasters):
    if "pgbench" in cmd.split(" ", 1)[0]:
        return "pgbench"
    for node, pm in postmasters.items():
        if ppid == pm:
            if "pgrac_ic listener" in cmd:
                return f"node {node} listener"
            if "pgrac_ic lms" in cmd:
                return f"node {node} LMS"
            if re.match(r"postgres: (checkpointer|background writer|walwriter|autovacuum|"
                        r"logical replication|archiver|stats|walsender|walreceiver)", cmd):
                return f"node {node} other"
            return f"node {node} backends"
    return None


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--pgbench", required=True)
    ap.add_argument("--host", required=True)
    ap.add_argument("--port", required=True)
    ap.add_argument("--script", required=True)
    ap.add_argument("--clients", type=int, required=True)
    ap.add_argument("--seconds", type=float, default=7)
    ap.add_argument("--postmaster", action="append", default=[])
    ap.add_argument("--as-user", default="")
    ap.add_argument("--label", default="")
    a = ap.parse_args()
    postmasters = {int(n): int(p) for n, p in (x.split("=") for x in a.postmaster)}
    warm = min(1.5, a.seconds / 4)
    window = a.seconds - warm - 1.0
    cmd = [a.pgbench, "-n", "-M", "prepared", "-c", str(a.clients), "-j", str(a.clients),
           "-T", str(int(a.seconds)), "-f", a.script, "-h", a.host, "-p", a.port, "postgres"]
    if a.as_user:
        cmd = ["runuser", "-u", a.as_user, "--"] + cmd
    pb = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    time.sleep(warm)
    before, t0 = snapshot(), time.monotonic()
    time.sleep(window)
    after, t1 = snapshot(), time.monotonic()
    out = pb.communicate(timeout=a.seconds + 60)[0]
    m = re.search(r"tps = ([0-9.]+)", out)
    if pb.returncode != 0 or m is None:
        raise SystemExit(f"pgbench failed:\n{out}")
    tps = float(m.group(1))
    secs = t1 - t0
    used = {}
    for pid, (ticks, c, ppid) in after.items():
        if pid not in before:
            continue
        g = group(c, ppid, postmasters)
        if g is None:
            continue
        used[g] = used.get(g, 0.0) + (ticks - before[pid][0]) / TICK
    tx = tps * secs
    used = {g: u for g, u in used.items() if u / tx * 1e6 >= 0.05}  # idle ones left out
    total = sum(used.values())
    print(f"{a.label} clients {a.clients}: {tps:.0f} tps, {total / secs:.2f} CPUs busy "
          f"(pgbench and the instances) over {secs:.1f} s")
    for g in sorted(used):
        print(f"  {g}: {used[g] / tx * 1e6:.1f} us CPU per transaction ({used[g] / secs:.2f} CPUs)")
    print(f"  total: {total / tx * 1e6:.1f} us CPU per transaction")
    print("split " + " ".join(f"{g.replace(' ', '_')}={used[g] / tx * 1e6:.1f}" for g in sorted(used))
          + f" tps={tps:.0f} cpus={total / secs:.2f}")


if __name__ == "__main__":
    main()
