// hop_chain: what a round trip costs with 6, 4 or 2 process wakeups, measured
// with real processes, real shared memory and real TCP over loopback, and no
// pgrac_ic code at all. It prices the request paths of docs/architecture.md
// ("Fewer hops") before any of them is built:
//
//   relay6   requester -> sender relay -> TCP -> receiver relay -> server, and
//            back the same way: 6 wakeups (pgrac_ic today: backend, listener,
//            listener, LMS, listener, listener, backend)
//   worker4  requester -> server's peer worker -> TCP -> server -> TCP -> worker
//            -> requester: 4 wakeups (LMS workers own the wire)
//   direct2  requester -> TCP -> server -> TCP -> requester: 2 wakeups (the
//            requester owns a lane to the serving worker; a raw ping-pong)
//
// A shared-memory hop is a sequence number and a 64-byte payload in a shared
// mapping; a TCP hop is a loopback connection with TCP_NODELAY. How a process
// waits is the same on every hop of one run (--wait): `block` sleeps in the
// kernel (read() on an eventfd the sender writes, as a latch wakeup does, or a
// blocking recv()), `yield` polls with sched_yield() between looks (pgrac_ic's
// busy-poll), `spin` polls with a pause instruction (tcp_pingpong --busy-poll).
//
//   hop_chain --path relay6|worker4|direct2 [--wait block|yield|spin]
//             [--iterations N] [--cpu C]
//
// --cpu pins every process to CPU C. Prints one line: path, wait, iterations,
// p50/p99/p999/mean round trip in µs (latency_stats.hpp).
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sched.h>
#include <signal.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "latency_stats.hpp"

