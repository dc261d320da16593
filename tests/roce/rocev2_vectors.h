// SPDX-License-Identifier: Apache-2.0
// The RoCEv2 reference vectors of reference/rocev2.md §2, as bytes, for the codec, ICRC and
// encoder tests.
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

namespace ina::roce::test_vectors {

using Bytes = std::vector<uint8_t>;

inline Bytes hex(std::string s) {
    std::erase_if(s, [](char c) { return c == ' ' || c == '|'; });
    Bytes out;
    for (size_t i = 0; i + 1 < s.size(); i += 2) {
        out.push_back(static_cast<uint8_t>(std::stoul(s.substr(i, 2), nullptr, 16)));
    }
    return out;
}

inline constexpr size_t kIpv4 = 20, kUdp = 8;

// (a) CNP from a ConnectX-4 Lx (scapy test/contrib/roce.uts): DSCP 48, ECN 10, BECN, QP 0x118.
inline const Bytes kCnpFrame = hex(
    "e41d2dab2bc2 7cfe90643b32 0800 | 45c2003c718c400040119161 0a001101 0a001201 |"
    "0000 12b7 0028 0000 | 81 00 ffff 40 000118 00 000000 |"
    "00000000000000000000000000000000 | 82fd002a");
// (b) UC SEND_ONLY (scapy): M=1, PadCnt 2, PSN 0xCF1710; an IP packet.
inline const Bytes kUcSend = hex(
    "45010040047840004011b4d5c0a80007c0a80007 c00012b7002caca2 2460ffff000000d300cf1710"
    "4630818be28935d90e9a95505401be885e500000 78f353f3");
// (c) derived by the recipe, decoded by tshark: ACK and NAK-seq (MSN 5, PSN 0x100, QP 0x11),
// WRITE_ONLY with RETH and four fp32 elements.
inline const Bytes kAck = hex(
    "4502003000004000401126b90a0000020a000001c00112b7001c0000 1100ffff00000011 00000100"
    "1f000005 c02cf9f7");
inline const Bytes kNak = hex(
    "4502003000004000401126b90a0000020a000001c00112b7001c0000 1100ffff00000011 00000100"
    "60000005 0a9ca5c4");
inline const Bytes kWrite = hex(
    "4502004c000040004011269d0a0000010a000002c00212b700380000 0a00ffff00000022 80000200"
    "00007f0000001000 00001234 00000010 3f800000 40000000 40400000 40800000 c9b14f1c");

}  // namespace ina::roce::test_vectors
