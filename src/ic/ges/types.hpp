// Vocabulary shared by the GES lock table, the client registry and the wire
// codec: who owns a lock, what state it is in, and the events the table emits.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "ic/ges/mode.hpp"
#include "ic/ges/resource.hpp"

namespace pgrac::ic::ges {

// A lock owner: a backend (pid, or backend id) on a node. Session-level
// semantics, as pg_advisory_lock: an owner holds at most one lock per resource;
// asking again while holding it converts that lock to the new mode.
struct Owner {
    uint16_t node = 0;
    uint32_t proc = 0;
};
inline bool operator==(Owner a, Owner b) {
    return a.node == b.node && a.proc == b.proc;
}
inline bool operator!=(Owner a, Owner b) {
    return !(a == b);
}
inline bool operator<(Owner a, Owner b) {
    return a.node != b.node ? a.node < b.node : a.proc < b.proc;
}
struct OwnerHash {
    size_t operator()(Owner o) const { return (static_cast<size_t>(o.node) << 32) ^ o.proc; }
};

// The owner of a node's cached locks (docs/ges.md, "Node-level caching"):
// proc 0 names no backend.
inline constexpr uint32_t kNodeOwnerProc = 0;
inline Owner node_owner(uint16_t node) {
    return Owner{node, kNodeOwnerProc};
}

// The key of per-lock maps: (resource, owner), ordered by resource first.
struct LockKey {
    ResourceName resource;
    Owner owner;
    bool operator<(const LockKey& o) const {
        return resource < o.resource || (resource == o.resource && owner < o.owner);
    }
};

// A lock value block (docs/ges.md, "Lock value blocks"): up to
// kMaxLockValue bytes a resource carries with its locks, written by a PW or
// EX holder when it releases or converts down, returned with every grant.
// Invalid when a PW or EX holder went away without writing (its session
// ended, its node was fenced) or a rebuild could not tell the last value.
// On a message: None carries nothing (a release that leaves the value as it
// is), Valid a value, Invalid the mark.
inline constexpr uint8_t kMaxLockValue = 32;
enum class ValueState : uint8_t { None = 0, Valid = 1, Invalid = 2 };
inline constexpr uint8_t kMaxValueState = 2;
struct LockValue {
    ValueState state = ValueState::None;
    uint8_t len = 0;  // Valid: 0..kMaxLockValue
    uint8_t data[kMaxLockValue] = {};

