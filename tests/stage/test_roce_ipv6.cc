// SPDX-License-Identifier: Apache-2.0
// RoCEv2 to the switch's own endpoint over an IPv6 underlay (issue 11), through the whole burst
// path (eth_input, classify with dp::kScopeRouted6, the RoCE stage, ipv6_forward): an IPv6 WRITE
// is ACKed over IPv6 byte for byte as RC and rocev2.md say, a job whose ranks are IPv6 and IPv4
// writes each rank's result in its own family (an IPv4 contribution completing a chunk emits
// IPv6, and the timer's retransmission too), bad ICRC and truncated frames are counted by reason
// and dropped, a chained frame is read across its segments, and what is not for the switch goes
// on untouched: IPv6 RoCE between other hosts, INA over IPv6 (INA binds IPv4 only), and a
// feature sharing UDP 4791 for IPv4 only (as the server-to-server mode) never sees IPv6.
// Frames in and the frames expected out are built here byte by byte; their ICRC is a bitwise
// CRC-32 over the IPv6-masked headers written from rocev2.md §2, never src/roce's.
#include <rte_ip.h>

#include <algorithm>
#include <array>
#include <cstring>
#include <memory>

#include "compile/snapshot_build.h"
#include "config/config.h"
#include "features/roce/compile_roce.h"
#include "features/roce/config_roce.h"
#include "features/roce/control_roce.h"
#include "features/roce/datapath_roce.h"
#include "net/addr.h"
#include "pipeline/feature_stages.h"
#include "pipeline/pipeline.h"
#include "roce/wire.h"
#include "roce_states.h"
#include "stage_util.h"

namespace ina::test {
namespace {

namespace fr = features::roce;
namespace rc = ina::roce;
using Addr6 = std::array<uint8_t, 16>;
using pipeline::EdgeBatches;
using pipeline::FeatureEdge;

Addr6 a6(const char* text) {
    auto a = net::Ipv6Addr::parse(text);
    EXPECT_TRUE(a.has_value()) << text;
    return a ? a->bytes : Addr6{};
}

constexpr uint16_t kV0 = 0;
constexpr uint16_t kV1 = 1;
constexpr rte_ether_addr kW1Mac{{0x02, 0x66, 0, 0, 0x01, 0x02}};    // rank 1, 2001:db8:1::2
constexpr rte_ether_addr kW2Mac{{0x02, 0xaa, 0, 0, 0x02, 0x02}};    // rank 2, 10.0.2.2
constexpr rte_ether_addr kPeer6Mac{{0x02, 0x66, 0, 0, 0x02, 0x09}};  // 2001:db8:2::9 on v1
constexpr uint32_t kSwitchQpn1 = 0x100, kSwitchQpn2 = 0x101;
constexpr uint32_t kWorkerQpn1 = 17, kWorkerQpn2 = 18;
constexpr uint32_t kPsn1 = 1000, kPsn2 = 2000, kSwitchPsn = 5000;
constexpr uint64_t kResultAddr = 0x7f0000000000;
constexpr uint32_t kChunk = 64;
constexpr uint8_t kIpv4OnlyFeature = 6;  // a stand-in for the server-to-server mode's binding
constexpr uint16_t kInaPort = 9470;

// Two ports, each with an IPv4 subnet and an IPv6 prefix.
const std::string kPortsYaml = R"(version: 1
ports:
  - name: v0
    devargs: net_null0
    ipv4: [10.0.1.1/24]
    ipv6: [2001:db8:1::1/64]
  - name: v1
    devargs: net_null1
    ipv4: [10.0.2.1/24]
    ipv6: [2001:db8:2::1/64]
)";

// Rank 1 is IPv6 (its GID 2001:db8:1::2 on v0), rank 2 IPv4 (10.0.2.2 on v1); an INA job makes
// INA bind its port (IPv4 only).
const std::string kYaml = kPortsYaml + R"(neighbours:
  - {ip: 10.0.2.2, mac: "02:aa:00:00:02:02", port: v1}
  - {ip: "2001:db8:1::2", mac: "02:66:00:00:01:02", port: v0}
ina:
  jobs:
    - {job_id: 9, role: aggregator, bsl: 64, abm: "1-2", op: sum, elem_type: int32,
       max_elements: 16, window: 8, root: 10.0.2.2}
rdma:
  jobs:
    - id: 7
      world: 2
      op: sum
      dtype: fp32
      chunk_bytes: 64
      window: 4
      pmtu: 1024
      qps:
        - {rank: 1, ip: "2001:db8:1::2", qpn: 17, psn: 1000, switch_qpn: 0x100,
           switch_psn: 5000, result_addr: 0x7f0000000000, result_rkey: 0x1234,
           result_length: 1024, timeout: 10}
        - {rank: 2, ip: 10.0.2.2, qpn: 18, psn: 2000, switch_qpn: 0x101, switch_psn: 5000,
           result_addr: 0x7f0000000000, result_rkey: 0x1234, result_length: 1024, timeout: 10}
)";

// CRC-32 of IEEE 802.3 (reflected, polynomial 0xEDB88320), one bit at a time.
uint32_t ref_crc32(const uint8_t* p, size_t n) {
    uint32_t c = 0xFFFFFFFFu;
    for (size_t i = 0; i < n; ++i) {
        c ^= p[i];
        for (int k = 0; k < 8; ++k) {
            c = (c >> 1) ^ (0xEDB88320u & (0u - (c & 1u)));
        }
    }
    return ~c;
}

