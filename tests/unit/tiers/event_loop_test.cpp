// The event loop under the TCP and verbs tiers: wake, timer, tags of the
// owner's descriptors and the poll-pass guard. Every wait is bounded.
#include <gtest/gtest.h>

#include <poll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <chrono>
#include <stdexcept>

#include "tiers/event_loop.hpp"

using namespace pgrac::tiers;
using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

namespace {

// Whether fd becomes readable within timeout_ms.
bool readable(int fd, int timeout_ms = 0) {
    pollfd p{fd, POLLIN, 0};
    return ::poll(&p, 1, timeout_ms) == 1 && (p.revents & POLLIN);
}

// An eventfd the test owns, standing in for a transport's descriptor.
struct OwnFd {
    int fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    ~OwnFd() { ::close(fd); }
    void signal() const {
        const uint64_t one = 1;
        ASSERT_EQ(write(fd, &one, sizeof one), static_cast<ssize_t>(sizeof one));
    }
    void drain() const {
        uint64_t v;
        ASSERT_EQ(read(fd, &v, sizeof v), static_cast<ssize_t>(sizeof v));
    }
};

}  // namespace

TEST(EventLoop, StartsUsableAndIdle) {
    EventLoop loop;
    ASSERT_TRUE(loop.ok());
    EXPECT_EQ(loop.error(), 0);
    EXPECT_GE(loop.fd(), 0);
    EXPECT_GE(loop.wake_fd(), 0);
    EXPECT_FALSE(readable(loop.fd()));
    epoll_event ev[4];
    EXPECT_EQ(loop.wait(ev, 4, 0), 0);
    EXPECT_FALSE(loop.timer_armed());
    EXPECT_FALSE(loop.in_pass());
    EXPECT_EQ(loop.pending_reports(), 0u);
}

TEST(EventLoop, WakeMakesWaitFdReadableUntilWaitDrainsIt) {
    EventLoop loop;
    ASSERT_TRUE(loop.ok());
    loop.wake();
    loop.wake();  // one write however often called
    EXPECT_TRUE(readable(loop.fd()));
    uint64_t count = 0;
    ASSERT_EQ(read(loop.wake_fd(), &count, sizeof count), static_cast<ssize_t>(sizeof count));
    EXPECT_EQ(count, 1u);
    ASSERT_EQ(write(loop.wake_fd(), &count, sizeof count), static_cast<ssize_t>(sizeof count));

    epoll_event ev[4];
    EXPECT_EQ(loop.wait(ev, 4, 0), 0);  // the wake is taken, not handed back
    EXPECT_FALSE(readable(loop.fd()));
    loop.wake();  // and the next one writes again
    EXPECT_TRUE(readable(loop.fd()));
    EXPECT_EQ(loop.wait(ev, 4, 0), 0);  // the wake is taken, not handed back
    EXPECT_FALSE(readable(loop.fd()));
}

TEST(EventLoop, WakeFromAnotherWriterIsDrainedToo) {
    EventLoop loop;
    ASSERT_TRUE(loop.ok());
    const uint64_t one = 1;
    ASSERT_EQ(write(loop.wake_fd(), &one, sizeof one), static_cast<ssize_t>(sizeof one));
    EXPECT_TRUE(readable(loop.fd()));
    epoll_event ev[4];
    EXPECT_EQ(loop.wait(ev, 4, 0), 0);
    EXPECT_FALSE(readable(loop.fd()));
}

TEST(EventLoop, TimerFiresAtItsDeadlineAndRearms) {
    EventLoop loop;
    ASSERT_TRUE(loop.ok());
    epoll_event ev[4];
    for (int round = 0; round < 2; ++round) {
        const auto start = Clock::now();
        loop.arm_timer(start + milliseconds(30));
        EXPECT_TRUE(loop.timer_armed());
        EXPECT_FALSE(readable(loop.fd()));
        ASSERT_TRUE(readable(loop.fd(), 5000));
        EXPECT_GE(Clock::now() - start, milliseconds(30));
        EXPECT_EQ(loop.wait(ev, 4, 0), 0);  // drained, not handed back
        EXPECT_FALSE(readable(loop.fd()));
    }
}

TEST(EventLoop, DeadlineInThePastFiresAtOnce) {
    EventLoop loop;
    ASSERT_TRUE(loop.ok());
    loop.arm_timer(Clock::now() - milliseconds(10));
    EXPECT_TRUE(readable(loop.fd(), 5000));
}

