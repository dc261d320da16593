// SPDX-License-Identifier: Apache-2.0
// Per-lcore counters. Each lcore writes only its own block with plain increments; the control
// plane sums the blocks when scraped. A torn read is impossible for aligned 64-bit words on the
// supported targets, and a scrape that is one packet stale is fine.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string_view>

namespace ina::dp {

inline constexpr uint16_t kMaxPorts = 32;
inline constexpr size_t kInaParseErrors = 10;  // ina::proto::kNumParseErrors (asserted there)

// Every reason a packet is dropped or not forwarded. Names become the `reason` label.
#define INA_DROP_REASONS(X)                                                                      \
    X(runt, "frame shorter than its headers")                                                    \
    X(chain_unreadable, "chained frame whose headers cannot be gathered into its first segment") \
    X(not_for_us, "frame for another MAC, or non-ARP broadcast/multicast, on a routed port")                              \
    X(unsupported_ethertype, "ethertype the switch does not handle on a routed port")            \
    X(arp_malformed, "ARP that is not Ethernet/IPv4 or is truncated")                            \
    X(arp_not_for_us, "ARP for an address this switch does not own")                            \
    X(arp_address_conflict, "ARP reply whose sender claims one of the switch's own addresses")   \
    X(arp_sender_unspecified, "ARP reply to the switch from sender 0.0.0.0")                     \
    X(arp_sender_bad_mac, "ARP reply to the switch whose sender MAC is zero or multicast")       \
    X(arp_sender_off_subnet, "ARP reply to the switch from outside the port's subnets")          \
    X(ipv4_malformed, "bad IPv4 version, header length or total length")                         \
    X(ipv4_bad_checksum, "IPv4 header checksum mismatch")                                        \
    X(ipv4_martian, "IPv4 source or destination that is never routed")                           \
    X(ttl_exceeded, "TTL would reach zero")                                                      \
    X(no_route, "no route to the destination")                                                   \
    X(neighbour_unresolved, "next hop MAC unknown; ARP resolution requested")                    \
    X(mtu_exceeded, "packet longer than the egress MTU")                                         \
    X(local_unsupported, "packet to a switch address that no local service takes")               \
    X(l2_same_port, "bridged frame whose destination is on its ingress port")                    \
    X(tx_full, "transmit queue rejected the packet")                                             \
    X(ina_rejected, "INA contribution failing the job's checks, job set to on_reject: drop")     \
    X(ina_duplicate, "INA contribution already absorbed (duplicate, overlap or stale)")          \
    X(ina_no_slot, "INA contribution at a root with no free slot (the worker retransmits)")      \
    X(ina_no_mbuf, "no mbuf for an INA result copy")                                             \
    X(ina_bad_checksum, "INA contribution whose UDP checksum fails (software check or NIC flag)") \
    X(ina_handoff_full, "INA contribution for another lcore's chunk while its hand-off ring was full") \
    X(bier_unknown_bift, "BIER packet whose BIFT-id no BIFT of this switch has")                 \
    X(bier_malformed, "BIER header malformed (reasons per BIFT: inaswitch_bier_malformed_total)") \
    X(bier_ttl_expired, "BIER packet whose TTL leaves nothing to forward")                       \
    X(bier_no_mbuf, "no mbuf for a BIER copy or delivery")                                       \
    X(bier_unsupported_proto, "BIER payload for a local bit that is not IPv4")                   \
    X(mcast_no_group, "IPv4 multicast for a group this switch does not carry over BIER")         \
    X(stage_contract, "a stage broke its edge contract (a bug): past an edge's capacity, or routed to bridge")

enum class DropReason : uint8_t {
#define INA_X(name, help) name,
    INA_DROP_REASONS(INA_X)
#undef INA_X
    count
};

inline constexpr size_t kDropReasonCount = static_cast<size_t>(DropReason::count);

inline constexpr std::array<std::string_view, kDropReasonCount> kDropReasonNames = {
#define INA_X(name, help) #name,
    INA_DROP_REASONS(INA_X)
#undef INA_X
};

inline constexpr std::array<std::string_view, kDropReasonCount> kDropReasonHelp = {
#define INA_X(name, help) help,
    INA_DROP_REASONS(INA_X)
#undef INA_X
};

// Why the classifier found a UDP datagram unsound (forwarded unmodified; a feature bound to its
// port sees it flagged unsound and passes it on).
#define INA_UDP_MALFORMED_REASONS(X)                                                             \
    X(truncated, "UDP header beyond the IPv4 packet or the frame's gathered headers")           \
    X(bad_length, "UDP length shorter than the UDP header")                                      \
    X(length_mismatch, "UDP length other than what the IPv4 total length leaves")

enum class UdpMalformed : uint8_t {
#define INA_X(name, help) name,
    INA_UDP_MALFORMED_REASONS(INA_X)
#undef INA_X
    count
};
inline constexpr size_t kUdpMalformedReasons = static_cast<size_t>(UdpMalformed::count);
inline constexpr std::array<std::string_view, kUdpMalformedReasons> kUdpMalformedNames = {
#define INA_X(name, help) #name,
    INA_UDP_MALFORMED_REASONS(INA_X)
#undef INA_X
};

// RX burst sizes in power-of-two buckets: 1, 2-3, 4-7, 8-15, 16-31, 32-63, 64.
inline constexpr size_t kBurstBuckets = 7;

struct PortCounters {
    uint64_t rx_packets = 0;
    uint64_t rx_bytes = 0;
    uint64_t tx_packets = 0;
    uint64_t tx_bytes = 0;
    uint64_t tx_dropped = 0;  // rejected by the PMD's TX burst, freed
};

// Per-BIFT counters. A BIFT's slot (BiftView::counter_slot) is stable across reloads.
inline constexpr size_t kBierCounterSlots = 64;
inline constexpr size_t kBierNeighbourSlots = 16;
inline constexpr size_t kBierMalformedReasons = 6;  // wire::BierParseError

struct BierCounters {
    uint64_t packets = 0;            // received for this BIFT, or encapsulated into it here
    uint64_t ttl_expired = 0;        // packets that could not be forwarded to neighbours
    uint64_t bits_no_neighbour = 0;  // bits cleared because no neighbour or own bit has them
    uint64_t delivered = 0;          // decapsulated copies for own bits
    std::array<uint64_t, kBierNeighbourSlots> copies{};  // by neighbour index in the BIFT
    std::array<uint64_t, kBierMalformedReasons> malformed{};

