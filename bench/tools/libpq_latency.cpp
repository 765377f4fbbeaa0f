// libpq_latency: client-side round-trip latency of one statement over one
// libpq connection, the way an application without an interconnect pays it.
// Each iteration is one complete round trip (request out, whole result in),
// timed in the client with CLOCK_MONOTONIC around the libpq call.
//
//   libpq_latency --conninfo "host=/tmp/x port=5432 dbname=postgres"
//                 --query "SELECT 1" [--mode simple|prepared] [--binary]
//                 [--iterations 20000] [--warmup 2000] [--label NAME]
//
// simple:   PQexec (simple query protocol: parse + plan every time).
// prepared: PQprepare once, then PQexecPrepared (Bind/Execute/Sync: one round
//           trip, no parse); --binary asks for binary results, so that a bytea
//           such as get_raw_page() travels as its 8192 bytes instead of 16 KiB
//           of hex. Prints one line:
//   libpq_latency label=.. iterations=.. p50_us=.. p99_us=.. p999_us=.. mean_us=..
//                 ops_per_sec=.. result_bytes=..
//
// --result-us: a sample is the number the statement returns (first column of
// its one row, in µs: e.g. SELECT p50_us FROM pgrac_ic_bench(2, 64, 1), one RPC
// timed inside the backend) instead of the client's timing.
//
// --connections C --seconds S: C concurrent requesters (threads, one
// connection each, --mode prepared) run the statement back to back for S
// seconds, after --warmup executions each; all start together once every
// connection is up. Prints the percentiles over all requesters' samples, the
// aggregate rate (statements of all requesters over the time from the start
// to the last requester's end) and busy_fraction: the share of the
// requesters' time inside what a sample times (with --result-us, what the
// statement timed; without, ~1).
//   --pipeline D (needs --result-us): each requester sends its statements in
//   batches of D (libpq pipeline mode, one Sync per batch) and keeps two
//   batches in flight, so its backend runs them back to back without waiting
//   for the client; the client's timing then means nothing, the result's does.
//   libpq_latency label=.. connections=C pipeline=D seconds=.. samples=..
//                 p50_us=.. p99_us=.. p999_us=.. mean_us=.. ops_per_sec=.. busy_fraction=..
#include <libpq-fe.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <string>
#include <thread>
#include <vector>

#include "latency_stats.hpp"
#include "start_line.hpp"

using pgrac::bench::now_ns;

