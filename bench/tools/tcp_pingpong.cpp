// tcp_pingpong: the latency limit for tier 3. Two processes ping-pong a
// message of a fixed size over a TCP connection on 127.0.0.1 with
// TCP_NODELAY and blocking sockets: the client writes N bytes, the server
// reads N bytes and writes them back, the client reads N bytes. One round
// trip per iteration, timed in the client with CLOCK_MONOTONIC.
//
//   tcp_pingpong [--sizes 64,8192] [--iterations 20000] [--warmup 2000]
//                [--host 127.0.0.1] [--port 0] [--busy-poll] [--stream N]
//
// By default one binary does both sides: it binds a listening socket (port 0:
// the kernel picks a free one, so parallel runs never collide), forks an echo
// server child, and runs the client in the parent. --server / --client run one
// side only (then --port is required). --busy-poll spins on nonblocking recv()
// on both sides instead of sleeping (the socket stays blocking for send()'s
// sake, each recv() passes MSG_DONTWAIT). Prints one line per size:
//   tcp_pingpong size=64 iterations=20000 p50_us=.. p99_us=.. p999_us=.. mean_us=..
//                ops_per_sec=..
//
// --stream N: streaming throughput instead of round trips. Per size the
// client writes N messages back to back (one send() each, TCP_NODELAY on),
// the server reads them all (in large reads) and then replies once; timed
// from the first write to that reply, after a warmup stream of --warmup
// messages. Prints one line per size (MB = 10^6 payload bytes):
//   tcp_pingpong mode=stream size=64 messages=N seconds=.. msgs_per_sec=..
//                mbytes_per_sec=..
//
// --connections C --seconds S: C concurrent requesters (threads of the client
// process, each with its own connection and its own forked echo server
// process) ping-pong one size back to back for S seconds, after --warmup round
// trips each; all start together once every connection is up. Prints one line
// with the percentiles over all requesters' samples and the aggregate rate
// (round trips of all requesters over the time from the start to the last
// requester's end):
//   tcp_pingpong mode=blocking connections=C size=64 seconds=.. samples=..
//                p50_us=.. p99_us=.. p999_us=.. mean_us=.. ops_per_sec=..
//
// --reply-size R: the server answers each request of a round trip with R
// bytes instead of an echo (a 64 B request for an 8 KiB page, as a block
// fetch is); the line then also says reply=R. Round trips of one client only.
//
// --idle K: the client also holds K connections open that carry nothing (an
// echo server process each), so that it holds as many connections as an
// interconnect process it is compared with; with or without --connections.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
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
    std::vector<size_t> sizes{64, 8192};
    int iterations = 20000;
    int warmup = 2000;
    std::string host = "127.0.0.1";
    int port = 0;
    bool server_only = false;
    bool client_only = false;
    bool busy_poll = false;
    size_t reply_size = 0;  // 0: an echo
    long stream = 0;        // --stream N: messages per stream; 0 = ping-pong
    int connections = 0;    // --connections C: concurrent requesters; 0 = one, --iterations
    double seconds = 5;     // --seconds S: how long the requesters run
    int idle = 0;           // --idle K: connections held open that carry nothing
};

// --busy-poll: both sides spin on nonblocking recv() instead of sleeping in
// it, so no side ever waits for a wakeup (the limit for a design that spins).
bool g_busy_poll = false;

constexpr size_t kMaxSize = 1 << 20;
// A size header with this bit set starts a stream: a u32 message count
// follows, then count messages of that size; the server replies with the
// count as 4 bytes once it has read them all.
constexpr uint32_t kStreamBit = 0x80000000u;
constexpr uint32_t kReplyBit = 0x40000000u;  // then a u32: the size of each reply

[[noreturn]] void die(const char* what) {
    std::fprintf(stderr, "tcp_pingpong: %s: %s\n", what, std::strerror(errno));
    std::exit(2);
}

[[noreturn]] void usage() {
    std::fprintf(stderr,
                 "usage: tcp_pingpong [--sizes 64,8192] [--iterations N] [--warmup N]\n"
                 "                    [--host 127.0.0.1] [--port P] [--busy-poll]\n"
                 "                    [--stream N] [--server | --client]\n"
                 "                    [--connections C --seconds S] [--idle K] [--reply-size R]\n");
    std::exit(2);
}

