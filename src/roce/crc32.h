// SPDX-License-Identifier: Apache-2.0
// The Ethernet CRC-32 (reflected polynomial 0xEDB88320, register started at all ones, result
// complemented: zlib's crc32, rte_net_crc's CRC32_ETH), continued from any earlier CRC, so a
// value summed over masked header bytes carries straight into the payload in place: no second
// pass, no combine, no forged seam. Carry-less-multiply folding over 64-byte (AVX-512
// VPCLMULQDQ) or 16-byte (PCLMULQDQ) blocks, chosen at run time from CPUID, else a table; every
// constant is derived at compile time from the polynomial (crc32.cc). Pure code, no DPDK.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

namespace ina::roce {

// The CRC of the bytes a CRC `crc` was taken of, followed by `len` bytes at p: zlib's
// crc32(crc, p, len) (crc 0 for the CRC of p alone).
uint32_t crc32_update(uint32_t crc, const uint8_t* p, size_t len);

// crc32_update over the bytes at p with the 64 bytes at `mask` ORed into the first 64 (or the
// first len, when fewer) as they are read: fields a CRC must see as ones (the ICRC's variant fields) are masked in
// registers, with nothing written to the bytes (no stores the loads must wait for).
uint32_t crc32_update_masked(uint32_t crc, const uint8_t* p, size_t len, const uint8_t* mask);

// The element types crc32_masked_with_add adds, each as the reduce library's sum does: fp32,
// fp16 and bf16 into fp32 accumulators, int32 (wrapping) into int32 ones.
enum class FusedAdd : uint8_t { fp32, int32, fp16, bf16 };

// crc32_update_masked(0, p, len, mask) into `crc` while the same pass adds n elements of
// `type` at `in` (little-endian, any alignment) into `acc` (the reduce library's accumulators:
// fp32 for fp32/fp16/bf16, int32 for int32) as the library's sum does (acc[i] += in[i], a
// floating NaN result the canonical quiet NaN 0x7FC00000; `first`: acc[i] = in[i] widened, NaN
// canonicalised): the adds run on other ports than the carry-less multiplies, so the pass costs
// what the CRC alone does. For a caller that checks one packet while it adds another, already
// checked (the CRC and the add are independent streams). True when done: the VPCLMULQDQ path,
// len >= 256 and n a multiple of 64; false, nothing done, otherwise.
bool crc32_masked_with_add(uint32_t& crc, const uint8_t* p, size_t len, const uint8_t* mask,
                           FusedAdd type, void* acc, const void* in, size_t n, bool first);

// A message's CRC is affine in its bytes for a fixed length: changing bytes xors the CRC by
// the register that the change alone (zeros elsewhere) leaves when it enters a zero register;
// zero bytes before a change add nothing. crc32_delta8 is that for a change in the last 8
// bytes (w little-endian: its low byte first), crc32_delta_byte for byte b followed by `after`
// bytes (constexpr, bit by bit: for tables built by the compiler).
uint32_t crc32_delta8(uint64_t w);
constexpr uint32_t crc32_delta_byte(uint8_t b, unsigned after) {
    uint32_t r = b;
    for (unsigned n = 0; n < 8 * (after + 1); ++n) {
        r = (r & 1) != 0 ? (r >> 1) ^ 0xEDB88320u : r >> 1;
    }
    return r;
}

enum class CrcIsa : uint8_t { table = 0, pclmul, vpclmul512 };

// The path crc32_update takes on this CPU (the widest it supports).
CrcIsa crc32_isa();
std::string_view to_string(CrcIsa isa);
bool crc32_isa_supported(CrcIsa isa);
// crc32_update on a given path (tests and benchmarks compare them); `isa` must be supported.
uint32_t crc32_update_with(CrcIsa isa, uint32_t crc, const uint8_t* p, size_t len);
uint32_t crc32_update_masked_with(CrcIsa isa, uint32_t crc, const uint8_t* p, size_t len,
                                  const uint8_t* mask);

}  // namespace ina::roce
