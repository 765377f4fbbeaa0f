// Cache Fusion block service (src/lms/block_service.cpp): an LMS handler that
// ships pages from this instance's buffer pool, and its wire format, shared
// with the fetch of the C API in src/capi/block_fetch.cpp.
//
// The wire format is in src/ic/wire/block_wire.hpp. The server locks relation
// (dbOid, relOid) and serves the blocks only if spcOid/dbOid/relNumber is
// that relation's storage there (src/lms/block_identity.hpp).
// The reply holds min(count, nblocks - first) blocks; first >= nblocks, a
// missing relation or fork are errors (the caller gets HANDLER_ERROR with the
// text).
#pragma once

#include <cstdint>

#include "capi/block_request.hpp"  // the wire format's names

namespace pgrac::glue {

// Registers the block handler (from _PG_init).
void register_block_handlers();

}  // namespace pgrac::glue