// The ICRC of the IPv6 RoCEv2 packet `l3` (its last 4 bytes, the ICRC, not covered): 8 bytes
// of ones, then the packet with the traffic class, flow label, hop limit, UDP checksum and BTH
// byte 4 set to ones (rocev2.md §2).
uint32_t ref_icrc6(const Bytes& l3) {
    Bytes b(8 + l3.size() - 4, 0xFF);
    std::copy(l3.begin(), l3.end() - 4, b.begin() + 8);
    uint8_t* ip = b.data() + 8;
    ip[0] |= 0x0F;
    ip[1] = ip[2] = ip[3] = 0xFF;
    ip[7] = 0xFF;
    ip[40 + 6] = ip[40 + 7] = 0xFF;
    if (b.size() > 8 + 48 + 4) {  // a BTH cut short (a malformed case) has no byte 4 to mask
        ip[48 + 4] = 0xFF;
    }
    return ref_crc32(b.data(), b.size());
}

// The UDP source port of a switch QP (docs/rdma.md): 0xC000 | the top bits of QPN * 0x9E3779B1.
uint16_t source_port(uint32_t qpn) {
    return static_cast<uint16_t>(0xC000 | ((qpn * 0x9E3779B1u) >> 18));
}

// BTH: opcode, SE/M/pad/TVer, P_Key 0xFFFF, FECN/BECN, DestQP, AckReq, PSN.
Bytes bth(uint8_t opcode, uint32_t dest_qp, uint32_t psn, bool ack_req, uint8_t pad = 0) {
    Bytes b(12);
    b[0] = opcode;
    b[1] = static_cast<uint8_t>(pad << 4);
    put16(&b[2], 0xFFFF);
    put32(&b[4], dest_qp & 0xFFFFFF);
    put32(&b[8], psn & 0xFFFFFF);
    b[8] = ack_req ? 0x80 : 0;
    return b;
}

Bytes be32(uint32_t v) {
    Bytes b(4);
    put32(b.data(), v);
    return b;
}

// An Ethernet frame of IPv6 + UDP 4791 carrying `transport` (BTH to pad), its ICRC appended.
Bytes roce6(const rte_ether_addr& eth_dst, const rte_ether_addr& eth_src, const Addr6& src,
            const Addr6& dst, uint16_t sport, const Bytes& transport, uint8_t tc = 0x02,
            uint8_t hop_limit = 64) {
    const auto udp_len = static_cast<uint16_t>(8 + transport.size() + 4);
    Bytes l3(48);
    put32(&l3[0], 6u << 28 | uint32_t{tc} << 20);
    put16(&l3[4], udp_len);
    l3[6] = 17;
    l3[7] = hop_limit;
    std::copy(src.begin(), src.end(), &l3[8]);
    std::copy(dst.begin(), dst.end(), &l3[24]);
    put16(&l3[40], sport);
    put16(&l3[42], 4791);
    put16(&l3[44], udp_len);
    l3.insert(l3.end(), transport.begin(), transport.end());
    l3.resize(l3.size() + 4);
    const uint32_t crc = ref_icrc6(l3);
    for (size_t k = 0; k < 4; ++k) {
        l3[l3.size() - 4 + k] = static_cast<uint8_t>(crc >> (8 * k));  // least significant first
    }
    return eth_frame(eth_dst, eth_src, RTE_ETHER_TYPE_IPV6, l3);
}

// A WRITE_ONLY_WITH_IMM's transport: BTH (AckReq), RETH, ImmDt, the values (no pad: whole
// floats).
Bytes write_only_imm(uint32_t dest_qp, uint32_t psn, uint64_t va, uint32_t rkey, uint32_t imm,
                     const std::vector<float>& values) {
    Bytes t = bth(rc::op::kWriteOnlyImm, dest_qp, psn, true);
    const auto length = static_cast<uint32_t>(values.size() * 4);
    for (const uint32_t word : {static_cast<uint32_t>(va >> 32), static_cast<uint32_t>(va), rkey,
                                length, imm}) {
        const Bytes b = be32(word);
        t.insert(t.end(), b.begin(), b.end());
    }
    const auto* p = reinterpret_cast<const uint8_t*>(values.data());
    t.insert(t.end(), p, p + length);
    return t;
}

std::vector<float> fill(float base) {
    std::vector<float> v(kChunk / 4);
    for (size_t i = 0; i < v.size(); ++i) {
        v[i] = base + static_cast<float>(i);
    }
    return v;
}

rte_ether_addr own_mac(uint16_t p) {
    return rte_ether_addr{{0x02, 0, 0, 0, 0x06, static_cast<uint8_t>(p)}};
}

const Addr6 kW1 = a6("2001:db8:1::2");
const Addr6 kSw0 = a6("2001:db8:1::1");
const Addr6 kPeer6 = a6("2001:db8:2::9");

// Every stage sees how often it was offered packets and of which family.
struct IpFamilies {
    int ipv4 = 0;
    int ipv6 = 0;
};
IpFamilies g_ipv4_only_seen;

