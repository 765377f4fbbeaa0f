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


# The impostor's link to the node whose id it claims (attach_impostor).
IMPOSTOR_LINK = "10.78.0"


def impostor_ns(tag):
    return "%sx" % tag


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


def attach_impostor(tag, i):
    """Namespace <tag>x for an instance that claims node i's id, behind node i's
    namespace: a veth pair (IMPOSTOR_LINK.1 on node i's side, .2 in <tag>x), node i's
    address on <tag>x's lo (so the impostor binds the address cluster.nodes gives node
    i, as the real node does in its own namespace), and node i forwarding <tag>x's
    packets to the cluster subnet with SNAT to its own address: the other nodes see
    both instances come from node i's address, as from two containers on one host
    behind its address, and no ARP or port clash disturbs the real node. Connections
    to node i's address still reach the real node only."""
    x, ns = impostor_ns(tag), node_ns(tag, i)
    run(["ip", "netns", "add", x])
    run(["ip", "-n", ns, "link", "add", "imp0", "type", "veth", "peer", "name", "eth0",
         "netns", x])
    run(["ip", "-n", ns, "addr", "add", IMPOSTOR_LINK + ".1/30", "dev", "imp0"])
    run(["ip", "-n", ns, "link", "set", "imp0", "up"])
    run(["ip", "-n", x, "addr", "add", IMPOSTOR_LINK + ".2/30", "dev", "eth0"])
    run(["ip", "-n", x, "link", "set", "eth0", "up"])
    run(["ip", "-n", x, "link", "set", "lo", "up"])
    run(["ip", "-n", x, "addr", "add", addr(i) + "/32", "dev", "lo"])
    run(["ip", "-n", x, "route", "add", SUBNET + ".0/24", "via", IMPOSTOR_LINK + ".1"])
    run(["ip", "netns", "exec", ns, "sysctl", "-q", "-w", "net.ipv4.ip_forward=1"], timeout=15)
    ipt(tag, i, "-t", "nat", "-A", "POSTROUTING", "-s", IMPOSTOR_LINK + ".2", "-o", "eth0",
        "-j", "SNAT", "--to-source", addr(i))


def detach_impostor(tag, i):
    """Undoes attach_impostor (deleting <tag>x deletes the veth pair)."""
    run(["ip", "netns", "del", impostor_ns(tag)], check=False, quiet=True)
    ipt(tag, i, "-t", "nat", "-F", "POSTROUTING", check=False)
    run(["ip", "netns", "exec", node_ns(tag, i), "sysctl", "-q", "-w", "net.ipv4.ip_forward=0"],
        timeout=15, check=False, quiet=True)


def reset_tcp(tag, i):
    """Kills every established TCP connection of node i (the interconnect's: clients
    use the unix socket). Returns how many were listed."""
    p = run(["ip", "netns", "exec", node_ns(tag, i), "ss", "-K", "-t", "-n", "state",
             "established"], timeout=15, check=False)
    return max(0, len(p.stdout.strip().splitlines()) - 1)
