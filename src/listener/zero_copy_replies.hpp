// Replies served in place that leave without a copy on the verbs tiers: the
// listener serves them into buffers its verbs transport registered ahead, and
// the transport sends the payload straight from there (a second gather entry
// after the header's). A buffer is handed out again only once no posted send
// reads it. docs/rdma.md, "Zero-copy replies".
#pragma once

#include <cstdint>

namespace pgrac::glue {

// Listener: the body (after the message header's room) of a registered reply
// buffer that no send reads now, or nullptr: not the verbs tiers,
// cluster.wire_protection = secure (the cipher writes the frame anew, into a
// send slot), the registration failed, or every buffer is still in flight.
// Under crc and mac the payload is sent from here (mac: header and tag apart). The caller then
// uses its own buffer, which the transport copies.
uint8_t* zero_copy_reply_body();

}  // namespace pgrac::glue