    static LockValue valid(const void* bytes, size_t n);  // n <= kMaxLockValue
    static LockValue invalid();
    bool carries() const { return state != ValueState::None; }
};
bool operator==(const LockValue& a, const LockValue& b);
inline bool operator!=(const LockValue& a, const LockValue& b) {
    return !(a == b);
}
// Whether a holder of `m` writes the value: PW and EX only.
inline bool mode_writes_value(LockMode m) {
    return m == LockMode::PW || m == LockMode::EX;
}

// Values are the wire encoding.
enum class LockState : uint8_t {
    Granted = 1,     // holds granted_mode
    Converting = 2,  // holds granted_mode, waits for requested_mode
    Waiting = 3,     // holds nothing, waits for requested_mode
};
const char* lock_state_name(LockState s);  // "granted", "converting", "waiting"

// Request flags (wire encoding).
enum RequestFlag : uint8_t {
    kNoWait = 0x01,  // deny at once (DenyReason::NoWait) instead of queueing
    // Direct routing (docs/ges.md, "Direct routing"): the backend sends this
    // request to the master itself, on its requester lane; its LMS only
    // registers it (a backend -> its LMS), and the master answers in the RPC.
    kDirect = 0x02,
};
inline constexpr uint8_t kKnownRequestFlags = 0x03;
// A replay or hand-off entry carries only what a waiting request keeps.
inline constexpr uint8_t kKnownEntryFlags = kNoWait;

// A backend's request ids carry its slot and session in the high 32 bits and
// a counter below (src/instance/ges_shmem.hpp); the LMS's own have bit 63 set.
// Whether id is a later request of the same session than bound (a bounded
// ReleaseAll leaves those: docs/ges.md, "Direct routing"). bound 0: none is.
inline bool request_after_bound(uint64_t id, uint64_t bound) {
    constexpr uint64_t kInternal = uint64_t{1} << 63;
    return bound != 0 && (id & kInternal) == 0 && (id >> 32) == (bound >> 32) &&
           (id & 0xffffffffu) > (bound & 0xffffffffu);
}
// What a ReleaseAll bounded by `bound` lets go: everything if 0; else the
// bound's session's requests up to it, and the LMS's own (bit 63). Another
// session's (a new backend with the same pid, whose direct request came
// first) stays.
inline bool released_by_bound(uint64_t id, uint64_t bound) {
    constexpr uint64_t kInternal = uint64_t{1} << 63;
    return bound == 0 || (id & kInternal) != 0 ||
           ((id >> 32) == (bound >> 32) && (id & 0xffffffffu) <= (bound & 0xffffffffu));
}

// Why a request or conversion was not granted. Values are the wire encoding.
enum class DenyReason : uint8_t {
    NoWait = 1,          // NOWAIT and not grantable at once
    Deadlock = 2,        // chosen as the victim of a deadlock
    Cancelled = 3,       // cancel(): query cancel, or the requester gave up
    Timeout = 4,         // the request's deadline passed on the master
    AlreadyPending = 5,  // the owner already has a request pending on this resource
    NotHeld = 6,         // convert() of a resource the owner does not hold
    NoQuorum = 7,        // this node is not a member with a valid lease (fenced, joining)
    // Not served on the direct path (another epoch, a barrier, not the home
    // master, a message of the owner about the resource still on the LMS
    // path): the request goes through the requester's LMS instead.
    Redirect = 8,
};
inline constexpr uint8_t kMaxDenyReason = 8;
const char* deny_reason_name(DenyReason r);  // "nowait", "deadlock", ...

enum class EventType : uint8_t {
    Granted = 1,  // owner now holds resource in mode; request_id is the request's
    Bast = 2,     // owner (a holder) blocks a request for mode on resource
    Denied = 3,   // owner's request request_id for mode was not granted: reason
};

// One thing the glue must tell a node. Every event goes to owner.node.
struct Event {
    EventType type = EventType::Granted;
    Owner owner;
    ResourceName resource;
    LockMode mode = LockMode::NL;  // Granted: new mode; Bast: the blocked mode; Denied: asked
    uint64_t request_id = 0;       // Granted/Denied: the request; Bast: the holder's grant
    DenyReason reason = DenyReason::Cancelled;  // Denied only
    uint64_t token = 0;                         // Granted: the fencing token (set by the glue)
    LockValue value;                            // Granted: the resource's value block

    static Event granted(Owner o, const ResourceName& r, LockMode m, uint64_t id);
    static Event bast(Owner o, const ResourceName& r, LockMode blocked, uint64_t id);
    static Event denied(Owner o, const ResourceName& r, LockMode m, uint64_t id, DenyReason why);
};
bool operator==(const Event& a, const Event& b);
using Events = std::vector<Event>;

// A lock as a client replays it to a (new) master after membership changes.
struct ReplayEntry {
    Owner owner;
    ResourceName resource;
    LockState state = LockState::Granted;
    LockMode granted_mode = LockMode::NL;    // Granted/Converting; NL (ignored) for Waiting
    LockMode requested_mode = LockMode::NL;  // Converting/Waiting; == granted_mode for Granted
    uint64_t request_id = 0;                 // the pending request, or the one that was granted
    uint8_t flags = 0;                       // RequestFlag bits of the pending request
    int64_t since = 0;                       // when the lock entered its state (requester's clock)
    uint64_t token = 0;                      // fencing token of the held mode's grant (0: none)
    LockValue value;  // Granted/Converting: the value block as this holder knows it (None: none)
};
bool operator==(const ReplayEntry& a, const ReplayEntry& b);

}  // namespace pgrac::ic::ges
