// Zero-copy replies on the verbs tiers (zero_copy_replies.hpp).
extern "C" {
#include "postgres.h"
}

#include <cstdlib>
#include <string>

#include "instance/guc.hpp"
#include "ic/wire/frame.hpp"
#include "ic/wire/frame_guard.hpp"
#include "pgrac_ic/pgrac_ic.h"
#include "tiers/verbs/transport.hpp"
#include "instance/verbs_glue.hpp"
#include "listener/zero_copy_replies.hpp"

namespace pgrac::glue {

namespace {

// More than the replies one poll of the transport can have in flight to one
// requester, so that a buffer is nearly always free; each is one message.
constexpr int kBuffers = 8;
constexpr size_t kBufferBytes =
    (pgrac::ic::kMessageHeaderSize + PGRAC_IC_MAX_MESSAGE + 4095) & ~size_t{4095};

uint8_t* g_buffers[kBuffers] = {};
int g_next = 0;
bool g_tried = false, g_ready = false;

// Allocates and registers the buffers once. The failure is logged once; the
// replies are copied then, as on any tier.
bool ready(pgrac::ic::Transport* t) {
    if (g_tried) return g_ready;
    g_tried = true;
    std::string err;
    for (int i = 0; i < kBuffers; i++) {
        g_buffers[i] = static_cast<uint8_t*>(std::aligned_alloc(4096, kBufferBytes));
        bool ok = false;
        try {
            ok = g_buffers[i] != nullptr &&
                 pgrac::tiers::verbs_register_region(*t, g_buffers[i], kBufferBytes, &err);
        } catch (...) {
            err = "out of memory";
        }
        if (!ok) {
            if (g_buffers[i] == nullptr) err = "out of memory";
            ereport(LOG, (errmsg("pgrac_ic listener: replies are copied into send slots: a reply "
                                 "buffer cannot be registered: %s",
                                 err.c_str())));
            return false;
        }
    }
    g_ready = true;
    return true;
}

}  // namespace

uint8_t* zero_copy_reply_body() {
    if (pgrac_wire_protection == static_cast<int>(pgrac::ic::WireProtection::Secure))
        return nullptr;
    pgrac::ic::Transport* t = listener_verbs_transport();
    if (t == nullptr || !ready(t)) return nullptr;
    for (int i = 0; i < kBuffers; i++) {
        const int k = (g_next + i) % kBuffers;
        if (pgrac::tiers::verbs_region_in_flight(*t, g_buffers[k], kBufferBytes)) continue;
        g_next = (k + 1) % kBuffers;
        return g_buffers[k] + pgrac::ic::kMessageHeaderSize;
    }
    return nullptr;
}

}  // namespace pgrac::glue
