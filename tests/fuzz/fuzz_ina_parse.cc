// SPDX-License-Identifier: Apache-2.0
// libFuzzer: the INA v1 parser never reads outside its input, and what it accepts is
// self-consistent (the header's sizes add up to the input's length; writing it back gives the
// same header bytes).
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "ina/protocol.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    // A private copy, so ASan sees any read past `size`.
    std::vector<uint8_t> in(data, data + size);
    const auto r = ina::proto::parse(in.data(), in.size());
    if (!r.packet) {
        return 0;
    }
    const auto& h = r.packet->header;
    if (h.total_bytes() != size) {
        std::abort();
    }
    std::vector<uint8_t> out(ina::proto::kFixedHeaderBytes + h.bitstring_bytes());
    ina::proto::write_header(out.data(), h, r.packet->bitstring);
    if (std::memcmp(out.data(), in.data(), 4) != 0 ||
        std::memcmp(out.data() + 8, in.data() + 8, 10) != 0) {
        std::abort();  // type, flags, job, seq, count must survive a round trip
    }
    return 0;
}
