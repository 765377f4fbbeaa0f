#include "ic/ges/types.hpp"

#include <algorithm>
#include <cstring>

namespace pgrac::ic::ges {

LockValue LockValue::valid(const void* bytes, size_t n) {
    LockValue v;
    v.state = ValueState::Valid;
    v.len = static_cast<uint8_t>(std::min<size_t>(n, kMaxLockValue));
    if (v.len != 0) std::memcpy(v.data, bytes, v.len);
    return v;
}

LockValue LockValue::invalid() {
    LockValue v;
    v.state = ValueState::Invalid;
    return v;
}

// Only the bytes that count are compared: an invalid or absent value has none.
bool operator==(const LockValue& a, const LockValue& b) {
    if (a.state != b.state) return false;
    if (a.state != ValueState::Valid) return true;
    return a.len == b.len && std::memcmp(a.data, b.data, a.len) == 0;
}

const char* lock_state_name(LockState s) {
    switch (s) {
        case LockState::Granted:
            return "granted";
        case LockState::Converting:
            return "converting";
        case LockState::Waiting:
            return "waiting";
    }
    return "unknown";
}

const char* deny_reason_name(DenyReason r) {
    switch (r) {
        case DenyReason::NoWait:
            return "nowait";
        case DenyReason::Deadlock:
            return "deadlock";
        case DenyReason::Cancelled:
            return "cancelled";
        case DenyReason::Timeout:
            return "timeout";
        case DenyReason::AlreadyPending:
            return "already_pending";
        case DenyReason::NotHeld:
            return "not_held";
        case DenyReason::NoQuorum:
            return "no_quorum";
        case DenyReason::Redirect:
            return "redirect";
    }
    return "unknown";
}

Event Event::granted(Owner o, const ResourceName& r, LockMode m, uint64_t id) {
    Event e;
    e.type = EventType::Granted;
    e.owner = o;
    e.resource = r;
    e.mode = m;
    e.request_id = id;
    return e;
}

Event Event::bast(Owner o, const ResourceName& r, LockMode blocked, uint64_t id) {
    Event e = granted(o, r, blocked, id);
    e.type = EventType::Bast;
    return e;
}

Event Event::denied(Owner o, const ResourceName& r, LockMode m, uint64_t id, DenyReason why) {
    Event e = granted(o, r, m, id);
    e.type = EventType::Denied;
    e.reason = why;
    return e;
}

bool operator==(const Event& a, const Event& b) {
    return a.type == b.type && a.owner == b.owner && a.resource == b.resource && a.mode == b.mode &&
           a.request_id == b.request_id && (a.type != EventType::Denied || a.reason == b.reason);
}

bool operator==(const ReplayEntry& a, const ReplayEntry& b) {
    return a.owner == b.owner && a.resource == b.resource && a.state == b.state &&
           a.granted_mode == b.granted_mode && a.requested_mode == b.requested_mode &&
           a.request_id == b.request_id && a.flags == b.flags && a.since == b.since &&
           a.token == b.token && a.value == b.value;
}

}  // namespace pgrac::ic::ges