// Reads exactly n bytes; false on EOF.
bool read_full(int fd, uint8_t* buf, size_t n) {
    size_t got = 0;
    while (got < n) {
        const ssize_t r = recv(fd, buf + got, n - got, g_busy_poll ? MSG_DONTWAIT : 0);
        if (r > 0) {
            got += static_cast<size_t>(r);
        } else if (r == 0) {
            return false;
        } else if (errno == EAGAIN || errno == EWOULDBLOCK) {
            __builtin_ia32_pause();
        } else if (errno != EINTR) {
            die("recv");
        }
    }
    return true;
}

void write_full(int fd, const uint8_t* buf, size_t n) {
    size_t put = 0;
    while (put < n) {
        const ssize_t w = send(fd, buf + put, n - put, MSG_NOSIGNAL);
        if (w > 0) {
            put += static_cast<size_t>(w);
        } else if (w < 0 && errno != EINTR) {
            die("send");
        }
    }
}

void set_nodelay(int fd) {
    int one = 1;
    if (setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one) != 0) die("TCP_NODELAY");
}

sockaddr_in make_addr(const std::string& host, int port) {
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(static_cast<uint16_t>(port));
    if (inet_pton(AF_INET, host.c_str(), &a.sin_addr) != 1) {
        std::fprintf(stderr, "tcp_pingpong: bad IPv4 address %s\n", host.c_str());
        std::exit(2);
    }
    return a;
}

int listen_on(const std::string& host, int port, int* bound_port) {
    const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) die("socket");
    int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    sockaddr_in a = make_addr(host, port);
    if (bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) die("bind");
    if (listen(fd, 128) != 0) die("listen");
    socklen_t len = sizeof a;
    if (getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) != 0) die("getsockname");
    *bound_port = ntohs(a.sin_port);
    return fd;
}

// Stream sink: reads count messages of size bytes (as they come, in reads of
// up to the buffer's size), then replies with the count.
bool sink_stream(int fd, uint32_t size, std::vector<uint8_t>& buf) {
    uint32_t count = 0;
    if (!read_full(fd, reinterpret_cast<uint8_t*>(&count), sizeof count)) return false;
    uint64_t left = static_cast<uint64_t>(count) * size;
    while (left > 0) {
        const size_t n = static_cast<size_t>(std::min<uint64_t>(left, buf.size()));
        const ssize_t r = recv(fd, buf.data(), n, g_busy_poll ? MSG_DONTWAIT : 0);
        if (r > 0) {
            left -= static_cast<uint64_t>(r);
        } else if (r == 0) {
            return false;
        } else if (errno == EAGAIN || errno == EWOULDBLOCK) {
            __builtin_ia32_pause();
        } else if (errno != EINTR) {
            die("recv");
        }
    }
    write_full(fd, reinterpret_cast<const uint8_t*>(&count), sizeof count);
    return true;
}

// Echo server of one connection: the client first sends the message size as 4
// bytes, then ping-pongs (or streams, kStreamBit); a size of 0 ends the
// connection.
void serve_conn(int fd) {
    set_nodelay(fd);
    std::vector<uint8_t> buf(kMaxSize);
    for (;;) {
        uint32_t size = 0;
        if (!read_full(fd, reinterpret_cast<uint8_t*>(&size), sizeof size) || size == 0) break;
        if (size & kStreamBit) {
            if ((size & ~kStreamBit) > kMaxSize || !sink_stream(fd, size & ~kStreamBit, buf)) break;
            continue;
        }
        uint32_t reply = size;
        if (size & kReplyBit) {
            size &= ~kReplyBit;
            if (!read_full(fd, reinterpret_cast<uint8_t*>(&reply), sizeof reply)) break;
        }
        if (size > kMaxSize || reply > kMaxSize || reply < 2) {
            std::fprintf(stderr, "tcp_pingpong server: size %u or reply %u out of range\n", size,
                         reply);
            std::exit(2);
        }
        for (;;) {
            if (!read_full(fd, buf.data(), size)) {
                close(fd);
                return;
            }
            // A message starting with 0xff 0xfe.. ends this size's round.
            const bool last = size >= 2 && buf[0] == 0xff && buf[1] == 0xfe;
            write_full(fd, buf.data(), reply);
            if (last) break;
        }
    }
    close(fd);
}

void serve(int lfd) {
    const int fd = accept4(lfd, nullptr, nullptr, SOCK_CLOEXEC);
    if (fd < 0) die("accept");
    serve_conn(fd);
}