namespace {

struct Options {
    std::string conninfo;
    std::string query = "SELECT 1";
    std::string mode = "simple";
    std::string label;
    bool binary = false;
    int iterations = 20000;
    int warmup = 2000;
    bool result_us = false;  // --result-us: the sample is the statement's result
    int connections = 0;     // --connections C: concurrent requesters for --seconds
    double seconds = 5;
    int pipeline = 1;  // --pipeline D: statements per batch in pipeline mode
};

[[noreturn]] void usage() {
    std::fprintf(
        stderr,
        "usage: libpq_latency --conninfo STR [--query SQL] [--mode simple|prepared]\n"
        "                     [--binary] [--iterations N] [--warmup N] [--label NAME]\n"
        "                     [--result-us] [--connections C --seconds S [--pipeline D]]\n");
    std::exit(2);
}

Options parse(int argc, char** argv) {
    Options o;
    for (int i = 1; i < argc; i++) {
        const std::string a = argv[i];
        auto value = [&]() -> std::string {
            if (i + 1 >= argc) usage();
            return argv[++i];
        };
        if (a == "--conninfo") {
            o.conninfo = value();
        } else if (a == "--query") {
            o.query = value();
        } else if (a == "--mode") {
            o.mode = value();
        } else if (a == "--binary") {
            o.binary = true;
        } else if (a == "--iterations") {
            o.iterations = std::atoi(value().c_str());
        } else if (a == "--warmup") {
            o.warmup = std::atoi(value().c_str());
        } else if (a == "--label") {
            o.label = value();
        } else if (a == "--result-us") {
            o.result_us = true;
        } else if (a == "--connections") {
            o.connections = std::atoi(value().c_str());
            if (o.connections < 1 || o.connections > 1024) usage();
        } else if (a == "--seconds") {
            o.seconds = std::strtod(value().c_str(), nullptr);
            if (!(o.seconds > 0 && o.seconds <= 3600)) usage();
        } else if (a == "--pipeline") {
            o.pipeline = std::atoi(value().c_str());
            if (o.pipeline < 1 || o.pipeline > 10000) usage();
        } else {
            usage();
        }
    }
    if (o.conninfo.empty() || o.iterations < 1 || o.warmup < 0 ||
        (o.mode != "simple" && o.mode != "prepared") || (o.binary && o.mode != "prepared"))
        usage();
    if (o.connections > 0 && o.mode != "prepared") usage();
    if (o.pipeline > 1 && (o.connections == 0 || !o.result_us)) usage();
    if (o.label.empty()) o.label = o.mode;
    return o;
}

// The sample of one execution in ns: the client's timing, or (--result-us)
// the µs the statement returned. Exits on a failed or malformed result.
uint64_t take_sample(const Options& o, PGresult* r, uint64_t client_ns) {
    if (PQresultStatus(r) != PGRES_TUPLES_OK || PQntuples(r) != 1) {
        std::fprintf(stderr, "libpq_latency: query failed: %s", PQresultErrorMessage(r));
        std::exit(2);
    }
    if (!o.result_us) return client_ns;
    char* end = nullptr;
    const double us = std::strtod(PQgetvalue(r, 0, 0), &end);
    if (end == PQgetvalue(r, 0, 0) || !(us >= 0)) {
        std::fprintf(stderr, "libpq_latency: --result-us: result is not a number of µs: %s\n",
                     PQgetvalue(r, 0, 0));
        std::exit(2);
    }
    return static_cast<uint64_t>(us * 1000.0 + 0.5);
}

PGconn* connect_prepared(const Options& o) {
    PGconn* conn = PQconnectdb(o.conninfo.c_str());
    if (PQstatus(conn) != CONNECTION_OK) {
        std::fprintf(stderr, "libpq_latency: cannot connect: %s", PQerrorMessage(conn));
        std::exit(2);
    }
    PGresult* r = PQprepare(conn, "q", o.query.c_str(), 0, nullptr);
    if (PQresultStatus(r) != PGRES_COMMAND_OK) {
        std::fprintf(stderr, "libpq_latency: prepare failed: %s", PQerrorMessage(conn));
        std::exit(2);
    }
    PQclear(r);
    return conn;
}

uint64_t exec_once(const Options& o, PGconn* conn) {
    const uint64_t t0 = now_ns();
    PGresult* r = PQexecPrepared(conn, "q", 0, nullptr, nullptr, nullptr, o.binary ? 1 : 0);
    const uint64_t sample = take_sample(o, r, now_ns() - t0);
    PQclear(r);
    return sample;
}

// Pipeline mode: queues a batch of D executions and its Sync.
void send_batch(const Options& o, PGconn* conn) {
    for (int i = 0; i < o.pipeline; i++) {
        if (!PQsendQueryPrepared(conn, "q", 0, nullptr, nullptr, nullptr, o.binary ? 1 : 0)) {
            std::fprintf(stderr, "libpq_latency: send failed: %s", PQerrorMessage(conn));
            std::exit(2);
        }
    }
    if (!PQpipelineSync(conn)) {
        std::fprintf(stderr, "libpq_latency: sync failed: %s", PQerrorMessage(conn));
        std::exit(2);
    }
}

// Pipeline mode: reads the results of one batch (each followed by a null
// result) and its Sync.
void read_batch(const Options& o, PGconn* conn, std::vector<uint64_t>& samples) {
    for (int i = 0; i < o.pipeline; i++) {
        PGresult* r = PQgetResult(conn);
        if (r == nullptr) {
            std::fprintf(stderr, "libpq_latency: missing result: %s", PQerrorMessage(conn));
            std::exit(2);
        }
        samples.push_back(take_sample(o, r, 0));
        PQclear(r);
        r = PQgetResult(conn);
        if (r != nullptr) {
            std::fprintf(stderr, "libpq_latency: more than one result per statement\n");
            std::exit(2);
        }
    }
    PGresult* sync = PQgetResult(conn);
    if (PQresultStatus(sync) != PGRES_PIPELINE_SYNC) {
        std::fprintf(stderr, "libpq_latency: expected the batch's sync, got %s\n",
                     PQresStatus(PQresultStatus(sync)));
        std::exit(2);
    }
    PQclear(sync);
}

// --connections C --seconds S.
int run_requesters(const Options& o) {
    const int n = o.connections;
    pgrac::bench::StartLine start_line(n);
    std::vector<std::vector<uint64_t>> samples(static_cast<size_t>(n));
    std::vector<uint64_t> ends(static_cast<size_t>(n));
    std::vector<std::thread> threads;
    for (int t = 0; t < n; t++) {
        threads.emplace_back([&, t] {
            PGconn* conn = connect_prepared(o);
            for (int i = 0; i < o.warmup; i++) exec_once(o, conn);
            const uint64_t stop = start_line.arrive();
            std::vector<uint64_t>& mine = samples[static_cast<size_t>(t)];
            mine.reserve(1 << 16);
            if (o.pipeline == 1) {
                for (;;) {
                    mine.push_back(exec_once(o, conn));
                    if (now_ns() >= stop) break;
                }
            } else {
                if (!PQenterPipelineMode(conn)) {
                    std::fprintf(stderr, "libpq_latency: pipeline mode: %s", PQerrorMessage(conn));
                    std::exit(2);
                }
                send_batch(o, conn);
                int in_flight = 1;
                while (in_flight > 0) {
                    if (in_flight < 2 && now_ns() < stop) {
                        send_batch(o, conn);
                        in_flight++;
                    }
                    read_batch(o, conn, mine);
                    in_flight--;
                }
                PQexitPipelineMode(conn);
            }
            ends[static_cast<size_t>(t)] = now_ns();
            PQfinish(conn);
        });
    }
    const uint64_t start = start_line.release(o.seconds);
    for (std::thread& th : threads) th.join();
    std::vector<uint64_t> all;
    for (const std::vector<uint64_t>& v : samples) all.insert(all.end(), v.begin(), v.end());
    const uint64_t elapsed = *std::max_element(ends.begin(), ends.end()) - start;
    double busy = 0;
    for (uint64_t v : all) busy += static_cast<double>(v);
    busy /= static_cast<double>(elapsed) * n;
    const int count = static_cast<int>(all.size());
    const pgrac::bench::LatencySummary s = pgrac::bench::summarize_latency(all);
    std::printf(
        "libpq_latency label=%s connections=%d pipeline=%d seconds=%.2f samples=%d p50_us=%.2f "
        "p99_us=%.2f p999_us=%.2f mean_us=%.2f ops_per_sec=%.0f busy_fraction=%.3f\n",
        o.label.c_str(), n, o.pipeline, static_cast<double>(elapsed) / 1e9, count, s.p50_us,
        s.p99_us, s.p999_us, s.mean_us, pgrac::bench::ops_per_sec(count, elapsed), busy);
    return 0;
}

}  // namespace

