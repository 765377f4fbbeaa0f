// The one little-endian codec of pgrac_ic's wire formats (docs/protocol.md).
// Every multi-byte field is written and read byte by byte, so no format
// depends on the host's endianness or on struct padding.
//
// Fixed layouts at known offsets (the frame header, heartbeats) use
// store_le/load_le. Variable records list their fields once, in wire order,
// in a static member
//
//     template <class C, class S> static void fields(C& c, S& s) {
//         c.le(s.node_id, "node id");
//         c.str8(s.cluster, kMaxClusterName, "cluster name");
//         c.fixed(s.nonce, "nonce");
//     }
//
// and that one list encodes the record (S = const Record, C = Writer) and
// decodes it (S = Record, C = Reader): the two can never disagree. A Reader
// checks every length against what is left, keeps the first problem as a
// phrase naming the field, and then reads nothing more.
#pragma once

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <type_traits>
#include <vector>

namespace pgrac::ic::codec {

template <typename T>
using Wire = std::conditional_t<std::is_enum_v<T>, std::underlying_type<T>, std::common_type<T>>;
template <typename T>
using WireT = typename Wire<T>::type;

template <typename T>
inline void store_le(uint8_t* p, T v) {
    static_assert(std::is_integral_v<WireT<T>>, "integers and enums only");
    const auto x = static_cast<uint64_t>(static_cast<WireT<T>>(v));
    for (size_t i = 0; i < sizeof(T); ++i) p[i] = static_cast<uint8_t>(x >> (8 * i));
}

template <typename T>
inline T load_le(const uint8_t* p) {
    static_assert(std::is_integral_v<WireT<T>>, "integers and enums only");
    uint64_t x = 0;
    for (size_t i = 0; i < sizeof(T); ++i) x |= static_cast<uint64_t>(p[i]) << (8 * i);
    return static_cast<T>(static_cast<WireT<T>>(x));
}

// Appends fields to a byte vector.
class Writer {
  public:
    explicit Writer(std::vector<uint8_t>* out) : out_(out) {}

    template <typename T>
    void le(const T& v, const char* = nullptr) {
        uint8_t b[sizeof(T)];
        store_le(b, v);
        out_->insert(out_->end(), b, b + sizeof(T));
    }
    template <size_t N>
    void fixed(const std::array<uint8_t, N>& a, const char* = nullptr) {
        out_->insert(out_->end(), a.begin(), a.end());
    }
    // A u8 length, then the bytes: longer strings are cut to max (<= 255).
    void str8(const std::string& s, size_t max, const char* = nullptr) {
        const size_t n = std::min({s.size(), max, size_t{255}});
        le(static_cast<uint8_t>(n));
        out_->insert(out_->end(), s.begin(), s.begin() + static_cast<std::ptrdiff_t>(n));
    }
    void bytes(const uint8_t* p, size_t n) { out_->insert(out_->end(), p, p + n); }

  private:
    std::vector<uint8_t>* out_;
};

// Reads fields in order from a bounded buffer. After the first problem every
// read fails and leaves its destination as it was.
class Reader {
  public:
    Reader(const uint8_t* p, size_t n) : p_(p), n_(n) {}

    template <typename T>
    bool le(T& v, const char* field = "field") {
        if (!take(sizeof(T), field)) return false;
        v = load_le<T>(p_ + pos_);
        pos_ += sizeof(T);
        return true;
    }
    // The value, or 0 once reading has failed.
    template <typename T>
    T le() {
        T v{};
        le(v);
        return v;
    }
    template <size_t N>
    bool fixed(std::array<uint8_t, N>& a, const char* field = "field") {
        const uint8_t* b = bytes(N, field);
        if (b != nullptr) std::memcpy(a.data(), b, N);
        return b != nullptr;
    }
    bool str8(std::string& s, size_t max, const char* field = "string") {
        uint8_t len = 0;
        if (!le(len, field)) return false;
        if (len > max) {
            fail(std::string("the ") + field + " is " + std::to_string(len) +
                 " bytes long, at most " + std::to_string(max) + " are allowed");
            return false;
        }
        const uint8_t* b = bytes(len, field);
        if (b == nullptr) return false;
        s.assign(reinterpret_cast<const char*>(b), len);
        return true;
    }
    // n bytes in place, or nullptr.
    const uint8_t* bytes(size_t n, const char* field = "field") {
        if (!take(n, field)) return nullptr;
        const uint8_t* b = p_ + pos_;
        pos_ += n;
        return b;
    }
    // Marks the input bad with a phrase of the caller's (a value out of range).
    void fail(std::string why) {
        if (error_.empty()) error_ = std::move(why);
    }
    // True when every field was read and nothing follows the last one.
    bool finish() {
        if (!error_.empty()) return false;
        if (pos_ != n_) {
            error_ = std::to_string(n_ - pos_) + " unexpected bytes follow the last field";
            return false;
        }
        return true;
    }
    bool ok() const { return error_.empty(); }
    bool at_end() const { return pos_ == n_; }
    size_t remaining() const { return n_ - pos_; }
    const std::string& error() const { return error_; }

  private:
    bool take(size_t n, const char* field) {
        if (!error_.empty()) return false;
        if (n > n_ - pos_) {
            error_ = "the payload (" + std::to_string(n_) + " bytes) ends inside the " + field;
            return false;
        }
        return true;
    }

    const uint8_t* p_;
    size_t n_;
    size_t pos_ = 0;
    std::string error_;
};

// A record with a fields() list, appended to out.
template <typename R>
void encode_into(const R& r, std::vector<uint8_t>* out) {
    Writer w(out);
    R::fields(w, r);
}

template <typename R>
std::vector<uint8_t> encode(const R& r) {
    std::vector<uint8_t> b;
    encode_into(r, &b);
    return b;
}

// Decodes a whole buffer into r; on failure returns false with the phrase in
// *error (r may be partly filled).
template <typename R>
bool decode(const uint8_t* p, size_t n, R* r, std::string* error) {
    Reader rd(p, n);
    R::fields(rd, *r);
    if (rd.finish()) return true;
    *error = rd.error();
    return false;
}

}  // namespace pgrac::ic::codec
