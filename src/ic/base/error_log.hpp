// A bounded ring of recent interconnect errors in shared memory, plus per-type
// totals that never wrap silently (64-bit). Written by any process; read by the
// errors view. Entries are published with a sequence number so that a reader
// skips an entry that is being overwritten.
#pragma once

#include <cstddef>
#include <cstdint>

namespace pgrac::ic {

enum class ErrorType : uint16_t {
    MalformedFrame = 0,
    BadChecksum,
    OversizedMessage,
    UnknownNode,
    AddressMismatch,
    WrongKey,
    ClusterMismatch,
    SystemMismatch,
    VersionMismatch,
    HandshakeFailed,
    ConnectFailed,
    PeerDown,
    PeerReset,
    QueueFull,
    InboxFull,
    RpcTimeout,
    NoHandler,
    HandlerError,
    CqOverflow,
    QpError,
    TierFallback,
    Internal,
    StaleEpoch,            // a GES message of an older membership epoch
    WrongSource,           // a GES message from a node that may not send it
    ReplayConflict,        // a replayed grant conflicts with a granted lock
    Fenced,                // this node lost its lease and voided its global locks
    MembershipChange,      // a new membership view was committed here
    DuplicateNode,         // a second instance claims a node id that is connected
    LimitMismatch,         // a peer built with another largest message
    FrameAuthFailed,       // a frame's tag did not verify (forged, altered, replayed, reordered)
    UnauthenticatedLimit,  // an accepted connection closed: too many still unauthenticated
    AcceptPaused,          // accept failed (EMFILE, ...): not accepting for a while
    ConfigMismatch,        // a peer's safety or routing settings differ from ours: refused
    ConfigDrift,           // a peer's timing settings differ: leases take the safe value
    Busy,                  // a connection refused as busy (requester lanes, peer not UP)
    FutureEpoch,           // a GES message of an epoch this node has not committed yet
    BarrierOverdue,        // a replay barrier waited too long for a member's marker
    kCount
};
const char* error_type_name(ErrorType t);  // "wrong_key", ...

enum class Severity : uint8_t { Info = 0, Warning = 1, Error = 2 };
const char* severity_name(Severity s);  // "INFO", "WARNING", "ERROR"

inline constexpr size_t kErrorDescriptionMax = 200;

struct ErrorEntry {
    uint64_t seq;       // 0 = never written; odd while being written (seqlock)
    int64_t time_us;    // microseconds since the Unix epoch
    int32_t peer_node;  // -1 when not about one peer
    uint16_t type;      // ErrorType
    uint8_t severity;   // Severity
    uint8_t pad;
    char description[kErrorDescriptionMax];
};

struct ErrorLog {
    static constexpr size_t kEntries = 256;

    uint64_t next;  // entries ever written
    uint64_t totals[static_cast<size_t>(ErrorType::kCount)];
    ErrorEntry entries[kEntries];

    void reset();
    // Records one error (counts it and keeps it in the ring). Thread/process safe.
    void add(ErrorType type, Severity severity, int32_t peer_node, int64_t time_us,
             const char* description);
    // Counts one error in the totals only (a flood whose entries would push
    // every other error out of the ring).
    void count_only(ErrorType type);
    // Copies up to max entries, newest first; returns how many.
    size_t snapshot(ErrorEntry* out, size_t max) const;
    uint64_t total(ErrorType t) const;
};

}  // namespace pgrac::ic