int main(int argc, char** argv) {
    const Options o = parse(argc, argv);
    if (o.connections > 0) return run_requesters(o);
    PGconn* conn = PQconnectdb(o.conninfo.c_str());
    if (PQstatus(conn) != CONNECTION_OK) {
        std::fprintf(stderr, "libpq_latency: cannot connect: %s", PQerrorMessage(conn));
        PQfinish(conn);
        return 2;
    }
    const bool prepared = o.mode == "prepared";
    if (prepared) {
        PGresult* r = PQprepare(conn, "q", o.query.c_str(), 0, nullptr);
        if (PQresultStatus(r) != PGRES_COMMAND_OK) {
            std::fprintf(stderr, "libpq_latency: prepare failed: %s", PQerrorMessage(conn));
            PQclear(r);
            PQfinish(conn);
            return 2;
        }
        PQclear(r);
    }

    std::vector<uint64_t> samples(static_cast<size_t>(o.iterations));
    const int total = o.warmup + o.iterations;
    int result_bytes = -1;
    uint64_t begin = 0;
    for (int i = 0; i < total; i++) {
        if (i == o.warmup) begin = now_ns();
        const uint64_t t0 = now_ns();
        PGresult* r =
            prepared ? PQexecPrepared(conn, "q", 0, nullptr, nullptr, nullptr, o.binary ? 1 : 0)
                     : PQexec(conn, o.query.c_str());
        const uint64_t t1 = now_ns();
        if (PQresultStatus(r) != PGRES_TUPLES_OK || PQntuples(r) != 1) {
            std::fprintf(stderr, "libpq_latency: query failed: %s", PQerrorMessage(conn));
            PQclear(r);
            PQfinish(conn);
            return 2;
        }
        if (result_bytes < 0) result_bytes = PQgetlength(r, 0, 0);
        const uint64_t sample = take_sample(o, r, t1 - t0);
        PQclear(r);
        if (i >= o.warmup) samples[static_cast<size_t>(i - o.warmup)] = sample;
    }
    const uint64_t elapsed = now_ns() - begin;
    PQfinish(conn);

    const pgrac::bench::LatencySummary s = pgrac::bench::summarize_latency(samples);
    std::printf(
        "libpq_latency label=%s iterations=%d p50_us=%.2f p99_us=%.2f p999_us=%.2f mean_us=%.2f "
        "ops_per_sec=%.0f result_bytes=%d\n",
        o.label.c_str(), o.iterations, s.p50_us, s.p99_us, s.p999_us, s.mean_us,
        pgrac::bench::ops_per_sec(o.iterations, elapsed), result_bytes);
    return 0;
}
