// Requester lanes, the backend's side (requester_path.hpp): a TCP socket at
// tier3, a queue pair of the process's own on the verbs tiers. The lanes live as
// long as the process; everything C++ here runs inside guarded() and holds no
// PostgreSQL resource, so an interrupt is handled by the caller afterwards.
extern "C" {
#include "postgres.h"

#include "access/xlog.h"
#include "miscadmin.h"
#include "storage/fd.h"
#include "storage/pmsignal.h"
}

#include <algorithm>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "capi/requester_path.hpp"
#include "instance/guc.hpp"
#include "ic/base/atomics.hpp"
#include "ic/session/handshake.hpp"
#include "ic/engine/requester_lane.hpp"
#include "ic/engine/transport_lane.hpp"
#include "instance/pg_boundary.hpp"
#include "pgrac_ic/pgrac_ic.h"
#include "instance/shmem.hpp"
#include "tiers/tier.hpp"

using namespace pgrac::ic;

namespace pgrac::glue {

namespace {

// After a lane broke, the listeners carry this process's RPCs to that node
// for a second; after the peer refused one (not UP there yet, another
// instance, its lane limit), for ten; after this process could not make one
// (the device, locked memory), for a minute.
constexpr uint64_t kRetryAfterNs = 1000ull * 1000 * 1000;
constexpr uint64_t kRetryAfterRefusalNs = 10 * kRetryAfterNs;
constexpr uint64_t kRetryAfterLocalFailureNs = 60 * kRetryAfterNs;

// File descriptors a lane holds, counted against PostgreSQL's budget for
// descriptors outside its file cache (AcquireExternalFD), so that the
// backend's own files are not starved: a socket at tier3; on verbs the device
// contexts librdmacm opens, the rdma_cm channel, the completion channel, an
// epoll and a timerfd (docs/architecture.md): five with one device, and one
// to spare.
constexpr int kTcpLaneFds = 1;
constexpr int kVerbsLaneFds = 6;

struct NodeLane {
    std::unique_ptr<RequesterLaneBase> lane;
    int fds_reserved = 0;           // while lane is set (reopened in place, kept)
    uint64_t incarnation = 0;       // ours when it was opened
    uint64_t peer_incarnation = 0;  // the peer's when it was opened
    uint64_t retry_after_ns = 0;
    bool one_way_sent = false;
    bool local_failure_reported = false;  // once per process and node
};

// Indexed by node id. Allocated on first use, kept for the process's life.
std::vector<NodeLane>* g_lanes = nullptr;
std::vector<uint8_t>* g_key = nullptr;  // cluster.auth_key_file, read once
bool g_key_failed = false;

// nullptr when out of memory.
NodeLane* lane_of(int node) noexcept {
    if (g_lanes == nullptr) g_lanes = new (std::nothrow) std::vector<NodeLane>();
    if (g_lanes == nullptr) return nullptr;
    if (g_lanes->empty()) {
        try {
            g_lanes->resize(kMaxNodes + 1);
        } catch (...) {
            return nullptr;
        }
    }
    return &(*g_lanes)[node];
}

// Reserves n external file descriptors for a lane of nl (all or none).
bool reserve_fds(NodeLane& nl, int n) {
    for (int i = 0; i < n; i++) {
        if (!AcquireExternalFD()) {
            for (int j = 0; j < i; j++) ReleaseExternalFD();
            return false;
        }
    }
    nl.fds_reserved = n;
    return true;
}

// Closes nl's lane (if any) and gives its descriptors back to the budget.
void drop_lane(NodeLane& nl) {
    nl.lane.reset();
    for (; nl.fds_reserved > 0; nl.fds_reserved--) ReleaseExternalFD();
}

// Only what ends the wait for good: a cancel or termination (then
// CHECK_FOR_INTERRUPTS raises it) or the postmaster's death.
// Interrupts that cannot be processed now (held off: a lightweight lock, a
// critical section) do not end the wait, as they would not end a latch wait.
bool must_stop() {
    if (!PostmasterIsAlive()) return true;
    if (InterruptHoldoffCount != 0 || CritSectionCount != 0) return false;
    return ProcDiePending || (QueryCancelPending && QueryCancelHoldoffCount == 0);
}

LocalIdentity identity(IcShared* shm) {
    LocalIdentity id;
    id.cluster_name = pgrac_cluster_name != nullptr ? pgrac_cluster_name : "";
    id.system_id = GetSystemIdentifier();
    id.node_id = static_cast<uint16_t>(pgrac_node_id);
    id.incarnation = load_acquire(&shm->incarnation);
    id.instance = shm->membership.self_instance;
    id.location = shm->membership.self_location;
    id.settings = shm->settings;
    id.max_message = PGRAC_IC_MAX_MESSAGE;
    id.protection = static_cast<WireProtection>(pgrac_wire_protection);
    if (g_key != nullptr) id.key = *g_key;
    return id;
}

// Loads the key the listener authenticates with (once; a failure keeps this
// process on the listener path, and the listener reports the file's problem).
bool have_key() noexcept {
    if (g_key != nullptr) return true;
    if (g_key_failed || pgrac_auth_key_file == nullptr || *pgrac_auth_key_file == '\0')
        return false;
    try {
        std::string err;
        auto key = load_key_file(pgrac_auth_key_file, &err);
        if (key) g_key = new std::vector<uint8_t>(std::move(*key));
    } catch (...) {
    }
    g_key_failed = g_key == nullptr;
    return g_key != nullptr;
}

LaneTransportFactory g_lane_transport = nullptr;  // install_lane_transport_factory

uint64_t now_ns() {
    return monotonic_ns();
}

bool is_verbs(uint32_t tier) {
    return tier == static_cast<uint32_t>(tiers::Tier::Tier1) ||
           tier == static_cast<uint32_t>(tiers::Tier::Tier2);
}

bool on_verbs(IcShared* shm) {
    return is_verbs(load_acquire(&shm->tier_active));
}

std::unique_ptr<RequesterLaneBase> make_lane(IcShared* shm, int node, const NodeAddress& addr,
                                             uint64_t deadline_ns) {
    if (!on_verbs(shm))
        return std::make_unique<RequesterLane>(identity(shm), static_cast<uint16_t>(node),
                                               addr.host, addr.port);
    return std::make_unique<TransportRequesterLane>(
        identity(shm), static_cast<uint16_t>(node), addr.host, addr.port,
        [deadline_ns](ic::TransportHandler& h, std::string* error) {
            std::unique_ptr<ic::Transport> t;
            if (g_lane_transport == nullptr) {
                *error = "no lane transport factory is installed";
                return t;
            }
            const uint64_t now = now_ns();
            const int timeout_ms = static_cast<int>(
                std::max<uint64_t>(1, deadline_ns > now ? (deadline_ns - now) / 1000000 : 1));
            return g_lane_transport(h, timeout_ms, error);
        });
}

}  // namespace

void install_lane_transport_factory(LaneTransportFactory make) {
    g_lane_transport = make;
}

bool requester_lane_usable(IcShared* shm, int node) noexcept {
    if (!pgrac_requester_lanes || node == pgrac_node_id || node < 1 || node > kMaxNodes)
        return false;
    const uint32_t tier = load_acquire(&shm->tier_active);
    if (tier != static_cast<uint32_t>(tiers::Tier::Tier3) && !is_verbs(tier)) return false;
    const PeerShared* p = peer_shared(shm, static_cast<uint32_t>(node));
    if (p == nullptr || load_relaxed(&p->state) != static_cast<uint32_t>(PeerState::Up))
        return false;
    const NodeLane* nl = lane_of(node);
    if (nl == nullptr || nl->one_way_sent || now_ns() < nl->retry_after_ns) return false;
    return have_key();
}

void note_one_way_message(int node) noexcept {
    if (node < 1 || node > kMaxNodes || node == pgrac_node_id) return;
    // Out of memory for the record means no lane either (usable() says no).
    if (NodeLane* nl = lane_of(node)) nl->one_way_sent = true;
}

void requester_rpc(IcShared* shm, int node, const MessageHeader& mh, uint16_t frame_flags,
                   const void* body, uint32_t len, void* reply_buf, uint32_t reply_cap,
                   uint64_t spin_ns, uint64_t deadline_ns, RequesterOutcome* out) {
    *out = RequesterOutcome{};
    char err[256] = "";
    const bool ok = guarded(
        [&] {
            NodeLane* nlp = lane_of(node);
            if (nlp == nullptr) return;
            NodeLane& nl = *nlp;
            const uint64_t incarnation = load_acquire(&shm->incarnation);
            const PeerShared* peer = peer_shared(shm, static_cast<uint32_t>(node));
            if (peer == nullptr) return;
            // A lane to an instance that is gone (the peer restarted; on verbs
            // its close may never reach us) is dropped before anything is sent.
            const uint64_t peer_incarnation = load_relaxed(&peer->incarnation);
            if (nl.lane != nullptr &&
                (nl.incarnation != incarnation || nl.peer_incarnation != peer_incarnation))
                drop_lane(nl);
            // Kept for the process's life: no allocation per RPC once they
            // have grown to the largest message (one RPC at a time).
            static std::vector<uint8_t> payload, reply;
            payload.resize(kMessageHeaderSize + len);
            encode_message_header(mh, payload.data());
            if (len > 0) std::memcpy(payload.data() + kMessageHeaderSize, body, len);
            reply.clear();
            bool& sent = out->taken;  // set by call() as soon as a byte is written
            std::string why;
            RequesterLane::Result r = RequesterLane::Result::Failed;
            // A lane kept from earlier RPCs may have been closed by the peer
            // meanwhile (nothing is sent on it then): one new lane is tried.
            for (int attempt = 0; attempt < 2 && !sent; attempt++) {
                const bool fresh = nl.lane == nullptr || !nl.lane->is_open();
                if (fresh) {
                    const auto& nodes = configured_nodes();
                    const NodeAddress* addr = nullptr;
                    for (const NodeAddress& a : nodes)
                        if (a.node_id == node) addr = &a;
                    if (addr == nullptr) return;
                    if (nl.fds_reserved == 0 &&
                        !reserve_fds(nl, on_verbs(shm) ? kVerbsLaneFds : kTcpLaneFds)) {
                        // Out of descriptors (dblink, postgres_fdw, other
                        // lanes): the listeners take this process's RPCs.
                        if (!nl.local_failure_reported) {
                            const std::string text =
                                "requester lane to node " + std::to_string(node) +
                                ": this process has no file descriptors to spare "
                                "(AcquireExternalFD); its RPCs to it take the listeners, "
                                "tried again every minute (raise max_files_per_process, "
                                "or hold fewer dblink or postgres_fdw connections)";
                            shm->errors.add(ErrorType::ConnectFailed, Severity::Warning, node,
                                            unix_time_us(), text.c_str());
                            nl.local_failure_reported = true;
                        }
                        nl.retry_after_ns = now_ns() + kRetryAfterLocalFailureNs;
                        return;
                    }
                    nl.lane = make_lane(shm, node, *addr, deadline_ns);
                    nl.incarnation = incarnation;
                    nl.peer_incarnation = peer_incarnation;
                    const auto opened = nl.lane->open(deadline_ns, must_stop, &why);
                    if (opened != RequesterLane::Result::Ok) {
                        // Nothing sent: the listeners take this RPC. A refusal
                        // by the peer is routine; a lane this process cannot
                        // make (locked memory, the device) is worth a word.
                        const bool local = nl.lane->failed_locally();
                        if (local && !nl.local_failure_reported) {
                            const std::string text = "requester lane to node " +
                                                     std::to_string(node) + ": " + why +
                                                     "; this process's RPCs to it take the "
                                                     "listeners (tried again every minute)";
                            shm->errors.add(ErrorType::ConnectFailed, Severity::Warning, node,
                                            unix_time_us(), text.c_str());
                            nl.local_failure_reported = true;
                        }
                        drop_lane(nl);
                        nl.retry_after_ns =
                            now_ns() + (local ? kRetryAfterLocalFailureNs : kRetryAfterRefusalNs);
                        out->interrupted = opened == RequesterLane::Result::Interrupted;
                        return;
                    }
                }
                r = nl.lane->call(payload.data(), static_cast<uint32_t>(payload.size()),
                                  frame_flags, mh.rpc_id, spin_ns, deadline_ns, must_stop, &reply,
                                  &sent, &why);
                if (!sent && (fresh || r == RequesterLane::Result::Interrupted)) break;
            }
            out->interrupted = r == RequesterLane::Result::Interrupted;
            if (!sent) {  // could not even start writing: the listeners take it
                nl.retry_after_ns = now_ns() + kRetryAfterNs;
                return;
            }
            PeerShared* p = peer_shared(shm, static_cast<uint32_t>(node));
            count(&p->rpcs_sent);
            count(&p->direct_rpcs_sent);
            count(&p->msgs_sent);
            count<uint64_t>(&p->bytes_sent, kFrameHeaderSize + payload.size());
            switch (r) {
                case RequesterLane::Result::Ok: {
                    MessageHeader rh;
                    decode_message_header(reply.data(), static_cast<uint32_t>(reply.size()), &rh);
                    count(&p->msgs_recv);
                    count<uint64_t>(&p->bytes_recv, kFrameHeaderSize + reply.size());
                    uint32_t n = static_cast<uint32_t>(reply.size() - kMessageHeaderSize);
                    out->status = static_cast<int>(rh.status);
                    if (n > reply_cap) {
                        if (out->status == PGRAC_IC_OK) out->status = PGRAC_IC_REPLY_TOO_BIG;
                        n = reply_cap;
                    }
                    if (n > 0) std::memcpy(reply_buf, reply.data() + kMessageHeaderSize, n);
                    out->reply_len = n;
                    return;
                }
                case RequesterLane::Result::Timeout: {
                    out->status = PGRAC_IC_TIMEOUT;
                    const std::string text = "RPC (message type " + std::to_string(mh.msg_type) +
                                             ") to node " + std::to_string(node) +
                                             " timed out on its requester lane";
                    shm->errors.add(ErrorType::RpcTimeout, Severity::Warning, node, unix_time_us(),
                                    text.c_str());
                    break;
                }
                case RequesterLane::Result::Interrupted:
                    out->interrupted = true;
                    out->status = PGRAC_IC_PEER_RESET;
                    break;
                case RequesterLane::Result::Failed: {
                    // Outcome unknown, as when a session is reset under a request.
                    out->status = PGRAC_IC_PEER_RESET;
                    const std::string text = "requester lane to node " + std::to_string(node) +
                                             " failed during an RPC: " + why;
                    shm->errors.add(ErrorType::PeerReset, Severity::Warning, node, unix_time_us(),
                                    text.c_str());
                    break;
                }
            }
            nl.retry_after_ns = now_ns() + kRetryAfterNs;
        },
        err, sizeof err);
    if (!ok) {  // out of memory, say: the lane starts again next time
        if (NodeLane* nl = lane_of(node)) drop_lane(*nl);
        if (out->taken) out->status = PGRAC_IC_PEER_RESET;  // it may have run: not resent
    }
}

}  // namespace pgrac::glue
