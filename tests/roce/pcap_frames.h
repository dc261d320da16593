// SPDX-License-Identifier: Apache-2.0
// Frames of a classic little-endian pcap file (tests/data), whole, for tests that feed captured
// bytes to pure code or mbufs.
#pragma once

#include <cstdint>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

namespace ina::test {

inline std::vector<std::vector<uint8_t>> read_pcap_frames(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    std::vector<std::vector<uint8_t>> out;
    char global_header[24];
    char record_header[16];
    if (!in.read(global_header, sizeof global_header)) {
        return out;
    }
    while (in.read(record_header, sizeof record_header)) {
        uint32_t caplen = 0;
        std::memcpy(&caplen, record_header + 8, 4);
        std::vector<uint8_t> frame(caplen);
        if (!in.read(reinterpret_cast<char*>(frame.data()), caplen)) {
            break;
        }
        out.push_back(std::move(frame));
    }
    return out;
}

}  // namespace ina::test
