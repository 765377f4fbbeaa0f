// Frame protection after the handshake (cluster.wire_protection):
//
//   crc     frames carry CRC32C only (integrity against accidents, not attacks)
//   mac     every frame also carries a 16-byte AES-256-GCM tag over header and
//           payload (GMAC): nobody without the session key can inject, alter,
//           replay, reorder or drop a frame unnoticed; payloads travel in clear
//   secure  as mac, and the payload is encrypted (AES-256-GCM, header as AAD)
//
// Each direction of a connection has its own key (from the handshake's HKDF)
// and a 64-bit frame counter that both sides advance in step; the GCM nonce is
// the counter, never sent, so a replayed, reordered or dropped frame fails its
// tag. Every 2^20 frames both sides derive the next key from the current one
// (HKDF-Expand), well inside AES-GCM's per-key limits for 64 KiB frames, so no
// key ever sees a nonce twice and none wears out. A sealed frame's payload_len
// includes the tag; its CRC covers what is on the wire, so the transports
// check it as for any frame.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "ic/wire/frame.hpp"

typedef struct evp_cipher_ctx_st EVP_CIPHER_CTX;

namespace pgrac::ic {

enum class WireProtection : uint8_t { Crc = 0, Mac = 1, Secure = 2 };
inline constexpr uint8_t kMaxWireProtection = 2;
const char* wire_protection_name(WireProtection p);  // "crc", "mac", "secure"

inline constexpr size_t kFrameTagSize = 16;
inline constexpr size_t kSessionKeySize = 32;  // AES-256

struct SessionKeys {
    std::array<uint8_t, kSessionKeySize> send{}, recv{};
};

// A copy of one send key, shared by the frames kept for resending that were
// sealed under it; wiped when the last of them goes.
struct KeptKey {
    std::array<uint8_t, kSessionKeySize> key{};
    KeptKey() = default;
    KeptKey(const KeptKey&) = delete;
    KeptKey& operator=(const KeptKey&) = delete;
    ~KeptKey();
};

// Where a kept frame was sealed (FrameGuard::seal_kept): the key of its
// generation and its counter (the GCM nonce), all open_kept() needs to open
// it again where it lies, after the connection and its guard are gone.
struct SealedUnder {
    std::shared_ptr<const KeptKey> key;  // nullptr: not sealed
    uint64_t counter = 0;
};

// HKDF-SHA256 (RFC 5869) through OpenSSL: out_len bytes from ikm, salt and info.
std::vector<uint8_t> hkdf_sha256(const std::vector<uint8_t>& ikm, const std::vector<uint8_t>& salt,
                                 const std::vector<uint8_t>& info, size_t out_len);

class FrameGuard {
  public:
    // Frames per key before both sides move to the next one.
    static constexpr uint64_t kDefaultRekeyInterval = uint64_t{1} << 20;

    FrameGuard(WireProtection mode, const SessionKeys& keys,
               uint64_t rekey_interval = kDefaultRekeyInterval);
    ~FrameGuard();
    FrameGuard(const FrameGuard&) = delete;
    FrameGuard& operator=(const FrameGuard&) = delete;

    WireProtection mode() const { return mode_; }
    // Bytes a sealed frame adds to the payload (0 in crc mode).
    size_t overhead() const { return mode_ == WireProtection::Crc ? 0 : kFrameTagSize; }