    BierCounters& operator+=(const BierCounters& o) {
        packets += o.packets;
        ttl_expired += o.ttl_expired;
        bits_no_neighbour += o.bits_no_neighbour;
        delivered += o.delivered;
        for (size_t i = 0; i < kBierNeighbourSlots; ++i) {
            copies[i] += o.copies[i];
        }
        for (size_t i = 0; i < kBierMalformedReasons; ++i) {
            malformed[i] += o.malformed[i];
        }
        return *this;
    }
};

struct alignas(64) LcoreCounters {
    uint64_t loops = 0;
    uint64_t busy_loops = 0;  // loops that received at least one packet
    uint64_t rx_bursts = 0;   // non-empty RX bursts
    uint64_t idle_sleeps = 0;
    uint64_t tx_bursts = 0;
    std::array<uint64_t, kBurstBuckets> burst_size{};
    uint64_t routed = 0;
    uint64_t bridged = 0;
    uint64_t flooded = 0;  // frames flooded to an L2 group (counted once per frame)
    uint64_t arp_replies = 0;
    uint64_t arp_learned = 0;  // ARP packets that reported a neighbour to the control plane
    uint64_t icmp_echo_replies = 0;
    uint64_t events_lost = 0;  // control-plane events dropped because the ring was full
    // UDP datagrams the classifier found unsound, by INA_UDP_MALFORMED_REASONS.
    std::array<uint64_t, kUdpMalformedReasons> udp_malformed{};
    // INA (per-job detail lives in each job's ChunkTable counters).
    uint64_t ina_packets = 0;          // UDP on the INA port that parsed as INA
    uint64_t ina_not_ina = 0;          // UDP on the INA port that did not parse: routed as is
    uint64_t ina_unknown_job = 0;      // INA for a job this switch does not have: routed as is
    uint64_t ina_rejected = 0;         // failed ingress or header checks, or outside the A-BM
    uint64_t ina_absorbed = 0;
    uint64_t ina_partials_sent = 0;    // aggregator: partial results to the parent
    uint64_t ina_results_sent = 0;     // root: result packets to workers
    uint64_t ina_resent = 0;           // results or partials re-emitted for a retransmission
    uint64_t ina_fallbacks = 0;        // contributions forwarded unaggregated (fallback flag)
    uint64_t ina_handed_off = 0;       // contributions passed to the lcore owning their chunk
    // UDP on the INA port that did not parse, by ina::proto::ParseError.
    std::array<uint64_t, kInaParseErrors> ina_malformed{};
    uint64_t bier_copies = 0;     // BIER copies sent to neighbours (all BIFTs)
    uint64_t bier_delivered = 0;  // BIER payloads delivered to local hosts (all BIFTs)
    uint64_t mcast_encapsulated = 0;  // IPv4 multicast packets this BFIR put on BIER
    std::array<uint64_t, kDropReasonCount> drops{};
    std::array<PortCounters, kMaxPorts> ports{};
    std::array<BierCounters, kBierCounterSlots> bier{};

