// SPDX-License-Identifier: Apache-2.0
// Frames the in-process benches (ina_bench, latency_bench) feed the pipeline: one worker's INA
// contribution and a plain routed 64 B IPv4/UDP frame, both to the switch's MAC 02:00:00:00:00:01
// on the "in" port's subnet. Built by hand (checksums included) so the benches need no pcap.
#pragma once

#include <rte_ip.h>
#include <rte_udp.h>

#include <cstdint>
#include <cstring>
#include <vector>

#include "ina/protocol.h"
#include "net/checksum.h"
#include "wire/bitstring.h"

namespace ina::bench {

inline constexpr size_t kL2L3L4 = 14 + 20 + 8;

// Ethernet + IPv4 (src, dst) + UDP (sport, dport) around `l4_payload_len` zero bytes.
inline std::vector<uint8_t> udp_frame(uint8_t src_mac_low, uint32_t src, uint32_t dst,
                                      uint16_t sport, uint16_t dport, size_t l4_payload_len) {
    std::vector<uint8_t> f(kL2L3L4 + l4_payload_len, 0);
    const uint8_t dst_mac[6] = {0x02, 0, 0, 0, 0, 0x01};
    std::memcpy(f.data(), dst_mac, 6);
    f[6] = 0x02;
    f[11] = src_mac_low;
    f[12] = 0x08;
    auto* ip = reinterpret_cast<rte_ipv4_hdr*>(f.data() + 14);
    ip->version_ihl = 0x45;
    ip->total_length = rte_cpu_to_be_16(static_cast<uint16_t>(20 + 8 + l4_payload_len));
    ip->time_to_live = 64;
    ip->next_proto_id = IPPROTO_UDP;
    ip->src_addr = rte_cpu_to_be_32(src);
    ip->dst_addr = rte_cpu_to_be_32(dst);
    ip->hdr_checksum = net::internet_checksum(ip, 20);
    auto* udp = reinterpret_cast<rte_udp_hdr*>(ip + 1);
    udp->src_port = rte_cpu_to_be_16(sport);
    udp->dst_port = rte_cpu_to_be_16(dport);
    udp->dgram_len = rte_cpu_to_be_16(static_cast<uint16_t>(8 + l4_payload_len));
    return f;
}

// The UDP checksum of frame `f` (Ethernet, IPv4 without options, UDP), as a sender's stack
// writes it (pseudo-header included; 0 sent as 0xffff).
inline void seal_udp_checksum(std::vector<uint8_t>& f) {
    auto* ip = reinterpret_cast<rte_ipv4_hdr*>(f.data() + 14);
    auto* udp = reinterpret_cast<rte_udp_hdr*>(ip + 1);
    udp->dgram_cksum = 0;
    uint8_t pseudo[12] = {};
    std::memcpy(pseudo, &ip->src_addr, 4);
    std::memcpy(pseudo + 4, &ip->dst_addr, 4);
    pseudo[9] = IPPROTO_UDP;
    std::memcpy(pseudo + 10, &udp->dgram_len, 2);
    const uint16_t head = net::ones_complement_sum(pseudo, sizeof pseudo);
    udp->dgram_cksum = net::udp_checksum_field(
        net::ones_complement_sum(udp, rte_be_to_cpu_16(udp->dgram_len), head));
}

// Worker `bfr_id`'s contribution to job 1 (BSL 64, sum), chunk 0, from 10.0.1.<bfr_id> to the
// root 10.0.2.2. Element bytes are any pattern; floats are kept finite (the exponent's top bit
// cleared) so sums never reach NaN. UDP checksum 0 (none: the switch verifies nothing, as when
// a NIC's RX offload did) unless `udp_checksum`.
inline std::vector<uint8_t> ina_contribution(uint16_t bfr_id, uint16_t elems, uint8_t elem_type,
                                             bool udp_checksum = false) {
    proto::Header h;
    h.type = proto::PacketType::data;
    h.elem_type = elem_type;
    h.bsl_code = 1;
    h.job_id = 1;
    h.elem_count = elems;
    const uint16_t ids[] = {bfr_id};
    const auto bs = *wire::BitString::from_bfr_ids(64, 0, ids);
    const size_t esize = proto::elem_bytes(elem_type);
    std::vector<uint8_t> f = udp_frame(static_cast<uint8_t>(bfr_id), 0x0A000100u + bfr_id,
                                       0x0A000202u, 40000, proto::kDefaultUdpPort,
                                       h.total_bytes());
    uint8_t* hdr = f.data() + kL2L3L4;
    const size_t at = proto::write_header(hdr, h, bs.data());
    for (size_t i = 0; i < elems * esize; ++i) {
        hdr[at + i] = static_cast<uint8_t>(i * 7 + bfr_id);
    }
    if (elem_type == 1 || elem_type == 3) {  // fp32, bf16
        for (size_t i = esize - 1; i < elems * esize; i += esize) {
            hdr[at + i] &= 0x3F;
        }
    }
    if (udp_checksum) {
        seal_udp_checksum(f);
    }
    return f;
}

// 64 B IPv4/UDP from 10.0.1.2 to 10.0.2.<1 + i> (a neighbour behind the "up" port).
inline std::vector<uint8_t> l3_frame(unsigned i) {
    return udp_frame(0x10, 0x0A000102u, 0x0A000201u + i, static_cast<uint16_t>(1024 + i), 5000,
                     22);
}

}  // namespace ina::bench