    // Seals one frame: h describes the plain payload (h.payload_len = len);
    // out receives header, payload (encrypted in secure mode) and tag, CRC set.
    void seal(FrameHeader h, const uint8_t* payload, uint32_t len, std::vector<uint8_t>* out);
    // As seal(), into out's kFrameHeaderSize + len + overhead() bytes (a
    // transport's send buffer: the cipher pass is then the only copy).
    void seal_into(FrameHeader h, const uint8_t* payload, uint32_t len, uint8_t* out);
    // seal_into() for a payload that is not in one place (a reply read from
    // several: the cipher then reads each piece where it lies, and its pass
    // is the only one). seal_begin() writes the header into out (room for
    // kFrameHeaderSize + len + overhead() bytes), seal_next() takes the len
    // payload bytes in order, in pieces of any size, and seal_end() writes the
    // tag and the CRC: the frame is byte for byte what seal_into() makes of
    // the same payload. seal_abandon() drops a frame begun and wipes what it
    // wrote. The frame counter advances at seal_end() only, so an abandoned
    // frame's nonce is the next frame's: its bytes must never have left
    // (nothing a caller sends is complete before seal_end()). One frame at
    // a time; a throw from seal_next() or seal_end() leaves it to abandon.
    void seal_begin(FrameHeader h, uint32_t len, uint8_t* out);
    // As seal_into() (secure only), for a frame kept for resending: it also
    // tells the key and counter the frame was sealed under, so that it can
    // be opened again where it is kept (open_kept) to go out under another
    // connection's keys or be rewritten. payload may be out +
    // kFrameHeaderSize: the frame is then sealed in place. A throw before the
    // cipher starts (the key's copy) leaves the frame as it was; one during
    // its pass (OpenSSL failing) leaves it wiped, as seal_abandon() does.
    SealedUnder seal_kept(FrameHeader h, const uint8_t* payload, uint32_t len, uint8_t* out);
    // Opens in place the frame_len bytes at frame that seal_kept() sealed
    // under `at`: the payload is in clear again and the header as it was
    // before sealing (payload_len without the tag, crc field zero). False if
    // the tag does not verify (the bytes changed since): the frame is garbage.
    static bool open_kept(const SealedUnder& at, uint8_t* frame, size_t frame_len);
    void seal_next(const uint8_t* piece, uint32_t n);
    void seal_end();
    void seal_abandon();
    bool sealing() const { return stream_out_ != nullptr; }
    // As seal(), for a mode that leaves the payload as it is (crc, mac): only
    // the header (hdr, kFrameHeaderSize bytes) and the tag (tag, overhead()
    // bytes) are written; the frame on the wire is hdr, payload, tag, the
    // payload sent from where it is (no copy). Throws in secure mode.
    void seal_apart(FrameHeader h, const uint8_t* payload, uint32_t len, uint8_t* hdr,
                    uint8_t* tag);
    // Checks and opens one received frame (h as decoded: payload_len includes
    // the tag). On success *plain and *plain_len give the payload without tag
    // (in secure mode, decrypted into a buffer of the guard's, valid until the
    // next call). False if the tag does not verify: the frame is forged,
    // altered, replayed or out of order, and the connection must be dropped.
    bool open(const FrameHeader& h, const uint8_t* payload, const uint8_t** plain,
              uint32_t* plain_len);
    // As open(), decrypting in place (secure): the plain payload is then the
    // first *plain_len bytes of payload. For a caller that owns the bytes and
    // would copy the plain text out of the guard's buffer otherwise. On a
    // failed tag the payload is garbage.
    bool open_in_place(const FrameHeader& h, uint8_t* payload, uint32_t* plain_len);
    // As open(), the plain payload written to out (h.payload_len bytes of
    // room): under secure the decryption is the copy, one pass over the
    // frame. For a frame that must leave where it lies (a landing slot).
    bool open_into(const FrameHeader& h, const uint8_t* payload, uint8_t* out, uint32_t* plain_len);

    uint64_t frames_sealed() const { return send_.counter; }
    uint64_t frames_opened() const { return recv_.counter; }
    uint64_t rekeys() const { return send_.generation + recv_.generation; }

  private:
    struct Direction {
        EVP_CIPHER_CTX* ctx = nullptr;
        std::array<uint8_t, kSessionKeySize> key{};
        uint64_t counter = 0;     // frames so far: the next frame's nonce
        uint64_t generation = 0;  // keys derived since the handshake
        bool encrypt = true;
        std::shared_ptr<const KeptKey> kept;  // key's copy for seal_kept, made at its first use
    };
    void init(Direction& d, const std::array<uint8_t, kSessionKeySize>& key, bool encrypt);
    // Sets the nonce for d.counter, moving to the next key first when due.
    void begin(Direction& d);
    void rekey_if_due(Direction& d);
    // open() and open_in_place(): secure decrypts into `into`, or into plain_
    // when it is nullptr.
    bool open_to(const FrameHeader& h, const uint8_t* payload, uint8_t* into, const uint8_t** plain,
                 uint32_t* plain_len);

    WireProtection mode_;
    uint64_t rekey_interval_;
    Direction send_, recv_;
    std::vector<uint8_t> plain_;
    // The frame seal_begin() started: where it goes, its payload's length,
    // and how much of it seal_next() has taken.
    uint8_t* stream_out_ = nullptr;
    uint32_t stream_len_ = 0, stream_done_ = 0;
};

}  // namespace pgrac::ic
