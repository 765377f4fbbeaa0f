// Requester lanes, the backend's side: pgrac_ic_rpc() to another node goes
// over a connection of this process's own to that node's listener (a TCP
// socket, ic/engine/requester_lane.hpp; on the verbs tiers a queue pair,
// ic/engine/transport_lane.hpp) when it may, and through the listeners otherwise.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "ic/wire/frame.hpp"
#include "ic/shm/shared_state.hpp"
#include "ic/transport/transport.hpp"

namespace pgrac::glue {

// LaneTransportFactory makes a verbs lane's own transport (a queue pair of
// this process's, to the listener's device), connecting within
// connect_timeout_ms; nullptr with *error set if it cannot. The module
// installs one at start (_PG_init: instance/verbs_glue.hpp), so that the C
// API never builds a transport itself; every process inherits it.
using LaneTransportFactory = std::unique_ptr<ic::Transport> (*)(ic::TransportHandler& h,
                                                                int connect_timeout_ms,
                                                                std::string* error);
void install_lane_transport_factory(LaneTransportFactory make);

// What requester_rpc() reports besides the RPC's status.
struct RequesterOutcome {
    bool taken = false;        // false: nothing was sent; use the listeners
    bool interrupted = false;  // a cancel, a termination or postmaster death cut it short
    int status = 0;            // pgrac_ic_status, if taken
    uint32_t reply_len = 0;
};

// May this process's next RPC to `node` take its own lane? Not to itself,
// not while it has one-way messages to the node that could still be on the
// way through the listeners (they would be overtaken), not right after its
// lane failed, and only with cluster.requester_lanes on (any tier but stub).
bool requester_lane_usable(pgrac::ic::IcShared* shm, int node) noexcept;

// One RPC on the lane (opened first if needed). Never raises a PostgreSQL
// error: the caller handles out.interrupted (CHECK_FOR_INTERRUPTS) itself.
void requester_rpc(pgrac::ic::IcShared* shm, int node, const pgrac::ic::MessageHeader& mh,
                   uint16_t frame_flags, const void* body, uint32_t len, void* reply_buf,
                   uint32_t reply_cap, uint64_t spin_ns, uint64_t deadline_ns,
                   RequesterOutcome* out);

// An RPC on this process's requester lane to `node` only (src/capi/rpc.cpp):
// its pgrac_ic status, or -1 if nothing was sent (no usable lane; the caller
// takes another path). May raise (a cancel while it waits for the reply).
int requester_lane_call(int node, uint16_t msg_type, uint32_t route_key, const void* body,
                        uint32_t len, void* reply_buf, uint32_t reply_cap, uint32_t* reply_len,
                        int timeout_ms);

// A one-way message to `node` went through the listeners: this process's
// RPCs to it take that path from now on, so that none overtakes it.
void note_one_way_message(int node) noexcept;

}  // namespace pgrac::glue
