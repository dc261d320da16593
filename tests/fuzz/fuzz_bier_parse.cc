// SPDX-License-Identifier: Apache-2.0
// libFuzzer: the RFC 8296 header parser never reads outside its input for any expected BSL, and
// an accepted header's BitString lies inside it.
#include <cstdint>
#include <cstdlib>
#include <vector>

#include "wire/bier_header.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    std::vector<uint8_t> in(data, data + size);
    (void)ina::wire::peek_bift_id(in.data(), in.size());
    for (uint16_t bsl : {64, 128, 256, 512, 1024, 2048, 4096}) {
        const auto r = ina::wire::parse_bier_header(in.data(), in.size(), bsl);
        if (r.packet && r.packet->header_bytes() > size) {
            std::abort();
        }
    }
    return 0;
}
