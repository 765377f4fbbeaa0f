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
#include <libpq-fe.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <string>
#include <vector>

#include "latency_stats.hpp"

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
};

[[noreturn]] void usage() {
    std::fprintf(stderr,
                 "usage: libpq_latency --conninfo STR [--query SQL] [--mode simple|prepared]\n"
                 "                     [--binary] [--iterations N] [--warmup N] [--label NAME]\n");
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
        } else {
            usage();
        }
    }
    if (o.conninfo.empty() || o.iterations < 1 || o.warmup < 0 ||
        (o.mode != "simple" && o.mode != "prepared") || (o.binary && o.mode != "prepared"))
        usage();
    if (o.label.empty()) o.label = o.mode;
    return o;
}

}  // namespace

int main(int argc, char** argv) {
    const Options o = parse(argc, argv);
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
        PQclear(r);
        if (i >= o.warmup) samples[static_cast<size_t>(i - o.warmup)] = t1 - t0;
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
