// Serving in place in the listener (in_place.hpp). Plain C-style code between
// the engine calls: handlers run here and may raise PostgreSQL errors, so no
// C++ object with a destructor is live in these frames; every engine call
// goes through guarded().
extern "C" {
#include "postgres.h"

#include "utils/memutils.h"
}

#include <cstring>

#include "ic/base/atomics.hpp"
#include "instance/guc.hpp"
#include "listener/in_place.hpp"
#include "lms/request_server.hpp"
#include "instance/pg_boundary.hpp"
#include "listener/zero_copy_replies.hpp"

using namespace pgrac::ic;

namespace pgrac::glue {

namespace {

// Serve at most this many, for at most this long, before the next round of
// wire work (heartbeats, lock traffic, the outbound ring).
constexpr int kBudget = 64;
constexpr uint64_t kBudgetNs = 200 * 1000;
constexpr size_t kRecordMax = sizeof(RingPrefix) + kMessageHeaderSize + PGRAC_IC_MAX_MESSAGE;

Engine* g_engine = nullptr;
uint8_t* g_record = nullptr;  // the request being served (kRecordMax bytes)

void engine_failed(const char* what, const char* err) {
    ereport(ERROR, (errcode(ERRCODE_INTERNAL_ERROR),
                    errmsg("pgrac_ic listener failed to %s: %s", what, err)));
}

// The header goes into the room before the body (request_server.hpp): the
// reply reaches the engine's frame with no copy of its own.
void send_reply(uint16_t node, uint16_t flags, const MessageHeader& mh, uint8_t* body,
                uint32_t len) {
    uint8_t* payload = body - kMessageHeaderSize;
    encode_message_header(mh, payload);
    const uint32_t payload_len = static_cast<uint32_t>(kMessageHeaderSize) + len;
    char err[256] = "";
    if (!guarded([&] { g_engine->send_from_owner(node, flags, payload, payload_len); }, err,
                 sizeof err))
        engine_failed("send a reply", err);
}

// The requester's send budget is used up: its reply would go past the
// limits every other sender stops at. An LMS worker waits for room instead.
bool over_budget(const PeerShared* p) {
    return load_relaxed(&p->queued_bytes) >=
               static_cast<uint64_t>(pgrac_send_queue_max_kb) * 1024 ||
           load_relaxed(&p->queued_msgs) >= static_cast<uint64_t>(pgrac_send_queue_max_messages);
}

void hand_on(uint8_t* rec, size_t len) {
    char err[256] = "";
    if (!guarded([&] { g_engine->hand_to_lms(rec, len); }, err, sizeof err))
        engine_failed("hand a request to an LMS worker", err);
}

// The reply stream (request_server.hpp) onto the engine's sealed replies.
bool stream_begin(uint16_t node, uint16_t flags, const MessageHeader& mh, uint32_t len) {
    bool taken = false;
    char err[256] = "";
    if (!guarded([&] { taken = g_engine->begin_sealed_reply(node, flags, mh, len); }, err,
                 sizeof err))
        engine_failed("seal a reply", err);
    return taken;
}

void stream_write(const uint8_t* piece, uint32_t len) {
    char err[256] = "";
    if (!guarded([&] { g_engine->write_sealed_reply(piece, len); }, err, sizeof err))
        engine_failed("seal a reply", err);
}

void stream_finish() {
    char err[256] = "";
    if (!guarded([&] { g_engine->finish_sealed_reply(); }, err, sizeof err))
        engine_failed("send a sealed reply", err);
}

void stream_abandon() {
    char err[256] = "";
    (void)guarded([&] { g_engine->abandon_sealed_reply(); }, err, sizeof err);
}

constexpr ReplyStreamOps kStreamOps = {stream_begin, stream_write, stream_finish, stream_abandon};

}  // namespace

void in_place_init(Engine* engine) {
    g_engine = engine;
    request_server_init();
    g_record = static_cast<uint8_t*>(MemoryContextAlloc(TopMemoryContext, kRecordMax));
}

bool serve_in_place(IcShared* shm) {
    bool served = false;
    char err[256] = "";
    const uint64_t start = monotonic_ns();
    for (int i = 0; i < kBudget && monotonic_ns() - start < kBudgetNs; i++) {
        size_t len = 0;
        if (!guarded([&] { len = g_engine->take_in_place(g_record, kRecordMax); }, err, sizeof err))
            engine_failed("take a request", err);
        if (len == 0) break;
        served = true;
        RingPrefix pre;
        std::memcpy(&pre, g_record, sizeof pre);
        PeerShared* peer = peer_shared(shm, pre.node);
        if (peer != nullptr && (pre.flags & kFlagRpcRequest) && over_budget(peer)) {
            count(&peer->in_place_handoffs);
            hand_on(g_record, len);
            continue;
        }
        // Only an RPC's reply is written; on verbs it may leave from where
        // it is written (zero_copy_replies.hpp).
        use_reply_body((pre.flags & kFlagRpcRequest) ? zero_copy_reply_body() : nullptr);
        use_reply_stream(&kStreamOps);
        const Served done = serve_record(shm, g_record, len, true, send_reply);
        use_reply_stream(nullptr);
        use_reply_body(nullptr);
        if (done == Served::Done) {
            if (peer != nullptr) count(&peer->served_in_place);
            continue;
        }
        if (peer != nullptr) count(&peer->in_place_handoffs);
        hand_on(g_record, len);
    }
    return served;
}

}  // namespace pgrac::glue
