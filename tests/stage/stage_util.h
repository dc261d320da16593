// SPDX-License-Identifier: Apache-2.0
// Shared support for the stage tests: the EAL environment (started once per test binary),
// frame builders that produce raw bytes with correct checksums, and a fixture holding a mempool,
// an events ring, a snapshot and an LcoreContext.
#pragma once

#include <gtest/gtest.h>
#include <rte_ether.h>
#include <rte_ip.h>
#include <rte_mbuf.h>
#include <rte_rcu_qsbr.h>
#include <rte_ring.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "dataplane/events.h"
#include "dataplane/snapshot.h"
#include "ina/chunk_table.h"
#include "pipeline/context.h"

namespace ina::test {

using Bytes = std::vector<uint8_t>;

// ---------------------------------------------------------------------------------------------
// EAL

class EalEnvironment : public ::testing::Environment {
public:
    void SetUp() override;
    void TearDown() override;
};

// A process-wide unique suffix for DPDK object names (pools, rings, snapshot generations).
uint64_t unique_id();

// ---------------------------------------------------------------------------------------------
// Addresses

rte_ether_addr mac(const char* text);
uint32_t ip4(const char* text);  // host order
inline constexpr rte_ether_addr kBroadcast{{0xff, 0xff, 0xff, 0xff, 0xff, 0xff}};
inline constexpr rte_ether_addr kZeroMac{{0, 0, 0, 0, 0, 0}};
bool same_mac(const rte_ether_addr& a, const rte_ether_addr& b);
std::string mac_str(const rte_ether_addr& a);

// ---------------------------------------------------------------------------------------------
// Frame builders (all multi-byte fields are written big-endian, checksums are computed by an
// independent reference implementation below, not by the code under test).

inline constexpr size_t kEthLen = 14;
inline constexpr size_t kArpLen = 28;
inline constexpr size_t kIpLen = 20;

uint16_t get16(const uint8_t* p);
uint32_t get32(const uint8_t* p);
void put16(uint8_t* p, uint16_t v);
void put32(uint8_t* p, uint32_t v);

// Reference Internet checksum: big-endian 16-bit words, odd byte padded, folded, inverted.
uint16_t ref_checksum(const uint8_t* p, size_t len);
// True if the buffer (containing its own checksum field) verifies.
bool ref_checksum_ok(const uint8_t* p, size_t len);

Bytes eth_frame(const rte_ether_addr& dst, const rte_ether_addr& src, uint16_t ether_type,
                const Bytes& payload);
Bytes arp_payload(uint16_t op, const rte_ether_addr& sha, uint32_t sip, const rte_ether_addr& tha,
                  uint32_t tip);
// IPv4 header (+ options, a multiple of 4 bytes) + payload, checksum set.
Bytes ipv4_packet(uint32_t src, uint32_t dst, uint8_t proto, const Bytes& payload,
                  uint8_t ttl = 64, const Bytes& options = {});
Bytes icmp_echo(uint8_t type, uint16_t id, uint16_t seq, const Bytes& data);
Bytes udp_datagram(uint32_t src, uint32_t dst, uint16_t sport, uint16_t dport, const Bytes& data);
Bytes payload_of(size_t len, uint8_t seed = 0);

// INA (docs/protocol.md) for the stage tests: BSL 64, set 0, int32 sum.
// A worker's contribution frame: INA data of `job_id`, chunk `seq`, P-BM = {bfr_id}, from
// 10.0.1.9 (a host behind r0) to `dst`, UDP 40001 -> 9470, Ethernet to r0's MAC from kHostA.
Bytes ina_contribution(uint32_t job_id, uint16_t bfr_id, uint32_t seq,
                       const std::vector<int32_t>& values, uint32_t dst);
// The same with any element type and raw little-endian element bytes (count = bytes / size), from
// P-BM `bfr_ids`.
Bytes ina_data(uint32_t job_id, const std::vector<uint16_t>& bfr_ids, uint32_t seq,
               uint8_t elem_type, const Bytes& elements, uint32_t dst);
// Chunk-table parameters of such a job: 16 elements, window 8, nothing expires during a test.
ina::JobParams ina_job_params(uint32_t job_id, const std::vector<uint16_t>& abm, ina::Role role);

// Recomputes the IPv4 header checksum of an Ethernet frame in place.
void fix_ipv4_checksum(Bytes& frame);

// Five broken copies of `good` (an IPv4 UDP frame without options) for classification tests: a
// UDP length below the header (bad_length), 8 longer and 20 shorter than the IPv4 packet leaves
// (length_mismatch), the IPv4 packet ending inside the UDP header (truncated), and a bad IPv4
// header checksum.
std::vector<Bytes> malformed_udp_frames(const Bytes& good);

// ---------------------------------------------------------------------------------------------
// The stage test topology (DPDK port ids; 5 is deliberately unused):
//   r0=0   routed   10.0.1.1/24                    MAC 02:00:00:00:00:01
//   r1=1   routed   10.0.2.1/24 10.0.3.1/24 mtu 1000, MAC overridden to 02:00:00:00:01:99
//   g0=2   L2 group "lan" (id 0) 10.0.10.1/24      MAC 02:00:00:00:00:03
//   g1=3   L2 group "lan"                          MAC 02:00:00:00:00:04
//   g2=4   L2 group "lan"                          MAC 02:00:00:00:00:05
//   h0=6   L2 group "dmz" (id 1)                   MAC 02:00:00:00:00:07
//   h1=7   L2 group "dmz"                          MAC 02:00:00:00:00:08
// Routes: 192.168.0.0/16 via 10.0.2.2 (r1), 192.168.5.0/24 via 10.0.1.2 (r0),
//         172.16.0.0/12 device route on r1, 10.99.0.0/16 via 10.0.2.50 (no neighbour).
// Static neighbours: 10.0.2.2 (r1), 10.0.1.2 (r0). Learned: 10.0.2.7 (r1), 10.0.10.20 (g1).
// FDB: kHostA in lan on g1 (index 5), kHostB in lan on g0 (index 6), kHostC in dmz on h1
// (index 7).

inline constexpr uint16_t kR0 = 0, kR1 = 1, kG0 = 2, kG1 = 3, kG2 = 4, kH0 = 6, kH1 = 7;
inline constexpr uint16_t kLan = 0, kDmz = 1;
extern const char* const kStageYaml;
// kStageYaml with INA job 7: aggregator of BFR-ids 1-2 (BSL 64), int32 sum of up to 16
// elements, window 8, root 10.0.2.2 (behind r1).
extern const std::string kInaAggregatorYaml;

rte_ether_addr port_mac(uint16_t port);  // the MAC the snapshot gives each port
inline constexpr rte_ether_addr kNbR1Gw{{0x02, 0xaa, 0x00, 0x00, 0x02, 0x02}};   // 10.0.2.2
inline constexpr rte_ether_addr kNbR0Gw{{0x02, 0xaa, 0x00, 0x00, 0x01, 0x02}};   // 10.0.1.2
inline constexpr rte_ether_addr kNbR1Host{{0x02, 0xbb, 0x00, 0x00, 0x02, 0x07}}; // 10.0.2.7
inline constexpr rte_ether_addr kNbLanHost{{0x02, 0xbb, 0x00, 0x00, 0x0a, 0x14}}; // 10.0.10.20
inline constexpr rte_ether_addr kHostA{{0x02, 0xcc, 0x00, 0x00, 0x00, 0x0a}};
inline constexpr rte_ether_addr kHostB{{0x02, 0xcc, 0x00, 0x00, 0x00, 0x0b}};
inline constexpr rte_ether_addr kHostC{{0x02, 0xcc, 0x00, 0x00, 0x00, 0x0c}};
inline constexpr rte_ether_addr kStranger{{0x02, 0xdd, 0x00, 0x00, 0x00, 0x01}};
inline constexpr uint32_t kFdbIndexA = 5, kFdbIndexB = 6, kFdbIndexC = 7;

// `tx_udp_checksum`: every port stands for a device that computes UDP checksums on send.
std::vector<dp::PortBinding> stage_bindings(bool tx_udp_checksum = false);
// What a device with TX UDP checksum offload sends for `m` (marked RTE_MBUF_F_TX_UDP_CKSUM, its
// field holding the pseudo-header sum): the frame with the complement of the datagram's sum
// from the UDP header on written into the field, as the device computes it.
Bytes device_completed_udp_checksum(const rte_mbuf* m);
// The UDP checksum of the datagram after `ip` (whole in memory) holds, by DPDK's sums.
bool udp_checksum_holds(const rte_ipv4_hdr* ip);
std::vector<dp::DynamicNeighbour> stage_learned();
std::vector<dp::DynamicFdbEntry> stage_fdb();

// ---------------------------------------------------------------------------------------------
// Fixture

class StageTest : public ::testing::Test {
protected:
    void SetUp() override;
    void TearDown() override;