uint16_t ipv4_only_stage(pipeline::LcoreContext&, const dp::Snapshot&, rte_mbuf** pkts,
                         uint16_t n, FeatureEdge pass, EdgeBatches<FeatureEdge>& out) {
    uint16_t i = 0;
    for (; i < n && out.room_for(1); ++i) {
        const bool v6 = rte_pktmbuf_mtod(pkts[i], const rte_ether_hdr*)->ether_type ==
                        rte_cpu_to_be_16(RTE_ETHER_TYPE_IPV6);
        ++(v6 ? g_ipv4_only_seen.ipv6 : g_ipv4_only_seen.ipv4);
        out.push(pass, pkts[i]);
    }
    return i;
}

class RoceIpv6 : public StageTest {
protected:
    void SetUp() override {
        static const bool registered = config::register_section(fr::section_hooks()) &&
                                       compile::register_extension(fr::compile_roce) &&
                                       pipeline::register_feature(fr::kFeatureRoce, fr::stage());
        ASSERT_TRUE(registered);
        StageTest::SetUp();
        ctx->pool = pool;
        std::vector<dp::PortBinding> b;
        for (uint16_t p = 0; p < 2; ++p) {
            b.push_back({p, own_mac(p)});
        }
        build(kYaml, {}, {}, b);
        // Rank 1's host is a static IPv6 neighbour (config); the other IPv6 host as if learned.
        ASSERT_TRUE(tables->set_neighbour6(kPeer6.data(), kPeer6Mac, kV1));
        // The states as the control piece makes them from the config (qp_params picks the
        // switch's address on each worker's prefix or subnet).
        auto loaded = config::load_string(kYaml, "stage.yaml");
        ASSERT_TRUE(loaded.ok()) << loaded.error_text();
        const fr::JobConfig& jc = fr::rdma_of(*loaded.config)->jobs.at(0);
        job = std::make_unique<fr::JobState>(fr::job_params(jc));
        qp1 = std::make_unique<fr::QpState>(fr::qp_params(*loaded.config, jc, jc.qps.at(0)),
                                            job.get());
        qp2 = std::make_unique<fr::QpState>(fr::qp_params(*loaded.config, jc, jc.qps.at(1)),
                                            job.get());
        attach_roce_job(*ctx, *snap, *job, *qp1, *qp2);
    }
    void TearDown() override {
        detach_roce_job(*ctx);
        pipeline::register_feature(kIpv4OnlyFeature, pipeline::FeatureStage{"none", nullptr, 1});
        StageTest::TearDown();
    }
    void run(std::vector<rte_mbuf*> in) {
        pipeline::process_burst(*ctx, *snap, in.data(), static_cast<uint16_t>(in.size()));
    }
    std::vector<Bytes> sent(uint16_t port) {
        std::vector<Bytes> out;
        for (rte_mbuf* m : take_tx(port)) {
            out.push_back(bytes_of(m));
            rte_pktmbuf_free(m);
        }
        return out;
    }
    uint64_t lcore(fr::LcoreCounter c) const {
        return ctx->feature_counters[fr::kFeatureRoce][static_cast<size_t>(c)];
    }

    // Rank 1's WRITE_ONLY_WITH_IMM of chunk s over IPv6, as a worker sends it.
    static Bytes contribution6(uint32_t psn, uint32_t s, const std::vector<float>& values,
                               uint8_t tc = 0x02) {
        const Bytes t = write_only_imm(kSwitchQpn1, psn, fr::kAreaAddr + s % 4 * kChunk,
                                       fr::kAreaRkey, s << 8 | 1, values);
        return roce6(own_mac(kV0), kW1Mac, kW1, kSw0, 0xC001, t, tc);
    }
    // Rank 2's contribution over IPv4 (src/roce's encoder: the IPv4 path is tested elsewhere).
    static Bytes contribution4(uint32_t psn, uint32_t s, const std::vector<float>& values) {
        rc::Ipv4Path path;
        path.src_ip = 0x0A000202;
        path.dst_ip = 0x0A000201;
        path.dest_qp = kSwitchQpn2;
        rc::Transmit tx;
        tx.opcode = rc::op::kWriteOnlyImm;
        tx.psn = psn;
        tx.ack_req = true;
        tx.has_reth = true;
        tx.length = static_cast<uint32_t>(values.size() * 4);
        tx.reth = {fr::kAreaAddr + s % 4 * kChunk, fr::kAreaRkey, tx.length};
        tx.has_imm = true;
        tx.imm = s << 8 | 1;
        Bytes buf(2048);
        const size_t l2 = rc::write_ethernet(buf.data(), buf.size(), own_mac(kV1).addr_bytes,
                                             kW2Mac.addr_bytes);
        const size_t l3 = rc::encode_write(buf.data() + l2, buf.size() - l2, path, 1, tx,
                                           reinterpret_cast<const uint8_t*>(values.data()));
        buf.resize(l2 + l3);
        return buf;
    }
    // What the switch must send rank 1: its ACK or NAK...
    static Bytes expected_ack6(uint32_t psn, uint32_t msn, uint8_t syndrome = 0x1F) {
        Bytes t = bth(rc::op::kAcknowledge, kWorkerQpn1, psn, false);
        const Bytes aeth = be32(uint32_t{syndrome} << 24 | msn);
        t.insert(t.end(), aeth.begin(), aeth.end());
        return roce6(kW1Mac, own_mac(kV0), kSw0, kW1, source_port(kSwitchQpn1), t);
    }
    // ...and the k-th result WRITE (chunk s, the sum `values`).
    static Bytes expected_result6(uint32_t k, uint32_t s, const std::vector<float>& values) {
        const Bytes t = write_only_imm(kWorkerQpn1, kSwitchPsn + k, kResultAddr + s * kChunk,
                                       0x1234, s << 8 | 2, values);
        return roce6(kW1Mac, own_mac(kV0), kSw0, kW1, source_port(kSwitchQpn1), t);
    }
    static std::vector<float> sum(const std::vector<float>& a, const std::vector<float>& b) {
        std::vector<float> out(a.size());
        for (size_t i = 0; i < a.size(); ++i) {
            out[i] = a[i] + b[i];
        }
        return out;
    }

