// membership_scale: the membership protocol at 3, 16 and 64 nodes, in the
// simulator of tests/unit/membership/simulator.hpp (N Membership instances
// wired as the engine wires them, one simulated clock, the safety invariants
// checked after every event). Issue 27, "Scale". For each node count, seed and
// failure kind (freeze: the node stops; isolate: it runs on, cut off both ways
// from every other node):
//
//   1. the cluster forms its first view and runs steadily for --steady-s
//      seconds: the heartbeat bytes each node sends and receives per second
//      (each frame as the engine puts it on the wire under `secure`, the
//      default: 24-byte frame header, 16-byte heartbeat head, 72 to 584 bytes
//      of gossip, 16-byte tag; see heartbeat_wire_bytes), mean over the nodes;
//   2. one node fails at a seed-dependent phase of the heartbeat (which node
//      depends on the seed and the kind; node 1, the proposer, among them):
//      the time until every other node has committed a view without it;
//   3. it comes back (thawed, or its links healed) a second later: the time
//      until every node is a member of one view with a lease again, and the
//      heartbeat bytes per node per second from the failure to then.
//
// Times are simulated milliseconds; one-way delays are uniform in
// [--min-delay-us, --max-delay-us]. Prints the median and the largest of each
// over the runs, and with --record writes the records of the targets
// membership.view-after-failure.{16,64} and membership.heartbeat-bytes.{16,64}
// through scripts/scoreboard record (run from the source tree, or give the
// script's path), with the 3-node figures of the same run as their baselines,
// paired by seed and kind.
//
//   membership_scale [--nodes 3,16,64] [--seeds 5] [--heartbeat-ms 1000]
//                    [--timeout-ms 10000] [--steady-s 30] [--min-delay-us 100]
//                    [--max-delay-us 500] [--record[=SCOREBOARD]]
//
// Exit status: 0, or 1 if a safety invariant broke, a failure was not handled
// (no view without the node within 3 timeouts, or no rejoin within 2), or a
// record was refused.
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <random>
#include <string>
#include <vector>

#include "ic/membership/membership.hpp"
// Relative, so that this builds with pgrac_core's include path alone.
#include "../../tests/unit/membership/simulator.hpp"

using namespace pgrac::ic;
using namespace pgrac::ic::memsim;

