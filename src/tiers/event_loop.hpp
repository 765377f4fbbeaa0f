// The event loop under the connection-oriented tiers (TCP and verbs): one
// epoll instance, an eventfd to wake its owner and a timerfd for deadlines.
//
// The epoll fd is the transport's wait_fd(): it becomes readable whenever the
// transport has work, whether a descriptor of the transport's own is ready,
// wake() was called (ends waiting to be reported, or another thread filed
// something through wake_fd()) or the timer reached its deadline. wait()
// takes the wake and the timer events itself and hands back only the tags of
// the transport's descriptors.
//
// A poll pass runs through run_pass(): callbacks made inside it that call
// poll() again get nothing (the pass under way does the work), an exception
// out of the pass ends it (what is pending is retried by the next one), and
// ends noted during the pass wake the owner once it is over.
#pragma once

#include <sys/epoll.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <optional>

namespace pgrac::tiers {

class EventLoop {
  public:
    // Tags of the loop's own descriptors; a transport's tags are any others.
    static constexpr uint64_t kWakeTag = ~uint64_t{0};
    static constexpr uint64_t kTimerTag = ~uint64_t{0} - 1;

    EventLoop();
    ~EventLoop();
    EventLoop(const EventLoop&) = delete;
    EventLoop& operator=(const EventLoop&) = delete;

    // False if setting up epoll, the eventfd or the timerfd failed; error()
    // is the errno of that failure.
    bool ok() const { return epfd_ >= 0; }
    int error() const { return error_; }

    int fd() const { return epfd_; }         // wait_fd()
    int wake_fd() const { return wakefd_; }  // written by other threads to wake the owner

    // epoll_ctl on fd with tag as its data; false with errno set on failure.
    bool add(int fd, uint32_t events, uint64_t tag);
    bool modify(int fd, uint32_t events, uint64_t tag);
    void remove(int fd);

    // epoll_wait for up to timeout_ms. The wake and timer events are drained
    // here; the transport's ready descriptors (tag in data.u64) are left in
    // events[0, n), in the order epoll gave them, and n returned (0 on error).
    int wait(epoll_event* events, int max_events, int timeout_ms);

    // Makes fd() readable until the next wait(); one write however often called.
    void wake();

    // Arms the timer (CLOCK_MONOTONIC, absolute) at when, or disarms it if
    // there is no when.
    void arm_timer(std::optional<std::chrono::steady_clock::time_point> when);
    bool timer_armed() const { return timer_armed_; }

    // Ends waiting to be reported. note_report() counts one and wakes the
    // owner unless a pass is under way (it delivers the report before it
    // returns); deliver_conn_reports() counts them down.
    void note_report();
    size_t& pending_reports() { return pending_reports_; }

    bool in_pass() const { return in_pass_; }

    // Runs body as one poll pass; false, without running it, when a pass is
    // under way already (a handler callback called poll()) or the loop is not
    // usable. An exception out of body ends the pass and is swallowed. If
    // reports are still pending afterwards the owner is woken for them.
    template <typename Body>
    bool run_pass(Body&& body) {
        if (in_pass_ || !ok()) return false;
        in_pass_ = true;
        try {
            body();
        } catch (...) {
            // A handler's exception or out of memory outside a connection's
            // work; what is pending is retried by the next pass.
        }
        in_pass_ = false;
        if (pending_reports_ > 0) wake();
        return true;
    }

  private:
    int epfd_ = -1, wakefd_ = -1, timerfd_ = -1;
    int error_ = 0;
    bool wake_signalled_ = false;  // wakefd_ is readable
    bool timer_armed_ = false;
    bool in_pass_ = false;
    size_t pending_reports_ = 0;
};

}  // namespace pgrac::tiers