    std::unique_ptr<fr::JobState> job;
    std::unique_ptr<fr::QpState> qp1, qp2;
};

TEST_F(RoceIpv6, BindingTakesIpv6OnlyWhereItSaysSo) {
    EXPECT_EQ(snap->features.lookup(dp::kIpProtoUdp, 4791, dp::kScopeRouted6), fr::kFeatureRoce);
    EXPECT_EQ(snap->features.lookup(dp::kIpProtoUdp, 4791, dp::kScopeRouted), fr::kFeatureRoce);
    EXPECT_EQ(snap->features.lookup(dp::kIpProtoUdp, kInaPort, dp::kScopeRouted),
              dp::kFeatureIna);
    EXPECT_EQ(snap->features.lookup(dp::kIpProtoUdp, kInaPort, dp::kScopeRouted6),
              dp::kFeatureNone)
        << "INA parses IPv4 only: its binding has no IPv6 scope";
}

TEST_F(RoceIpv6, WriteIsAckedOverIpv6ByteForByte) {
    const auto values = fill(1.0f);
    run({mbuf(contribution6(kPsn1, 0, values), kV0)});
    const auto out = sent(kV0);
    ASSERT_EQ(out.size(), 1u) << "the ACK, nothing else before rank 2 contributes";
    EXPECT_EQ(out[0], expected_ack6(kPsn1, 1))
        << "Ethernet to the worker's neighbour MAC from v0's, IPv6 from 2001:db8:1::1 (v0's "
           "address on the worker's prefix), traffic class ECT(0), flow label 0, hop limit 64, "
           "UDP from the QP's port, checksum 0, ACK PSN 1000 MSN 1, the ICRC over IPv6 rules";
    EXPECT_EQ(qp1->counters.contributions, 1u);
    EXPECT_EQ(qp1->counters.acks_sent, 1u);
    EXPECT_EQ(qp1->counters.packets_in, 1u);
    EXPECT_EQ(qp1->counters.bytes_in, 40u + 8 + 12 + 16 + 4 + kChunk + 4);
    EXPECT_EQ(total_drops(), 0u);
}

TEST_F(RoceIpv6, MixedFamiliesEachRankGetsItsResultInItsOwnFamily) {
    for (uint32_t s = 0; s < 2; ++s) {
        const auto a = fill(static_cast<float>(s));
        const auto b = fill(100.0f);
        // s 0: IPv6 first, the IPv4 contribution completes the chunk (IPv6 emitted from an IPv4
        // run); s 1: the other way round.
        if (s == 0) {
            run({mbuf(contribution6(kPsn1 + s, s, a), kV0)});
            run({mbuf(contribution4(kPsn2 + s, s, b), kV1)});
        } else {
            run({mbuf(contribution4(kPsn2 + s, s, b), kV1)});
            run({mbuf(contribution6(kPsn1 + s, s, a), kV0)});
        }
        const auto v0 = sent(kV0);
        ASSERT_EQ(v0.size(), 2u) << "chunk " << s;
        EXPECT_EQ(v0[0], expected_ack6(kPsn1 + s, s + 1));
        EXPECT_EQ(v0[1], expected_result6(s, s, sum(a, b)));
        const auto v1 = sent(kV1);
        ASSERT_EQ(v1.size(), 2u);
        for (const auto& f : v1) {
            ASSERT_GE(f.size(), 14u + 20 + 8 + 12);
            EXPECT_EQ(f[12] << 8 | f[13], RTE_ETHER_TYPE_IPV4) << "rank 2 stays IPv4";
            EXPECT_EQ(std::memcmp(f.data(), kW2Mac.addr_bytes, 6), 0);
        }
        const auto r2 = rc::parse(v1[1].data() + 14 + 28, v1[1].size() - 14 - 28);
        ASSERT_TRUE(r2.packet.has_value());
        EXPECT_EQ(r2.packet->bth.opcode, rc::op::kWriteOnlyImm);
        EXPECT_EQ(r2.packet->bth.dest_qp, kWorkerQpn2);
        EXPECT_EQ(r2.packet->imm, s << 8 | 2);
    }
    EXPECT_EQ(qp1->counters.results_sent, 2u);
    EXPECT_EQ(qp2->counters.results_sent, 2u);
    EXPECT_EQ(total_drops(), 0u);
}

TEST_F(RoceIpv6, TimeoutRetransmitsTheIpv6ResultFromTheTimer) {
    const auto a = fill(1.0f);
    const auto b = fill(2.0f);
    run({mbuf(contribution6(kPsn1, 0, a), kV0)});
    run({mbuf(contribution4(kPsn2, 0, b), kV1)});
    const auto first = sent(kV0);
    ASSERT_EQ(first.size(), 2u);
    free_mbufs(take_tx(kV1));
    // timeout 10: 4.096 us * 2^10 = 4.2 ms without rank 1's ACK of PSN 5000.
    ctx->now_tsc += 10 * ctx->tsc_hz / 1000;
    pipeline::service_timers(*ctx, *snap);
    const auto again = sent(kV0);
    ASSERT_GE(again.size(), 1u);
    EXPECT_EQ(again[0], expected_result6(0, 0, sum(a, b)))
        << "the same packet again (go-back-N), routed over IPv6 from the tick";
    EXPECT_GE(qp1->counters.retransmissions, 1u);
    free_mbufs(take_tx(kV0));
    free_mbufs(take_tx(kV1));
}

