// SPDX-License-Identifier: Apache-2.0
#include "pipeline/ina_encode.h"

#include <rte_ether.h>
#include <rte_udp.h>

#include <bit>
#include <cstring>

#include "net/checksum.h"
#include "pipeline/ipv4_forward.h"
#include "pipeline/mbuf_chain.h"
#include "reduce/reduce.h"

namespace ina::pipeline {

namespace {

constexpr size_t kL2 = sizeof(rte_ether_hdr);
constexpr size_t kL3 = sizeof(rte_ipv4_hdr);
constexpr size_t kL4 = sizeof(rte_udp_hdr);
static_assert(kInaFrameHeadBytes == kL2 + kL3 + kL4);

// Host <-> network order by the builtins: DPDK's x86 rte_cpu_to_be_16/32 are `asm volatile`
// for non-constant values, which the compiler can neither merge nor schedule.
constexpr uint16_t swap16(uint16_t v) {
    return std::endian::native == std::endian::little ? __builtin_bswap16(v) : v;
}
constexpr uint32_t swap32(uint32_t v) {
    return std::endian::native == std::endian::little ? __builtin_bswap32(v) : v;
}

// The folded sum of the UDP pseudo-header (RFC 768) of a datagram of `udp_len` bytes in `ip`:
// its six 16-bit words as they sit in memory (the addresses' halves, then 0 and the protocol,
// then the length), added directly rather than gathered into a buffer and summed.
uint16_t pseudo_header_sum(const rte_ipv4_hdr* ip, uint16_t udp_len) {
    uint32_t sum = (ip->src_addr & 0xffff) + (ip->src_addr >> 16) + (ip->dst_addr & 0xffff) +
                   (ip->dst_addr >> 16) + rte_cpu_to_be_16(uint16_t{IPPROTO_UDP}) +
                   swap16(udp_len);
    sum = (sum & 0xffff) + (sum >> 16);
    sum = (sum & 0xffff) + (sum >> 16);
    return static_cast<uint16_t>(sum);
}

// The header is built in three registers (bytes 0..7, 8..15, 16..19 in memory order) and stored
// as three words at the offsets every later reader loads it from (ipv4_header_halves20, the
// UDP checksum's pseudo-header): a load spanning several narrow stores cannot take its bytes
// from the store buffer and waits for them to reach the cache (~15 cycles on every emitted
// datagram's header checksum, UDP checksum and route), a load inside one store can.
void write_ipv4(rte_ipv4_hdr* ip, uint32_t src, uint32_t dst, uint16_t total) {
    static_assert(std::endian::native == std::endian::little);
    // version/IHL 0x45, TOS 0, total length, id 0, flags DF, fragment offset 0.
    const uint64_t a = uint64_t{0x45} | uint64_t{swap16(total)} << 16 |
                       uint64_t{swap16(RTE_IPV4_HDR_DF_FLAG)} << 48;
    // TTL 64, protocol UDP, checksum (0 while summing), source.
    uint64_t b = uint64_t{64} | uint64_t{IPPROTO_UDP} << 8 | uint64_t{swap32(src)} << 32;
    const uint32_t c = swap32(dst);
    uint64_t s = ipv4_halves_sum(a, b, c);
    s = (s & 0xffffffff) + (s >> 32);
    s = (s & 0xffff) + (s >> 16);
    s = (s & 0xffff) + (s >> 16);
    s = (s & 0xffff) + (s >> 16);
    b |= uint64_t{static_cast<uint16_t>(~s)} << 16;
    auto* p = reinterpret_cast<uint8_t*>(ip);
    std::memcpy(p, &a, 8);
    std::memcpy(p + 8, &b, 8);
    std::memcpy(p + 16, &c, 4);
}

}  // namespace

namespace {

// The first address of the interface a packet routed by `nh` leaves by: the station's port
// (`station`, a pack_station word, 0 while unresolved) when it names one, else the next hop's.
uint32_t source_of_egress(const dp::Snapshot& snap, const dp::NextHop& nh, uint64_t station) {
    const uint16_t port = station != 0 && dp::station_port(station) < snap.n_ports
                              ? dp::station_port(station)
                              : nh.port;
    const dp::PortView& pv = snap.ports[port];
    return pv.n_addrs != 0 ? pv.addrs[0].addr.value : 0;
}

}  // namespace

uint32_t ina_source_for(const dp::Snapshot& snap, uint32_t configured, uint32_t dst) {
    if (configured != 0) {
        return configured;
    }
    const dp::NextHop* nh = snap.route(dst);
    if (nh == nullptr) {
        return 0;
    }
    const uint64_t station = nh->kind == dp::NextHopKind::gateway
                                 ? nh->station_word()
                                 : snap.tables->neighbour_word(dst);
    return source_of_egress(snap, *nh, station);
}

uint32_t ina_source_for(const dp::Snapshot& snap, dp::NeighbourCache& neighbours,
                        uint32_t configured, uint32_t dst) {
    if (configured != 0) {
        return configured;
    }
    const dp::NextHop* nh = snap.route(dst);
    if (nh == nullptr) {
        return 0;
    }
    if (nh->kind == dp::NextHopKind::gateway) {
        return source_of_egress(snap, *nh, nh->station_word());
    }
    neighbours.sync(*snap.tables);
    uint64_t station = neighbours.get(dst);
    if (station == 0) {
        station = snap.tables->neighbour_word(dst);
        neighbours.put(dst, station);
    }
    return source_of_egress(snap, *nh, station);
}

uint8_t* write_ina_headers(uint8_t* d, const proto::Header& h, const uint8_t* bs, uint32_t src,
                           uint32_t dst, uint16_t port) {
    const size_t ina_len = h.total_bytes();
    auto* eth = reinterpret_cast<rte_ether_hdr*>(d);
    std::memset(eth, 0, sizeof *eth);  // routing writes both MACs
    eth->ether_type = rte_cpu_to_be_16(RTE_ETHER_TYPE_IPV4);
    auto* ip = reinterpret_cast<rte_ipv4_hdr*>(eth + 1);
    write_ipv4(ip, src, dst, static_cast<uint16_t>(kL3 + kL4 + ina_len));
    auto* udp = reinterpret_cast<rte_udp_hdr*>(ip + 1);
    // A partial (data towards the parent) leaves from its chunk's steering source port, so a
    // parent switch's NIC rules put it on the lcore owning the chunk (proto::steer_source_port);
    // a result from the INA port (its receivers match on the destination port alone).
    const uint16_t src_port =
        h.type == proto::PacketType::data
            ? proto::steer_source_port(proto::kDefaultSteerBasePort, proto::kMaxSteerPorts, h.seq)
            : port;
    // One store (ports, length, checksum 0), as the seal's sum loads it (see write_ipv4).
    const uint64_t udp_word = uint64_t{swap16(src_port)} | uint64_t{swap16(port)} << 16 |
                              uint64_t{swap16(static_cast<uint16_t>(kL4 + ina_len))} << 32;
    std::memcpy(udp, &udp_word, 8);
    auto* hdr = reinterpret_cast<uint8_t*>(udp + 1);
    return hdr + proto::write_header(hdr, h, bs);
}

void seal_ina_datagram(uint8_t* d, const uint8_t* elements, uint32_t elements_sum) {
    auto* ip = reinterpret_cast<rte_ipv4_hdr*>(d + kL2);
    auto* udp = reinterpret_cast<rte_udp_hdr*>(ip + 1);
    const uint16_t udp_len = swap16(udp->dgram_len);
    const auto* start = reinterpret_cast<const uint8_t*>(udp);
    const auto head = static_cast<size_t>(elements - start);
    // The elements' words pair with the datagram's only from an even offset; from an odd one
    // their sum counts each byte in the other half of its word: swapped (RFC 1071 2(B)).
    if ((head & 1) != 0) {
        elements_sum = static_cast<uint16_t>(elements_sum << 8 | elements_sum >> 8);
    }
    // The checksum field is still the 0 write_ina_headers stored: no narrow store here, which
    // the sum's first load would have to wait for.
    const uint32_t initial = uint32_t{pseudo_header_sum(ip, udp_len)} + elements_sum;
    udp->dgram_cksum = net::udp_checksum_field(net::ones_complement_sum(udp, head, initial));
}

void seal_ina_datagram_offloaded(uint8_t* d) {
    auto* ip = reinterpret_cast<rte_ipv4_hdr*>(d + kL2);
    auto* udp = reinterpret_cast<rte_udp_hdr*>(ip + 1);
    udp->dgram_cksum = pseudo_header_sum(ip, swap16(udp->dgram_len));
}

void ina_udp_checksum_retarget(rte_ipv4_hdr* ip, rte_udp_hdr* udp, uint32_t old_dst,
                               bool offloaded) {
    if (offloaded) {
        udp->dgram_cksum = pseudo_header_sum(ip, swap16(udp->dgram_len));
        return;
    }
    udp->dgram_cksum = net::udp_checksum_field(static_cast<uint16_t>(
        ~net::checksum_update32(udp->dgram_cksum, old_dst, ip->dst_addr)));
}

void seal_ina_datagram(uint8_t* d) {
    const auto* udp = reinterpret_cast<const rte_udp_hdr*>(d + kL2 + kL3);
    seal_ina_datagram(d, reinterpret_cast<const uint8_t*>(udp) + rte_be_to_cpu_16(udp->dgram_len),
                      0);
}

bool ina_udp_checksum_verified(const rte_mbuf* m, const rte_ipv4_hdr* ip, const rte_udp_hdr* udp,
                               size_t udp_off, size_t udp_len) {
    const uint64_t nic = m->ol_flags & RTE_MBUF_F_RX_L4_CKSUM_MASK;
    if (nic == RTE_MBUF_F_RX_L4_CKSUM_GOOD) {
        return true;
    }
    if (nic == RTE_MBUF_F_RX_L4_CKSUM_BAD) {
        return false;
    }
    const uint16_t pseudo = pseudo_header_sum(ip, static_cast<uint16_t>(udp_len));
    if (udp_off + udp_len <= rte_pktmbuf_data_len(m)) [[likely]] {
        // In the first segment: the reduce library's vector byte sum (SIMD where the CPU has it).
        static const reduce::SumBytesFn sum_bytes = reduce::kernels().sum_bytes;
        uint32_t sum = pseudo + sum_bytes(udp, udp_len);
        sum = (sum & 0xffff) + (sum >> 16);
        return sum == 0xffff;
    }
    return sum_ok(m, static_cast<uint32_t>(udp_off), static_cast<uint32_t>(udp_len), pseudo);
}

}  // namespace ina::pipeline