// --connections, --idle: a process that accepts count connections and forks
// an echo server process for each, then waits for them all.
pid_t fork_echo_servers(int lfd, int count) {
    const pid_t acceptor = fork();
    if (acceptor < 0) die("fork");
    if (acceptor > 0) return acceptor;
    for (int i = 0; i < count; i++) {
        const int fd = accept4(lfd, nullptr, nullptr, SOCK_CLOEXEC);
        if (fd < 0) die("accept");
        const pid_t child = fork();
        if (child < 0) die("fork");
        if (child == 0) {
            close(lfd);
            serve_conn(fd);
            _exit(0);
        }
        close(fd);
    }
    close(lfd);
    int status = 0;
    bool ok = true;
    while (wait(&status) > 0) ok = ok && WIFEXITED(status) && WEXITSTATUS(status) == 0;
    _exit(ok ? 0 : 1);
}

int connect_to(const std::string& host, int port) {
    const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) die("socket");
    sockaddr_in a = make_addr(host, port);
    int tries = 0;
    while (connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
        if (++tries > 100) die("connect");
        usleep(20000);
    }
    set_nodelay(fd);
    return fd;
}

// One ping-pong round trip of size bytes; exits if the echo differs.
void round_trip(int fd, const std::vector<uint8_t>& out, std::vector<uint8_t>& in, size_t size) {
    write_full(fd, out.data(), size);
    if (!read_full(fd, in.data(), size)) {
        std::fprintf(stderr, "tcp_pingpong: server closed the connection\n");
        std::exit(2);
    }
}

// Ends a ping-pong round on fd (the 0xff 0xfe message) and the connection.
void end_connection(int fd, const std::vector<uint8_t>& out, std::vector<uint8_t>& in,
                    size_t size) {
    std::vector<uint8_t> last(out.begin(), out.begin() + static_cast<long>(size));
    last[0] = 0xff;
    last[1] = 0xfe;
    write_full(fd, last.data(), size);
    read_full(fd, in.data(), size);
    const uint32_t zero = 0;
    write_full(fd, reinterpret_cast<const uint8_t*>(&zero), sizeof zero);
    close(fd);
}

// --connections C --seconds S: C requester threads ping-pong back to back.
void run_requesters(const Options& o, int port) {
    const size_t size = o.sizes.front();
    const int n = o.connections;
    pgrac::bench::StartLine start_line(n);
    std::vector<std::vector<uint64_t>> samples(static_cast<size_t>(n));
    std::vector<uint64_t> ends(static_cast<size_t>(n));
    std::vector<std::thread> threads;
    for (int t = 0; t < n; t++) {
        threads.emplace_back([&, t] {
            const int fd = connect_to(o.host, port);
            std::vector<uint8_t> out(size), in(size);
            for (size_t i = 0; i < size; i++) out[i] = static_cast<uint8_t>(i * 131 + 7 + t);
            out[0] = 0x01;
            const uint32_t s32 = static_cast<uint32_t>(size);
            write_full(fd, reinterpret_cast<const uint8_t*>(&s32), sizeof s32);
            for (int i = 0; i < o.warmup; i++) round_trip(fd, out, in, size);
            const uint64_t stop = start_line.arrive();
            std::vector<uint64_t>& mine = samples[static_cast<size_t>(t)];
            mine.reserve(1 << 16);
            for (;;) {
                const uint64_t t0 = now_ns();
                round_trip(fd, out, in, size);
                const uint64_t t1 = now_ns();
                mine.push_back(t1 - t0);
                if (t1 >= stop) break;
            }
            ends[static_cast<size_t>(t)] = now_ns();
            if (std::memcmp(in.data(), out.data(), size) != 0) {
                std::fprintf(stderr, "tcp_pingpong: echo differs from what was sent\n");
                std::exit(2);
            }
            end_connection(fd, out, in, size);
        });
    }
    const uint64_t start = start_line.release(o.seconds);
    for (std::thread& th : threads) th.join();
    std::vector<uint64_t> all;
    for (const std::vector<uint64_t>& v : samples) all.insert(all.end(), v.begin(), v.end());
    const uint64_t end = *std::max_element(ends.begin(), ends.end());
    const int count = static_cast<int>(all.size());
    const pgrac::bench::LatencySummary s = pgrac::bench::summarize_latency(all);
    std::printf(
        "tcp_pingpong mode=%s connections=%d size=%zu seconds=%.2f samples=%d p50_us=%.2f "
        "p99_us=%.2f p999_us=%.2f mean_us=%.2f ops_per_sec=%.0f\n",
        o.busy_poll ? "busy-poll" : "blocking", n, size, static_cast<double>(end - start) / 1e9,
        count, s.p50_us, s.p99_us, s.p999_us, s.mean_us,
        pgrac::bench::ops_per_sec(count, end - start));
    std::fflush(stdout);
}

