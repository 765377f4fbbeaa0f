// CRC32C (Castagnoli), as used by iSCSI, ext4 and Ceph msgr2, computed by ISA-L.
#pragma once

#include <cstddef>
#include <cstdint>

namespace pgrac::ic {

// Standard CRC32C of [data, data+len). Chains: crc32c(b, n, crc32c(a, m)) is the
// CRC of a followed by b. crc32c("123456789", 9) == 0xE3069283.
uint32_t crc32c(const void* data, size_t len, uint32_t prev = 0);

}  // namespace pgrac::ic
