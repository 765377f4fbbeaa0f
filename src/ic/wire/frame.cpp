// Frame codec. Every multi-byte field is written and read byte by byte in
// little-endian order, so the wire format does not depend on the host's
// endianness or on struct padding.
//
// Validation rules beyond the obvious range checks:
//  - RpcRequest and RpcReply are Message flags: on any other type, or both at
//    once, the frame is BadFlags. ControlLane is valid on every type.
//  - The payload limit is the connection's max_payload, never above
//    kMaxFramePayload.
//  - A Message frame's payload starts with a MessageHeader, so a shorter one is
//    BadPayload (the frame's contents do not fit its type).
//  - Only Message frames are sequenced. A nonzero seq on any other type is
//    rejected as BadPayload rather than ignored: a sender that puts one there
//    is confused about what it sends, and accepting it would let two
//    implementations disagree about which frames the session numbered.
#include "ic/wire/frame.hpp"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <new>

#include "ic/wire/codec.hpp"
#include "ic/wire/crc32c.hpp"

namespace pgrac::ic {

namespace {

constexpr size_t kCrcOffset = 20;

void put16(uint8_t* p, uint16_t v) {
    codec::store_le(p, v);
}
void put32(uint8_t* p, uint32_t v) {
    codec::store_le(p, v);
}
void put64(uint8_t* p, uint64_t v) {
    codec::store_le(p, v);
}
uint16_t get16(const uint8_t* p) {
    return codec::load_le<uint16_t>(p);
}
uint32_t get32(const uint8_t* p) {
    return codec::load_le<uint32_t>(p);
}
uint64_t get64(const uint8_t* p) {
    return codec::load_le<uint64_t>(p);
}

uint32_t effective_limit(uint32_t max_payload) {
    return std::min(max_payload, kMaxFramePayload);
}

}  // namespace

const char* frame_type_name(FrameType t) {
    switch (t) {
        case FrameType::Hello:
            return "Hello";
        case FrameType::HelloReply:
            return "HelloReply";
        case FrameType::Auth:
            return "Auth";
        case FrameType::AuthOk:
            return "AuthOk";
        case FrameType::Reject:
            return "Reject";
        case FrameType::Heartbeat:
            return "Heartbeat";
        case FrameType::Ack:
            return "Ack";
        case FrameType::Message:
            return "Message";
        case FrameType::Backoff:
            return "Backoff";
    }
    return "unknown";
}

const char* frame_error_name(FrameError e) {
    switch (e) {
        case FrameError::None:
            return "none";
        case FrameError::Truncated:
            return "truncated";
        case FrameError::BadMagic:
            return "bad_magic";
        case FrameError::BadVersion:
            return "bad_version";
        case FrameError::BadType:
            return "bad_type";
        case FrameError::BadFlags:
            return "bad_flags";
        case FrameError::PayloadTooLarge:
            return "payload_too_large";
        case FrameError::BadChecksum:
            return "bad_checksum";
        case FrameError::BadPayload:
            return "bad_payload";
    }
    return "unknown";
}

void encode_frame_fields(const FrameHeader& h, uint8_t out[kFrameHeaderSize]) {
    put16(out + 0, kFrameMagic);
    out[2] = h.version;
    out[3] = static_cast<uint8_t>(h.type);
    put16(out + 4, h.flags);
    put16(out + 6, h.src_node);
    put32(out + 8, h.payload_len);
    put32(out + 12, h.seq);
    put32(out + 16, h.ack);
    put32(out + kCrcOffset, 0);
}

void encode_frame_header(FrameHeader& h, const void* payload, uint8_t out[kFrameHeaderSize]) {
    encode_frame_fields(h, out);
    uint32_t crc = crc32c(out, kFrameHeaderSize);
    if (h.payload_len > 0) crc = crc32c(payload, h.payload_len, crc);
    h.crc = crc;
    put32(out + kCrcOffset, crc);
}

FrameError decode_frame_header(const uint8_t* in, size_t len, uint32_t max_payload,
                               FrameHeader* out) {
    if (len < kFrameHeaderSize) return FrameError::Truncated;
    if (get16(in) != kFrameMagic) return FrameError::BadMagic;
    if (in[2] != kFramingVersion) return FrameError::BadVersion;
    const uint8_t type = in[3];
    if (type == 0 || type > kMaxFrameType) return FrameError::BadType;
    const bool is_message = type == static_cast<uint8_t>(FrameType::Message);

    const uint16_t flags = get16(in + 4);
    if ((flags & ~kKnownFrameFlags) != 0) return FrameError::BadFlags;
    const uint16_t rpc_flags = flags & (kFlagRpcRequest | kFlagRpcReply);
    if (rpc_flags != 0 && (!is_message || rpc_flags == (kFlagRpcRequest | kFlagRpcReply)))
        return FrameError::BadFlags;

    const uint32_t payload_len = get32(in + 8);
    if (payload_len > effective_limit(max_payload)) return FrameError::PayloadTooLarge;
    const uint32_t seq = get32(in + 12);
    if (is_message && payload_len < kMessageHeaderSize) return FrameError::BadPayload;
    if (!is_message && seq != 0) return FrameError::BadPayload;

    out->version = in[2];
    out->type = static_cast<FrameType>(type);
    out->flags = flags;
    out->src_node = get16(in + 6);
    out->payload_len = payload_len;
    out->seq = seq;
    out->ack = get32(in + 16);
    out->crc = get32(in + kCrcOffset);
    return FrameError::None;
}

FrameError verify_frame_crc(const uint8_t header[kFrameHeaderSize], const uint8_t* payload,
                            uint32_t payload_len) {
    uint8_t zeroed[kFrameHeaderSize];
    std::memcpy(zeroed, header, kFrameHeaderSize);
    put32(zeroed + kCrcOffset, 0);
    uint32_t crc = crc32c(zeroed, kFrameHeaderSize);
    if (payload_len > 0) crc = crc32c(payload, payload_len, crc);
    return crc == get32(header + kCrcOffset) ? FrameError::None : FrameError::BadChecksum;
}

void encode_message_header(const MessageHeader& m, uint8_t out[kMessageHeaderSize]) {
    put16(out + 0, m.msg_type);
    put16(out + 2, m.status);
    put32(out + 4, m.route_key);
    put64(out + 8, m.rpc_id);
    put32(out + 16, m.epoch);
    put32(out + 20, 0);
}

FrameError decode_message_header(const uint8_t* in, size_t len, MessageHeader* out) {
    if (len < kMessageHeaderSize) return FrameError::Truncated;
    if (get32(in + 20) != 0) return FrameError::BadPayload;
    out->msg_type = get16(in + 0);
    out->status = get16(in + 2);
    out->route_key = get32(in + 4);
    out->rpc_id = get64(in + 8);
    out->epoch = get32(in + 16);
    return FrameError::None;
}

// ---- FrameStreamDecoder
//
// Bytes live in buf_[start_, end_): start_ is the first byte of the next
// frame. Frames are handed out in place (no copy); the space before start_ is
// reclaimed by moving the partial frame to the front when the free tail is
// too small, and the buffer only grows when even that is not enough, so its
// size settles at about one maximal frame plus one read.

namespace {

constexpr size_t kMinCapacity = 4096;

// CRC check of a frame whose header and payload are contiguous in a buffer we
// own: zeroing the crc field in place lets one crc32c call cover the frame.
// For small frames that halves the cost, which is mostly ISA-L's per-call setup.
FrameError verify_contiguous_frame(uint8_t* frame, uint32_t payload_len) {
    uint8_t* field = frame + kCrcOffset;
    const uint32_t expected = get32(field);
    put32(field, 0);
    const uint32_t crc = crc32c(frame, kFrameHeaderSize + payload_len);
    put32(field, expected);
    return crc == expected ? FrameError::None : FrameError::BadChecksum;
}

}  // namespace

FrameStreamDecoder::FrameStreamDecoder(uint32_t max_payload)
    : max_payload_(effective_limit(max_payload)) {}

FrameStreamDecoder::~FrameStreamDecoder() {
    std::free(buf_);
}

void FrameStreamDecoder::set_max_payload(uint32_t max_payload) {
    max_payload_ = effective_limit(max_payload);
}

uint8_t* FrameStreamDecoder::write_ptr(size_t min) {
    if (start_ == end_) start_ = end_ = 0;
    if (cap_ - end_ >= min) return buf_ + end_;
    const size_t live = end_ - start_;
    if (cap_ - live >= min) {
        std::memmove(buf_, buf_ + start_, live);
    } else {
        const size_t new_cap = std::max({live + min, 2 * cap_, kMinCapacity});
        auto* bigger = static_cast<uint8_t*>(std::malloc(new_cap));
        if (bigger == nullptr) throw std::bad_alloc();
        if (live > 0) std::memcpy(bigger, buf_ + start_, live);
        std::free(buf_);
        buf_ = bigger;
        cap_ = new_cap;
    }
    start_ = 0;
    end_ = live;
    return buf_ + end_;
}

void FrameStreamDecoder::commit(size_t n) {
    // A failed stream is never read again: drop input instead of buffering it.
    if (error_ != FrameError::None) {
        start_ = end_ = 0;
        return;
    }
    end_ += n;
}

void FrameStreamDecoder::feed(const uint8_t* data, size_t n) {
    if (n == 0 || error_ != FrameError::None) return;
    std::memcpy(write_ptr(n), data, n);
    commit(n);
}

bool FrameStreamDecoder::next(FrameHeader* header, const uint8_t** payload) {
    if (error_ != FrameError::None) return false;
    const size_t avail = end_ - start_;
    if (avail < kFrameHeaderSize) return false;
    // The header is validated as soon as it is complete, so a bad or oversized
    // frame fails before its payload is waited for (or buffered).
    uint8_t* frame = buf_ + start_;
    FrameHeader h;
    FrameError e = decode_frame_header(frame, avail, max_payload_, &h);
    if (e == FrameError::None && avail < kFrameHeaderSize + h.payload_len) return false;
    if (e == FrameError::None) e = verify_contiguous_frame(frame, h.payload_len);
    if (e != FrameError::None) {
        error_ = e;
        return false;
    }
    *header = h;
    *payload = frame + kFrameHeaderSize;
    start_ += kFrameHeaderSize + h.payload_len;
    return true;
}

}  // namespace pgrac::ic
