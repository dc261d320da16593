// SPDX-License-Identifier: Apache-2.0
// libFuzzer: the RoCEv2 parser never reads outside its input, its lengths add up, and the ICRC
// over any bytes (as an IPv4 packet) never reads outside them either.
#include <cstdint>
#include <cstdlib>
#include <vector>

#include "roce/icrc.h"
#include "roce/wire.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    std::vector<uint8_t> in(data, data + size);
    const auto r = ina::roce::parse(in.data(), in.size());
    if (r.packet && r.packet->header_bytes + r.packet->payload_bytes + r.packet->bth.pad +
                            ina::roce::kIcrcBytes != size) {
        std::abort();
    }
    (void)ina::roce::icrc(in.data(), in.size());
    return 0;
}
