// ges_rebuild_scale: a million cached global locks on one node, and what an
// epoch change (the rebuild, docs/ges.md "Epochs and the rebuild") costs with
// them. Issue 27, "Scale". In-process and PostgreSQL-free: three real
// ges::Worker (one LMS worker per node) in the unit tests' in-memory cluster
// (tests/unit/ges/worker_support.hpp), each node with a registry mirror and a
// node cache big enough for every lock. For each lock count N:
//
//   1. node 1's backends (--procs of them, in turn) take N distinct resources
//      in EX and release them: each becomes the node owner's cached lock
//      (Transfer, then the master's grant; docs/ges.md "Node-level caching").
//      The names are chosen so that each of the cache's 16 partitions gets
//      N / 16 of them (a cache of exactly N entries holds them all); the tool
//      fails unless N entries are cached, N registry entries mirrored and no
//      lock was evicted;
//   2. memory per cached lock: the cache entry and its bucket
//      (NodeCache::bytes_for(1, N) / N), the registry mirror at the capacity
//      that holds N (RegistryMirror rounds to a power of two and keeps a
//      quarter free), and the LMS processes' heap (mallinfo2() before and
//      after step 1, every worker of the cluster: node 1's registry and
//      tokens, the masters' tables and tokens; the unit harness's own queues
//      drained), split by replicas of each structure measured alone;
//   3. --rounds times: an epoch change with the same members {1,2,3}; one
//      without node 3 ({1,2}: its resources are remastered on 1 and 2); one
//      with node 3 back. Each is GesCluster::commit_view done by hand: the new
//      view set on every node, each worker's tick that adopts it timed (the
//      old table dropped, the registry replayed to the masters, the entries
//      it masters itself ingested), then every queued message delivered in
//      GesCluster::pump's order, each worker's handle() timed (the replay
//      batches ingested, the markers, the barrier's end). "workers" is the sum
//      of those worker calls: one thread runs the three nodes one after
//      another, so it is the CPU the change costs the cluster, not its latency
//      on three machines (the busiest node's share is printed beside it, the
//      wire's time is not in it). "wall" adds the harness's delivery loop;
//   4. two steady ticks with N locks, per node: 300 ms later (the reaper's
//      pass over the registry, the wait check's over the table, and what every
//      tick does: the deadline scan over the table), then 10 ms later (only
//      what every tick does);
//   5. every table is read back: N rows, each node 1's owner in EX.
//
// Prints the median and the largest over the rounds, and with --record
// writes the records of ges.epoch-change.{10k,100k,1m} (same members, the
// workers' median) and, with 1,000,000 locks measured, ges.memory-per-lock,
// through scripts/scoreboard record (run from the source tree, or give the
// script's path).
//
//   ges_rebuild_scale [--locks 10000,100000,1000000] [--rounds 3] [--procs 64]
//                     [--names int|text] [--record[=SCOREBOARD]]
//
// Exit status: 0, or 1 if a check failed (above) or a record was refused.
#include <malloc.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "ges/worker_support.hpp"

using namespace pgrac::ic;
using namespace pgrac::ic::ges;
using namespace pgrac::ic::ges::testing;

