#include "ic/wire/crc32c.hpp"

#include <isa-l.h>

namespace pgrac::ic {

// ISA-L's crc32_iscsi neither inverts its seed nor its result, so the standard
// CRC32C is ~crc32_iscsi(data, len, ~prev). Chaining works because the
// inversions cancel between calls. Its length is an int: feed big inputs in pieces.
uint32_t crc32c(const void* data, size_t len, uint32_t prev) {
    constexpr size_t kMaxChunk = size_t{1} << 30;
    auto* p = static_cast<unsigned char*>(const_cast<void*>(data));
    uint32_t crc = ~prev;
    while (len > 0) {
        const size_t n = len < kMaxChunk ? len : kMaxChunk;
        crc = crc32_iscsi(p, static_cast<int>(n), crc);
        p += n;
        len -= n;
    }
    return ~crc;
}

}  // namespace pgrac::ic
