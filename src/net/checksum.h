// SPDX-License-Identifier: Apache-2.0
// Internet checksum helpers (RFC 1071, RFC 1624). Pure; values are in network byte order as they
// sit in the header, so callers never swap.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

#if defined(__x86_64__)
#include <x86intrin.h>  // _addcarry_u64: one add-with-carry chain
#endif

namespace ina::net {

// One's-complement sum of a buffer, folded to 16 bits (not inverted). Inline because the
// packet path verifies every IPv4 header with it and seals every INA datagram it builds (1 KiB
// and more). 64-bit words are summed with their carries counted apart (two independent chains,
// 16 bytes a step: ~0.2 instructions a byte where 32-bit words took ~1.2), the rest as 32-bit
// words into a 64-bit accumulator, all folded once (2^16 = 1 mod 0xffff, so wider words and
// each carry out of bit 63 add the same sum, and the result is in the byte order of the data,
// RFC 1071 §2(B)). On x86-64 every 8-byte word goes through one add-with-carry chain (the
// carry out of each word is the carry into the next; the one left over at the end is added as
// 2^64 = 1): runs of 64 bytes, ~0.3 instructions a byte, for the 1 KiB+ INA partials and
// results, then at most one block each of 32, 16 and 8 bytes (the 40 bytes of UDP and INA
// headers a seal sums: five adc, no loop).
inline uint16_t ones_complement_sum(const void* data, size_t len, uint32_t initial = 0) {
    const auto* p = static_cast<const uint8_t*>(data);
    uint64_t sum = initial;
#if defined(__x86_64__)
    if (len >= 8) {
        unsigned long long acc = 0;
        unsigned char carry = 0;
        const auto word = [](const uint8_t* q) {
            unsigned long long v;
            std::memcpy(&v, q, sizeof v);
            return v;
        };
        while (len >= 64) {  // written out: GCC keeps the chain in adc only without a loop here
            carry = _addcarry_u64(carry, acc, word(p), &acc);
            carry = _addcarry_u64(carry, acc, word(p + 8), &acc);
            carry = _addcarry_u64(carry, acc, word(p + 16), &acc);
            carry = _addcarry_u64(carry, acc, word(p + 24), &acc);
            carry = _addcarry_u64(carry, acc, word(p + 32), &acc);
            carry = _addcarry_u64(carry, acc, word(p + 40), &acc);
            carry = _addcarry_u64(carry, acc, word(p + 48), &acc);
            carry = _addcarry_u64(carry, acc, word(p + 56), &acc);
            p += 64;
            len -= 64;
        }
        // What is left (< 64 bytes: a datagram's headers, the tail of a payload) continues the
        // same chain in blocks of 32, 16 and 8 bytes, each at most once: no loop, no branch per
        // word.
        if (len >= 32) {
            carry = _addcarry_u64(carry, acc, word(p), &acc);
            carry = _addcarry_u64(carry, acc, word(p + 8), &acc);
            carry = _addcarry_u64(carry, acc, word(p + 16), &acc);
            carry = _addcarry_u64(carry, acc, word(p + 24), &acc);
            p += 32;
            len -= 32;
        }
        if (len >= 16) {
            carry = _addcarry_u64(carry, acc, word(p), &acc);
            carry = _addcarry_u64(carry, acc, word(p + 8), &acc);
            p += 16;
            len -= 16;
        }
        if (len >= 8) {
            carry = _addcarry_u64(carry, acc, word(p), &acc);
            p += 8;
            len -= 8;
        }
        // acc + carry * 2^64, congruent mod 0xffff to the halves of acc plus carry; < 2^34.
        sum += (acc & 0xffffffff) + (acc >> 32) + carry;
    }
#endif
    if (len >= 16) {
        uint64_t a = 0;
        uint64_t b = 0;
        uint64_t carries = 0;
        while (len >= 16) {
            uint64_t wa;
            uint64_t wb;
            std::memcpy(&wa, p, 8);
            std::memcpy(&wb, p + 8, 8);
            a += wa;
            carries += a < wa;
            b += wb;
            carries += b < wb;
            p += 16;
            len -= 16;
        }
        // a and b each add (a mod 2^32) + (a >> 32), congruent mod 0xffff; < 2^34 in all.
        sum += (a & 0xffffffff) + (a >> 32) + (b & 0xffffffff) + (b >> 32) + carries;
    }
    while (len >= 4) {
        uint32_t word;
        std::memcpy(&word, p, 4);
        sum += word;
        p += 4;
        len -= 4;
    }
    if (len >= 2) {
        uint16_t half;
        std::memcpy(&half, p, 2);
        sum += half;
        p += 2;
        len -= 2;
    }
    if (len) {
        uint16_t last = 0;
        std::memcpy(&last, p, 1);
        sum += last;
    }
    sum = (sum & 0xffffffff) + (sum >> 32);
    sum = (sum & 0xffffffff) + (sum >> 32);
    sum = (sum & 0xffff) + (sum >> 16);
    sum = (sum & 0xffff) + (sum >> 16);
    sum = (sum & 0xffff) + (sum >> 16);
    return static_cast<uint16_t>(sum);
}

// Checksum over a buffer: the inverted folded sum, ready to store.
inline uint16_t internet_checksum(const void* data, size_t len) {
    return static_cast<uint16_t>(~ones_complement_sum(data, len));
}

// RFC 1624 eqn. 3 incremental update, HC' = ~(~HC + ~m + m'), for one 16-bit word changed from
// old_word to new_word. All three are raw header words (network order); the result is too.
inline uint16_t checksum_update16(uint16_t checksum, uint16_t old_word, uint16_t new_word) {
    uint32_t sum = static_cast<uint16_t>(~checksum);
    sum += static_cast<uint16_t>(~old_word);
    sum += new_word;
    sum = (sum & 0xffff) + (sum >> 16);
    sum = (sum & 0xffff) + (sum >> 16);
    return static_cast<uint16_t>(~sum);
}

// The same for a 32-bit field (an IPv4 address) changed from old_be to new_be, network order.
inline uint16_t checksum_update32(uint16_t checksum, uint32_t old_be, uint32_t new_be) {
    checksum = checksum_update16(checksum, static_cast<uint16_t>(old_be),
                                 static_cast<uint16_t>(new_be));
    return checksum_update16(checksum, static_cast<uint16_t>(old_be >> 16),
                             static_cast<uint16_t>(new_be >> 16));
}

// The UDP checksum field for a datagram whose one's-complement sum (pseudo-header included,
// checksum field 0) is `sum`: inverted, and 0 sent as 0xffff since 0 means "none" (RFC 768).
inline uint16_t udp_checksum_field(uint16_t sum) {
    const auto c = static_cast<uint16_t>(~sum);
    return c == 0 ? 0xffff : c;
}

}  // namespace ina::net
