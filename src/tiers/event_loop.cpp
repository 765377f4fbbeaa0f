#include "tiers/event_loop.hpp"

#include <sys/eventfd.h>
#include <sys/timerfd.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>

namespace pgrac::tiers {

namespace {

void drain_fd(int fd) {
    uint64_t value;
    while (read(fd, &value, sizeof value) < 0 && errno == EINTR) {
    }
}

}  // namespace

EventLoop::EventLoop() {
    epfd_ = epoll_create1(EPOLL_CLOEXEC);
    if (epfd_ < 0) error_ = errno;
    wakefd_ = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (wakefd_ < 0 && error_ == 0) error_ = errno;
    timerfd_ = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
    if (timerfd_ < 0 && error_ == 0) error_ = errno;
    if (epfd_ >= 0 && (wakefd_ < 0 || timerfd_ < 0 || !add(wakefd_, EPOLLIN, kWakeTag) ||
                       !add(timerfd_, EPOLLIN, kTimerTag))) {
        if (error_ == 0) error_ = errno;
        ::close(epfd_);
        epfd_ = -1;
    }
}

EventLoop::~EventLoop() {
    for (int fd : {epfd_, wakefd_, timerfd_})
        if (fd >= 0) ::close(fd);
}

bool EventLoop::add(int fd, uint32_t events, uint64_t tag) {
    epoll_event ev{};
    ev.events = events;
    ev.data.u64 = tag;
    return epoll_ctl(epfd_, EPOLL_CTL_ADD, fd, &ev) == 0;
}

bool EventLoop::modify(int fd, uint32_t events, uint64_t tag) {
    epoll_event ev{};
    ev.events = events;
    ev.data.u64 = tag;
    return epoll_ctl(epfd_, EPOLL_CTL_MOD, fd, &ev) == 0;
}

void EventLoop::remove(int fd) {
    epoll_ctl(epfd_, EPOLL_CTL_DEL, fd, nullptr);
}

int EventLoop::wait(epoll_event* events, int max_events, int timeout_ms) {
    const int n = epoll_wait(epfd_, events, max_events, timeout_ms);
    int kept = 0;
    for (int i = 0; i < n; ++i) {
        const uint64_t tag = events[i].data.u64;
        if (tag == kWakeTag) {
            drain_fd(wakefd_);
            wake_signalled_ = false;
        } else if (tag == kTimerTag) {
            drain_fd(timerfd_);
        } else {
            events[kept++] = events[i];
        }
    }
    return kept;
}

void EventLoop::wake() {
    if (wake_signalled_) return;
    const uint64_t one = 1;
    wake_signalled_ = write(wakefd_, &one, sizeof one) == sizeof one;
}

void EventLoop::arm_timer(std::optional<std::chrono::steady_clock::time_point> when) {
    if (!when && !timer_armed_) return;
    itimerspec spec{};
    if (when) {
        // steady_clock is CLOCK_MONOTONIC on Linux; 0 would disarm, so use >= 1 ns.
        const auto ns = std::max<int64_t>(
            1,
            std::chrono::duration_cast<std::chrono::nanoseconds>(when->time_since_epoch()).count());
        spec.it_value.tv_sec = ns / 1000000000;
        spec.it_value.tv_nsec = ns % 1000000000;
    }
    timerfd_settime(timerfd_, TFD_TIMER_ABSTIME, &spec, nullptr);
    timer_armed_ = when.has_value();
}

void EventLoop::note_report() {
    ++pending_reports_;
    if (!in_pass_) wake();
}

}  // namespace pgrac::tiers
