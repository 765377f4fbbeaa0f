// The verbs tiers (tier1 InfiniBand, tier2 RoCE) inside the extension: making
// the transport from the cluster.rdma_* settings, falling back to TCP when it
// cannot be made, and publishing what runs (status and counters) into shared
// memory for pg_cluster_rdma_status and pg_cluster_rdma_counters.
#pragma once

#include <cstdint>
#include <memory>

#include "ic/wire/frame.hpp"
#include "ic/shm/shared_state.hpp"
#include "pgrac_ic/pgrac_ic.h"
#include "ic/transport/transport.hpp"
#include "tiers/verbs/transport.hpp"

namespace pgrac::glue {

// The largest frame payload (one message): defined with the transport, which
// pgrac_ctl sizes the buffer pool with too.
using tiers::kVerbsMaxPayload;

// VerbsOptions from cluster.rdma_* (device/port: the decision at start).
tiers::VerbsOptions verbs_options(const char* device, int port);

// The factory of tier1/tier2 (called in the listener, inside the engine's
// constructor, so it may throw): the verbs transport, or when it cannot be
// made, TCP (the reason is kept for publish_transport) or, with
// cluster.interconnect_strict, an exception that stops the listener's start.
std::unique_ptr<ic::Transport> make_verbs_or_tcp(ic::TransportHandler& h);

// A verbs requester lane's own transport (capi/requester_path.hpp's
// LaneTransportFactory): the listener's device and port, and as little as one
// RPC at a time needs (a few slots of normal pages, a small CQ, no XRC), so
// that a backend pins well under a megabyte per peer.
std::unique_ptr<ic::Transport> make_verbs_lane_transport(ic::TransportHandler& h,
                                                         int connect_timeout_ms,
                                                         std::string* error);

// Payloads from this size on leave a registered buffer without a copy (the
// listener's zero-copy replies); smaller ones are copied into a send slot.
inline constexpr uint32_t kZeroCopyMin = 2048;

// Listener: its verbs transport (nullptr on other tiers or after a fallback).
ic::Transport* listener_verbs_transport();

// Listener, once the engine has started: writes the tier that really runs,
// why, and the verbs status into shared memory; logs a WARNING for a fallback
// to TCP or for a buffer pool without hugepages. Never throws.
void publish_transport(ic::IcShared* shm);
// Listener, every loop iteration: copies the verbs transport's counters into
// shared memory when they changed (and the status after a CQ rebuild).
// Cheap, never throws, does nothing on other tiers.
void publish_transport_counters(ic::IcShared* shm) noexcept;

}  // namespace pgrac::glue
