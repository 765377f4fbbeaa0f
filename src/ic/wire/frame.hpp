// The wire frame: a fixed 24-byte little-endian header, then the payload.
// Layout (byte offsets):
//   0  u16 magic        kFrameMagic
//   2  u8  version      framing version (1)
//   3  u8  type         FrameType
//   4  u16 flags        FrameFlag bits
//   6  u16 src_node     sender's node id
//   8  u32 payload_len  bytes after the header (<= max payload)
//  12  u32 seq          session sequence number (Message frames; 0 otherwise)
//  16  u32 ack          cumulative ack: last seq received in order from the peer
//  20  u32 crc          CRC32C over the header (this field as zero) and the payload
#pragma once

#include <cstddef>
#include <cstdint>

namespace pgrac::ic {

inline constexpr uint16_t kFrameMagic = 0x4352;  // bytes "RC" on the wire
inline constexpr uint8_t kFramingVersion = 1;
inline constexpr size_t kFrameHeaderSize = 24;
// Hard upper bound for any frame's payload; a connection may set a lower one.
inline constexpr uint32_t kMaxFramePayload = 256 * 1024;

enum class FrameType : uint8_t {
    Hello = 1,       // handshake, dialer -> acceptor
    HelloReply = 2,  // acceptor -> dialer, carries the acceptor's proof
    Auth = 3,        // dialer -> acceptor, the dialer's proof
    AuthOk = 4,      // acceptor -> dialer: session established
    Reject = 5,      // refusal with a reason; the sender then closes
    Heartbeat = 6,   // liveness and ack; not sequenced
    Ack = 7,         // standalone cumulative ack; not sequenced
    Message = 8,     // sequenced upper-layer message: MessageHeader + body
    Backoff = 9,     // receiver congested: hold sends until the given time
};
inline constexpr uint8_t kMaxFrameType = 9;

enum FrameFlag : uint16_t {
    kFlagRpcRequest = 0x0001,   // Message that expects a reply
    kFlagRpcReply = 0x0002,     // Message that is a reply (rpc_id names the request)
    kFlagControlLane = 0x0004,  // sent on the control lane
};
inline constexpr uint16_t kKnownFrameFlags = 0x0007;

struct FrameHeader {
    uint8_t version = kFramingVersion;
    FrameType type = FrameType::Message;
    uint16_t flags = 0;
    uint16_t src_node = 0;
    uint32_t payload_len = 0;
    uint32_t seq = 0;
    uint32_t ack = 0;
    uint32_t crc = 0;
};

enum class FrameError : uint8_t {
    None = 0,
    Truncated,  // fewer bytes than the header or the payload needs
    BadMagic,
    BadVersion,
    BadType,
    BadFlags,         // unknown flag bits, or flags not valid for the type
    PayloadTooLarge,  // payload_len above the connection's limit
    BadChecksum,
    BadPayload,  // payload does not parse for its type
};
inline constexpr int kFrameErrorCount = 9;

// The frame type's name as docs/protocol.md spells it, e.g. "Heartbeat".
const char* frame_type_name(FrameType t);

// Stable lower-case name, e.g. "bad_checksum"; used in logs and the errors view.
const char* frame_error_name(FrameError e);

// Writes the 24-byte header with the crc field zero (what CRC and MAC cover).
void encode_frame_fields(const FrameHeader& h, uint8_t out[kFrameHeaderSize]);
// Fills h.crc over header+payload and writes the 24-byte header to out.
void encode_frame_header(FrameHeader& h, const void* payload, uint8_t out[kFrameHeaderSize]);

// Parses and validates every header field except the CRC. Needs len >= 24.
FrameError decode_frame_header(const uint8_t* in, size_t len, uint32_t max_payload,
                               FrameHeader* out);

// Checks the CRC of a decoded header against its raw bytes and payload.
FrameError verify_frame_crc(const uint8_t header[kFrameHeaderSize], const uint8_t* payload,
                            uint32_t payload_len);

// Upper-layer message header: first 24 bytes of a Message frame's payload.
//   0 u16 msg_type  2 u16 status  4 u32 route_key  8 u64 rpc_id  16 u32 epoch  20 u32 reserved (0)
inline constexpr size_t kMessageHeaderSize = 24;
struct MessageHeader {
    uint16_t msg_type = 0;
    uint32_t route_key = 0;
    uint64_t rpc_id = 0;  // requester's reply slot and generation; echoed in the reply
    uint32_t epoch = 0;   // sender's membership epoch
    uint16_t status = 0;  // replies: pgrac_ic_status
};
void encode_message_header(const MessageHeader& m, uint8_t out[kMessageHeaderSize]);
// A retained request whose caller was told it failed is rewritten to this
// type (and loses kFlagRpcRequest) before any resend: it keeps its place in
// the session's sequence, and the receiver drops it. At most once for what
// failed, exactly once for what succeeded.
inline constexpr uint16_t kVoidMsgType = 0;
FrameError decode_message_header(const uint8_t* in, size_t len, MessageHeader* out);

// Reassembles frames from a byte stream (TCP). Feed bytes, then take frames.
class FrameStreamDecoder {
  public:
    explicit FrameStreamDecoder(uint32_t max_payload = kMaxFramePayload);
    ~FrameStreamDecoder();
    FrameStreamDecoder(const FrameStreamDecoder&) = delete;
    FrameStreamDecoder& operator=(const FrameStreamDecoder&) = delete;

    // Space to read into: at least `min` bytes; commit what was written.
    uint8_t* write_ptr(size_t min);
    void commit(size_t n);
    // Copies bytes in (for tests and fuzzing).
    void feed(const uint8_t* data, size_t n);

    // Next complete, validated frame. Returns false when more bytes are needed
    // or after an error (then error() != None and the stream is unusable).
    // header/payload stay valid until the next call.
    bool next(FrameHeader* header, const uint8_t** payload);
    FrameError error() const { return error_; }
    size_t buffered() const { return end_ - start_; }
    // Changes the payload limit (never above kMaxFramePayload) for the frames
    // not yet taken, including one whose header is already buffered.
    void set_max_payload(uint32_t max_payload);

  private:
    uint32_t max_payload_;
    uint8_t* buf_ = nullptr;
    size_t cap_ = 0, start_ = 0, end_ = 0;
    FrameError error_ = FrameError::None;
};

}  // namespace pgrac::ic