namespace {

using Clock = std::chrono::steady_clock;
constexpr uint16_t kNodes = 3;

double ms_since(Clock::time_point t0) {
    return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
}

struct Args {
    std::vector<uint32_t> locks{10000, 100000, 1000000};
    int rounds = 3;
    uint32_t procs = 64;
    bool text = false;
    bool record = false;
    std::string scoreboard = "scripts/scoreboard";
    std::string command;
};

[[noreturn]] void usage(const char* why) {
    fprintf(stderr,
            "ges_rebuild_scale: %s\nusage: ges_rebuild_scale [--locks 10000,100000,1000000] "
            "[--rounds 3] [--procs 64] [--names int|text] [--record[=SCOREBOARD]]\n",
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
        if (arg == "--locks") {
            a.locks.clear();
            std::string list = value();
            size_t at = 0;
            while (at <= list.size()) {
                const size_t comma = std::min(list.find(',', at), list.size());
                a.locks.push_back(static_cast<uint32_t>(
                    number(list.substr(at, comma - at).c_str(), 16, 4000000, "--locks")));
                at = comma + 1;
            }
        } else if (arg == "--rounds") {
            a.rounds = static_cast<int>(number(value(), 1, 100, "--rounds"));
        } else if (arg == "--procs") {
            a.procs = static_cast<uint32_t>(number(value(), 1, 10000, "--procs"));
        } else if (arg == "--names") {
            const std::string v = value();
            if (v != "int" && v != "text") usage("--names: int or text");
            a.text = v == "text";
        } else if (arg == "--record") {
            a.record = true;
        } else if (arg.rfind("--record=", 0) == 0) {
            a.record = true;
            a.scoreboard = arg.substr(strlen("--record="));
        } else {
            usage(("unknown argument " + arg).c_str());
        }
    }
    return a;
}

// Bytes malloc has handed out and not got back (heap and mmap'ed chunks).
size_t heap_bytes() {
    const struct mallinfo2 m = mallinfo2();
    return m.uordblks + m.hblkhd;
}

double per(size_t after, size_t before, uint32_t n) {
    return after > before ? static_cast<double>(after - before) / n : 0.0;
}

double median(std::vector<double> v) {
    if (v.empty()) return 0;
    std::sort(v.begin(), v.end());
    const size_t m = v.size() / 2;
    return v.size() % 2 ? v[m] : (v[m - 1] + v[m]) / 2;
}

double largest(const std::vector<double>& v) {
    return v.empty() ? 0 : *std::max_element(v.begin(), v.end());
}

std::string num(double v, int decimals) {
    char b[64];
    snprintf(b, sizeof b, "%.*f", decimals, v);
    return b;
}

// Thousands separated, for lock counts.
std::string count_text(uint64_t n) {
    std::string s = std::to_string(n);
    for (int i = static_cast<int>(s.size()) - 3; i > 0; i -= 3)
        s.insert(static_cast<size_t>(i), ",");
    return s;
}

// N names, N / 16 (rounded up) per cache partition of LMS worker 0.
std::vector<ResourceName> pick_names(const Args& a, const NodeCache& cache, uint32_t n) {
    std::vector<ResourceName> out;
    out.reserve(n);
    std::vector<uint32_t> in_part(cache.partitions(), 0);
    for (int64_t i = 1; out.size() < n; i++) {
        // A text name the length of a buffer tag's ("b:spc/db/rel/fork/block").
        const ResourceName r =
            a.text ? *ResourceName::from_text("b:1663/16384/16385/0/" + std::to_string(i))
                   : ResourceName::from_int(i);
        const uint32_t p = cache.partition_of(r, 0);
        if (in_part[p] >= cache.entries_per_partition()) continue;
        in_part[p]++;
        out.push_back(r);
    }
    return out;
}

// One epoch change, timed worker call by worker call.
struct Change {
    double wall_ms = 0;
    double tick_ms[kNodes + 1] = {};    // the tick that adopts the epoch
    double handle_ms[kNodes + 1] = {};  // every message delivered to the node
    uint64_t replay_msgs = 0, replay_bytes = 0, other_msgs = 0, other_bytes = 0;
    double node_ms(uint16_t n) const { return tick_ms[n] + handle_ms[n]; }
    double workers_ms() const {
        double s = 0;
        for (uint16_t n = 1; n <= kNodes; n++) s += node_ms(n);
        return s;
    }
    double busiest_ms() const {
        double m = 0;
        for (uint16_t n = 1; n <= kNodes; n++) m = std::max(m, node_ms(n));
        return m;
    }
};

// GesCluster::commit_view, with its pump's delivery order (a round takes the
// oldest queued message of each node in turn: per-pair FIFO).
Change epoch_change(GesCluster& c, uint32_t epoch, const std::vector<uint16_t>& members) {
    Change ch;
    const Clock::time_point t0 = Clock::now();
    for (uint16_t n = 1; n <= c.size(); n++) c.host(n).set_view(epoch, nodes_mask(members));
    for (uint16_t n = 1; n <= c.size(); n++) {
        const Clock::time_point t = Clock::now();
        c.worker(n).tick(c.now());
        ch.tick_ms[n] = ms_since(t);
    }
    for (bool moved = true; moved;) {
        moved = false;
        for (uint16_t from = 1; from <= c.size(); from++) {
            std::deque<FakeHost::Sent>& q = c.host(from).sent;
            if (q.empty()) continue;
            FakeHost::Sent s = std::move(q.front());
            q.pop_front();
            moved = true;
            if (s.node < 1 || s.node > c.size()) continue;
            const bool replay =
                s.body.size() > 1 && s.body[1] == static_cast<uint8_t>(GesMsgType::Replay);
            (replay ? ch.replay_msgs : ch.other_msgs)++;
            (replay ? ch.replay_bytes : ch.other_bytes) += s.body.size();
            const Clock::time_point t = Clock::now();
            c.worker(s.node).handle(GesCluster::role_of(s.channel), from, s.body.data(),
                                    s.body.size(), c.now());
            ch.handle_ms[s.node] += ms_since(t);
        }
    }
    ch.wall_ms = ms_since(t0);
    return ch;
}

struct Memory {
    double cache = 0;         // NodeCache::bytes_for(1, N) / N
    double mirror_slot = 0;   // RegistryMirror::bytes_for(cap) / cap
    double mirror_at_n = 0;   // RegistryMirror::bytes_for(cap) / N
    uint32_t mirror_cap = 0;  // the capacity that holds N
    double heap = 0;          // every worker's heap growth in the build / N
    double table = 0;         // replicas measured alone: a master's LockTable
    double registry = 0;      //   node 1's ClientRegistry
    double token_map = 0;     //   one std::map<LockKey, uint64_t> (tokens_, held_tokens_)
    double total() const { return cache + mirror_at_n + heap; }
};

// The per-lock heap of each structure, alone.
void heap_parts(const std::vector<ResourceName>& names, Memory* m) {
    const uint32_t n = static_cast<uint32_t>(names.size());
    const Owner node1 = node_owner(1);
    std::vector<ReplayEntry> entries(n);
    for (uint32_t i = 0; i < n; i++) {
        ReplayEntry& e = entries[i];
        e.owner = node1;
        e.resource = names[i];
        e.state = LockState::Granted;
        e.granted_mode = e.requested_mode = LockMode::EX;
        e.request_id = kInternalRequestId | (i + 1);
        e.token = (uint64_t{2} << 32) | (uint64_t{i + 1} << kCacheTokenBits);
    }
    {
        const size_t h0 = heap_bytes();
        LockTable t(2);
        t.begin_replay();
        t.ingest_replay(entries, 0);
        t.end_replay(0);
        m->table = per(heap_bytes(), h0, n);
    }
    {
        const size_t h0 = heap_bytes();
        ClientRegistry r;
        for (const ReplayEntry& e : entries) {
            r.on_request(e.owner, e.resource, e.granted_mode, e.request_id, 0, 0);
            r.on_granted(e.owner, e.resource, e.request_id, 0);
        }
        m->registry = per(heap_bytes(), h0, n);
    }
    {
        const size_t h0 = heap_bytes();
        std::map<LockKey, uint64_t> tokens;
        for (const ReplayEntry& e : entries) tokens[LockKey{e.resource, e.owner}] = e.token;
        m->token_map = per(heap_bytes(), h0, n);
    }
}

struct Result {
    uint32_t locks = 0;
    double build_s = 0;
    Memory mem;
    std::vector<Change> same, leave, rejoin;
    double steady_ms[kNodes + 1] = {};      // a tick with the reaper and the wait check
    double every_tick_ms[kNodes + 1] = {};  // a tick with neither
    uint64_t remote_entries = 0;            // node 1's locks mastered by 2 or 3 in {1,2,3}
    bool ok = true;
};

bool fail(Result* r, const std::string& why) {
    printf("ges_rebuild_scale: %s locks: FAILED: %s\n", count_text(r->locks).c_str(), why.c_str());
    fflush(stdout);
    r->ok = false;
    return false;
}

// After an epoch change: every member serves the epoch with its barrier
// ended, nothing is left queued, and node 1 still has every lock cached.
bool check_after(GesCluster& c, Result* r, uint32_t epoch, const std::vector<uint16_t>& members,
                 const char* what) {
    for (uint16_t n : members) {
        if (c.worker(n).epoch() != epoch || c.worker(n).replaying())
            return fail(r, std::string(what) + ": node " + std::to_string(n) + " serves epoch " +
                               std::to_string(c.worker(n).epoch()) +
                               (c.worker(n).replaying() ? " (barrier not ended)" : ""));
        if (!c.host(n).sent.empty()) return fail(r, std::string(what) + ": messages left queued");
        if (c.host(n).counter(WorkerCounter::ReplayConflicts) != 0 || !c.host(n).errors.empty())
            return fail(r, std::string(what) + ": node " + std::to_string(n) +
                               " reported errors (replay conflicts or others)");
    }
    NodeCache& cache = c.host(1).cache;
    uint32_t used = 0;
    for (uint32_t p = 0; p < cache.partitions(); p++) used += cache.used(p);
    if (used != r->locks || c.worker(1).registry().size() != r->locks)
        return fail(r, std::string(what) + ": " + std::to_string(used) + " cached, " +
                           std::to_string(c.worker(1).registry().size()) + " in the registry");
    return true;
}

Result measure(const Args& a, uint32_t n) {
    Result res;
    res.locks = n;
    // The mirror keeps a quarter free and rounds up to a power of two; room
    // for every backend's entry beside the node owner's while a lock moves.
    const uint32_t mirror_cap = static_cast<uint32_t>((uint64_t{n} + a.procs + 64) * 4 / 3 + 1);
    auto cluster = std::make_unique<GesCluster>(kNodes, mirror_cap);
    GesCluster& c = *cluster;
    for (uint16_t id = 1; id <= kNodes; id++) c.host(id).enable_cache(n);
    std::vector<ResourceName> names = pick_names(a, c.host(1).cache, n);
    for (const ResourceName& r : names)
        if (master_for(r, {1, 2, 3}) != 1) res.remote_entries++;
    uint32_t epoch = 1;
    c.commit_view(epoch, {1, 2, 3});

    Memory& mem = res.mem;
    mem.cache = static_cast<double>(NodeCache::bytes_for(1, n)) / n;
    mem.mirror_cap = c.node(1).mirror.capacity();
    mem.mirror_slot =
        static_cast<double>(RegistryMirror::bytes_for(mem.mirror_cap)) / mem.mirror_cap;
    mem.mirror_at_n = static_cast<double>(RegistryMirror::bytes_for(mem.mirror_cap)) / n;

    // 1. the cached locks
    FakeHost& h1 = c.host(1);
    const size_t heap0 = heap_bytes();
    const Clock::time_point t0 = Clock::now();
    for (uint32_t i = 0; i < n; i++) {
        const uint32_t proc = 1 + i % a.procs;
        const uint64_t rid = c.request(1, proc, names[i], LockMode::EX);
        if (h1.deliveries.size() != 1 || !h1.deliveries[0].granted ||
            h1.deliveries[0].request_id != rid) {
            fail(&res, "lock " + std::to_string(i) + " was not granted at once");
            return res;
        }
        h1.deliveries.clear();
        c.release(1, proc, names[i]);
        if (h1.logs.size() > 64) h1.logs.clear();
    }
    res.build_s = ms_since(t0) / 1000;
    for (uint16_t id = 1; id <= kNodes; id++) {
        c.host(id).logs.clear();
        c.host(id).logs.shrink_to_fit();
        c.host(id).deliveries.shrink_to_fit();
    }
    mem.heap = per(heap_bytes(), heap0, n);
    if (h1.counter(WorkerCounter::CacheEvictions) != 0 ||
        h1.counter(WorkerCounter::CacheTransfers) != n)
        fail(&res, std::to_string(h1.counter(WorkerCounter::CacheEvictions)) + " evictions, " +
                       std::to_string(h1.counter(WorkerCounter::CacheTransfers)) + " transfers");
    uint32_t cached = 0;
    for (uint32_t i = 0; i < h1.cache.capacity(); i++)
        cached += h1.cache.at(i)->state == kCacheCached &&
                  h1.cache.at(i)->mode == static_cast<uint8_t>(LockMode::EX);
    if (cached != n) fail(&res, std::to_string(cached) + " cached in EX, not " + std::to_string(n));
    if (c.node(1).mirror.size() != n || c.node(1).mirror.overflowed())
        fail(&res, "the registry mirror holds " + std::to_string(c.node(1).mirror.size()) +
                       (c.node(1).mirror.overflowed() ? " (overflowed)" : ""));
    if (!check_after(c, &res, epoch, {1, 2, 3}, "the build") || !res.ok) return res;
    printf("  %s locks: built in %.1f s; %s cached on node 1, %s of them mastered by 2 or 3\n",
           count_text(n).c_str(), res.build_s, count_text(cached).c_str(),
           count_text(res.remote_entries).c_str());
    fflush(stdout);

    // 3. the epoch changes
    const std::vector<uint16_t> all{1, 2, 3}, without3{1, 2};
    for (int round = 0; round < a.rounds; round++) {
        res.same.push_back(epoch_change(c, ++epoch, all));
        if (!check_after(c, &res, epoch, all, "same members")) return res;
        res.leave.push_back(epoch_change(c, ++epoch, without3));
        if (!check_after(c, &res, epoch, without3, "node 3 left")) return res;
        res.rejoin.push_back(epoch_change(c, ++epoch, all));
        if (!check_after(c, &res, epoch, all, "node 3 back")) return res;
        printf(
            "    round %d: same members %.1f ms, node 3 leaves %.1f ms, back %.1f ms "
            "(workers)\n",
            round + 1, res.same.back().workers_ms(), res.leave.back().workers_ms(),
            res.rejoin.back().workers_ms());
        fflush(stdout);
    }

    // 4. steady ticks: 300 ms on (the reaper, every 250 ms, and the wait
    // check, every 50 ms, run), then 10 ms on (only what runs every tick)
    c.advance_ms(300);
    for (uint16_t id = 1; id <= kNodes; id++) {
        const Clock::time_point t = Clock::now();
        c.worker(id).tick(c.now());
        res.steady_ms[id] = ms_since(t);
    }
    c.pump();
    c.advance_ms(10);
    for (uint16_t id = 1; id <= kNodes; id++) {
        const Clock::time_point t = Clock::now();
        c.worker(id).tick(c.now());
        res.every_tick_ms[id] = ms_since(t);
    }
    c.pump();

    // 5. the tables, read back
    size_t rows = 0, right = 0;
    for (uint16_t id = 1; id <= kNodes; id++)
        for (const LockRow& row : c.worker(id).snapshot()) {
            rows++;
            right += row.owner_node == 1 && row.proc == kNodeOwnerProc &&
                     row.mode == LockMode::EX && row.state == LockState::Granted;
        }
    if (rows != n || right != n)
        fail(&res, "the tables hold " + std::to_string(rows) + " rows, " + std::to_string(right) +
                       " of them node 1's cached EX locks");

    // 2. (the split) each structure alone, the cluster gone
    cluster.reset();
    heap_parts(names, &mem);
    return res;
}

void print_change(const char* what, const std::vector<Change>& v) {
    std::vector<double> wall, workers, busiest;
    for (const Change& c : v) {
        wall.push_back(c.wall_ms);
        workers.push_back(c.workers_ms());
        busiest.push_back(c.busiest_ms());
    }
    const Change& m = v[v.size() / 2];
    std::string nodes;
    for (uint16_t n = 1; n <= kNodes; n++)
        nodes += " " + num(m.tick_ms[n], 1) + "+" + num(m.handle_ms[n], 1);
    printf("    %-24s %9.1f %9.1f %9.1f %9.1f %9.1f  %6.2f MB in %llu batches;%s\n", what,
           median(workers), largest(workers), median(busiest), median(wall), largest(wall),
           static_cast<double>(m.replay_bytes) / 1e6,
           static_cast<unsigned long long>(m.replay_msgs), nodes.c_str());
}

// scripts/scoreboard record ARGS...; true if it wrote the record.
bool scoreboard_record(const Args& a, const std::vector<std::string>& args) {
    std::vector<std::string> all{a.scoreboard, "record"};
    all.insert(all.end(), args.begin(), args.end());
    all.insert(all.end(), {"--command", a.command});
    std::vector<char*> argv;
    for (std::string& s : all) argv.push_back(s.data());
    argv.push_back(nullptr);
    fflush(stdout);
    const pid_t pid = fork();
    if (pid < 0) {
        perror("ges_rebuild_scale: fork");
        return false;
    }
    if (pid == 0) {
        execv(argv[0], argv.data());
        fprintf(stderr, "ges_rebuild_scale: %s: %s\n", argv[0], strerror(errno));
        _exit(127);
    }
    int status = 0;
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
    const bool ok = WIFEXITED(status) && WEXITSTATUS(status) == 0;
    if (!ok) fprintf(stderr, "ges_rebuild_scale: no record for %s (above)\n", args[1].c_str());
    return ok;
}

}  // namespace

