// Frame protection with AES-256-GCM through OpenSSL's EVP interface (see
// frame_guard.hpp for the modes and the nonce and rekey rules).
#include "ic/wire/frame_guard.hpp"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/kdf.h>

#include <cstring>
#include <stdexcept>

#include "ic/wire/codec.hpp"
#include "ic/wire/crc32c.hpp"

namespace pgrac::ic {

namespace {

constexpr size_t kNonceBytes = 12;  // GCM's natural nonce: 4 zero bytes, then the counter
constexpr char kRekeyLabel[] = "pgrac-ic v2 rekey";

[[noreturn]] void crypto_failed(const char* what) {
    throw std::runtime_error(std::string("OpenSSL failed: ") + what);
}

void put32(uint8_t* p, uint32_t v) {
    codec::store_le(p, v);
}

}  // namespace

KeptKey::~KeptKey() {
    OPENSSL_cleanse(key.data(), key.size());
}

const char* wire_protection_name(WireProtection p) {
    switch (p) {
        case WireProtection::Crc:
            return "crc";
        case WireProtection::Mac:
            return "mac";
        case WireProtection::Secure:
            return "secure";
    }
    return "unknown";
}

std::vector<uint8_t> hkdf_sha256(const std::vector<uint8_t>& ikm, const std::vector<uint8_t>& salt,
                                 const std::vector<uint8_t>& info, size_t out_len) {
    EVP_PKEY_CTX* ctx = EVP_PKEY_CTX_new_id(EVP_PKEY_HKDF, nullptr);
    if (ctx == nullptr) crypto_failed("EVP_PKEY_CTX_new_id(HKDF)");
    std::vector<uint8_t> out(out_len);
    size_t len = out_len;
    static const uint8_t kEmpty = 0;
    const bool ok = EVP_PKEY_derive_init(ctx) > 0 &&
                    EVP_PKEY_CTX_set_hkdf_md(ctx, EVP_sha256()) > 0 &&
                    EVP_PKEY_CTX_set1_hkdf_salt(ctx, salt.empty() ? &kEmpty : salt.data(),
                                                static_cast<int>(salt.size())) > 0 &&
                    EVP_PKEY_CTX_set1_hkdf_key(ctx, ikm.empty() ? &kEmpty : ikm.data(),
                                               static_cast<int>(ikm.size())) > 0 &&
                    EVP_PKEY_CTX_add1_hkdf_info(ctx, info.empty() ? &kEmpty : info.data(),
                                                static_cast<int>(info.size())) > 0 &&
                    EVP_PKEY_derive(ctx, out.data(), &len) > 0 && len == out_len;
    EVP_PKEY_CTX_free(ctx);
    if (!ok) crypto_failed("HKDF-SHA256");
    return out;
}

FrameGuard::FrameGuard(WireProtection mode, const SessionKeys& keys, uint64_t rekey_interval)
    : mode_(mode), rekey_interval_(rekey_interval == 0 ? kDefaultRekeyInterval : rekey_interval) {
    if (mode_ == WireProtection::Crc) return;
    init(send_, keys.send, true);
    init(recv_, keys.recv, false);
}

FrameGuard::~FrameGuard() {
    EVP_CIPHER_CTX_free(send_.ctx);
    EVP_CIPHER_CTX_free(recv_.ctx);
    OPENSSL_cleanse(send_.key.data(), send_.key.size());
    OPENSSL_cleanse(recv_.key.data(), recv_.key.size());
}

void FrameGuard::init(Direction& d, const std::array<uint8_t, kSessionKeySize>& key, bool encrypt) {
    d.key = key;
    d.encrypt = encrypt;
    d.kept.reset();  // frames sealed under the previous key keep their copy
    if (d.ctx == nullptr) d.ctx = EVP_CIPHER_CTX_new();
    if (d.ctx == nullptr) crypto_failed("EVP_CIPHER_CTX_new");
    const int ok =
        encrypt ? EVP_EncryptInit_ex(d.ctx, EVP_aes_256_gcm(), nullptr, d.key.data(), nullptr)
                : EVP_DecryptInit_ex(d.ctx, EVP_aes_256_gcm(), nullptr, d.key.data(), nullptr);
    if (ok != 1) crypto_failed("AES-256-GCM init");
}

void FrameGuard::begin(Direction& d) {
    rekey_if_due(d);
    uint8_t nonce[kNonceBytes] = {};
    codec::store_le(nonce + 4, d.counter);
    const int ok = d.encrypt ? EVP_EncryptInit_ex(d.ctx, nullptr, nullptr, nullptr, nonce)
                             : EVP_DecryptInit_ex(d.ctx, nullptr, nullptr, nullptr, nonce);
    if (ok != 1) crypto_failed("AES-256-GCM nonce");
}

void FrameGuard::rekey_if_due(Direction& d) {
    // Both sides count the same frames, so both move to the next key together.
    const uint64_t due = d.counter / rekey_interval_;
    if (due != d.generation) {
        std::vector<uint8_t> ikm(d.key.begin(), d.key.end());
        std::vector<uint8_t> salt(kRekeyLabel, kRekeyLabel + sizeof kRekeyLabel - 1);
        std::vector<uint8_t> info(8);
        codec::store_le(info.data(), due);
        std::vector<uint8_t> next = hkdf_sha256(ikm, salt, info, kSessionKeySize);
        std::array<uint8_t, kSessionKeySize> key{};
        std::memcpy(key.data(), next.data(), key.size());
        OPENSSL_cleanse(ikm.data(), ikm.size());
        OPENSSL_cleanse(next.data(), next.size());
        init(d, key, d.encrypt);
        d.generation = due;
    }
}

void FrameGuard::seal(FrameHeader h, const uint8_t* payload, uint32_t len,
                      std::vector<uint8_t>* out) {
    if (sealing()) throw std::logic_error("FrameGuard::seal: another frame is being sealed");
    out->resize(kFrameHeaderSize + len + overhead());
    seal_into(h, payload, len, out->data());
}

void FrameGuard::seal_into(FrameHeader h, const uint8_t* payload, uint32_t len, uint8_t* out) {
    seal_begin(h, len, out);
    try {
        seal_next(payload, len);
        seal_end();
    } catch (...) {
        seal_abandon();
        throw;
    }
}

void FrameGuard::seal_begin(FrameHeader h, uint32_t len, uint8_t* out) {
    if (stream_out_ != nullptr)
        throw std::logic_error("FrameGuard::seal_begin: another frame is being sealed");
    h.payload_len = static_cast<uint32_t>(len + overhead());
    encode_frame_fields(h, out);  // crc field zero: this is the AAD
    if (mode_ != WireProtection::Crc) {
        begin(send_);
        int n = 0;
        if (EVP_EncryptUpdate(send_.ctx, nullptr, &n, out, kFrameHeaderSize) != 1)
            crypto_failed("AES-256-GCM seal");
    }
    stream_out_ = out;
    stream_len_ = len;
    stream_done_ = 0;
}

SealedUnder FrameGuard::seal_kept(FrameHeader h, const uint8_t* payload, uint32_t len,
                                  uint8_t* out) {
    if (mode_ != WireProtection::Secure)
        throw std::logic_error("FrameGuard::seal_kept: only secure mode seals kept frames");
    if (sealing()) throw std::logic_error("FrameGuard::seal_kept: another frame is being sealed");
    // The key this frame is sealed under, copied before a byte of the frame
    // changes: what can fail (allocation) fails with the frame intact.
    rekey_if_due(send_);
    if (!send_.kept) {
        auto copy = std::make_shared<KeptKey>();
        copy->key = send_.key;
        send_.kept = std::move(copy);
    }
    SealedUnder at{send_.kept, send_.counter};
    seal_into(h, payload, len, out);
    return at;
}

bool FrameGuard::open_kept(const SealedUnder& at, uint8_t* frame, size_t frame_len) {
    FrameHeader h;
    if (at.key == nullptr ||
        decode_frame_header(frame, frame_len, kMaxFramePayload, &h) != FrameError::None ||
        h.payload_len < kFrameTagSize || frame_len != kFrameHeaderSize + h.payload_len)
        return false;
    const uint32_t len = h.payload_len - static_cast<uint32_t>(kFrameTagSize);
    uint8_t* payload = frame + kFrameHeaderSize;
    EVP_CIPHER_CTX* ctx = EVP_CIPHER_CTX_new();
    if (ctx == nullptr) crypto_failed("EVP_CIPHER_CTX_new");
    uint8_t nonce[kNonceBytes] = {};
    codec::store_le(nonce + 4, at.counter);
    h.crc = 0;
    uint8_t aad[kFrameHeaderSize];
    encode_frame_fields(h, aad);
    int n = 0;
    uint8_t final_block[16];  // GCM writes nothing here
    const bool ok =
        EVP_DecryptInit_ex(ctx, EVP_aes_256_gcm(), nullptr, at.key->key.data(), nonce) == 1 &&
        EVP_DecryptUpdate(ctx, nullptr, &n, aad, kFrameHeaderSize) == 1 &&
        (len == 0 || EVP_DecryptUpdate(ctx, payload, &n, payload, static_cast<int>(len)) == 1) &&
        EVP_CIPHER_CTX_ctrl(ctx, EVP_CTRL_GCM_SET_TAG, kFrameTagSize, payload + len) == 1 &&
        EVP_DecryptFinal_ex(ctx, final_block, &n) == 1;
    EVP_CIPHER_CTX_free(ctx);
    if (!ok) return false;
    h.payload_len = len;
    encode_frame_fields(h, frame);
    return true;
}

void FrameGuard::seal_next(const uint8_t* piece, uint32_t n) {
    if (stream_out_ == nullptr || n > stream_len_ - stream_done_)
        throw std::logic_error("FrameGuard::seal_next: more than the frame's payload");
    if (n == 0) return;
    uint8_t* to = stream_out_ + kFrameHeaderSize + stream_done_;
    int written = 0;
    if (mode_ == WireProtection::Secure) {
        // GCM is a stream mode: every byte in is a byte out, at once.
        if (EVP_EncryptUpdate(send_.ctx, to, &written, piece, static_cast<int>(n)) != 1 ||
            written != static_cast<int>(n))
            crypto_failed("AES-256-GCM seal");
    } else {
        if (mode_ == WireProtection::Mac &&
            EVP_EncryptUpdate(send_.ctx, nullptr, &written, piece, static_cast<int>(n)) != 1)
            crypto_failed("AES-256-GCM seal");
        std::memcpy(to, piece, n);
    }
    stream_done_ += n;
}

void FrameGuard::seal_end() {
    if (stream_out_ == nullptr || stream_done_ != stream_len_)
        throw std::logic_error("FrameGuard::seal_end: the payload is not complete");
    uint8_t* tag = stream_out_ + kFrameHeaderSize + stream_len_;
    if (mode_ != WireProtection::Crc) {
        int n = 0;
        const bool ok =
            EVP_EncryptFinal_ex(send_.ctx, tag, &n) == 1 &&
            EVP_CIPHER_CTX_ctrl(send_.ctx, EVP_CTRL_GCM_GET_TAG, kFrameTagSize, tag) == 1;
        if (!ok) crypto_failed("AES-256-GCM seal");
        ++send_.counter;
    }
    put32(stream_out_ + 20, crc32c(stream_out_, kFrameHeaderSize + stream_len_ + overhead()));
    stream_out_ = nullptr;
}

void FrameGuard::seal_abandon() {
    if (stream_out_ == nullptr) return;
    // Its nonce is the next frame's: nothing sealed under it stays behind.
    OPENSSL_cleanse(stream_out_, kFrameHeaderSize + stream_done_);
    stream_out_ = nullptr;
}

void FrameGuard::seal_apart(FrameHeader h, const uint8_t* payload, uint32_t len, uint8_t* hdr,
                            uint8_t* tag) {
    if (mode_ == WireProtection::Secure)
        throw std::logic_error("FrameGuard::seal_apart: secure mode encrypts the payload");
    if (sealing()) throw std::logic_error("FrameGuard::seal_apart: another frame is being sealed");
    const size_t tag_len = overhead();
    h.payload_len = static_cast<uint32_t>(len + tag_len);
    encode_frame_fields(h, hdr);  // crc field zero: this is the AAD
    if (mode_ == WireProtection::Mac) {
        begin(send_);
        int n = 0;
        bool ok = EVP_EncryptUpdate(send_.ctx, nullptr, &n, hdr, kFrameHeaderSize) == 1 &&
                  (len == 0 ||
                   EVP_EncryptUpdate(send_.ctx, nullptr, &n, payload, static_cast<int>(len)) == 1);
        ok = ok && EVP_EncryptFinal_ex(send_.ctx, tag, &n) == 1 &&
             EVP_CIPHER_CTX_ctrl(send_.ctx, EVP_CTRL_GCM_GET_TAG, kFrameTagSize, tag) == 1;
        if (!ok) crypto_failed("AES-256-GCM seal");
        ++send_.counter;
    }
    // The CRC of header, payload and tag, as seal() computes it over one buffer.
    uint32_t crc = crc32c(hdr, kFrameHeaderSize);
    if (len > 0) crc = crc32c(payload, len, crc);
    if (tag_len > 0) crc = crc32c(tag, tag_len, crc);
    put32(hdr + 20, crc);
}

bool FrameGuard::open(const FrameHeader& h, const uint8_t* payload, const uint8_t** plain,
                      uint32_t* plain_len) {
    return open_to(h, payload, nullptr, plain, plain_len);
}

bool FrameGuard::open_in_place(const FrameHeader& h, uint8_t* payload, uint32_t* plain_len) {
    const uint8_t* plain = nullptr;
    return open_to(h, payload, payload, &plain, plain_len);
}

bool FrameGuard::open_into(const FrameHeader& h, const uint8_t* payload, uint8_t* out,
                           uint32_t* plain_len) {
    if (mode_ == WireProtection::Secure) {
        const uint8_t* plain = nullptr;
        return open_to(h, payload, out, &plain, plain_len);
    }
    if (h.payload_len > 0) std::memcpy(out, payload, h.payload_len);
    return open_in_place(h, out, plain_len);
}

bool FrameGuard::open_to(const FrameHeader& h, const uint8_t* payload, uint8_t* into,
                         const uint8_t** plain, uint32_t* plain_len) {
    if (mode_ == WireProtection::Crc) {
        *plain = payload;
        *plain_len = h.payload_len;
        return true;
    }
    if (h.payload_len < kFrameTagSize) return false;
    const uint32_t len = h.payload_len - static_cast<uint32_t>(kFrameTagSize);
    uint8_t aad[kFrameHeaderSize];
    encode_frame_fields(h, aad);
    begin(recv_);
    int n = 0;
    uint8_t final_block[16];  // GCM writes nothing here
    bool ok = EVP_DecryptUpdate(recv_.ctx, nullptr, &n, aad, kFrameHeaderSize) == 1;
    const uint8_t* out = payload;
    if (mode_ == WireProtection::Secure) {
        if (into == nullptr) {
            if (plain_.size() < len + 1) plain_.resize(len + 1);
            into = plain_.data();
        }
        // GCM decrypts in place (into == payload) as well as apart.
        ok = ok && (len == 0 ||
                    EVP_DecryptUpdate(recv_.ctx, into, &n, payload, static_cast<int>(len)) == 1);
        out = into;
    } else {
        ok = ok && (len == 0 ||
                    EVP_DecryptUpdate(recv_.ctx, nullptr, &n, payload, static_cast<int>(len)) == 1);
    }
    ok = ok &&
         EVP_CIPHER_CTX_ctrl(recv_.ctx, EVP_CTRL_GCM_SET_TAG, kFrameTagSize,
                             const_cast<uint8_t*>(payload + len)) == 1 &&
         EVP_DecryptFinal_ex(recv_.ctx, final_block, &n) == 1;
    if (!ok) return false;
    ++recv_.counter;
    *plain = out;
    *plain_len = len;
    return true;
}

}  // namespace pgrac::ic
