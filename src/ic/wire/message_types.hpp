// The message types pgrac_ic's own services use, in its reserved range (below
// PGRAC_IC_FIRST_USER_TYPE, include/pgrac_ic/pgrac_ic.h), so they never
// collide with an upper layer's. One place for the numbers: the backends' C
// API sends them, the LMS and the listener serve them, the SQL functions
// call them. docs/protocol.md lists them with their bodies.
#pragma once

#include <cstdint>

namespace pgrac::ic {

// GES (one-way unless noted). Bodies are the GES wire format (ic/ges/wire.hpp);
// route_key = ges::route_key_for(resource), or the LMS worker index for
// resource-less messages (ReleaseAll, Replay). kMsgGesDeadlock carries the
// cluster-wide deadlock search: WaitHint and Edges to the coordinator's LMS 0
// (route_key 0), EdgesRequest to LMS w (route_key w).
inline constexpr uint16_t kMsgGesClient = 16;    // backend -> its own node's LMS
inline constexpr uint16_t kMsgGesMaster = 17;    // client LMS -> master LMS
inline constexpr uint16_t kMsgGesReply = 18;     // master LMS -> client LMS (Grant/Bast/Deny)
inline constexpr uint16_t kMsgGesView = 19;      // RPC: one worker's lock table rows
inline constexpr uint16_t kMsgGesDeadlock = 20;  // deadlock search (docs/ges.md)
// RPC: a backend's request to the resource's home master LMS on its requester
// lane; the reply is the master's answer (docs/ges.md, "Direct routing").
inline constexpr uint16_t kMsgGesDirect = 21;
// Cache Fusion (ic/wire/block_wire.hpp).
inline constexpr uint16_t kMsgBlockFetch = 32;  // RPC: block batch

}  // namespace pgrac::ic
