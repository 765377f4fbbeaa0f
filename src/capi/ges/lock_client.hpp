// The backend's side of a global lock (session-level, as pg_advisory_lock):
// what the C API (src/capi/ges/api.cpp) and the SQL functions
// (src/views/ges_functions.cpp) call. lock_client.cpp holds a request from
// top to bottom: the name checked, the session's held table, the request sent
// to this node's LMS worker for the resource (which records it and forwards it
// to the master), the grant or the refusal taken. The waiting between the
// send and the answer is lock_wait.hpp's (the backend's GES wait slot and its
// latch). README.md draws the path.
#pragma once

#include <cstddef>
#include <cstdint>

#include "ic/ges/mode.hpp"
#include "ic/ges/resource.hpp"
#include "ic/ges/types.hpp"
#include "ic/ges/wire.hpp"
#include "pgrac_ic/pgrac_ic.h"

namespace pgrac::glue {

// ges_lock takes (or converts to) `mode`. true: granted; false: not granted
// within timeout_ms (0: NOWAIT, -1: no limit). Errors for deadlock victims and
// failures.
bool ges_lock(const pgrac::ic::ges::ResourceName& r, pgrac::ic::ges::LockMode mode, int timeout_ms);
// ges_unlock releases one level; false (and a WARNING) if the session does not hold r.
bool ges_unlock(const pgrac::ic::ges::ResourceName& r);
// ges_unlock_all releases every global lock of this session; returns how many resources.
int ges_unlock_all();
// ges_held_token: does the session hold r? If so, *token is its grant's fencing token.
bool ges_held_token(const pgrac::ic::ges::ResourceName& r, uint64_t* token);
// Lock value blocks (docs/ges.md, "Lock value blocks"). ges_lock_value: the
// value of the session's lock on r (as its grant brought it, or as the
// session set it since); true if valid. ges_set_lock_value: sets it (a PW/EX
// holder only, 0..32 bytes); it is written when the lock is released with
// ges_unlock or converted down. Both ERROR if the session does not hold r.
bool ges_lock_value(const pgrac::ic::ges::ResourceName& r, pgrac::ic::ges::LockValue* out);
void ges_set_lock_value(const pgrac::ic::ges::ResourceName& r, const void* bytes, int len);

// Resource names and modes as the C API and the SQL functions give them:
// checked (an ERROR says what is wrong), and named in messages.
// ges_text_resource: the text resource of `len` bytes at p, 1 to kMaxResourceText bytes, no NUL.
pgrac::ic::ges::ResourceName ges_text_resource(const char* p, int len);
// ges_api_resource: the C API's NUL-terminated resource name (not NULL).
pgrac::ic::ges::ResourceName ges_api_resource(const char* resource);
// ges_api_mode: the C API's mode (one of pgrac_ges_mode).
pgrac::ic::ges::LockMode ges_api_mode(pgrac_ges_mode mode);
// ges_resource_text: "name", or "#id" for a bigint resource, for messages.
void ges_resource_text(const pgrac::ic::ges::ResourceName& r, char* out, size_t cap);

// For lock_wait.cpp (a withdrawn or re-sent request, the exit hook):
// ges_shard_of is the LMS worker of this node whose shard holds r.
uint32_t ges_shard_of(const pgrac::ic::ges::ResourceName& r);
// ges_send_client sends one message to this node's LMS worker for route_key
// (r may be null for resource-less messages). Returns a pgrac_ic status;
// `wait_ms` bounds the wait for queue room. ERROR if it cannot be encoded.
int ges_send_client(pgrac::ic::ges::GesMsgType type, const pgrac::ic::ges::ResourceName* r,
                    uint32_t route_key, pgrac::ic::ges::LockMode mode, uint64_t request_id,
                    uint8_t flags, uint32_t timeout_ms, pgrac::ic::ges::DenyReason reason,
                    int wait_ms, const pgrac::ic::ges::LockValue* value = nullptr,
                    uint32_t epoch = 0);
// ges_send_release_all sends ReleaseAll to every local LMS worker; returns
// the first failure (or OK).
int ges_send_release_all(int wait_ms);
// ges_drop_cache_use ends a use of r's cached lock that the LMS took for this
// session but the session stopped waiting for (a grant that won the race).
void ges_drop_cache_use(const pgrac::ic::ges::ResourceName& r, pgrac::ic::ges::LockMode mode);
// ges_forget_held forgets every lock of the session (it ends).
void ges_forget_held();

}  // namespace pgrac::glue