// One stream of count messages of size bytes; returns the ns from the first
// write to the server's reply.
uint64_t stream_once(int fd, size_t size, uint32_t count, const std::vector<uint8_t>& out) {
    const uint32_t header[2] = {static_cast<uint32_t>(size) | kStreamBit, count};
    write_full(fd, reinterpret_cast<const uint8_t*>(header), sizeof header);
    const uint64_t t0 = now_ns();
    for (uint32_t i = 0; i < count; i++) write_full(fd, out.data(), size);
    uint32_t got = 0;
    if (!read_full(fd, reinterpret_cast<uint8_t*>(&got), sizeof got) || got != count) {
        std::fprintf(stderr, "tcp_pingpong: stream of %u messages not confirmed\n", count);
        std::exit(2);
    }
    return now_ns() - t0;
}

void run_stream_client(const Options& o, int fd, const std::vector<uint8_t>& out) {
    for (size_t size : o.sizes) {
        if (o.warmup > 0) stream_once(fd, size, static_cast<uint32_t>(o.warmup), out);
        const uint32_t n = static_cast<uint32_t>(o.stream);
        const double seconds = static_cast<double>(stream_once(fd, size, n, out)) / 1e9;
        std::printf(
            "tcp_pingpong mode=stream size=%zu messages=%u seconds=%.4f msgs_per_sec=%.0f "
            "mbytes_per_sec=%.1f\n",
            size, n, seconds, n / seconds, static_cast<double>(n) * size / seconds / 1e6);
        std::fflush(stdout);
    }
}

void run_client(const Options& o, int port) {
    const int fd = connect_to(o.host, port);
    std::vector<uint8_t> out(kMaxSize), in(kMaxSize);
    for (size_t i = 0; i < kMaxSize; i++) out[i] = static_cast<uint8_t>(i * 131 + 7);
    out[0] = 0x01;
    if (o.stream > 0) run_stream_client(o, fd, out);
    const std::vector<size_t> none;
    for (size_t size : o.stream > 0 ? none : o.sizes) {
        // The reply's size, and what of it must equal the request.
        const size_t reply = o.reply_size > 0 ? o.reply_size : size;
        const size_t check = std::min(size, reply);
        const uint32_t s32 = static_cast<uint32_t>(size) | (o.reply_size > 0 ? kReplyBit : 0);
        write_full(fd, reinterpret_cast<const uint8_t*>(&s32), sizeof s32);
        if (o.reply_size > 0) {
            const uint32_t r32 = static_cast<uint32_t>(reply);
            write_full(fd, reinterpret_cast<const uint8_t*>(&r32), sizeof r32);
        }
        std::vector<uint64_t> samples(static_cast<size_t>(o.iterations));
        const int total = o.warmup + o.iterations;
        uint64_t begin = 0;
        for (int i = 0; i < total; i++) {
            if (i == o.warmup) begin = now_ns();
            const uint64_t t0 = now_ns();
            write_full(fd, out.data(), size);
            if (!read_full(fd, in.data(), reply)) {
                std::fprintf(stderr, "tcp_pingpong: server closed the connection\n");
                std::exit(2);
            }
            const uint64_t t1 = now_ns();
            if (i >= o.warmup) samples[static_cast<size_t>(i - o.warmup)] = t1 - t0;
        }
        const uint64_t elapsed = now_ns() - begin;
        if (std::memcmp(in.data(), out.data(), check) != 0) {
            std::fprintf(stderr, "tcp_pingpong: echo differs from what was sent\n");
            std::exit(2);
        }
        // End this size's round.
        std::vector<uint8_t> last(out.begin(), out.begin() + static_cast<long>(size));
        if (size >= 2) {
            last[0] = 0xff;
            last[1] = 0xfe;
        }
        write_full(fd, last.data(), size);
        read_full(fd, in.data(), reply);
        const pgrac::bench::LatencySummary s = pgrac::bench::summarize_latency(samples);
        std::printf(
            "tcp_pingpong mode=%s size=%zu reply=%zu iterations=%d p50_us=%.2f p99_us=%.2f "
            "p999_us=%.2f mean_us=%.2f ops_per_sec=%.0f\n",
            o.busy_poll ? "busy-poll" : "blocking", size, reply, o.iterations, s.p50_us, s.p99_us,
            s.p999_us, s.mean_us, pgrac::bench::ops_per_sec(o.iterations, elapsed));
        std::fflush(stdout);
    }
    const uint32_t zero = 0;
    write_full(fd, reinterpret_cast<const uint8_t*>(&zero), sizeof zero);
    close(fd);
}