TEST_F(RoceIpv6, CeMarkedIpv6ContributionEarnsAnIpv6Cnp) {
    run({mbuf(contribution6(kPsn1, 0, fill(1.0f), 0x03), kV0)});
    const auto out = sent(kV0);
    ASSERT_EQ(out.size(), 2u);
    Bytes t = bth(rc::op::kCnp, kWorkerQpn1, 0, false);
    t[4] = 0x40;  // BECN
    t.resize(t.size() + 16);
    EXPECT_EQ(out[0], roce6(kW1Mac, own_mac(kV0), kSw0, kW1, source_port(kSwitchQpn1), t));
    EXPECT_EQ(out[1], expected_ack6(kPsn1, 1));
    EXPECT_EQ(qp1->counters.cnps_sent, 1u);
}

TEST_F(RoceIpv6, BadIcrcAndTruncatedFramesAreCountedByReasonAndDropped) {
    Bytes bad = contribution6(kPsn1, 0, fill(1.0f));
    bad[bad.size() - 10] ^= 0x01;  // a payload bit
    // BTH cut short: the UDP datagram (consistent lengths, ICRC over what is there) holds 8
    // bytes of transport, less than a BTH and an ICRC.
    Bytes head = bth(rc::op::kWriteOnlyImm, kSwitchQpn1, kPsn1, true);
    head.resize(4);
    const Bytes short_bth = roce6(own_mac(kV0), kW1Mac, kW1, kSw0, 0xC001, head);
    // The frame ends before the IPv6 payload length says.
    Bytes cut = contribution6(kPsn1, 0, fill(1.0f));
    cut.resize(cut.size() - 20);
    run({mbuf(bad, kV0), mbuf(short_bth, kV0), mbuf(cut, kV0)});
    EXPECT_EQ(total_tx(), 0u);
    EXPECT_EQ(qp1->counters.icrc_errors, 1u);
    EXPECT_EQ(lcore(fr::LcoreCounter::icrc_error), 1u);
    EXPECT_EQ(lcore(fr::LcoreCounter::malformed), 1u);
    EXPECT_EQ(drops(dp::DropReason::ipv6_bad_length), 1u);
    EXPECT_EQ(qp1->responder.expected_psn(), kPsn1) << "nothing was taken";
    EXPECT_EQ(qp1->counters.contributions, 0u);
}

TEST_F(RoceIpv6, ChainedIpv6ContributionIsReadAcrossSegments) {
    const Bytes f = contribution6(kPsn1, 0, fill(3.0f));
    run({chained(f, kV0, {70, 30, 16})});
    const auto out = sent(kV0);
    ASSERT_EQ(out.size(), 1u);
    EXPECT_EQ(out[0], expected_ack6(kPsn1, 1));
    EXPECT_EQ(qp1->counters.contributions, 1u);
}

TEST_F(RoceIpv6, RoceBetweenOtherHostsIsRoutedUntouched) {
    // RoCE from rank 1's host to another IPv6 host, through the switch.
    Bytes t = bth(rc::op::kSendOnly, 0x77, 5, true);
    t.insert(t.end(), {1, 2, 3, 4});
    const Bytes f = roce6(own_mac(kV0), kW1Mac, kW1, kPeer6, 0xC123, t);
    run({mbuf(f, kV0)});
    const auto out = sent(kV1);
    ASSERT_EQ(out.size(), 1u);
    Bytes want = f;
    std::memcpy(want.data(), kPeer6Mac.addr_bytes, 6);
    const rte_ether_addr v1 = own_mac(kV1);
    std::memcpy(want.data() + 6, v1.addr_bytes, 6);
    want[14 + 7] = 63;  // hop limit - 1: masked in the ICRC, which stays valid
    EXPECT_EQ(out[0], want);
    EXPECT_EQ(lcore(fr::LcoreCounter::passed), 1u);
    EXPECT_EQ(ctx->counters.routed6, 1u);
}

TEST_F(RoceIpv6, InaOverIpv6IsNotInasAndGoesOnUntouched) {
    Bytes udp(8 + 16, 0xA5);
    put16(&udp[0], 40000);
    put16(&udp[2], kInaPort);
    put16(&udp[4], static_cast<uint16_t>(udp.size()));
    put16(&udp[6], 0);
    auto ipv6 = [&](const Addr6& dst) {
        Bytes l3(40);
        put32(&l3[0], 6u << 28);
        put16(&l3[4], static_cast<uint16_t>(udp.size()));
        l3[6] = 17;
        l3[7] = 64;
        std::copy(kW1.begin(), kW1.end(), &l3[8]);
        std::copy(dst.begin(), dst.end(), &l3[24]);
        l3.insert(l3.end(), udp.begin(), udp.end());
        return eth_frame(own_mac(kV0), kW1Mac, RTE_ETHER_TYPE_IPV6, l3);
    };
    const Bytes transit = ipv6(kPeer6);
    run({mbuf(transit, kV0), mbuf(ipv6(kSw0), kV0)});
    const auto out = sent(kV1);
    ASSERT_EQ(out.size(), 1u);
    EXPECT_EQ(std::vector<uint8_t>(out[0].begin() + 14 + 8, out[0].end()),
              std::vector<uint8_t>(transit.begin() + 14 + 8, transit.end()))
        << "addresses and datagram unchanged";
    EXPECT_EQ(out[0][14 + 7], 63);
    EXPECT_EQ(drops(dp::DropReason::local_unsupported), 1u)
        << "INA to the switch's IPv6 address: no local service takes it";
    EXPECT_EQ(ctx->counters.routed6, 1u);
}

