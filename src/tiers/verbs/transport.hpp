// The verbs tier: tier1 on an InfiniBand port, tier2 on an Ethernet (RoCE v2)
// port. RC queue pairs set up through librdmacm, one shared receive queue and
// one completion queue for all connections, send/receive slots in a
// registered (hugepage) buffer pool. See docs/rdma.md for the design.
//
// The transport obeys the Transport contract (transport.hpp): callbacks only
// from poll(), on the caller's thread; no threads of its own.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "ic/wire/frame.hpp"
#include "ic/wire/frame_guard.hpp"
#include "pgrac_ic/pgrac_ic.h"
#include "tiers/transports.hpp"

namespace pgrac::tiers {

// The largest frame payload the engine produces is one message: the message
// header plus PGRAC_IC_MAX_MESSAGE bytes of body (send_path.cpp refuses more;
// handshake, heartbeat and ack frames are far smaller). Every instance of a
// build derives the verbs receive-slot size from this constant alone, so both
// ends of a connection always agree on it (the extension's max_payload).
inline constexpr uint32_t kVerbsMaxPayload =
    (static_cast<uint32_t>(ic::kMessageHeaderSize + ic::kFrameTagSize) + PGRAC_IC_MAX_MESSAGE +
     1023u) &
    ~1023u;
static_assert(kVerbsMaxPayload >=
              ic::kMessageHeaderSize + ic::kFrameTagSize + PGRAC_IC_MAX_MESSAGE);
static_assert(kVerbsMaxPayload <= ic::kMaxFramePayload);

enum class XrcMode { kAuto, kOn, kOff };  // mirrors cluster.rdma_use_xrc

struct VerbsOptions {
    std::string device;  // empty: the first device with an ACTIVE port
    int port = 1;
    // GID the tier expects rdma_cm to use; -1 = whatever the address maps to.
    // rdma_cm chooses the GID from the IP address; a mismatch is reported in
    // VerbsStatus::gid_note, not enforced.
    int gid_index = -1;
    int cq_depth = 4096;  // cluster.rdma_cq_depth; used as given (see docs/rdma.md)
    XrcMode use_xrc = XrcMode::kAuto;
    // Page size for the buffer pool: 0 = normal pages, 2 MB, or 1 GB
    // (falls back to 2 MB, then normal pages, with a warning).
    uint64_t hugepage_size = 2u << 20;
    uint32_t max_payload = 64 * 1024;  // a slot holds the 24-byte header + this
    // The limit every new connection starts with until set_max_payload()
    // changes it; capped at max_payload, so by default the same.
    uint32_t initial_max_payload = ic::kMaxFramePayload;
    uint32_t send_slots = 256;    // registered send buffers, shared by all connections
    uint32_t recv_slots = 512;    // receive buffers posted to the SRQ
    uint32_t qp_send_depth = 64;  // send work requests in flight per queue pair
    int connect_timeout_ms = 5000;
    bool numa_bind = false;  // bind the calling thread to the HCA's NUMA node at creation
    // Frame pieces at least this long that lie in a registered region (the MR
    // cache) are sent without copying; 0 = always copy. The caller must then
    // keep those bytes unchanged until in_flight(conn) drops to 0.
    uint32_t zero_copy_min = 0;
    // Zero-copy only from regions registered ahead (verbs_register_region),
    // never registering a payload's memory on the fly: for callers whose
    // other payloads live in memory that changes as soon as send() returns.
    bool zero_copy_registered_only = false;
    size_t mr_cache_entries = 64;  // MR cache capacity (LRU beyond it)
    // The outbound connection offers its peer this many landing slots (one
    // frame each, registered for remote write) to RDMA WRITE frames into
    // (landing.hpp, docs/rdma.md); 0 = every frame arrives by SEND. Such a
    // transport carries one connection and does not listen: an rkey is good
    // on every queue pair of the protection domain.
    uint32_t landing_slots = 0;
    // Frames of at least this many bytes go into the peer's landing slot by
    // RDMA WRITE when it offered slots and one is free; smaller ones are
    // SENT (inline when they fit). 0 = never write.
    uint32_t write_min = 0;
};

// What the tier runs on, for pg_cluster_rdma_status. Filled at creation;
// gid_* and link facts of the path are refined by the first connection.
struct VerbsStatus {
    std::string device, vendor;  // vendor: "mlx5" or "other"
    uint32_t vendor_id = 0, vendor_part_id = 0;
    int port = 0;
    std::string link_layer;  // "InfiniBand" (tier1) or "Ethernet" (tier2)
    std::string tier;        // "tier1" or "tier2"
    int active_mtu = 0;
    int gid_index = -1;  // the GID in use (-1 until a connection chose one)
    std::string gid, gid_type;
    std::string gid_note;
    bool xrc_supported = false, xrc_in_use = false, srq_in_use = false;
    std::string xrc_srq_note;      // why XRC is or is not used
    uint64_t hugepage_size = 0;    // page size the pool actually got (4096 = normal pages)
    std::string hugepage_warning;  // set when the pool fell back to smaller pages
    size_t pool_bytes = 0;
    int numa_node = -1;
    bool numa_bound = false;
    std::string numa_note;
    int cq_depth = 0;  // depth of the current CQ (grows after an overflow, see docs)
    int cq_depth_requested = 0;
    std::string cq_note;
    uint32_t max_inline = 0, qp_send_depth = 0, srq_depth = 0, max_payload = 0;
};

// The most bytes the buffer pool of a transport made with `o` maps and
// registers (ibv_reg_mr pins them all, against RLIMIT_MEMLOCK): send slots +
// receive slots (fewer on a device whose SRQ is smaller), each
// round64(frame header + max_payload), rounded up to pages of hugepage_size
// (normal pages when 0). `pgrac_ctl verify rdma` checks the limit against it.
size_t verbs_pool_bytes(const VerbsOptions& o);

// Creates the transport on the chosen device: PD, CQ with its completion
// channel, SRQ, buffer pool. nullptr with *error set when there is no usable
// device or a resource cannot be created.
std::unique_ptr<Transport> make_verbs_transport(TransportHandler& handler, const VerbsOptions& opts,
                                                std::string* error);

// The status of a transport made by make_verbs_transport; false for other tiers.
bool verbs_transport_status(const Transport& t, VerbsStatus* out);

// Bytes of frames posted to the device but not yet completed (zero-copy
// senders wait for 0 before reusing their buffers); 0 for other tiers.
size_t verbs_in_flight(const Transport& t, ConnId conn);

// Registers [addr, addr+len) in the transport's MR cache ahead of use (e.g.
// shared buffers for zero-copy). False if not a verbs transport or on failure.
bool verbs_register_region(Transport& t, const void* addr, size_t len, std::string* error);

// The region registered ahead as exactly [addr, addr+len) is still read by a
// posted send (zero-copy): its owner must not change it yet. False for other
// tiers.
bool verbs_region_in_flight(const Transport& t, const void* addr, size_t len);

// NUMA node of an RDMA device from sysfs (-1: none, e.g. software devices).
int verbs_device_numa_node(const std::string& device, const std::string& sys_root = "/sys");
// Binds the calling thread's CPUs and memory preference to a NUMA node
// (libnuma). False with *error when NUMA is unavailable or node < 0.
bool bind_thread_to_numa_node(int node, std::string* error);

}  // namespace pgrac::tiers
