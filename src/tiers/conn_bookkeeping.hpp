// Connection bookkeeping shared by the connection-oriented tiers (TCP and
// verbs): reporting ended connections to the handler, connect deadlines, and
// the error texts of listen() and connect(). Their event loop is event_loop.hpp.
//
// A transport keeps its connections as std::unordered_map<ConnId,
// std::unique_ptr<Conn>>, where Conn has `bool report_pending`, a `state`
// (an enum with a Connecting value) and a steady_clock `deadline`.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "ic/wire/frame.hpp"
#include "tiers/transports.hpp"

namespace pgrac::tiers {

// How one ended connection is reported to the handler.
struct ConnEndReport {
    enum class Kind {
        Silent,         // never announced: nothing to report
        ConnectFailed,  // on_connected(false, reason)
        Closed,         // on_closed(reason, frame_error)
    };
    Kind kind = Kind::Silent;
    std::string reason;
    ic::FrameError frame_error = ic::FrameError::None;
};

// Reports ended connections (report_pending set) in ConnId order until
// pending_reports is 0. take_end(conn) takes the end over from the transport
// and says how to report it; it may erase the connection's entry. Ends that a
// callback causes are picked up by the next pass. A handler's exception
// propagates; what is still pending is reported by a later call.
template <typename ConnMap, typename TakeEnd>
void deliver_conn_reports(TransportHandler& handler, ConnMap& conns, size_t& pending_reports,
                          TakeEnd&& take_end) {
    while (pending_reports > 0) {
        std::vector<ConnId> ids;
        for (const auto& [id, c] : conns)
            if (c->report_pending) ids.push_back(id);
        if (ids.empty()) {  // cannot happen; never spin on a miscount
            pending_reports = 0;
            break;
        }
        std::sort(ids.begin(), ids.end());
        for (ConnId id : ids) {
            auto it = conns.find(id);
            if (it == conns.end() || !it->second->report_pending) continue;
            const ConnEndReport r = take_end(*it->second);
            --pending_reports;
            if (r.kind == ConnEndReport::Kind::ConnectFailed)
                handler.on_connected(id, false, r.reason);
            else if (r.kind == ConnEndReport::Kind::Closed)
                handler.on_closed(id, r.reason, r.frame_error);
        }
    }
}

// Calls end_timeout(conn) for every connection still `connecting` past its deadline.
template <typename ConnMap, typename State, typename EndTimeout>
void expire_connect_deadlines(ConnMap& conns, State connecting, EndTimeout&& end_timeout) {
    const auto now = std::chrono::steady_clock::now();
    for (auto& [id, c] : conns)
        if (c->state == connecting && c->deadline <= now) end_timeout(*c);
}

// The earliest deadline of the connections still `connecting`, if any.
template <typename ConnMap, typename State>
std::optional<std::chrono::steady_clock::time_point> earliest_connect_deadline(const ConnMap& conns,
                                                                               State connecting) {
    std::optional<std::chrono::steady_clock::time_point> earliest;
    for (const auto& [id, c] : conns)
        if (c->state == connecting && (!earliest || c->deadline < *earliest))
            earliest = c->deadline;
    return earliest;
}

// The outcome of listen() on every resolved address: true if any is bound,
// else false with *error naming the first failure.
inline bool listen_outcome(size_t bound, const std::string& first_error, std::string* error) {
    if (bound == 0) *error = "cannot listen: " + first_error;
    return bound > 0;
}

// Sets *error to text where out of memory must not escape (in a catch block).
inline void set_error_nothrow(std::string* error, const char* text) noexcept {
    try {
        *error = text;
    } catch (...) {
    }
}

}  // namespace pgrac::tiers