TEST_F(RoceIpv6, AnIpv4OnlyFeatureSharingThePortNeverSeesIpv6) {
    g_ipv4_only_seen = {};
    ASSERT_TRUE(pipeline::register_feature(
        kIpv4OnlyFeature, pipeline::FeatureStage{"ipv4-only", ipv4_only_stage, 1, nullptr, 0}));
    ASSERT_TRUE(snap->features.bind({dp::kIpProtoUdp, kIpv4OnlyFeature,
                                     static_cast<uint8_t>(dp::kScopeRouted | dp::kScopeBridged),
                                     4791, true}));
    Bytes t = bth(rc::op::kSendOnly, 0x77, 5, true);
    const Bytes v6 = roce6(own_mac(kV0), kW1Mac, kW1, kPeer6, 0xC123, t);
    rc::Ipv4Path path;
    path.src_ip = 0x0A000202;
    path.dst_ip = 0x0A000109;  // another host, not the switch
    path.dest_qp = 0x77;
    Bytes v4(256);
    const size_t l2 = rc::write_ethernet(v4.data(), v4.size(), own_mac(kV1).addr_bytes,
                                         kW2Mac.addr_bytes);
    v4.resize(l2 + rc::encode_ack(v4.data() + l2, v4.size() - l2, path, 1,
                                  rc::Reply{0x1F, 5, 1}));
    run({mbuf(v6, kV0), mbuf(v4, kV1)});
    EXPECT_EQ(g_ipv4_only_seen.ipv4, 1) << "what the endpoint passed of IPv4 reaches it";
    EXPECT_EQ(g_ipv4_only_seen.ipv6, 0) << "its binding has no IPv6 scope";
    EXPECT_EQ(sent(kV1).size(), 1u) << "the IPv6 frame, routed past both features";
    EXPECT_EQ(lcore(fr::LcoreCounter::passed), 2u);
    free_mbufs(take_tx(kV0));
}

}  // namespace
}  // namespace ina::test

namespace ina::test {
namespace {

// The YAML of a one-QP job whose worker is `ip`, and a neighbour entry, on ports v0 and v1.
std::string one_qp_yaml(const std::string& ip, const std::string& neighbour_ip = "10.0.2.2") {
    return kPortsYaml + R"(neighbours:
  - {ip: ")" + neighbour_ip + R"(", mac: "02:aa:00:00:02:02", port: v1}
rdma:
  jobs:
    - id: 7
      world: 2
      qps:
        - {rank: 1, ip: ")" + ip + R"(", qpn: 17, psn: 0, switch_qpn: 0x100, switch_psn: 0,
           result_addr: 0, result_rkey: 1, result_length: 4096}
)";
}

// A QP the API (or the CM) connected is carried into a reloaded file that names no QP of its
// job, IPv6 worker or IPv4 alike, while its job stays the same and a port still holds its
// worker; otherwise it ends, with the reason.
TEST(RoceIpv6Config, ConnectedQpsOfEitherFamilyAreCarriedAcrossAReload) {
    static const bool registered = config::register_section(fr::section_hooks());
    (void)registered;
    auto running = config::load_string(one_qp_yaml("2001:db8:1::2"), "run.yaml");
    ASSERT_TRUE(running.ok()) << running.error_text();
    {
        // Rank 1 as the API made it, and an IPv4 rank 2 beside it.
        auto rdma = std::make_shared<fr::RdmaConfig>(*fr::rdma_of(*running.config));
        fr::JobConfig& job = rdma->jobs.at(0);
        job.qps.at(0).from_api = true;
        fr::QpConfig v4 = job.qps.at(0);
        v4.rank = 2;
        v4.ip6.reset();
        v4.ip = 0x0A000205;  // 10.0.2.5, on v1
        v4.switch_qpn = 0x101;
        job.qps.push_back(v4);
        running.config->sections[fr::kSectionKey] = rdma;
    }
    const std::string job_only = R"(rdma:
  jobs:
    - id: 7
      world: 2
)";
    auto file = config::load_string(kPortsYaml + job_only, "file.yaml");
    ASSERT_TRUE(file.ok()) << file.error_text();
    std::vector<std::string> ended;
    fr::carry_connected_qps(*running.config, *file.config, ended);
    EXPECT_TRUE(ended.empty()) << ended.front();
    const fr::JobConfig& kept = fr::rdma_of(*file.config)->jobs.at(0);
    ASSERT_EQ(kept.qps.size(), 2u);
    EXPECT_TRUE(fr::same_qp(kept.qps.at(0), fr::rdma_of(*running.config)->jobs.at(0).qps.at(0)));
    EXPECT_TRUE(kept.qps.at(0).ip6.has_value() && kept.qps.at(1).from_api);
    EXPECT_TRUE(config::validate(*file.config).empty()) << "the carried QPs keep it valid";

