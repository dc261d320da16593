// SPDX-License-Identifier: Apache-2.0
// Per-lcore counters. Each lcore writes only its own block with plain increments; the control
// plane sums the blocks when scraped. A torn read is impossible for aligned 64-bit words on the
// supported targets, and a scrape that is one packet stale is fine.
#pragma once

#include <array>
#include <bit>
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
    X(ipv6_malformed, "bad IPv6 version, or header beyond the frame")                          \
    X(ipv6_bad_length, "IPv6 payload length beyond the frame")                                   \
    X(ipv6_martian, "IPv6 source or destination that is never routed (multicast source, unspecified, loopback, link-local)") \
    X(hop_limit_exceeded, "IPv6 hop limit would reach zero (counted, no ICMPv6 time exceeded)")  \
    X(icmp6_bad_checksum, "ICMPv6 to the switch whose checksum fails")                          \
    X(nd_invalid, "Neighbor Discovery failing RFC 4861 7.1.1/7.1.2 (hop limit 255, code 0, length, options)") \
    X(nd_not_for_us, "Neighbor Solicitation for an address this switch does not own")            \
    X(nd_no_mbuf, "no mbuf for a Neighbor Advertisement or Solicitation")                        \
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

// RX stalls: the time from one poll loop iteration's start to the next (between two polls of
// the lcore's RX queues), in microsecond buckets: power-of-two bounds (bucket k counts gaps
// under 2^k us, k = 0: under 1 us) with one more bound at 100 us between 64 and 128 — the
// stall an operator's budget names (issue 13: no stall over 100 us), so a histogram tells
// "under 100" from "under 128" — and the last bucket every gap of 2^16 us or more. A histogram
// of monotonic per-lcore counts, so a scrape resets nothing and a reader diffs two scrapes to
// see the worst gap of an interval (the highest bucket that moved).
inline constexpr size_t kPollGapBuckets = 19;
inline constexpr uint64_t kPollGapBudgetUs = 100;
// The same buckets split each iteration's own time (from its start to the end of its RX, TX,
// timers and commands; an idle back-off sleep after it excluded) by whether the kernel switched
// the thread out meanwhile (runtime/sched_watch.h): loop_work is what the switch's own work
// costs a worker, loop_descheduled what the host's scheduler added.

// Counter structs are generated from one list each, so a counter cannot miss its summation or
// its metric: the struct's members, operator+= and -= and the exposition in metrics.cc all
// expand the same list, and tests/unit/test_metrics.cc checks that every entry reaches the
// exposition. Entries, in member order:
//   S(member, exposition, metric, help)          one uint64_t
//   A(member, element type, count, metric, help) a std::array; its labels are chosen in metrics.cc
// `metric` is the family name after "inaswitch_"; entries (of any list) that share a name share
// its help, and their values are summed into one sample. An A entry of a struct type with its
// own list has no metric ("") of its own: each of its element's counters has one.
// Exposition: total (one sample, summed over lcores), per_lcore (one sample per lcore, label
// `lcore`), per_port (label `port`), per_bift (labels bift_id, sd, bsl, set).

#define INA_PORT_COUNTERS(S, A)                                                                   \
    S(rx_packets, per_port, "port_rx_packets_total", "Packets received by the dataplane")          \
    S(rx_bytes, per_port, "port_rx_bytes_total", "Bytes received by the dataplane")                \
    S(tx_packets, per_port, "port_tx_packets_total", "Packets accepted by the port's TX queues")   \
    S(tx_bytes, per_port, "port_tx_bytes_total", "Bytes accepted by the port's TX queues")         \
    S(tx_dropped, per_port, "port_tx_dropped_total", "Packets the port's TX queues rejected (freed)")

// Per-BIFT counters. A BIFT's slot (BiftView::counter_slot) is stable across reloads.
inline constexpr size_t kBierCounterSlots = 64;
inline constexpr size_t kBierNeighbourSlots = 16;
inline constexpr size_t kBierMalformedReasons = 6;  // wire::BierParseError

// packets: received for this BIFT, or encapsulated into it here; ttl_expired: could not be
// forwarded to neighbours; bits_no_neighbour: bits cleared because no neighbour or own bit has
// them; delivered: decapsulated copies for own bits; copies: by neighbour index in the BIFT.
#define INA_BIER_COUNTERS(S, A)                                                                   \
    S(packets, per_bift, "bier_packets_total",                                                    \
      "BIER packets received for a BIFT or encapsulated into it")                                 \
    S(ttl_expired, per_bift, "bier_ttl_expired_total",                                            \
      "BIER packets whose TTL left nothing to forward to neighbours")                             \
    S(bits_no_neighbour, per_bift, "bier_bits_no_neighbour_total",                               \
      "BitString bits cleared because no neighbour or own bit has them")                          \
    S(delivered, per_bift, "bier_bift_delivered_total", "Decapsulated deliveries for own bits")    \
    A(copies, uint64_t, kBierNeighbourSlots, "bier_copies_by_neighbour_total",                    \
      "BIER copies sent per BIFT and neighbour")                                                  \
    A(malformed, uint64_t, kBierMalformedReasons, "bier_malformed_total",                         \
      "Malformed BIER headers by reason")

