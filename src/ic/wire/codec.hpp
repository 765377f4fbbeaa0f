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
// and that one list encodes the record (S = const Record, C = Writer or
// FixedWriter) and decodes it (S = Record, C = Reader): the two can never
// disagree. A Reader
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

// Writes fields into a fixed buffer; never allocates, so it may live in a
// PostgreSQL frame. What does not fit is not written and makes ok() false.
class FixedWriter {
  public:
    FixedWriter(uint8_t* p, size_t cap) : p_(p), cap_(cap) {}

    template <typename T>
    void le(const T& v, const char* = nullptr) {
        if (room(sizeof(T))) store_le(p_ + pos_, v);
        pos_ += sizeof(T);
    }
    template <size_t N>
    void fixed(const std::array<uint8_t, N>& a, const char* = nullptr) {
        bytes(a.data(), N);
    }
    void bytes(const uint8_t* p, size_t n) {
        if (room(n) && n > 0) std::memcpy(p_ + pos_, p, n);
        pos_ += n;
    }
    bool ok() const { return pos_ <= cap_; }
    size_t size() const { return pos_; }

  private:
    bool room(size_t n) const { return pos_ <= cap_ && n <= cap_ - pos_; }
    uint8_t* p_;
    size_t cap_;
    size_t pos_ = 0;
};

// Reads fields in order from a bounded buffer. After the first problem every
// read fails and leaves its destination as it was. It keeps the problem as
// plain values (no allocation, trivially destructible: it may live in a
// PostgreSQL frame) and phrases it only when error() is asked.
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
            set(Problem::TooLong, field, len, max);
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
    // Marks the input bad with the caller's phrase (a string literal: a value
    // out of range), unless it is bad already.
    void fail(const char* phrase) { set(Problem::Caller, phrase, 0, 0); }
    // True when every field was read and nothing follows the last one.
    bool finish() {
        if (problem_ == Problem::None && pos_ != n_) set(Problem::Trailing, "", n_ - pos_, 0);
        return problem_ == Problem::None;
    }
    bool ok() const { return problem_ == Problem::None; }
    bool at_end() const { return pos_ == n_; }
    size_t remaining() const { return n_ - pos_; }
    // The first problem as a phrase, or empty.
    std::string error() const {
        switch (problem_) {
            case Problem::None:
                return {};
            case Problem::Short:
                return "the payload (" + std::to_string(n_) + " bytes) ends inside the " + what_;
            case Problem::TooLong:
                return std::string("the ") + what_ + " is " + std::to_string(a_) +
                       " bytes long, at most " + std::to_string(b_) + " are allowed";
            case Problem::Trailing:
                return std::to_string(a_) + " unexpected bytes follow the last field";
            case Problem::Caller:
                return what_;
        }
        return {};
    }

  private:
    enum class Problem : uint8_t { None, Short, TooLong, Trailing, Caller };

    void set(Problem p, const char* what, size_t a, size_t b) {
        if (problem_ != Problem::None) return;
        problem_ = p;
        what_ = what;
        a_ = a;
        b_ = b;
    }
    bool take(size_t n, const char* field) {
        if (problem_ != Problem::None) return false;
        if (n > n_ - pos_) {
            set(Problem::Short, field, 0, 0);
            return false;
        }
        return true;
    }

    const uint8_t* p_;
    size_t n_;
    size_t pos_ = 0;
    Problem problem_ = Problem::None;
    const char* what_ = "";
    size_t a_ = 0, b_ = 0;
};

// A record with a fields() list, as bytes.
template <typename R>
std::vector<uint8_t> encode(const R& r) {
    std::vector<uint8_t> b;
    Writer w(&b);
    R::fields(w, r);
    return b;
}

// A record with a fields() list into out[0..cap): the bytes written, or 0 if
// it does not fit. Never allocates.
template <typename R>
size_t encode_to(const R& r, uint8_t* out, size_t cap) {
    FixedWriter w(out, cap);
    R::fields(w, r);
    return w.ok() ? w.size() : 0;
}

// Decodes a whole buffer into r (which may be partly filled on failure).
// Without error text it never allocates for records of fixed-size fields.
template <typename R>
bool decode(const uint8_t* p, size_t n, R* r) {
    Reader rd(p, n);
    R::fields(rd, *r);
    return rd.finish();
}

template <typename R>
bool decode(const uint8_t* p, size_t n, R* r, std::string* error) {
    Reader rd(p, n);
    R::fields(rd, *r);
    if (rd.finish()) return true;
    *error = rd.error();
    return false;
}

}  // namespace pgrac::ic::codec