Options parse(int argc, char** argv) {
    Options o;
    for (int i = 1; i < argc; i++) {
        const std::string a = argv[i];
        auto value = [&]() -> std::string {
            if (i + 1 >= argc) usage();
            return argv[++i];
        };
        if (a == "--sizes") {
            o.sizes.clear();
            std::string v = value();
            size_t pos = 0;
            while (pos <= v.size()) {
                const size_t comma = v.find(',', pos);
                const std::string item =
                    v.substr(pos, comma == std::string::npos ? v.npos : comma - pos);
                const long s = std::strtol(item.c_str(), nullptr, 10);
                if (s < 2 || static_cast<size_t>(s) > kMaxSize) usage();
                o.sizes.push_back(static_cast<size_t>(s));
                if (comma == std::string::npos) break;
                pos = comma + 1;
            }
        } else if (a == "--iterations") {
            o.iterations = std::atoi(value().c_str());
        } else if (a == "--warmup") {
            o.warmup = std::atoi(value().c_str());
        } else if (a == "--host") {
            o.host = value();
        } else if (a == "--port") {
            o.port = std::atoi(value().c_str());
        } else if (a == "--reply-size") {
            const long r = std::strtol(value().c_str(), nullptr, 10);
            if (r < 2 || static_cast<size_t>(r) > kMaxSize) usage();
            o.reply_size = static_cast<size_t>(r);
        } else if (a == "--busy-poll") {
            o.busy_poll = true;
        } else if (a == "--stream") {
            o.stream = std::strtol(value().c_str(), nullptr, 10);
            if (o.stream < 1 || o.stream > 1000000000L) usage();
        } else if (a == "--connections") {
            o.connections = std::atoi(value().c_str());
            if (o.connections < 1 || o.connections > 1024) usage();
        } else if (a == "--seconds") {
            o.seconds = std::strtod(value().c_str(), nullptr);
            if (!(o.seconds > 0 && o.seconds <= 3600)) usage();
        } else if (a == "--idle") {
            o.idle = std::atoi(value().c_str());
            if (o.idle < 0 || o.idle > 1024) usage();
        } else if (a == "--server") {
            o.server_only = true;
        } else if (a == "--client") {
            o.client_only = true;
        } else {
            usage();
        }
    }
    if (o.iterations < 1 || o.warmup < 0 || o.sizes.empty() || (o.server_only && o.client_only))
        usage();
    if (o.client_only && o.port == 0) usage();
    // --connections and --idle: one binary does both sides, one size, round trips.
    if ((o.connections > 0 || o.idle > 0) && (o.server_only || o.client_only || o.stream > 0 ||
                                              (o.connections > 0 && o.sizes.size() != 1)))
        usage();
    if (o.reply_size > 0 && (o.connections > 0 || o.idle > 0 || o.stream > 0 || o.server_only))
        usage();
    return o;
}

}  // namespace

int main(int argc, char** argv) {
    const Options o = parse(argc, argv);
    g_busy_poll = o.busy_poll;
    if (o.client_only) {
        run_client(o, o.port);
        return 0;
    }
    int port = 0;
    const int lfd = listen_on(o.host, o.port, &port);
    if (o.server_only) {
        std::fprintf(stderr, "tcp_pingpong: listening on %s:%d\n", o.host.c_str(), port);
        serve(lfd);
        return 0;
    }
    pid_t child = 0;
    if (o.connections > 0 || o.idle > 0) {
        child = fork_echo_servers(lfd, std::max(o.connections, 1) + o.idle);
    } else {
        child = fork();
        if (child < 0) die("fork");
        if (child == 0) {
            serve(lfd);
            _exit(0);
        }
    }
    close(lfd);
    std::vector<int> idle;
    for (int i = 0; i < o.idle; i++) idle.push_back(connect_to(o.host, port));
    if (o.connections > 0)
        run_requesters(o, port);
    else
        run_client(o, port);
    for (int fd : idle) close(fd);
    int status = 0;
    waitpid(child, &status, 0);
    return WIFEXITED(status) && WEXITSTATUS(status) == 0 ? 0 : 1;
}
