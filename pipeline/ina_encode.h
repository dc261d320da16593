// SPDX-License-Identifier: Apache-2.0
// INA datagrams this switch originates (docs/protocol.md "Packets the switch emits"): the one
// encoder of every partial and result the switch writes — the INA stage's aggregator and root
// (ina_input.cc) and the RoCE feature's aggregator role (src/features/roce, its partial to the
// parent) — and the UDP checksum check of received INA datagrams.
#pragma once

#include <rte_ether.h>
#include <rte_ip.h>
#include <rte_mbuf.h>
#include <rte_udp.h>

#include <cstddef>
#include <cstdint>

#include "dataplane/neighbour_cache.h"
#include "dataplane/snapshot.h"
#include "ina/protocol.h"

namespace ina::pipeline {

// Bytes of Ethernet + IPv4 + UDP before the INA header of an emitted datagram.
inline constexpr size_t kInaFrameHeadBytes = 14 + 20 + 8;

// Source address for a packet this switch originates towards `dst`: `configured` when it is
// not 0 (a job's `source`), else the first address of the interface the route to `dst` leaves
// by; 0 when there is no route.
uint32_t ina_source_for(const dp::Snapshot& snap, uint32_t configured, uint32_t dst);
// The same for the packet path: a connected `dst`'s station comes from the lcore's memo
// `neighbours` (synced here, so never staler than its invariant allows) rather than a
// neighbour-hash lookup per partial (~100 instructions; every partial of a job goes to one
// parent, and every result to the same workers).
uint32_t ina_source_for(const dp::Snapshot& snap, dp::NeighbourCache& neighbours,
                        uint32_t configured, uint32_t dst);

// Writes the Ethernet (both MACs 0: routing writes them), IPv4 (DF, TTL 64), UDP (source and
// destination port `port`) and INA headers with BitString `bs` of a datagram of
// kInaFrameHeadBytes + h.total_bytes() bytes at `d`. Returns where the h.payload_bytes()
// elements go; the caller places them, then calls seal_ina_datagram.
uint8_t* write_ina_headers(uint8_t* d, const proto::Header& h, const uint8_t* bs, uint32_t src,
                           uint32_t dst, uint16_t port);
// Computes the UDP checksum of the datagram written at `d` (elements in place): a worker's
// stack or NIC verifies what it receives. The checksum field must hold the 0 write_ina_headers
// wrote (the seal sums the headers with it in place).
void seal_ina_datagram(uint8_t* d);
// The same when the caller already has the one's-complement sum (folded, RFC 1071)
// `elements_sum` of the bytes from `elements` (inside the datagram) to its end: only the headers
// before them are summed here. The INA stage takes it from the store kernel that wrote the
// elements (ChunkTable::store_result with a sum), so the 1 KiB+ payload is read once.
void seal_ina_datagram(uint8_t* d, const uint8_t* elements, uint32_t elements_sum);

// Leaves the UDP checksum of the datagram written at `d` to the device that sends it (for
// dp::Snapshot::udp_checksum_offload): the field gets the pseudo-header's folded sum, as
// RTE_MBUF_F_TX_UDP_CKSUM asks, and the elements are never summed. The checksum field must
// hold the 0 write_ina_headers wrote. The frame's mbuf then needs mark_udp_checksum_offload.
void seal_ina_datagram_offloaded(uint8_t* d);
// Asks the device to complete the UDP checksum of the frame `m` (Ethernet, IPv4 without
// options, UDP) whose field holds its pseudo-header sum. A frame so marked may only be routed
// as plain IPv4 (a header put before it or a rewrite of its addresses must redo the field:
// ina_udp_checksum_retarget).
inline void mark_udp_checksum_offload(rte_mbuf* m) {
    m->ol_flags |= RTE_MBUF_F_TX_IPV4 | RTE_MBUF_F_TX_UDP_CKSUM;
    m->l2_len = sizeof(rte_ether_hdr);
    m->l3_len = sizeof(rte_ipv4_hdr);
}
// The UDP checksum field of a datagram whose IPv4 destination changed from `old_dst` to
// ip->dst_addr: updated (RFC 1624) when it holds the checksum, recomputed as the pseudo-header
// sum when the device completes it (`offloaded`).
void ina_udp_checksum_retarget(rte_ipv4_hdr* ip, rte_udp_hdr* udp, uint32_t old_dst,
                               bool offloaded);

// A received INA datagram's UDP checksum holds (absent, 0, is allowed in IPv4; a NIC's verdict
// is taken when it gave one; else summed across segments). The absent case is tested inline:
// a call that only finds 0 cost ~19 instructions per contribution (prologue and epilogue of the
// summing function).
bool ina_udp_checksum_verified(const rte_mbuf* m, const rte_ipv4_hdr* ip, const rte_udp_hdr* udp,
                               size_t udp_off, size_t udp_len);
inline bool ina_udp_checksum_ok(const rte_mbuf* m, const rte_ipv4_hdr* ip, const rte_udp_hdr* udp,
                                size_t udp_off, size_t udp_len) {
    return udp->dgram_cksum == 0 || ina_udp_checksum_verified(m, ip, udp, udp_off, udp_len);
}

}  // namespace ina::pipeline
