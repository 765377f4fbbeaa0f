// libFuzzer target: Cache Fusion's wire records (src/ic/wire/block_wire.hpp) from
// arbitrary bytes. Byte 0 picks the record; the rest is decoded as it. What
// decodes must encode back to exactly the same bytes (one field list, no slack
// in the format); what does not must leave a reason and never read past the input.
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "ic/wire/block_wire.hpp"

namespace {

using namespace pgrac::ic;

template <typename R>
void round_trip(const uint8_t* p, size_t n) {
    R r;
    std::string err;
    // A copy of exactly n bytes: reading beyond it is an ASan report.
    std::vector<uint8_t> in(p, p + n);
    if (!codec::decode(in.data(), in.size(), &r, &err)) {
        if (err.empty()) std::abort();  // refused without saying why
        R again;
        if (codec::decode(in.data(), in.size(), &again)) std::abort();  // the two decoders disagree
        return;
    }
    if (codec::encode(r) != in) std::abort();
    std::vector<uint8_t> fixed(n + 1, 0xa5);
    if (codec::encode_to(r, fixed.data(), n) != n || std::memcmp(fixed.data(), in.data(), n) != 0 ||
        fixed[n] != 0xa5)
        std::abort();  // the fixed-buffer encoder writes the same bytes and not one more
    if (n > 0 && codec::encode_to(r, fixed.data(), n - 1) != 0) std::abort();  // too small: refused
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    if (size < 1) return 0;
    const uint8_t* p = data + 1;
    const size_t n = size - 1;
    switch (data[0] % 3) {
        case 0:
            round_trip<BlockRequest>(p, n);
            break;
        case 1:
            round_trip<BlockReplyHeader>(p, n);
            break;
        default:
            round_trip<BlockEntryHeader>(p, n);
            break;
    }
    return 0;
}