    // Control-plane side only: sums another lcore's block into this one.
    LcoreCounters& operator+=(const LcoreCounters& o) {
        loops += o.loops;
        busy_loops += o.busy_loops;
        rx_bursts += o.rx_bursts;
        idle_sleeps += o.idle_sleeps;
        tx_bursts += o.tx_bursts;
        for (size_t i = 0; i < kBurstBuckets; ++i) {
            burst_size[i] += o.burst_size[i];
        }
        routed += o.routed;
        bridged += o.bridged;
        flooded += o.flooded;
        arp_replies += o.arp_replies;
        arp_learned += o.arp_learned;
        icmp_echo_replies += o.icmp_echo_replies;
        events_lost += o.events_lost;
        for (size_t i = 0; i < kUdpMalformedReasons; ++i) {
            udp_malformed[i] += o.udp_malformed[i];
        }
        ina_packets += o.ina_packets;
        ina_not_ina += o.ina_not_ina;
        ina_unknown_job += o.ina_unknown_job;
        ina_rejected += o.ina_rejected;
        ina_absorbed += o.ina_absorbed;
        ina_partials_sent += o.ina_partials_sent;
        ina_results_sent += o.ina_results_sent;
        ina_resent += o.ina_resent;
        ina_fallbacks += o.ina_fallbacks;
        ina_handed_off += o.ina_handed_off;
        for (size_t i = 0; i < kInaParseErrors; ++i) {
            ina_malformed[i] += o.ina_malformed[i];
        }
        bier_copies += o.bier_copies;
        bier_delivered += o.bier_delivered;
        mcast_encapsulated += o.mcast_encapsulated;
        for (size_t i = 0; i < kDropReasonCount; ++i) {
            drops[i] += o.drops[i];
        }
        for (size_t i = 0; i < kBierCounterSlots; ++i) {
            bier[i] += o.bier[i];
        }
        for (size_t p = 0; p < kMaxPorts; ++p) {
            ports[p].rx_packets += o.ports[p].rx_packets;
            ports[p].rx_bytes += o.ports[p].rx_bytes;
            ports[p].tx_packets += o.ports[p].tx_packets;
            ports[p].tx_bytes += o.ports[p].tx_bytes;
            ports[p].tx_dropped += o.ports[p].tx_dropped;
        }
        return *this;
    }
};

inline size_t burst_bucket(uint16_t n) {
    size_t b = 0;
    while (n > 1 && b + 1 < kBurstBuckets) {
        n >>= 1;
        ++b;
    }
    return b;
}

}  // namespace ina::dp
