// ShmRing: single-threaded behaviour against a model, multi-producer threads,
// and producers in separate processes sharing a MAP_SHARED mapping.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <string>
#include <thread>
#include <vector>

#include "ic/shm/shm_ring.hpp"

using namespace pgrac::ic;

namespace {

// Region for a ring, 64-byte aligned like PostgreSQL shared memory.
struct Region {
    explicit Region(size_t capacity) : bytes(ShmRing::bytes_needed(capacity)) {
        mem = std::aligned_alloc(64, (bytes + 63) & ~size_t{63});
    }
    ~Region() { std::free(mem); }
    size_t bytes;
    void* mem;
};

uint64_t splitmix(uint64_t* s) {
    uint64_t z = (*s += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

uint8_t pattern(uint64_t key, size_t i) {
    return static_cast<uint8_t>((key * 131 + i * 7) >> 3);
}

std::vector<uint8_t> make_body(uint64_t key, size_t len) {
    std::vector<uint8_t> v(len);
    for (size_t i = 0; i < len; i++) v[i] = pattern(key, i);
    return v;
}

// memcmp that accepts the null data() of an empty vector.
bool same(const uint8_t* a, const uint8_t* b, size_t n) {
    return n == 0 || std::memcmp(a, b, n) == 0;
}

uint64_t fnv1a(const uint8_t* p, size_t n) {
    uint64_t h = 0xcbf29ce484222325ULL;
    for (size_t i = 0; i < n; i++) h = (h ^ p[i]) * 0x100000001b3ULL;
    return h;
}

// Stress records: {producer, seq, checksum of payload} + payload whose length
// comes from a per-producer PRNG that the consumer replays.
struct StressHeader {
    uint32_t producer;
    uint32_t seq;
    uint64_t checksum;
};

struct StressProducer {
    explicit StressProducer(uint32_t id, size_t max_payload)
        : id(id), max_payload(max_payload), rng(0x1234 + id) {}
    uint32_t id;
    size_t max_payload;
    uint64_t rng;
    uint32_t seq = 0;

    size_t next_size() {
        uint64_t r = splitmix(&rng);
        // Mostly small records, some large ones (up to max_payload).
        return (r & 7) == 0 ? (r >> 8) % (max_payload + 1) : (r >> 8) % 200;
    }
};

void build_stress(StressProducer* p, std::vector<uint8_t>* payload, StressHeader* h) {
    size_t len = p->next_size();
    payload->resize(len);
    for (size_t i = 0; i < len; i++) {
        (*payload)[i] = pattern((uint64_t{p->id} << 32) | p->seq, i);
    }
    h->producer = p->id;
    h->seq = p->seq;
    h->checksum = fnv1a(payload->data(), len);
    p->seq++;
}

// Pushes `count` stress records, retrying while Full. Returns false on a
// non-Ok, non-Full result or if `give_up` says so.
template <typename GiveUp>
bool produce(ShmRing ring, uint32_t id, uint32_t count, size_t max_payload, GiveUp give_up) {
    StressProducer p(id, max_payload);
    std::vector<uint8_t> payload;
    for (uint32_t i = 0; i < count; i++) {
        StressHeader h;
        build_stress(&p, &payload, &h);
        iovec iov[2] = {{&h, sizeof(h)}, {payload.data(), payload.size()}};
        for (;;) {
            ShmRing::Push r = ring.push(iov, 2);
            if (r == ShmRing::Push::Ok) break;
            if (r != ShmRing::Push::Full || give_up()) return false;
            std::this_thread::yield();
        }
    }
    return true;
}

// Consumes records from `producers` producers of `count` records each and
// checks each producer's order, sizes and checksums. Gives up (with a test
// failure) if nothing arrives for `stall`.
void consume_and_verify(ShmRing ring, uint32_t producers, uint32_t count, size_t max_payload,
                        std::chrono::seconds stall) {
    std::vector<StressProducer> replay;
    for (uint32_t i = 0; i < producers; i++) replay.emplace_back(i, max_payload);
    std::vector<uint8_t> expected;
    uint64_t remaining = uint64_t{producers} * count;
    auto last_progress = std::chrono::steady_clock::now();
    while (remaining > 0) {
        const uint8_t* data;
        size_t len;
        if (!ring.peek(&data, &len)) {
            if (std::chrono::steady_clock::now() - last_progress > stall) {
                FAIL() << "no progress; " << remaining << " records missing";
            }
            std::this_thread::yield();
            continue;
        }
        last_progress = std::chrono::steady_clock::now();
        ASSERT_GE(len, sizeof(StressHeader));
        StressHeader h;
        std::memcpy(&h, data, sizeof(h));
        ASSERT_LT(h.producer, producers);
        StressProducer& p = replay[h.producer];
        ASSERT_EQ(h.seq, p.seq) << "producer " << h.producer << " out of order";
        StressHeader want;
        build_stress(&p, &expected, &want);
        ASSERT_EQ(len, sizeof(StressHeader) + expected.size());
        ASSERT_EQ(h.checksum, want.checksum);
        ASSERT_EQ(fnv1a(data + sizeof(h), len - sizeof(h)), want.checksum)
            << "payload of producer " << h.producer << " seq " << h.seq;
        ring.pop();
        remaining--;
    }
    for (auto& p : replay) EXPECT_EQ(p.seq, count);
}

}  // namespace

TEST(ShmRing, SizesAndBasics) {
    EXPECT_EQ(ShmRing::bytes_needed(1) - ShmRing::bytes_needed(4096), 0u);
    EXPECT_EQ(ShmRing::bytes_needed(4097) - ShmRing::bytes_needed(4096), 4096u);
    EXPECT_EQ(ShmRing::bytes_needed(65536) - ShmRing::bytes_needed(4096), 61440u);

    Region r(5000);
    ShmRing ring = ShmRing::create(r.mem, 5000);
    EXPECT_EQ(ring.capacity(), 8192u);
    EXPECT_EQ(ring.max_record(), 8192u / 2 - 8);
    EXPECT_TRUE(ring.empty());
    EXPECT_EQ(ring.used_bytes(), 0u);
    const uint8_t* d;
    size_t n;
    EXPECT_FALSE(ring.peek(&d, &n));
    ring.pop();  // nothing ready: no effect
    EXPECT_EQ(ring.popped(), 0u);

    ASSERT_EQ(ring.push("hello", 5), ShmRing::Push::Ok);
    EXPECT_FALSE(ring.empty());
    EXPECT_EQ(ring.used_bytes(), 16u);  // 8-byte header + body padded to 8

    // A second handle on the same region sees the same ring.
    ShmRing other = ShmRing::attach(r.mem);
    ASSERT_TRUE(other.peek(&d, &n));
    EXPECT_EQ(std::string(reinterpret_cast<const char*>(d), n), "hello");
    other.pop();
    EXPECT_TRUE(ring.empty());
    EXPECT_EQ(ring.pushed(), 1u);
    EXPECT_EQ(ring.popped(), 1u);

    // Zero-length record and a gathered record.
    ASSERT_EQ(ring.push(nullptr, 0), ShmRing::Push::Ok);
    const char a[] = "ab", b[] = "cde";
    iovec iov[3] = {{const_cast<char*>(a), 2}, {nullptr, 0}, {const_cast<char*>(b), 3}};
    ASSERT_EQ(ring.push(iov, 3), ShmRing::Push::Ok);
    ASSERT_TRUE(ring.peek(&d, &n));
    EXPECT_EQ(n, 0u);
    ring.pop();
    ASSERT_TRUE(ring.peek(&d, &n));
    EXPECT_EQ(std::string(reinterpret_cast<const char*>(d), n), "abcde");
    ring.pop();
    EXPECT_TRUE(ring.empty());
}

TEST(ShmRing, EverySizeRoundTripsAcrossWraps) {
    Region r(4096);
    ShmRing ring = ShmRing::create(r.mem, 4096);
    // One record at a time, every size up to the maximum: the offsets walk
    // all over the buffer, so records wrap and skip records appear.
    uint64_t records = 0;
    for (size_t len = 0; len <= ring.max_record(); len++) {
        auto body = make_body(len, len);
        ASSERT_EQ(ring.push(body.data(), len), ShmRing::Push::Ok) << len;
        const uint8_t* d;
        size_t n;
        ASSERT_TRUE(ring.peek(&d, &n));
        ASSERT_EQ(n, len);
        ASSERT_TRUE(same(d, body.data(), len)) << len;
        ring.pop();
        records++;
        ASSERT_TRUE(ring.empty());
    }
    EXPECT_EQ(ring.pushed(), records);
    EXPECT_EQ(ring.popped(), records);
    EXPECT_EQ(ring.full_count(), 0u);
}

TEST(ShmRing, RandomOpsMatchModel) {
    Region r(4096);
    ShmRing ring = ShmRing::create(r.mem, 4096);
    std::deque<std::vector<uint8_t>> model;
    uint64_t rng = 42, key = 0, fulls = 0, pushes = 0, wraps = 0;
    size_t model_bytes = 0;
    for (int op = 0; op < 200000; op++) {
        uint64_t x = splitmix(&rng);
        if (x % 5 < 3) {  // push a little more often than pop
            size_t len = (x >> 8) % 3 == 0 ? (x >> 16) % (ring.max_record() + 1) : (x >> 16) % 100;
            auto body = make_body(key++, len);
            ShmRing::Push res = ring.push(body.data(), len);
            if (res == ShmRing::Push::Full) {
                // Full is only allowed when the ring holds records.
                ASSERT_FALSE(model.empty());
                fulls++;
            } else {
                ASSERT_EQ(res, ShmRing::Push::Ok);
                model_bytes += 8 + ((len + 7) & ~size_t{7});
                model.push_back(std::move(body));
                pushes++;
            }
        } else {
            const uint8_t* d;
            size_t n;
            bool got = ring.peek(&d, &n);
            ASSERT_EQ(got, !model.empty());
            if (!got) continue;
            ASSERT_EQ(n, model.front().size());
            ASSERT_TRUE(same(d, model.front().data(), n));
            ring.pop();
            model_bytes -= 8 + ((n + 7) & ~size_t{7});
            model.pop_front();
        }
        // used_bytes counts skip padding too, never less than the records.
        ASSERT_GE(ring.used_bytes(), model_bytes);
        ASSERT_LE(ring.used_bytes(), ring.capacity());
        if (ring.used_bytes() > model_bytes) wraps++;
    }
    EXPECT_GT(fulls, 1000u);
    EXPECT_GT(wraps, 0u);  // skip records were exercised
    EXPECT_EQ(ring.full_count(), fulls);
    EXPECT_EQ(ring.pushed(), pushes);
}

TEST(ShmRing, FullThenRoomAfterPop) {
    Region r(4096);
    ShmRing ring = ShmRing::create(r.mem, 4096);
    std::vector<uint8_t> body(504);  // 512 bytes per record
    for (int i = 0; i < 8; i++) {
        body[0] = static_cast<uint8_t>(i);
        ASSERT_EQ(ring.push(body.data(), body.size()), ShmRing::Push::Ok) << i;
    }
    EXPECT_EQ(ring.used_bytes(), 4096u);
    EXPECT_EQ(ring.push(body.data(), body.size()), ShmRing::Push::Full);
    EXPECT_EQ(ring.push(nullptr, 0), ShmRing::Push::Full);
    EXPECT_EQ(ring.full_count(), 2u);

    const uint8_t* d;
    size_t n;
    ASSERT_TRUE(ring.peek(&d, &n));
    EXPECT_EQ(d[0], 0);
    ring.pop();
    body[0] = 8;
    ASSERT_EQ(ring.push(body.data(), body.size()), ShmRing::Push::Ok);
    EXPECT_EQ(ring.push(body.data(), body.size()), ShmRing::Push::Full);
    for (int i = 1; i <= 8; i++) {
        ASSERT_TRUE(ring.peek(&d, &n));
        EXPECT_EQ(d[0], i);
        ring.pop();
    }
    EXPECT_TRUE(ring.empty());
}

TEST(ShmRing, WrapWritesSkipRecord) {
    Region r(4096);
    ShmRing ring = ShmRing::create(r.mem, 4096);
    std::vector<uint8_t> big(ring.max_record());  // 2048 bytes with its header
    std::vector<uint8_t> small(1016);             // 1024 bytes with its header
    ASSERT_EQ(ring.push(small.data(), small.size()), ShmRing::Push::Ok);
    ASSERT_EQ(ring.push(small.data(), small.size()), ShmRing::Push::Ok);
    ASSERT_EQ(ring.push(small.data(), small.size()), ShmRing::Push::Ok);  // offset now 3072
    const uint8_t* d;
    size_t n;
    for (int i = 0; i < 2; i++) {
        ASSERT_TRUE(ring.peek(&d, &n));
        ring.pop();
    }
    // 2048 bytes do not fit in the last 1024: skip them, start at 0 (free:
    // 0..2047 since tail is at 2048).
    ASSERT_EQ(ring.push(big.data(), big.size()), ShmRing::Push::Ok);
    EXPECT_EQ(ring.used_bytes(), 1024u + 1024u + 2048u);
    ASSERT_TRUE(ring.peek(&d, &n));
    EXPECT_EQ(n, small.size());
    ring.pop();
    ASSERT_TRUE(ring.peek(&d, &n));  // steps over the skip record
    EXPECT_EQ(n, big.size());
    EXPECT_EQ(ring.used_bytes(), 2048u);
    ring.pop();
    EXPECT_TRUE(ring.empty());
}

TEST(ShmRing, TooBig) {
    Region r(4096);
    ShmRing ring = ShmRing::create(r.mem, 4096);
    std::vector<uint8_t> body(ring.max_record() + 1);
    EXPECT_EQ(ring.push(body.data(), body.size()), ShmRing::Push::TooBig);
    // The total of the pieces counts, and huge lengths do not overflow.
    iovec iov[2] = {{body.data(), ring.max_record()}, {body.data(), 1}};
    EXPECT_EQ(ring.push(iov, 2), ShmRing::Push::TooBig);
    iovec huge[2] = {{body.data(), SIZE_MAX}, {body.data(), 2}};
    EXPECT_EQ(ring.push(huge, 2), ShmRing::Push::TooBig);
    EXPECT_TRUE(ring.empty());
    EXPECT_EQ(ring.full_count(), 0u);
    EXPECT_EQ(ring.push(body.data(), ring.max_record()), ShmRing::Push::Ok);
}

TEST(ShmRing, StressFourThreadProducers) {
    constexpr uint32_t kProducers = 4, kCount = 200000;
    constexpr size_t kMaxPayload = 2000;
    Region r(64 * 1024);
    ShmRing ring = ShmRing::create(r.mem, 64 * 1024);
    ASSERT_GE(ring.max_record(), sizeof(StressHeader) + kMaxPayload);
    std::vector<std::thread> producers;
    std::vector<int> ok(kProducers, 0);
    bool stop = false;  // set if the consumer fails, so that producers stop retrying
    for (uint32_t id = 0; id < kProducers; id++) {
        producers.emplace_back([&, id] {
            ok[id] = produce(ring, id, kCount, kMaxPayload,
                             [&] { return __atomic_load_n(&stop, __ATOMIC_RELAXED); });
        });
    }
    consume_and_verify(ring, kProducers, kCount, kMaxPayload, std::chrono::seconds(20));
    if (HasFatalFailure()) __atomic_store_n(&stop, true, __ATOMIC_RELAXED);
    for (auto& t : producers) t.join();
    if (HasFatalFailure()) return;
    for (uint32_t id = 0; id < kProducers; id++) EXPECT_TRUE(ok[id]) << id;
    EXPECT_TRUE(ring.empty());
    EXPECT_EQ(ring.pushed(), uint64_t{kProducers} * kCount);
    EXPECT_EQ(ring.popped(), uint64_t{kProducers} * kCount);
}

TEST(ShmRing, StressForkedProducerProcesses) {
    constexpr uint32_t kChildren = 3, kCount = 100000;
    constexpr size_t kMaxPayload = 1500;
    const size_t bytes = ShmRing::bytes_needed(32 * 1024);
    void* mem = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    ASSERT_NE(mem, MAP_FAILED);
    ShmRing ring = ShmRing::create(mem, 32 * 1024);
    const pid_t parent = getpid();

    std::vector<pid_t> pids;
    // Kills and reaps children that are still running if the test bails out.
    struct Reaper {
        std::vector<pid_t>* pids;
        ~Reaper() {
            for (pid_t pid : *pids) {
                if (pid > 0) {
                    kill(pid, SIGKILL);
                    waitpid(pid, nullptr, 0);
                }
            }
        }
    } reaper{&pids};

    for (uint32_t id = 0; id < kChildren; id++) {
        pid_t pid = fork();
        ASSERT_GE(pid, 0);
        if (pid == 0) {
            // Child: a fresh handle on the shared region, as another process
            // would get it; give up if the parent has gone away.
            ShmRing mine = ShmRing::attach(mem);
            bool ok = produce(mine, id, kCount, kMaxPayload, [&] { return getppid() != parent; });
            _exit(ok ? 0 : 1);
        }
        pids.push_back(pid);
    }
    consume_and_verify(ring, kChildren, kCount, kMaxPayload, std::chrono::seconds(20));
    if (HasFatalFailure()) return;  // the reaper kills the children
    for (pid_t& pid : pids) {
        int status = 0;
        ASSERT_EQ(waitpid(pid, &status, 0), pid);
        pid = 0;
        EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    }
    EXPECT_TRUE(ring.empty());
    EXPECT_EQ(ring.pushed(), uint64_t{kChildren} * kCount);
    EXPECT_EQ(ring.popped(), uint64_t{kChildren} * kCount);
    munmap(mem, bytes);
}
