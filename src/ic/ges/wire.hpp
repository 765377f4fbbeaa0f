// Wire encoding of GES messages: the body of an interconnect message, a small
// fixed little-endian format. Decoding treats the bytes as untrusted network
// input: every field is range-checked and the message must use every byte.
//
// Every message starts with
//   0 u8 version (5)   1 u8 type (GesMsgType)   2 u16 reserved (0)
//   4 u32 epoch: the sender's membership epoch (docs/ges.md, "Epochs")
// then, by type (owner = u16 node (1..64), u32 proc;
//                resource = u8 kind (1 text, 2 bigint), u8 len, len bytes:
//                text 1..64 bytes without NUL, bigint exactly 8 bytes LE):
//                value = u8 state (0 none, 1 valid, 2 invalid), and if valid u8 len
//                (0..32), len bytes: a lock value block, docs/ges.md "Lock value blocks"):
//   Request, Convert  owner, u64 request_id, u8 mode, u8 flags, u32 timeout_ms, resource,
//                     value (written by a PW/EX holder's down-conversion)
//   Release           owner, resource, value (written by a PW/EX holder; invalid: it
//                     went away without writing)
//   ReleaseAll        owner, u64 bound (0: everything; else the owner's last request id: its
//                     locks of later requests of the same session stay, docs/ges.md
//                     "Direct routing")
//   Cancel            owner, u64 request_id (0: whatever is pending), u8 reason, resource
//                     (reason: cancelled, timeout or deadlock)
//   Grant             owner, u64 request_id, u8 mode, u64 fencing token, resource,
//                     value (the resource's; none only from a master that has none)
//   Bast              owner (the holder), u64 grant's request_id, u8 blocked mode (not NL),
//                     resource
//   Deny              owner, u64 request_id, u8 mode, u8 reason, resource
//   Withdraw          as Cancel (a direct request given up: cancelled if waiting, its lock
//                     released if granted under exactly this id)
//   Queued            owner, u64 request_id, u8 mode, resource (the answer to a direct
//                     Request that waits: docs/ges.md, "Direct routing")
//   Replay            u8 flags (bit 0: last batch from this node), u8 reserved (0), u16 count,
//                     count entries: owner, u64 request_id, i64 since, u8 state,
//                     u8 granted_mode, u8 requested_mode, u8 flags, u64 token, resource,
//                     value (none for a waiting entry)
//   ReplayDone        u16 worker, u16 n_workers (1..16, worker below it), u32 replayed,
//                     u64 witnesses     (the replay barrier's marker: docs/ges.md,
//                     "Epochs and the rebuild")
//   WaitHint          u16 worker, u32 oldest_wait_ms          (cluster-wide deadlock search:
//   EdgesRequest      u64 round (nonzero), u32 min_wait_ms     see docs/ges.md, "Deadlocks")
//   Transfer          owner (the holder now), u32 to_proc (the new holder, same node),
//                     u64 request_id (0: no answer; else the master grants to_proc under
//                     it: a new token), resource, value (as Release's) (docs/ges.md,
//                     "Node-level caching": a
//                     backend's lock becomes the node's cached lock, proc 0, or back)
//   CacheNotify       owner, resource (a backend -> its LMS: the local users of the cached lock
//                     changed while a BAST or a local conversion waits)
//   HandOff           resource, value, u32 grant_seq, u16 count (<= 450), count replay
//                     entries, each of the resource (mastership that follows use: the home
//                     master -> the new one, the resource's whole table and its token floor)
//   HandOffAck        resource (the new master -> the home master: installed)
//   Forwarded         u16 origin (1..64), u16 len, len bytes: a Request, Convert, Release,
//                     Cancel or Transfer that origin sent the home master, of the same epoch
//   Moved             resource (the new master -> a client node, before its first reply
//                     there: answers about the resource come from here in this epoch)
//   Drained           resource (the home -> the new master, after its HandOffAck: every
//                     message the new master's own node sent the home before is back)
//   Edges             u64 round (nonzero), u16 worker, u8 flags (bit 0: last part, bit 1:
//                     incomplete), u8 reserved (0), u16 count (<= 600), count entries:
//                     waiter owner, holder owner, u16 master, u64 request_id, i64 since,
//                     u64 order, resource (waiter != holder)
// request_id is nonzero everywhere except Cancel. Replay entries must be
// consistent: Granted has requested == granted, Converting has them differ,
// Waiting has granted 0 (NL).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "ic/ges/deadlock.hpp"
#include "ic/ges/types.hpp"