    // v0 loses its IPv6 prefix: the IPv6 worker ends, the IPv4 one is kept.
    std::string no_v0_prefix = kPortsYaml;
    no_v0_prefix.replace(no_v0_prefix.find("    ipv6: [2001:db8:1::1/64]\n"),
                         std::string("    ipv6: [2001:db8:1::1/64]\n").size(), "");
    auto moved = config::load_string(no_v0_prefix + job_only, "file.yaml");
    ASSERT_TRUE(moved.ok()) << moved.error_text();
    ended.clear();
    fr::carry_connected_qps(*running.config, *moved.config, ended);
    ASSERT_EQ(ended.size(), 1u);
    EXPECT_EQ(ended[0], "job 7 rank 1: its worker is on no subnet of the new config's ports");
    ASSERT_EQ(fr::rdma_of(*moved.config)->jobs.at(0).qps.size(), 1u);
    EXPECT_EQ(fr::rdma_of(*moved.config)->jobs.at(0).qps.at(0).rank, 2);

    // The job's window changes: both end with it.
    auto changed = config::load_string(kPortsYaml + job_only + "      window: 32\n", "file.yaml");
    ASSERT_TRUE(changed.ok()) << changed.error_text();
    ended.clear();
    fr::carry_connected_qps(*running.config, *changed.config, ended);
    EXPECT_EQ(ended.size(), 2u);
    EXPECT_TRUE(fr::rdma_of(*changed.config)->jobs.at(0).qps.empty());
}

TEST(RoceIpv6Config, WorkerAddressesAndTheirErrors) {
    static const bool registered = config::register_section(fr::section_hooks());
    (void)registered;
    auto r = config::load_string(one_qp_yaml("2001:db8:1::2"), "t.yaml");
    ASSERT_TRUE(r.ok()) << r.error_text();
    const fr::QpConfig& q = fr::rdma_of(*r.config)->jobs.at(0).qps.at(0);
    ASSERT_TRUE(q.ip6.has_value());
    EXPECT_EQ(q.ip6->str(), "2001:db8:1::2");
    EXPECT_EQ(q.ip, 0u);
    const fr::QpParams p = fr::qp_params(*r.config, fr::rdma_of(*r.config)->jobs.at(0), q);
    EXPECT_TRUE(p.ipv6);
    EXPECT_EQ(net::Ipv6Addr{p.switch_ip6}.str(), "2001:db8:1::1") << "v0's address on the prefix";

    r = config::load_string(one_qp_yaml("::ffff:10.0.1.2"), "t.yaml");
    ASSERT_TRUE(r.ok()) << r.error_text();
    EXPECT_EQ(fr::rdma_of(*r.config)->jobs.at(0).qps.at(0).ip, 0x0A000102u)
        << "an IPv4-mapped GID is its IPv4 address";
    EXPECT_FALSE(fr::rdma_of(*r.config)->jobs.at(0).qps.at(0).ip6.has_value());

    // The qps entry is line 18 from column 11, its ip's value at column 25; the neighbour's ip
    // value is line 12, column 10.
    r = config::load_string(one_qp_yaml("2001:db8:9::2"), "t.yaml");
    EXPECT_NE(r.error_text().find("t.yaml:18:11: worker 2001:db8:9::2 is on no port's ipv6 "
                                  "prefix"),
              std::string::npos)
        << r.error_text();
    r = config::load_string(one_qp_yaml("fe80::2"), "t.yaml");
    EXPECT_NE(r.error_text().find("t.yaml:18:25: expected ip: a unicast IPv6 address"),
              std::string::npos)
        << r.error_text();
    r = config::load_string(one_qp_yaml("2001:db8:1::zz"), "t.yaml");
    EXPECT_NE(r.error_text().find("t.yaml:18:25: expected ip: an IPv4 address like 10.77.1.2 or "
                                  "an IPv6 address"),
              std::string::npos)
        << r.error_text();

    // Static IPv6 neighbours: on a prefix of their port.
    r = config::load_string(one_qp_yaml("10.0.2.5", "2001:db8:1::7"), "t.yaml");
    EXPECT_NE(r.error_text().find("t.yaml:12:5: neighbour 2001:db8:1::7 is on no ipv6 prefix of "
                                  "port 'v1'"),
              std::string::npos)
        << r.error_text();
    r = config::load_string(one_qp_yaml("10.0.2.5", "ff02::1"), "t.yaml");
    EXPECT_NE(r.error_text().find("t.yaml:12:10: expected a unicast IPv6 neighbour address"),
              std::string::npos)
        << r.error_text();

    // The API's connect body takes an IPv6 worker too.
    const fr::ConnectParse c = fr::parse_connect(
        R"({"rank": 1, "qpn": 17, "psn": 5, "ip": "2001:db8:1::2", "pmtu": 1024,
            "result_addr": 0, "result_rkey": 1, "result_length": 4096, "chunk_bytes": 1024,
            "window": 64, "dtype": "fp32", "op": "sum", "world": 2})",
        "request");
    ASSERT_TRUE(c.request.has_value());
    ASSERT_TRUE(c.request->qp.ip6.has_value());
    EXPECT_EQ(c.request->qp.ip6->str(), "2001:db8:1::2");
}