int main(int argc, char** argv) {
    const Args a = parse(argc, argv);
    printf(
        "ges_rebuild_scale: 3 nodes, one LMS worker each (real ges::Worker, in-process, one "
        "thread), %s names, %u backends on node 1, %d rounds\n",
        a.text ? "text" : "bigint", a.procs, a.rounds);
    fflush(stdout);
    std::vector<Result> results;
    bool ok = true;
    for (uint32_t n : a.locks) {
        results.push_back(measure(a, n));
        ok = ok && results.back().ok;
    }

    printf(
        "\nepoch changes, ms: workers = the three nodes' worker calls one after another "
        "(median, max), busiest = the node with most (median), wall = with the harness's "
        "delivery loop (median, max); replay bytes and batches on the wire; per node "
        "tick+handle ms (median round)\n");
    for (const Result& r : results) {
        if (!r.ok) continue;
        printf("  %s cached locks on node 1 (%s replayed over the wire in {1,2,3}):\n",
               count_text(r.locks).c_str(), count_text(r.remote_entries).c_str());
        printf("    %-24s %9s %9s %9s %9s %9s\n", "", "workers", "max", "busiest", "wall", "max");
        print_change("same members {1,2,3}", r.same);
        print_change("node 3 leaves: {1,2}", r.leave);
        print_change("node 3 back: {1,2,3}", r.rejoin);
        printf(
            "    steady ticks, ms (nodes 1, 2, 3): with the reaper and the wait check %.1f, %.1f, "
            "%.1f; without them (every tick: the deadline scan) %.1f, %.1f, %.1f\n",
            r.steady_ms[1], r.steady_ms[2], r.steady_ms[3], r.every_tick_ms[1], r.every_tick_ms[2],
            r.every_tick_ms[3]);
        const Memory& m = r.mem;
        printf(
            "    memory per cached lock: %.0f B = cache %.1f (sizeof(CacheEntry) %zu + bucket 4) "
            "+ registry mirror %.1f (%zu-B slots, capacity %s for %s locks) + LMS heap %.1f "
            "(mallinfo2, all workers; alone: master table %.1f, registry %.1f, 2 token maps "
            "%.1f, sum %.1f)\n",
            m.total(), m.cache, sizeof(CacheEntry), m.mirror_at_n, sizeof(MirrorSlot),
            count_text(m.mirror_cap).c_str(), count_text(r.locks).c_str(), m.heap, m.table,
            m.registry, 2 * m.token_map, m.table + m.registry + 2 * m.token_map);
    }

    printf("\n%10s %9s %14s %14s %14s %10s %10s %12s\n", "locks", "build s", "same ms", "leave ms",
           "back ms", "replay MB", "B/lock", "tick ms n1");
    for (const Result& r : results) {
        if (!r.ok) continue;
        auto mm = [](const std::vector<Change>& v) {
            std::vector<double> w;
            for (const Change& c : v) w.push_back(c.workers_ms());
            return num(median(w), 1) + "/" + num(largest(w), 1);
        };
        printf("%10s %9.1f %14s %14s %14s %10.2f %10.0f %12.1f\n", count_text(r.locks).c_str(),
               r.build_s, mm(r.same).c_str(), mm(r.leave).c_str(), mm(r.rejoin).c_str(),
               static_cast<double>(r.same[r.same.size() / 2].replay_bytes) / 1e6, r.mem.total(),
               r.steady_ms[1]);
    }
    printf(
        "(epoch changes: the workers' time, median/max of %d rounds; B/lock: cache + mirror + "
        "LMS heap)\n",
        a.rounds);
    if (!ok) printf("\nges_rebuild_scale: FAILED (above)\n");

    if (a.record) {
        if (!ok) {
            printf("ges_rebuild_scale: no records from a failed run\n");
            return 1;
        }
        for (const Result& r : results) {
            const char* id = r.locks == 10000     ? "ges.epoch-change.10k"
                             : r.locks == 100000  ? "ges.epoch-change.100k"
                             : r.locks == 1000000 ? "ges.epoch-change.1m"
                                                  : nullptr;
            if (id == nullptr) continue;
            std::vector<double> w, wall, busiest, leave, back;
            std::string each;
            for (const Change& c : r.same) {
                w.push_back(c.workers_ms());
                wall.push_back(c.wall_ms);
                busiest.push_back(c.busiest_ms());
                each += (each.empty() ? "" : ", ") + num(c.workers_ms(), 1);
            }
            for (const Change& c : r.leave) leave.push_back(c.workers_ms());
            for (const Change& c : r.rejoin) back.push_back(c.workers_ms());
            const Change& m = r.same[r.same.size() / 2];
            const std::string note =
                "in-process (tests/unit/ges/worker_support.hpp): 3 real GES workers, " +
                count_text(r.locks) + " cached EX locks of node 1 (" +
                count_text(r.remote_entries) +
                " mastered by nodes 2 and 3); a new epoch with the same members, the workers' "
                "calls (each adopting tick, every delivered message) summed over the 3 nodes on "
                "one thread: " +
                each + " ms in " + std::to_string(r.same.size()) + " rounds; the busiest node " +
                num(median(busiest), 1) +
                " ms; with the "
                "harness's delivery loop " +
                num(median(wall), 1) + " ms; " + num(static_cast<double>(m.replay_bytes) / 1e6, 2) +
                " MB of replay in " + std::to_string(m.replay_msgs) +
                " batches (no wire time counted). Node 3 leaving (its resources remastered): " +
                num(median(leave), 1) + " ms, coming back " + num(median(back), 1) +
                " ms. A steady tick of node 1 then: " + num(r.steady_ms[1], 1) +
                " ms with the reaper (every 250 ms), " + num(r.every_tick_ms[1], 1) +
                " ms without (the deadline scan, every tick).";
            ok = scoreboard_record(
                     a, {"--target", id, "--figure", num(median(w), 1), "--note", note}) &&
                 ok;
            if (r.locks != 1000000) continue;
            const Memory& mm = r.mem;
            const std::string mnote =
                "ges_rebuild_scale, 1,000,000 cached locks on node 1: node cache " +
                num(mm.cache, 1) + " B (shared memory: sizeof(CacheEntry) " +
                std::to_string(sizeof(CacheEntry)) + " + its bucket) + registry mirror " +
                num(mm.mirror_at_n, 1) +
                " B (shared memory: " + std::to_string(sizeof(MirrorSlot)) + "-B slots, capacity " +
                count_text(mm.mirror_cap) + ", the power of two that keeps a quarter free; " +
                num(mm.mirror_slot / 0.75, 1) + " B at its fullest) + LMS heap " + num(mm.heap, 1) +
                " B (mallinfo2 before and after the build, every worker of the cluster: node 1's "
                "registry and held tokens, the masters' tables and tokens; alone: table " +
                num(mm.table, 1) + ", registry " + num(mm.registry, 1) + ", token maps 2 x " +
                num(mm.token_map, 1) + ").";
            ok = scoreboard_record(a, {"--target", "ges.memory-per-lock", "--figure",
                                       num(mm.total(), 0), "--note", mnote}) &&
                 ok;
        }
    }
    return ok ? 0 : 1;
}
