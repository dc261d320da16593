// SPDX-License-Identifier: Apache-2.0
#include "net/checksum.h"

#include <cstring>

namespace ina::net {

uint16_t ones_complement_sum(const void* data, size_t len, uint32_t initial) {
    const auto* p = static_cast<const uint8_t*>(data);
    uint64_t sum = initial;
    // Byte pairs are summed in memory order; the one's-complement sum is byte-order independent
    // (RFC 1071 §2(B)), so the result is in the same order as the data.
    while (len >= 2) {
        uint16_t word;
        std::memcpy(&word, p, 2);
        sum += word;
        p += 2;
        len -= 2;
    }
    if (len) {
        uint16_t word = 0;
        std::memcpy(&word, p, 1);
        sum += word;
    }
    while (sum >> 16) {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    return static_cast<uint16_t>(sum);
}

}  // namespace ina::net
