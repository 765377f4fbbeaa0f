// Serving one request: find its handler, run it (a PostgreSQL error becomes
// HANDLER_ERROR with its message as the reply), send the reply. Run by the
// LMS workers on what their inbox brings, and by the listener on the requests
// whose handler is registered in place (handler_registry.hpp).
#pragma once

#include <cstddef>
#include <cstdint>

#include "ic/wire/frame.hpp"
#include "ic/shm/shared_state.hpp"

namespace pgrac::glue {

// How a reply leaves the process that served the request. `body` is preceded
// by kMessageHeaderSize bytes the sender may write (the message header goes
// there, so that header and body leave as one piece without another copy).
using ReplySender = void (*)(uint16_t node, uint16_t flags, const ic::MessageHeader& mh,
                             uint8_t* body, uint32_t len);

// Once per process, before the first request: memory for handlers and replies.
void request_server_init();
// The buffer the next replies are written into: `body` (kMessageHeaderSize
// bytes of room before it, PGRAC_IC_MAX_MESSAGE after), or with nullptr the
// server's own. The listener points it at a zero-copy buffer per request.
void use_reply_body(uint8_t* body);

// A reply written while it is sealed (Engine::begin_sealed_reply): the
// cipher reads each piece where the handler finds it. The listener installs
// these for what it serves in place; elsewhere there are none. Each raises a
// PostgreSQL error when the engine fails, except abandon, which cannot.
struct ReplyStreamOps {
    bool (*begin)(uint16_t node, uint16_t flags, const ic::MessageHeader& mh, uint32_t len);
    void (*write)(const uint8_t* piece, uint32_t len);
    void (*finish)();
    void (*abandon)();
};
void use_reply_stream(const ReplyStreamOps* ops);

// For pgrac_ic's own handlers (the block service): true if the reply to the
// request being served, `len` body bytes, is to be written while it is sealed:
// then reply_stream_write() takes the len bytes in order and
// reply_stream_finish() sends it (the handler's reply->len is then ignored);
// false: write the reply as usual. A reply begun and not finished (an error,
// a decline) is abandoned by the request server; reply_stream_abandon()
// does it at once (nothing was sent; a reply is still due).
bool reply_stream_begin(uint32_t len);
void reply_stream_write(const void* piece, uint32_t len);
void reply_stream_finish();
void reply_stream_abandon();

enum class Served { Done, WouldBlock };

// Serves one record (RingPrefix + MessageHeader + body). With in_place, a
// handler may decline (WouldBlock): nothing was sent, and the caller hands
// the record to an LMS worker. Runs PostgreSQL code: the caller holds no C++
// object with a destructor.
Served serve_record(ic::IcShared* shm, const uint8_t* rec, size_t len, bool in_place,
                    ReplySender send);

// Called by one of pgrac_ic's handlers serving in place that would have to
// wait (a block not in the buffer pool), after releasing what it holds: its
// return value is ignored and an LMS worker serves the request. Not in the
// public API: an upper layer's handler in place runs once, where it arrives.
void decline_in_place();

}  // namespace pgrac::glue
