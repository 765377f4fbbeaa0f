// GES messages from a backend to its own node's LMS workers (kMsgGesClient):
// the worker whose shard holds the resource records the request and forwards
// it to the resource's master (docs/ges.md).
#pragma once

#include <cstdint>

#include "ic/ges/resource.hpp"
#include "ic/ges/types.hpp"
#include "ic/ges/wire.hpp"

namespace pgrac::glue {

// The LMS worker of this node whose shard holds r.
uint32_t ges_shard_of(const pgrac::ic::ges::ResourceName& r);
// Sends one message to this node's LMS worker for route_key (r may be null
// for resource-less messages). Returns a pgrac_ic status; `wait_ms` bounds the
// wait for queue room. ERROR if the message cannot be encoded.
int ges_send_client(pgrac::ic::ges::GesMsgType type, const pgrac::ic::ges::ResourceName* r,
                    uint32_t route_key, pgrac::ic::ges::LockMode mode, uint64_t request_id,
                    uint8_t flags, uint32_t timeout_ms, pgrac::ic::ges::DenyReason reason,
                    int wait_ms);
// ReleaseAll to every local LMS worker; returns the first failure (or OK).
int ges_send_release_all(int wait_ms);

}  // namespace pgrac::glue