namespace {

struct Args {
    std::vector<int> nodes{3, 16, 64};
    int seeds = 5;
    int heartbeat_ms = 1000;  // cluster.heartbeat_interval's default (docs/configuration.md)
    int timeout_ms = 10000;   // cluster.peer_timeout's default
    int steady_s = 30;
    int64_t min_delay_us = 100;
    int64_t max_delay_us = 500;
    bool record = false;
    std::string scoreboard = "scripts/scoreboard";
    std::string command;
};

// One run: one node count, seed and failure kind.
struct Run {
    uint64_t seed = 0;
    FailureKind kind = FailureKind::Freeze;
    uint16_t failed = 0;
    double view_ms = -1;    // failure to a view without it on every other node
    double rejoin_ms = -1;  // its return to one view of all with every lease
    double steady_sent = 0, steady_received = 0;  // B/s per node, mean over nodes
    double failure_sent = 0, failure_received = 0;
    int violations = 0;
};

[[noreturn]] void usage(const char* why) {
    fprintf(stderr,
            "membership_scale: %s\nusage: membership_scale [--nodes 3,16,64] [--seeds 5] "
            "[--heartbeat-ms 1000] [--timeout-ms 10000] [--steady-s 30] [--min-delay-us 100] "
            "[--max-delay-us 500] [--record[=SCOREBOARD]]\n",
            why);
    exit(2);
}

long number(const char* s, long lo, long hi, const char* what) {
    char* end = nullptr;
    errno = 0;
    const long v = strtol(s, &end, 10);
    if (errno != 0 || end == s || *end != '\0' || v < lo || v > hi)
        usage((std::string(what) + ": not a number in " + std::to_string(lo) + ".." +
               std::to_string(hi) + ": " + s)
                  .c_str());
    return v;
}

Args parse(int argc, char** argv) {
    Args a;
    a.command = argv[0];
    for (int i = 1; i < argc; i++) {
        a.command += std::string(" ") + argv[i];
        const std::string arg = argv[i];
        auto value = [&]() -> const char* {
            if (i + 1 >= argc) usage((arg + " needs a value").c_str());
            a.command += std::string(" ") + argv[i + 1];
            return argv[++i];
        };
        if (arg == "--nodes") {
            a.nodes.clear();
            std::string list = value();
            size_t at = 0;
            while (at <= list.size()) {
                const size_t comma = std::min(list.find(',', at), list.size());
                a.nodes.push_back(static_cast<int>(
                    number(list.substr(at, comma - at).c_str(), 2, 64, "--nodes")));
                at = comma + 1;
            }
        } else if (arg == "--seeds") {
            a.seeds = static_cast<int>(number(value(), 1, 1000, "--seeds"));
        } else if (arg == "--heartbeat-ms") {
            a.heartbeat_ms = static_cast<int>(
                number(value(), kMinHeartbeatMs, kMaxHeartbeatMs, "--heartbeat-ms"));
        } else if (arg == "--timeout-ms") {
            a.timeout_ms = static_cast<int>(
                number(value(), kMinPeerTimeoutMs, kMaxPeerTimeoutMs, "--timeout-ms"));
        } else if (arg == "--steady-s") {
            a.steady_s = static_cast<int>(number(value(), 1, 3600, "--steady-s"));
        } else if (arg == "--min-delay-us") {
            a.min_delay_us = number(value(), 0, 10000000, "--min-delay-us");
        } else if (arg == "--max-delay-us") {
            a.max_delay_us = number(value(), 0, 10000000, "--max-delay-us");
        } else if (arg == "--record") {
            a.record = true;
        } else if (arg.rfind("--record=", 0) == 0) {
            a.record = true;
            a.scoreboard = arg.substr(strlen("--record="));
        } else {
            usage(("unknown argument " + arg).c_str());
        }
    }
    if (a.timeout_ms < 2 * a.heartbeat_ms)
        usage("--timeout-ms must be at least twice --heartbeat-ms (as cluster.peer_timeout)");
    if (a.min_delay_us > a.max_delay_us) usage("--min-delay-us is above --max-delay-us");
    return a;
}

// Per node and second, mean over the nodes of `who`, since the last reset.
void rates(Cluster& c, NodeMask who, double* sent, double* received) {
    const double secs = static_cast<double>(c.now_us() - c.traffic_since_us()) / kSec;
    double s = 0, r = 0;
    int n = 0;
    for (uint16_t id : mask_nodes(who)) {
        s += static_cast<double>(c.node(id).traffic.bytes_sent);
        r += static_cast<double>(c.node(id).traffic.bytes_received);
        n++;
    }
    *sent = n == 0 || secs <= 0 ? 0 : s / n / secs;
    *received = n == 0 || secs <= 0 ? 0 : r / n / secs;
}

Run run_one(const Args& a, int nodes, uint64_t seed, FailureKind kind) {
    Run r;
    r.seed = seed;
    r.kind = kind;
    const int k = kind == FailureKind::Freeze ? 0 : 1;
    // Node 1 (the proposer) fails in the first run of each kind; then others.
    r.failed = static_cast<uint16_t>(1 + ((seed - 1) * 5 + static_cast<uint64_t>(k) * 3) %
                                             static_cast<uint64_t>(nodes));
    const SimOptions o = sim(nodes, seed * 2 + static_cast<uint64_t>(k), a.min_delay_us,
                             a.max_delay_us, a.heartbeat_ms, a.timeout_ms);
    const int64_t hb = int64_t{a.heartbeat_ms} * kMs;
    const int64_t timeout = int64_t{a.timeout_ms} * kMs;
    const uint64_t failures_before = g_failures;
    Cluster c(o);
    if (!c.run_until([&] { return c.converged(); }, 10 * hb + timeout)) {
        fprintf(stderr, "membership_scale: %d nodes, seed %llu: no first view\n%s", nodes,
                static_cast<unsigned long long>(seed), c.dump().c_str());
        return r;  // view_ms < 0: a failed run
    }
    c.run_for(2 * hb);
    c.reset_traffic();
    c.run_for(int64_t{a.steady_s} * kSec);
    rates(c, first_nodes(nodes), &r.steady_sent, &r.steady_received);

    std::mt19937_64 rng(seed * 7919 + static_cast<uint64_t>(k));
    c.run_for(std::uniform_int_distribution<int64_t>(0, hb - 1)(rng));
    c.reset_traffic();
    c.fail(r.failed, kind);
    const int64_t failed_at = c.now_us();
    if (c.run_until([&] { return c.excluded_everywhere(r.failed); }, 3 * timeout)) {
        r.view_ms = static_cast<double>(c.now_us() - failed_at) / kMs;
        c.run_for(1 * kSec);
        c.recover(r.failed, kind);
        const int64_t back_at = c.now_us();
        if (c.run_until([&] { return c.converged(); }, 2 * timeout))
            r.rejoin_ms = static_cast<double>(c.now_us() - back_at) / kMs;
    }
    rates(c, first_nodes(nodes) & ~node_bit(r.failed), &r.failure_sent, &r.failure_received);
    r.violations = c.monitor().violations() + static_cast<int>(g_failures - failures_before);
    if (r.view_ms < 0 || r.rejoin_ms < 0)
        fprintf(
            stderr, "membership_scale: %d nodes, seed %llu, %s node %u: %s\n%s", nodes,
            static_cast<unsigned long long>(seed), failure_kind_name(kind), r.failed,
            r.view_ms < 0 ? "no view without it within 3 timeouts" : "no rejoin within 2 timeouts",
            c.trace().c_str());
    return r;
}

double median(std::vector<double> v) {
    if (v.empty()) return 0;
    std::sort(v.begin(), v.end());
    const size_t n = v.size();
    return n % 2 == 1 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

double largest(const std::vector<double>& v) {
    return v.empty() ? 0 : *std::max_element(v.begin(), v.end());
}

// The settings as SHOW prints them ("1s", "10s", "250ms").
std::string setting_text(int ms) {
    return ms % 1000 == 0 ? std::to_string(ms / 1000) + "s" : std::to_string(ms) + "ms";
}

std::string num(double v, int decimals) {
    char b[64];
    snprintf(b, sizeof b, "%.*f", decimals, v);
    return b;
}

// scripts/scoreboard record ARGS...; true if it wrote the record.
bool scoreboard_record(const Args& a, const std::vector<std::string>& args) {
    std::vector<std::string> all{a.scoreboard, "record"};
    all.insert(all.end(), args.begin(), args.end());
    all.insert(
        all.end(),
        {"--setting", "cluster.heartbeat_interval=" + setting_text(a.heartbeat_ms), "--setting",
         "cluster.peer_timeout=" + setting_text(a.timeout_ms), "--command", a.command});
    std::vector<char*> argv;
    for (std::string& s : all) argv.push_back(s.data());
    argv.push_back(nullptr);
    fflush(stdout);
    const pid_t pid = fork();
    if (pid < 0) {
        perror("membership_scale: fork");
        return false;
    }
    if (pid == 0) {
        execv(argv[0], argv.data());
        fprintf(stderr, "membership_scale: %s: %s\n", argv[0], strerror(errno));
        _exit(127);
    }
    int status = 0;
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
    const bool ok = WIFEXITED(status) && WEXITSTATUS(status) == 0;
    if (!ok) fprintf(stderr, "membership_scale: no record for %s (above)\n", args[1].c_str());
    return ok;
}

// "F/B F/B ...": the runs of one node count (`at`) against the 3-node runs of
// the same seed and kind (`base`, in the same order).
std::string rounds(const std::vector<Run>& at, const std::vector<Run>& base, double Run::*field,
                   int decimals) {
    std::string out;
    for (size_t i = 0; i < at.size() && i < base.size(); i++) {
        if (at[i].*field <= 0 || base[i].*field <= 0) continue;
        out += (out.empty() ? "" : " ") + num(at[i].*field, decimals) + "/" +
               num(base[i].*field, decimals);
    }
    return out;
}

}  // namespace

int main(int argc, char** argv) {
    const Args a = parse(argc, argv);
    printf(
        "membership simulator: heartbeat_interval %d ms, peer_timeout %d ms, one-way delay "
        "%.1f-%.1f ms, %d seeds x {freeze, isolate}, steady %d s\n",
        a.heartbeat_ms, a.timeout_ms, a.min_delay_us / 1000.0, a.max_delay_us / 1000.0, a.seeds,
        a.steady_s);
    const double bound_ms = a.timeout_ms + a.heartbeat_ms + std::min(a.heartbeat_ms, 100) +
                            6 * static_cast<double>(a.max_delay_us) / kMs;
    printf(
        "bound on a view after a failure: peer_timeout + heartbeat + tick + 6 delays = "
        "%.1f ms (tests/unit/membership/membership_scale_test.cpp)\n",
        bound_ms);
    printf(
        "heartbeat bytes: frame header %zu + heartbeat head %zu + gossip %zu..%zu + tag %zu "
        "(secure, mac; crc: no tag); a steady frame is %zu bytes\n\n",
        kFrameHeaderSize, kHeartbeatHeadSize, kGossipFixedSize, kGossipMaxSize, kFrameTagSize,
        heartbeat_wire_bytes(kGossipFixedSize));
    printf("%5s %4s | %-26s | %-17s | %-26s | %-26s | %s\n", "", "", "view after failure, ms",
           "rejoin, ms", "steady, B/s per node", "failure, B/s per node", "");
    printf("%5s %4s | %8s %8s %8s | %8s %8s | %12s %13s | %12s %13s | %s\n", "nodes", "runs",
           "median", "max", "min", "median", "max", "sent", "received", "sent", "received",
           "violations   CPU s");

    std::vector<std::vector<Run>> all;
    bool ok = true;
    for (int nodes : a.nodes) {
        const auto cpu0 = std::clock();
        std::vector<Run> runs;
        for (uint64_t seed = 1; seed <= static_cast<uint64_t>(a.seeds); seed++)
            for (FailureKind kind : {FailureKind::Freeze, FailureKind::Isolate})
                runs.push_back(run_one(a, nodes, seed, kind));
        std::vector<double> view, rejoin, ss, sr, fs, fr;
        int violations = 0;
        for (const Run& r : runs) {
            if (r.view_ms >= 0) view.push_back(r.view_ms);
            if (r.rejoin_ms >= 0) rejoin.push_back(r.rejoin_ms);
            ss.push_back(r.steady_sent);
            sr.push_back(r.steady_received);
            fs.push_back(r.failure_sent);
            fr.push_back(r.failure_received);
            violations += r.violations;
            if (r.view_ms < 0 || r.rejoin_ms < 0 || r.violations != 0) ok = false;
        }
        const double cpu = static_cast<double>(std::clock() - cpu0) / CLOCKS_PER_SEC;
        printf(
            "%5d %4zu | %8.1f %8.1f %8.1f | %8.1f %8.1f | %12.0f %13.0f | %12.0f %13.0f | "
            "%10d %7.1f\n",
            nodes, runs.size(), median(view), largest(view),
            view.empty() ? 0.0 : *std::min_element(view.begin(), view.end()), median(rejoin),
            largest(rejoin), median(ss), median(sr), median(fs), median(fr), violations, cpu);
        fflush(stdout);
        all.push_back(std::move(runs));
    }
    printf("\nper run (seed, f: freeze or i: isolate, the failed node = view ms / rejoin ms):\n");
    for (size_t i = 0; i < a.nodes.size(); i++) {
        std::string line = "  " + std::to_string(a.nodes[i]) + " nodes:";
        for (const Run& r : all[i])
            line += " " + std::to_string(r.seed) + failure_kind_name(r.kind)[0] +
                    std::to_string(r.failed) + "=" + num(r.view_ms, 1) + "/" + num(r.rejoin_ms, 1);
        printf("%s\n", line.c_str());
    }
    if (!ok) printf("\nmembership_scale: FAILED (violations or failures not handled, above)\n");

    if (a.record) {
        if (!ok) {
            printf("membership_scale: no records from a failed run\n");
            return 1;
        }
        const auto three = std::find(a.nodes.begin(), a.nodes.end(), 3);
        const std::vector<Run>* base =
            three == a.nodes.end() ? nullptr : &all[static_cast<size_t>(three - a.nodes.begin())];
        for (size_t i = 0; i < a.nodes.size(); i++) {
            const int n = a.nodes[i];
            if (n != 16 && n != 64) continue;
            const std::vector<Run>& runs = all[i];
            std::vector<double> view, rejoin, sent, received;
            for (const Run& r : runs) {
                view.push_back(r.view_ms);
                rejoin.push_back(r.rejoin_ms);
                sent.push_back(r.steady_sent);
                received.push_back(r.steady_received);
            }
            const std::string view_note =
                "simulated; " + std::to_string(runs.size()) + " runs (" + std::to_string(a.seeds) +
                " seeds x freeze, isolate), largest " + num(largest(view), 1) +
                " ms against the bound peer_timeout + heartbeat + tick + " +
                "6 delays = " + num(bound_ms, 1) + " ms; the failed node rejoined in " +
                num(median(rejoin), 1) + " ms (median), " + num(largest(rejoin), 1) +
                " ms at most. Baseline: 3 nodes, the same seeds and kinds.";
            const std::string bytes_note =
                "simulated; bytes sent per node per second in a steady cluster, mean over the "
                "nodes, median over " +
                std::to_string(runs.size()) + " runs (received: " + num(median(received), 0) +
                " B/s); each heartbeat as on the wire under secure (24 header + 16 head + " +
                "gossip + 16 tag). Baseline: 3 nodes, the same seeds.";
            std::vector<std::string> v{"--target",
                                       "membership.view-after-failure." + std::to_string(n)};
            std::vector<std::string> b{"--target",
                                       "membership.heartbeat-bytes." + std::to_string(n)};
            if (base != nullptr) {
                v.insert(v.end(), {"--rounds", rounds(runs, *base, &Run::view_ms, 1)});
                b.insert(b.end(), {"--rounds", rounds(runs, *base, &Run::steady_sent, 1)});
            } else {
                v.insert(v.end(), {"--figure", num(median(view), 1)});
                b.insert(b.end(), {"--figure", num(median(sent), 1)});
            }
            v.insert(v.end(), {"--note", view_note});
            b.insert(b.end(), {"--note", bytes_note});
            ok = scoreboard_record(a, v) && ok;
            ok = scoreboard_record(a, b) && ok;
        }
    }
    return ok ? 0 : 1;
}