    // (Re)builds the snapshot. Fails the test on error.
    void build(const std::string& yaml = kStageYaml,
               const std::vector<dp::DynamicNeighbour>& learned = stage_learned(),
               const std::vector<dp::DynamicFdbEntry>& fdb = stage_fdb(),
               const std::vector<dp::PortBinding>& bindings = stage_bindings());

    rte_mbuf* mbuf(const Bytes& frame, uint16_t port);
    // The frame as a chain of segments holding `sizes` bytes each, in order; the last segment
    // takes whatever remains. Segments come from `from` (default: the fixture's pool).
    rte_mbuf* chained(const Bytes& frame, uint16_t port, const std::vector<uint16_t>& sizes,
                      rte_mempool* from = nullptr);
    static Bytes bytes_of(const rte_mbuf* m);

    // Removes and returns what is queued for TX on `port` (the caller frees it).
    std::vector<rte_mbuf*> take_tx(uint16_t port);
    uint16_t tx_count(uint16_t port) const { return ctx->tx[port].count; }
    uint32_t total_tx() const;
    std::vector<dp::Event> events();
    uint64_t drops(dp::DropReason r) const {
        return ctx->counters.drops[static_cast<size_t>(r)];
    }
    uint64_t total_drops() const;
    uint64_t udp_malformed(dp::UdpMalformed r) const {
        return ctx->counters.udp_malformed[static_cast<size_t>(r)];
    }
    unsigned in_use() const;

    template <typename Edge>
    void free_all(pipeline::EdgeBatches<Edge>& out) {
        for (size_t e = 0; e < static_cast<size_t>(Edge::count); ++e) {
            if (out.n[e] != 0) {
                rte_pktmbuf_free_bulk(out.pkts[e].data(), out.n[e]);
                out.n[e] = 0;
            }
        }
    }
    static void free_mbufs(const std::vector<rte_mbuf*>& v);

    rte_mempool* pool = nullptr;
    rte_ring* ring = nullptr;
    std::unique_ptr<pipeline::LcoreContext> ctx;
    rte_rcu_qsbr* qsbr = nullptr;
    std::unique_ptr<dp::ForwardingTables> tables;  // outlives snap, which points at it
    std::unique_ptr<dp::Snapshot> snap;
    std::vector<uint64_t> fdb_seen;
    static constexpr uint64_t kStartTsc = 1'000'000'000'000ull;
};

}  // namespace ina::test
