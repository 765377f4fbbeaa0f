extern "C" {
#include "postgres.h"
}

#include <cstring>

#include "ic/base/atomics.hpp"
#include "ic/session/seq_check.hpp"
#include "capi/handler_registry.hpp"
#include "instance/shmem.hpp"

namespace pgrac::glue {

namespace {

bool g_serving_in_place = false;  // serving_in_place()

HandlerEntry g_handlers[PGRAC_IC_MAX_MSG_TYPE + 1];

// Built-in PING: the reply is the request body.
int ping_handler(const pgrac_ic_message* msg, pgrac_ic_reply* reply) {
    if (reply == nullptr) return PGRAC_IC_OK;
    // Never more than the reply buffer holds, whatever arrived.
    if (msg->len > reply->capacity) return PGRAC_IC_REPLY_TOO_BIG;
    std::memcpy(reply->body, msg->body, msg->len);
    reply->len = msg->len;
    return PGRAC_IC_OK;
}

// Built-in NOTE: one-way; counts what reached this worker from each node.
int note_handler(const pgrac_ic_message* msg, pgrac_ic_reply*) {
    pgrac::ic::IcShared* shm = shared();
    if (pgrac::ic::PeerShared* p =
            pgrac::ic::peer_shared(shm, static_cast<uint32_t>(msg->src_node)))
        pgrac::ic::count(&p->notes_recv);
    return PGRAC_IC_OK;
}

// Built-in SEQ: body u32 stream, u64 seq (little-endian); reply one byte, the
// SeqOutcome of applying seq to the sender's stream.
int seq_handler(const pgrac_ic_message* msg, pgrac_ic_reply* reply) {
    const auto* b = static_cast<const uint8_t*>(msg->body);
    if (msg->len != 12)
        ereport(ERROR, (errmsg("pgrac_ic seq probe of %u bytes (expected 12)", msg->len)));
    uint32_t stream = 0;
    uint64_t seq = 0;
    for (int i = 0; i < 4; i++) stream |= static_cast<uint32_t>(b[i]) << (8 * i);
    for (int i = 0; i < 8; i++) seq |= static_cast<uint64_t>(b[4 + i]) << (8 * i);
    pgrac::ic::PeerShared* p =
        pgrac::ic::peer_shared(shared(), static_cast<uint32_t>(msg->src_node));
    if (p == nullptr || stream >= static_cast<uint32_t>(pgrac::ic::kSeqStreams))
        ereport(ERROR, (errmsg("pgrac_ic seq probe: stream %u from node %d is out of range", stream,
                               msg->src_node)));
    const pgrac::ic::SeqOutcome o = pgrac::ic::seq_apply(&p->seq_last[stream], seq);
    if (reply != nullptr) {
        static_cast<uint8_t*>(reply->body)[0] = static_cast<uint8_t>(o);
        reply->len = 1;
    }
    return PGRAC_IC_OK;
}

}  // namespace

void put_handler(uint16_t type, const char* name, pgrac_ic_handler_fn fn, bool in_place) {
    g_handlers[type].fn = fn;
    g_handlers[type].name = name;
    g_handlers[type].in_place = in_place;
}

std::vector<bool> in_place_types() {
    std::vector<bool> v(PGRAC_IC_MAX_MSG_TYPE + 1, false);
    for (int t = 0; t <= PGRAC_IC_MAX_MSG_TYPE; t++)
        v[t] = g_handlers[t].fn != nullptr && g_handlers[t].in_place;
    return v;
}

bool serving_in_place() {
    return g_serving_in_place;
}

void set_serving_in_place(bool on) {
    g_serving_in_place = on;
}

const HandlerEntry* find_handler(uint16_t msg_type) {
    if (msg_type > PGRAC_IC_MAX_MSG_TYPE || g_handlers[msg_type].fn == nullptr) return nullptr;
    return &g_handlers[msg_type];
}

void register_builtin_handlers() {
    // None of them blocks: the listener serves them where they arrive.
    put_handler(PGRAC_IC_MSG_PING, "ping", ping_handler, true);
    put_handler(PGRAC_IC_MSG_NOTE, "note", note_handler, true);
    put_handler(PGRAC_IC_MSG_SEQ, "seq", seq_handler, true);
}

}  // namespace pgrac::glue