// INA: per-job detail lives in each job's chunk table counters (metrics/stats.h). ina_rejected
// counts contributions failing ingress or header checks, or outside the A-BM; ina_malformed is
// by ina::proto::ParseError; events_lost are control-plane events dropped on a full ring.
#define INA_LCORE_COUNTERS(S, A)                                                                  \
    S(loops, per_lcore, "lcore_loops_total", "Poll loop iterations")                              \
    S(busy_loops, per_lcore, "lcore_busy_loops_total", "Poll loop iterations that received packets") \
    S(rx_bursts, per_lcore, "lcore_rx_bursts_total", "Non-empty RX bursts")                       \
    S(idle_sleeps, per_lcore, "lcore_idle_sleeps_total", "Idle back-off sleeps")                  \
    S(tx_bursts, per_lcore, "lcore_tx_bursts_total", "TX bursts handed to ports")                 \
    A(burst_size, uint64_t, kBurstBuckets, "lcore_rx_bursts_by_size_total",                       \
      "Non-empty RX bursts by packet count")                                                      \
    A(poll_gap, uint64_t, kPollGapBuckets, "lcore_poll_gaps_total",                               \
      "Poll loop iterations by the time since the previous one began (le_us: upper bound)")       \
    A(loop_work, uint64_t, kPollGapBuckets, "lcore_loop_work_total",                              \
      "Poll loop iterations the kernel did not deschedule, by the worker's own work time in them " \
      "(le_us: upper bound): the RX stalls the switch causes")                                    \
    A(loop_descheduled, uint64_t, kPollGapBuckets, "lcore_loop_descheduled_total",               \
      "Poll loop iterations during which the kernel switched the worker thread out, by their "    \
      "time (le_us: upper bound): RX stalls the host causes")                                     \
    S(routed, total, "routed_packets_total", "IPv4 packets routed")                               \
    S(bridged, total, "bridged_packets_total", "Frames bridged to a known port in an L2 group")   \
    S(flooded, total, "flooded_packets_total", "Frames flooded in an L2 group (once per frame)")  \
    S(arp_replies, total, "arp_replies_total", "ARP replies sent for the switch's own addresses") \
    S(arp_learned, total, "arp_learned_total",                                                    \
      "ARP packets that reported a neighbour to the control plane")                               \
    S(icmp_echo_replies, total, "icmp_echo_replies_total",                                        \
      "ICMP echo replies sent for the switch's own addresses")                                    \
    S(routed6, total, "routed6_packets_total", "IPv6 packets routed")                           \
    S(nd_advertisements, total, "nd_advertisements_total",                                        \
      "Neighbor Advertisements sent for the switch's own IPv6 addresses")                         \
    S(nd_solicitations, total, "nd_solicitations_total",                                          \
      "Neighbor Solicitations sent to resolve IPv6 next hops")                                    \
    S(nd_learned, total, "nd_learned_total",                                                      \
      "NS/NA packets that reported an IPv6 neighbour to the control plane")                       \
    S(icmp6_echo_replies, total, "icmp6_echo_replies_total",                                      \
      "ICMPv6 echo replies sent for the switch's own addresses")                                  \
    S(events_lost, total, "control_events_lost_total", "Worker events lost to a full ring")       \
    A(udp_malformed, uint64_t, kUdpMalformedReasons, "udp_malformed_total",                       \
      "UDP datagrams the classifier found unsound (forwarded unmodified), by reason")             \
    S(ina_packets, total, "ina_packets_total", "UDP datagrams on the INA port that parsed as INA") \
    S(ina_not_ina, total, "ina_not_ina_total",                                                    \
      "UDP datagrams on the INA port that did not parse (routed as is)")                          \
    S(ina_unknown_job, total, "ina_unknown_job_total",                                            \
      "INA packets for a job this switch does not have (routed)")                                 \
    S(ina_rejected, total, "ina_rejected_total",                                                  \
      "INA contributions failing ingress, header or A-BM checks (on_reject applies)")             \
    S(ina_absorbed, total, "ina_absorbed_total", "Contributions absorbed into aggregation slots")  \
    S(ina_partials_sent, total, "ina_partials_sent_total",                                        \
      "Partial results an aggregator sent to its parent")                                         \
    S(ina_results_sent, total, "ina_results_sent_total", "Result packets a root sent to workers") \
    S(ina_resent, total, "ina_resent_total",                                                      \
      "Results or partials re-sent for a retransmitted contribution")                             \
    S(ina_fallbacks, total, "ina_fallbacks_total", "Contributions forwarded unaggregated (no slot)") \
    S(ina_handed_off, total, "ina_handed_off_total",                                              \
      "Contributions passed to the lcore that owns their chunk")                                  \
    A(ina_malformed, uint64_t, kInaParseErrors, "ina_malformed_total",                            \
      "UDP datagrams on the INA port that are not INA v1, by parse error")                        \
    S(bier_copies, total, "bier_copies_total", "BIER copies sent to neighbour BFRs (all BIFTs)")  \
    S(bier_delivered, total, "bier_delivered_total",                                              \
      "BIER payloads delivered to local hosts (all BIFTs)")                                       \
    S(mcast_encapsulated, total, "bier_mcast_encapsulated_total",                                 \
      "IPv4 multicast packets this switch put on BIER as the BFIR")                               \
    A(drops, uint64_t, kDropReasonCount, "drops_total", "Packets dropped by the dataplane, by reason") \
    A(ports, PortCounters, kMaxPorts, "", "")                                                     \
    A(bier, BierCounters, kBierCounterSlots, "", "")