namespace pgrac::ic::ges {

inline constexpr uint8_t kGesWireVersion = 5;

enum class GesMsgType : uint8_t {
    Request = 1,
    Convert = 2,
    Release = 3,
    ReleaseAll = 4,
    Cancel = 5,
    Grant = 6,
    Bast = 7,
    Deny = 8,
    Replay = 9,
    // The cluster-wide deadlock search (docs/ges.md, "Deadlocks").
    WaitHint = 10,      // an LMS worker -> the coordinator: I have a request waiting too long
    EdgesRequest = 11,  // the coordinator -> an LMS worker: your wait-for edges, please
    Edges = 12,         // the worker's answer, in one or more parts
    // An LMS worker -> a master's worker of the same index: my replay to you in
    // this epoch is complete; it names the sender's worker and the settings the
    // replay's routing rests on, which the master checks against its own.
    ReplayDone = 13,
    // Node-level caching (docs/ges.md): a client LMS -> the master: the lock of
    // `owner` on the resource is now `to_proc`'s of the same node.
    Transfer = 14,
    // A backend -> its LMS: a cached lock's local users changed (client only).
    CacheNotify = 15,
    // Mastership that follows use (docs/ges.md): within an epoch a resource's
    // home master (master_for) hands its table to the node that uses it most.
    HandOff = 16,     // home -> new master: the resource's locks
    HandOffAck = 17,  // new master -> home: installed
    Forwarded = 18,   // home -> new master: a message of another node about the resource
    Moved = 19,       // new master -> a client node: the resource is mastered here now
    Drained = 20,     // home -> new master: your own earlier messages came back; go local
    // Direct routing (docs/ges.md): the master's answer to a direct Request
    // that waits (its grant or denial comes later, through the requester's LMS).
    Queued = 21,
    // A client LMS -> the master: its backend gave up a direct request whose
    // answer it may never have seen: cancel it, or release the lock granted
    // under exactly that id.
    Withdraw = 22,
};
inline constexpr uint8_t kMaxGesMsgType = 22;
const char* ges_msg_type_name(GesMsgType t);

enum ReplayFlag : uint8_t { kReplayLast = 0x01 };
enum EdgesFlag : uint8_t {
    kEdgesLast = 0x01,        // the source's last part for this round
    kEdgesIncomplete = 0x02,  // the source's graph cannot be trusted now (replaying)
};
inline constexpr uint8_t kKnownEdgesFlags = 0x03;

// Largest encoded entry is 134 bytes (100 and a 34-byte value); this many fit
// in one PGRAC_IC_MAX_MESSAGE (64 KiB) body with room to spare.
inline constexpr uint16_t kMaxReplayEntries = 450;
inline constexpr size_t kMaxGesMessage = 65536;
// A Forwarded message's inner one (a Request is at most 128 bytes).
inline constexpr size_t kMaxForwardedInner = 512;
// Largest encoded edge is 104 bytes: 600 of them and the 22-byte head fit.
inline constexpr uint16_t kMaxEdgeEntries = 600;
// LMS worker indexes on the wire (WaitHint, Edges, ReplayDone) are below this,
// and a ReplayDone's n_workers is at most this.
inline constexpr uint16_t kMaxWireWorkers = 16;

// One decoded message; only the fields its type uses are meaningful.
struct GesMessage {
    GesMsgType type = GesMsgType::Request;
    uint32_t epoch = 0;  // every type: the sender's membership epoch
    uint64_t token = 0;  // Grant: the fencing token of the grant
    Owner owner;
    ResourceName resource;
    LockMode mode = LockMode::NL;
    uint64_t request_id = 0;
    uint8_t flags = 0;           // Request/Convert: RequestFlag; Replay: ReplayFlag
    uint32_t timeout_ms = 0;     // Request/Convert: the requester's wait limit, 0 = none
    uint32_t to_proc = 0;        // Transfer: the new holder (owner.node's)
    LockValue value;             // Request/Convert/Release/Transfer/Grant/HandOff: the value block
    uint32_t grant_seq = 0;      // HandOff: the home worker's grant count (the new one's floor)
    uint16_t origin = 0;         // Forwarded: the node that sent the inner message
    std::vector<uint8_t> inner;  // Forwarded: the inner message, encoded
    DenyReason reason = DenyReason::Cancelled;  // Cancel, Deny
    std::vector<ReplayEntry> entries;           // Replay
    uint64_t round = 0;                         // EdgesRequest, Edges: the search round
    uint16_t worker = 0;             // WaitHint, Edges, ReplayDone: the sender's LMS index
    uint32_t wait_ms = 0;            // WaitHint: oldest wait; EdgesRequest: min_wait_ms (> 0)
    std::vector<WaitForEdge> edges;  // Edges (flags: EdgesFlag)
    // ReplayDone: the sender's cluster.lms_workers, how many replay entries it
    // sent this master in the epoch, and its cluster.witness_nodes (bit id-1).
    uint16_t n_workers = 1;
    uint32_t replayed = 0;
    uint64_t witnesses = 0;
};
bool operator==(const GesMessage& a, const GesMessage& b);

enum class GesWireError : uint8_t {
    None = 0,
    Truncated,      // ends inside a field
    TrailingBytes,  // bytes left after the message
    BadVersion,
    BadType,
    BadReserved,   // a reserved field is not zero
    BadNode,       // owner node outside 1..64
    BadRequestId,  // zero where a request id is required
    BadMode,
    BadFlags,
    BadReason,
    BadResource,  // unknown kind, bad length, NUL in text
    BadState,     // replay entry state unknown or inconsistent with its modes
    BadCount,     // replay count above kMaxReplayEntries, edge count above kMaxEdgeEntries
    BadEdge,      // an edge from an owner to itself
    BadWorker,    // LMS worker index out of range
    BadRound,     // zero round, or zero min_wait_ms
    BadValue,     // value state unknown, length above kMaxLockValue, or one where none may be
    BadInner,     // a Forwarded message's inner one does not decode, is of a type that is not
                  // forwarded, or of another epoch; a HandOff entry of another resource
};
const char* ges_wire_error_name(GesWireError e);

// Validates m as decode() would and appends its encoding to out; on error out
// is unchanged.
GesWireError encode_ges_message(const GesMessage& m, std::vector<uint8_t>* out);
GesWireError decode_ges_message(const uint8_t* in, size_t len, GesMessage* out);

// A node's whole replay to one master, split into messages of at most
// kMaxReplayEntries entries; the last carries kReplayLast (an empty replay is
// one message with count 0, so the master still hears "done"). Entries that
// would not decode are left out.
// Whether a message of this type may travel inside a Forwarded one.
bool forwardable(GesMsgType t);

std::vector<std::vector<uint8_t>> encode_replay_messages(const std::vector<ReplayEntry>& entries,
                                                         uint32_t epoch = 0);

// One source's edges for one round of the cluster-wide deadlock search, split
// into messages of at most kMaxEdgeEntries edges; the last carries kEdgesLast
// (no edges is one message with count 0), every part kEdgesIncomplete if
// `incomplete`. Edges that would not decode are left out.
std::vector<std::vector<uint8_t>> encode_edges_messages(uint64_t round, uint16_t worker,
                                                        const std::vector<WaitForEdge>& edges,
                                                        bool incomplete);

// Glue helpers: the message that tells a requester about an event.
GesMessage message_for_event(const Event& e);

}  // namespace pgrac::ic::ges