// A port with several IPv6 addresses on the worker's prefix: a QP's `source` picks the one it
// runs from (the CM sets it to the address the REQ was sent to); without it the first one.
// Errors name file:line:col of the `source` value.
TEST(RoceIpv6Config, SourceChoosesAmongAPortsIpv6Addresses) {
    static const bool registered = config::register_section(fr::section_hooks());
    (void)registered;
    // v0 also answers on 2001:db8:1::9 (same prefix) and 2001:db8:5::1 (another prefix).
    std::string ports = kPortsYaml;
    ports.replace(ports.find("ipv6: [2001:db8:1::1/64]"),
                  std::string("ipv6: [2001:db8:1::1/64]").size(),
                  "ipv6: [2001:db8:1::1/64, 2001:db8:1::9/64, 2001:db8:5::1/64]");
    const auto yaml = [&](const std::string& ip, const std::string& source) {
        return ports + R"(rdma:
  jobs:
    - id: 7
      world: 2
      qps:
        - {rank: 1, ip: ")" + ip + R"(", source: ")" + source + R"(", qpn: 17, psn: 0,
           switch_qpn: 0x100, switch_psn: 0, result_addr: 0, result_rkey: 1,
           result_length: 4096}
)";
    };
    auto r = config::load_string(yaml("2001:db8:1::2", "2001:db8:1::9"), "t.yaml");
    ASSERT_TRUE(r.ok()) << r.error_text();
    const fr::JobConfig& job = fr::rdma_of(*r.config)->jobs.at(0);
    fr::QpParams p = fr::qp_params(*r.config, job, job.qps.at(0));
    EXPECT_EQ(net::Ipv6Addr{p.switch_ip6}.str(), "2001:db8:1::9") << "the QP's source";
    EXPECT_NE(fr::section_hooks().to_json(fr::rdma_of(*r.config))
                  .find("\"source\":\"2001:db8:1::9\""),
              std::string::npos)
        << "GET /api/v1/config shows it";
    fr::QpConfig no_source = job.qps.at(0);
    no_source.source6.reset();
    p = fr::qp_params(*r.config, job, no_source);
    EXPECT_EQ(net::Ipv6Addr{p.switch_ip6}.str(), "2001:db8:1::1") << "the first on the prefix";
    EXPECT_FALSE(fr::same_qp(no_source, job.qps.at(0))) << "another source is another QP";

    // The `source` value is line 16, column 50 (45 after an IPv4 ip).
    r = config::load_string(yaml("2001:db8:1::2", "2001:db8:1::7"), "t.yaml");
    EXPECT_NE(r.error_text().find("t.yaml:16:50: source 2001:db8:1::7 is no IPv6 address of a "
                                  "port whose prefix holds the worker 2001:db8:1::2"),
              std::string::npos)
        << r.error_text();
    r = config::load_string(yaml("2001:db8:1::2", "2001:db8:5::1"), "t.yaml");
    EXPECT_NE(r.error_text().find("t.yaml:16:50: source 2001:db8:5::1 is no IPv6 address"),
              std::string::npos)
        << "a port's address on another prefix: " << r.error_text();
    r = config::load_string(yaml("10.0.1.2", "2001:db8:1::9"), "t.yaml");
    EXPECT_NE(r.error_text().find("t.yaml:16:45: source 2001:db8:1::9 is an IPv6 address for "
                                  "the IPv4 worker 10.0.1.2; expected one of the switch's IPv4 "
                                  "addresses"),
              std::string::npos)
        << r.error_text();
    r = config::load_string(yaml("2001:db8:1::2", "10.0.1.1"), "t.yaml");
    EXPECT_NE(r.error_text().find("t.yaml:16:50: source 10.0.1.1 is an IPv4 address for the "
                                  "IPv6 worker 2001:db8:1::2; expected one of the switch's IPv6 "
                                  "addresses"),
              std::string::npos)
        << r.error_text();

    // The connect body takes it too.
    const fr::ConnectParse c = fr::parse_connect(
        R"({"rank": 1, "qpn": 17, "psn": 5, "ip": "2001:db8:1::2", "source": "2001:db8:1::9",
            "pmtu": 1024, "result_addr": 0, "result_rkey": 1, "result_length": 4096,
            "chunk_bytes": 1024, "window": 64, "dtype": "fp32", "op": "sum", "world": 2})",
        "request");
    ASSERT_TRUE(c.request.has_value());
    ASSERT_TRUE(c.request->qp.source6.has_value());
    EXPECT_EQ(c.request->qp.source6->str(), "2001:db8:1::9");

    // A connected QP whose source leaves the port ends at a reload, with the reason.
    r = config::load_string(yaml("2001:db8:1::2", "2001:db8:1::9"), "t.yaml");
    ASSERT_TRUE(r.ok()) << r.error_text();
    {
        auto rdma = std::make_shared<fr::RdmaConfig>(*fr::rdma_of(*r.config));
        rdma->jobs.at(0).qps.at(0).from_api = true;
        r.config->sections[fr::kSectionKey] = rdma;
    }
    auto next = config::load_string(kPortsYaml + "rdma:\n  jobs:\n    - id: 7\n      world: 2\n",
                                    "file.yaml");
    ASSERT_TRUE(next.ok()) << next.error_text();
    std::vector<std::string> ended;
    fr::carry_connected_qps(*r.config, *next.config, ended);
    ASSERT_EQ(ended.size(), 1u);
    EXPECT_EQ(ended[0], "job 7 rank 1: its source address is not on its worker's prefix in the "
                        "new config");
}

}  // namespace
}  // namespace ina::test