// Expansions of a list into members, += and -=.
#define INA_COUNTER_MEMBER(member, ...) uint64_t member = 0;
#define INA_COUNTER_ARRAY_MEMBER(member, type, count, ...) std::array<type, count> member{};
#define INA_COUNTER_ADD(member, ...) member += o.member;
#define INA_COUNTER_ARRAY_ADD(member, type, count, ...)                                           \
    for (size_t i = 0; i < (count); ++i) {                                                        \
        member[i] += o.member[i];                                                                 \
    }
// Sums a struct with the same members (named c) into this one.
#define INA_COUNTER_ADD_FROM(member, ...) member += c.member;
#define INA_COUNTER_ARRAY_ADD_FROM(member, type, count, ...)                                     \
    for (size_t i = 0; i < (count); ++i) {                                                        \
        member[i] += c.member[i];                                                                 \
    }
#define INA_COUNTER_SUB(member, ...) member -= o.member;
#define INA_COUNTER_ARRAY_SUB(member, type, count, ...)                                           \
    for (size_t i = 0; i < (count); ++i) {                                                        \
        member[i] -= o.member[i];                                                                 \
    }
// Members, then the control-plane-side arithmetic: += sums another lcore's block into this one,
// -= takes a baseline off (a reused BIFT slot).
#define INA_COUNTER_STRUCT_BODY(name, LIST)                                                       \
    LIST(INA_COUNTER_MEMBER, INA_COUNTER_ARRAY_MEMBER)                                            \
    name& operator+=(const name& o) {                                                             \
        LIST(INA_COUNTER_ADD, INA_COUNTER_ARRAY_ADD)                                              \
        return *this;                                                                             \
    }                                                                                             \
    name& operator-=(const name& o) {                                                             \
        LIST(INA_COUNTER_SUB, INA_COUNTER_ARRAY_SUB)                                              \
        return *this;                                                                             \
    }

struct PortCounters {
    INA_COUNTER_STRUCT_BODY(PortCounters, INA_PORT_COUNTERS)
};

struct BierCounters {
    INA_COUNTER_STRUCT_BODY(BierCounters, INA_BIER_COUNTERS)
};

struct alignas(64) LcoreCounters {
    INA_COUNTER_STRUCT_BODY(LcoreCounters, INA_LCORE_COUNTERS)
};

// Bucket of a gap: bit_width(gap) up to the 64..128 octave, which the budget splits in two;
// every bucket above it one further on.
constexpr size_t poll_gap_bucket(uint64_t gap_us) {
    const auto b = static_cast<size_t>(std::bit_width(gap_us));
    const size_t k = b < 7 ? b : b > 7 || gap_us >= kPollGapBudgetUs ? b + 1 : b;
    return k < kPollGapBuckets ? k : kPollGapBuckets - 1;
}

// The exclusive upper bound (us) of bucket k; 0 for the last (open) one.
constexpr uint64_t poll_gap_bucket_bound(size_t k) {
    return k < 7                     ? uint64_t{1} << k
           : k == 7                  ? kPollGapBudgetUs
           : k + 1 < kPollGapBuckets ? uint64_t{1} << (k - 1)
                                     : 0;
}
static_assert(poll_gap_bucket(0) == 0 && poll_gap_bucket(63) == 6 && poll_gap_bucket(64) == 7 &&
              poll_gap_bucket(99) == 7 && poll_gap_bucket(100) == 8 && poll_gap_bucket(127) == 8 &&
              poll_gap_bucket(128) == 9 && poll_gap_bucket(65535) == 17 &&
              poll_gap_bucket(65536) == 18 && poll_gap_bucket(~uint64_t{0}) == 18);
static_assert(poll_gap_bucket_bound(6) == 64 && poll_gap_bucket_bound(7) == 100 &&
              poll_gap_bucket_bound(8) == 128 && poll_gap_bucket_bound(17) == 65536 &&
              poll_gap_bucket_bound(18) == 0);

inline size_t burst_bucket(uint16_t n) {
    size_t b = 0;
    while (n > 1 && b + 1 < kBurstBuckets) {
        n >>= 1;
        ++b;
    }
    return b;
}

}  // namespace ina::dp