namespace {

constexpr size_t kPayload = 64;
enum class Wait { Block, Yield, Spin };
Wait g_wait = Wait::Block;

[[noreturn]] void die(const char* what) {
    std::perror(what);
    std::exit(2);
}

void idle() {
    if (g_wait == Wait::Yield)
        sched_yield();
    else
        __builtin_ia32_pause();
}

// One direction of a shared-memory hop: the sender bumps seq after writing
// the payload; in block mode it also writes the receiver's eventfd.
struct Mailbox {
    std::atomic<uint64_t> seq;
    uint8_t payload[kPayload];
};

struct ShmHop {
    Mailbox* box;
    int efd;
    uint64_t seen = 0;
};

void shm_send(ShmHop& h, const uint8_t* data) {
    std::memcpy(h.box->payload, data, kPayload);
    h.box->seq.fetch_add(1, std::memory_order_release);
    if (g_wait == Wait::Block) {
        const uint64_t one = 1;
        if (write(h.efd, &one, sizeof one) != sizeof one) die("eventfd write");
    }
}

void shm_recv(ShmHop& h, uint8_t* data) {
    if (g_wait == Wait::Block) {
        uint64_t n;
        while (h.box->seq.load(std::memory_order_acquire) == h.seen)
            if (read(h.efd, &n, sizeof n) < 0 && errno != EINTR) die("eventfd read");
    } else {
        while (h.box->seq.load(std::memory_order_acquire) == h.seen) idle();
    }
    h.seen++;
    std::memcpy(data, h.box->payload, kPayload);
}

void tcp_send(int fd, const uint8_t* data) {
    size_t off = 0;
    while (off < kPayload) {
        const ssize_t w = send(fd, data + off, kPayload - off, MSG_NOSIGNAL);
        if (w > 0)
            off += static_cast<size_t>(w);
        else if (w < 0 && errno != EINTR && errno != EAGAIN)
            die("send");
    }
}

void tcp_recv(int fd, uint8_t* data) {
    size_t got = 0;
    const int flags = g_wait == Wait::Block ? 0 : MSG_DONTWAIT;
    while (got < kPayload) {
        const ssize_t r = recv(fd, data + got, kPayload - got, flags);
        if (r > 0)
            got += static_cast<size_t>(r);
        else if (r == 0)
            std::exit(0);  // the requester is done
        else if (errno == EAGAIN || errno == EWOULDBLOCK)
            idle();
        else if (errno != EINTR)
            die("recv");
    }
}

// A connected loopback TCP pair (a, b) with TCP_NODELAY on both ends.
void tcp_pair(int* a, int* b) {
    const int l = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in sa{};
    sa.sin_family = AF_INET;
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof sa;
    if (l < 0 || bind(l, reinterpret_cast<sockaddr*>(&sa), sizeof sa) != 0 || listen(l, 1) != 0 ||
        getsockname(l, reinterpret_cast<sockaddr*>(&sa), &len) != 0)
        die("listen");
    *a = socket(AF_INET, SOCK_STREAM, 0);
    if (*a < 0 || connect(*a, reinterpret_cast<sockaddr*>(&sa), sizeof sa) != 0) die("connect");
    *b = accept(l, nullptr, nullptr);
    if (*b < 0) die("accept");
    close(l);
    const int one = 1;
    setsockopt(*a, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    setsockopt(*b, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

// A shared-memory hop (one direction) in a mapping every child inherits.
ShmHop shm_hop() {
    void* m =
        mmap(nullptr, sizeof(Mailbox), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (m == MAP_FAILED) die("mmap");
    ShmHop h;
    h.box = new (m) Mailbox();
    h.efd = eventfd(0, 0);
    if (h.efd < 0) die("eventfd");
    return h;
}

// One step of a process's round: take the message from `in`, pass it to `out`.
struct Endpoint {
    ShmHop* shm = nullptr;
    int fd = -1;
};
void take(Endpoint& e, uint8_t* m) {
    if (e.shm)
        shm_recv(*e.shm, m);
    else
        tcp_recv(e.fd, m);
}
void pass(Endpoint& e, const uint8_t* m) {
    if (e.shm)
        shm_send(*e.shm, m);
    else
        tcp_send(e.fd, m);
}

// A forwarding process: forever, for each (in, out) step in order.
pid_t spawn(std::vector<std::pair<Endpoint, Endpoint>> steps, int cpu) {
    const pid_t pid = fork();
    if (pid < 0) die("fork");
    if (pid > 0) return pid;
    if (cpu >= 0) {
        cpu_set_t set;
        CPU_ZERO(&set);
        CPU_SET(cpu, &set);
        sched_setaffinity(0, sizeof set, &set);
    }
    uint8_t m[kPayload];
    for (;;)
        for (auto& [in, out] : steps) {
            take(in, m);
            m[0]++;  // every hop touches the message
            pass(out, m);
        }
}

struct Options {
    std::string path = "relay6";
    int iterations = 20000;
    int cpu = -1;
};

Options parse(int argc, char** argv) {
    Options o;
    for (int i = 1; i < argc; i++) {
        const std::string a = argv[i];
        auto next = [&]() -> std::string {
            if (i + 1 >= argc) {
                std::fprintf(stderr, "hop_chain: %s needs a value\n", a.c_str());
                std::exit(2);
            }
            return argv[++i];
        };
        if (a == "--path") {
            o.path = next();
        } else if (a == "--wait") {
            const std::string w = next();
            g_wait = w == "block" ? Wait::Block : w == "yield" ? Wait::Yield : Wait::Spin;
            if (w != "block" && w != "yield" && w != "spin") {
                std::fprintf(stderr, "hop_chain: --wait block|yield|spin\n");
                std::exit(2);
            }
        } else if (a == "--iterations") {
            o.iterations = std::atoi(next().c_str());
        } else if (a == "--cpu") {
            o.cpu = std::atoi(next().c_str());
        } else {
            std::fprintf(stderr,
                         "usage: hop_chain --path relay6|worker4|direct2 "
                         "[--wait block|yield|spin] [--iterations N] [--cpu C]\n");
            std::exit(2);
        }
    }
    if ((o.path != "relay6" && o.path != "worker4" && o.path != "direct2") || o.iterations < 1) {
        std::fprintf(stderr, "hop_chain: bad --path or --iterations\n");
        std::exit(2);
    }
    return o;
}

}  // namespace

int main(int argc, char** argv) {
    const Options o = parse(argc, argv);
    signal(SIGPIPE, SIG_IGN);
    std::vector<pid_t> kids;
    Endpoint first_out, last_in;  // the requester's two ends
    std::vector<int> requester_fds;
    if (o.path == "direct2") {
        int a, b;
        tcp_pair(&a, &b);
        kids.push_back(spawn({{Endpoint{nullptr, b}, Endpoint{nullptr, b}}}, o.cpu));
        close(b);
        first_out.fd = last_in.fd = a;
    } else if (o.path == "worker4") {
        ShmHop* to_w = new ShmHop(shm_hop());
        ShmHop* from_w = new ShmHop(shm_hop());
        int a, b;
        tcp_pair(&a, &b);
        // The requester's local worker: request out over TCP, reply back in.
        kids.push_back(spawn({{Endpoint{to_w, -1}, Endpoint{nullptr, a}},
                              {Endpoint{nullptr, a}, Endpoint{from_w, -1}}},
                             o.cpu));
        // The serving worker answers on the lane it was asked on.
        kids.push_back(spawn({{Endpoint{nullptr, b}, Endpoint{nullptr, b}}}, o.cpu));
        close(a);
        close(b);
        first_out.shm = to_w;
        last_in.shm = from_w;
    } else {
        ShmHop* to_l1 = new ShmHop(shm_hop());
        ShmHop* from_l1 = new ShmHop(shm_hop());
        ShmHop* to_m = new ShmHop(shm_hop());
        ShmHop* from_m = new ShmHop(shm_hop());
        int a, b;
        tcp_pair(&a, &b);
        // Sender relay (listener 1): ring -> wire, wire -> reply slot.
        kids.push_back(spawn({{Endpoint{to_l1, -1}, Endpoint{nullptr, a}},
                              {Endpoint{nullptr, a}, Endpoint{from_l1, -1}}},
                             o.cpu));
        // Receiver relay (listener 2): wire -> inbox, outbound ring -> wire.
        kids.push_back(spawn({{Endpoint{nullptr, b}, Endpoint{to_m, -1}},
                              {Endpoint{from_m, -1}, Endpoint{nullptr, b}}},
                             o.cpu));
        // Server (LMS): inbox -> outbound ring.
        kids.push_back(spawn({{Endpoint{to_m, -1}, Endpoint{from_m, -1}}}, o.cpu));
        close(a);
        close(b);
        first_out.shm = to_l1;
        last_in.shm = from_l1;
    }
    if (o.cpu >= 0) {
        cpu_set_t set;
        CPU_ZERO(&set);
        CPU_SET(o.cpu, &set);
        sched_setaffinity(0, sizeof set, &set);
    }

    uint8_t m[kPayload] = {};
    const int warmup = o.iterations / 10 + 100;
    std::vector<uint64_t> samples;
    samples.reserve(static_cast<size_t>(o.iterations));
    uint64_t begin = 0;
    for (int i = 0; i < warmup + o.iterations; i++) {
        if (i == warmup) begin = pgrac::bench::now_ns();
        const uint64_t t0 = pgrac::bench::now_ns();
        pass(first_out, m);
        take(last_in, m);
        if (i >= warmup) samples.push_back(pgrac::bench::now_ns() - t0);
    }
    const uint64_t elapsed = pgrac::bench::now_ns() - begin;
    for (pid_t k : kids) kill(k, SIGKILL);
    for (pid_t k : kids) waitpid(k, nullptr, 0);
    const char* wait = g_wait == Wait::Block ? "block" : g_wait == Wait::Yield ? "yield" : "spin";
    const auto s = pgrac::bench::summarize_latency(samples);
    std::printf(
        "hop_chain %-8s %-5s %s iterations=%d p50=%.1f p99=%.1f p999=%.1f mean=%.1f us "
        "(%.0f/s)\n",
        o.path.c_str(), wait, o.cpu >= 0 ? "pinned" : "placed", o.iterations, s.p50_us, s.p99_us,
        s.p999_us, s.mean_us, pgrac::bench::ops_per_sec(o.iterations, elapsed));
    return 0;
}