TEST(EventLoop, DisarmedTimerDoesNotFire) {
    EventLoop loop;
    ASSERT_TRUE(loop.ok());
    loop.arm_timer(Clock::now() + milliseconds(20));
    loop.arm_timer(std::nullopt);
    EXPECT_FALSE(loop.timer_armed());
    EXPECT_FALSE(readable(loop.fd(), 80));
    loop.arm_timer(std::nullopt);  // disarming a disarmed timer is a no-op
    EXPECT_FALSE(loop.timer_armed());
}

TEST(EventLoop, TagsOfTheOwnersDescriptorsComeBack) {
    EventLoop loop;
    ASSERT_TRUE(loop.ok());
    OwnFd a, b;
    ASSERT_TRUE(loop.add(a.fd, EPOLLIN, 7));
    ASSERT_TRUE(loop.add(b.fd, EPOLLIN, uint64_t{1} << 62 | 3));
    EXPECT_FALSE(loop.add(a.fd, EPOLLIN, 8));  // already there
    a.signal();
    b.signal();
    loop.wake();
    epoll_event ev[8];
    int n = loop.wait(ev, 8, 1000);
    ASSERT_EQ(n, 2);  // the wake is not among them
    uint64_t tags = ev[0].data.u64 ^ ev[1].data.u64;
    EXPECT_EQ(tags, 7u ^ (uint64_t{1} << 62 | 3));
    EXPECT_TRUE(ev[0].events & EPOLLIN);

    b.drain();
    ASSERT_TRUE(loop.modify(a.fd, EPOLLIN, 9));
    n = loop.wait(ev, 8, 1000);
    ASSERT_EQ(n, 1);
    EXPECT_EQ(ev[0].data.u64, 9u);
    EXPECT_EQ(ev[0].events & EPOLLIN, static_cast<uint32_t>(EPOLLIN));

    loop.remove(a.fd);
    EXPECT_EQ(loop.wait(ev, 8, 0), 0);
    EXPECT_FALSE(readable(loop.fd()));
}

TEST(EventLoop, WaitWithTimeoutReturnsWhenNothingIsReady) {
    EventLoop loop;
    ASSERT_TRUE(loop.ok());
    epoll_event ev[4];
    const auto start = Clock::now();
    EXPECT_EQ(loop.wait(ev, 4, 30), 0);
    EXPECT_GE(Clock::now() - start, milliseconds(25));
}

TEST(EventLoop, NestedPassDoesNotRun) {
    EventLoop loop;
    ASSERT_TRUE(loop.ok());
    int outer = 0, inner = 0;
    bool nested_ran = true;
    EXPECT_TRUE(loop.run_pass([&] {
        ++outer;
        EXPECT_TRUE(loop.in_pass());
        nested_ran = loop.run_pass([&] { ++inner; });  // a handler calling poll()
    }));
    EXPECT_EQ(outer, 1);
    EXPECT_EQ(inner, 0);
    EXPECT_FALSE(nested_ran);
    EXPECT_FALSE(loop.in_pass());
    EXPECT_TRUE(loop.run_pass([&] { ++inner; }));  // a later pass runs
    EXPECT_EQ(inner, 1);
}

TEST(EventLoop, ExceptionEndsThePassAndIsSwallowed) {
    EventLoop loop;
    ASSERT_TRUE(loop.ok());
    int after = 0;
    EXPECT_TRUE(loop.run_pass([&] {
        throw std::runtime_error("from a handler");
        ++after;
    }));
    EXPECT_EQ(after, 0);
    EXPECT_FALSE(loop.in_pass());
    EXPECT_TRUE(loop.run_pass([] {}));
}

TEST(EventLoop, ReportNotedOutsideAPassWakesAtOnce) {
    EventLoop loop;
    ASSERT_TRUE(loop.ok());
    loop.note_report();
    EXPECT_EQ(loop.pending_reports(), 1u);
    EXPECT_TRUE(readable(loop.fd()));
}

TEST(EventLoop, ReportNotedInAPassWakesOnlyIfStillPendingAfterIt) {
    EventLoop loop;
    ASSERT_TRUE(loop.ok());
    epoll_event ev[4];
    // Delivered inside the pass: no wake.
    loop.run_pass([&] {
        loop.note_report();
        EXPECT_FALSE(readable(loop.fd()));
        --loop.pending_reports();
    });
    EXPECT_FALSE(readable(loop.fd()));

    // Left pending (the delivery threw): the owner is woken to come back.
    loop.run_pass([&] {
        loop.note_report();
        throw std::runtime_error("handler");
    });
    EXPECT_EQ(loop.pending_reports(), 1u);
    EXPECT_TRUE(readable(loop.fd()));
    EXPECT_EQ(loop.wait(ev, 4, 0), 0);
    EXPECT_FALSE(readable(loop.fd()));
}
