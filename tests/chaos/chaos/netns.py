"""The network: one namespace per node, joined by veth pairs to a bridge that lives
in a namespace of its own (the root namespace is not touched), and the iptables
chains that faults fill and heals flush.

Node i has address SUBNET.i in namespace <tag>n<i>; the bridge namespace is <tag>br.
Each node namespace has chains CHAOS_IN and CHAOS_OUT, jumped to from INPUT and
OUTPUT; every fault rule goes there, so a heal is two flushes."""

from .util import run

SUBNET = "10.77.0"


def node_ns(tag, i):
    return "%sn%d" % (tag, i)


def bridge_ns(tag):
    return "%sbr" % tag


def addr(i):
    return "%s.%d" % (SUBNET, i)


def ipt(tag, i, *args, check=True):
    return run(["ip", "netns", "exec", node_ns(tag, i), "iptables", "-w", "5"] + list(args),
               timeout=15, check=check)


def setup(tag, n):
    br = bridge_ns(tag)
    run(["ip", "netns", "add", br])
    run(["ip", "-n", br, "link", "add", "br0", "type", "bridge"])
    run(["ip", "-n", br, "link", "set", "br0", "up"])
    run(["ip", "-n", br, "link", "set", "lo", "up"])
    for i in range(1, n + 1):
        ns = node_ns(tag, i)
        run(["ip", "netns", "add", ns])
        run(["ip", "-n", br, "link", "add", "v%d" % i, "type", "veth",
             "peer", "name", "eth0", "netns", ns])
        run(["ip", "-n", br, "link", "set", "v%d" % i, "master", "br0"])
        run(["ip", "-n", br, "link", "set", "v%d" % i, "up"])
        run(["ip", "-n", ns, "addr", "add", addr(i) + "/24", "dev", "eth0"])
        run(["ip", "-n", ns, "link", "set", "eth0", "up"])
        run(["ip", "-n", ns, "link", "set", "lo", "up"])
        for chain, hook in (("CHAOS_IN", "INPUT"), ("CHAOS_OUT", "OUTPUT")):
            ipt(tag, i, "-N", chain)
            ipt(tag, i, "-A", hook, "-j", chain)


def teardown(tag, n):
    """Deletes every namespace of the run (and with them the veths, bridge and rules)."""
    p = run(["ip", "netns", "list"], check=False, quiet=True)
    names = [l.split()[0] for l in p.stdout.splitlines() if l.strip()]
    for name in names:
        if name.startswith(tag):
            run(["ip", "netns", "del", name], check=False, quiet=True)


def heal(tag, i):
    ipt(tag, i, "-F", "CHAOS_IN", check=False)
    ipt(tag, i, "-F", "CHAOS_OUT", check=False)
    run(["ip", "netns", "exec", node_ns(tag, i), "tc", "qdisc", "del", "dev", "eth0", "root"],
        timeout=15, check=False, quiet=True)


def netem_available(tag, i):
    """Whether this kernel has sch_netem (a netem qdisc can be put on node i's eth0)."""
    ns = node_ns(tag, i)
    p = run(["ip", "netns", "exec", ns, "tc", "qdisc", "add", "dev", "eth0", "root", "netem",
             "delay", "1ms"], timeout=15, check=False, quiet=True)
    run(["ip", "netns", "exec", ns, "tc", "qdisc", "del", "dev", "eth0", "root"],
        timeout=15, check=False, quiet=True)
    return p.returncode == 0


def netem(tag, i, delay_ms, jitter_ms, reorder_pct, loss_pct):
    """Node i's packets are delayed (with jitter), reordered and lost by netem."""
    run(["ip", "netns", "exec", node_ns(tag, i), "tc", "qdisc", "replace", "dev", "eth0",
         "root", "netem", "delay", "%dms" % delay_ms, "%dms" % jitter_ms,
         "reorder", "%d%%" % reorder_pct, "50%", "loss", "%.1f%%" % loss_pct], timeout=15)


def partition(tag, i):
    """Node i drops everything from and to the cluster subnet."""
    ipt(tag, i, "-A", "CHAOS_IN", "-s", SUBNET + ".0/24", "-j", "DROP")
    ipt(tag, i, "-A", "CHAOS_OUT", "-d", SUBNET + ".0/24", "-j", "DROP")


def one_way(tag, i, j):
    """Node i's packets to node j are dropped (j's packets to i still arrive)."""
    ipt(tag, i, "-A", "CHAOS_OUT", "-d", addr(j), "-j", "DROP")


def loss(tag, i, probability):
    """Node i loses the given share of its packets, each way."""
    for chain, d in (("CHAOS_IN", "-s"), ("CHAOS_OUT", "-d")):
        ipt(tag, i, "-A", chain, d, SUBNET + ".0/24", "-m", "statistic", "--mode", "random",
            "--probability", "%.2f" % probability, "-j", "DROP")


def reset_tcp(tag, i):
    """Kills every established TCP connection of node i (the interconnect's: clients
    use the unix socket). Returns how many were listed."""
    p = run(["ip", "netns", "exec", node_ns(tag, i), "ss", "-K", "-t", "-n", "state",
             "established"], timeout=15, check=False)
    return max(0, len(p.stdout.strip().splitlines()) - 1)
