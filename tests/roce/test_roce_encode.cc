// SPDX-License-Identifier: Apache-2.0
// The RC endpoint's encoders (src/roce/encode.h) byte-exact against reference/rocev2.md's
// vectors (a) CNP and (c) ACK, NAK-sequence, WRITE ONLY; and the requester and responder
// talking to each other through those encoders and parse() over a link that loses, duplicates
// and reorders packets both ways: every message lands exactly once, byte for byte.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <random>
#include <vector>

#include "rocev2_vectors.h"
#include "roce/cnp.h"
#include "roce/encode.h"
#include "roce/icrc.h"

namespace ina::roce {
namespace {

using namespace test_vectors;

constexpr uint32_t ip(uint8_t a, uint8_t b, uint8_t c, uint8_t d) {
    return uint32_t{a} << 24 | uint32_t{b} << 16 | uint32_t{c} << 8 | d;
}

Ipv4Path vector_c_path(uint32_t src, uint32_t dst, uint16_t sport, uint32_t qp) {
    Ipv4Path p;
    p.src_ip = src;
    p.dst_ip = dst;
    p.src_port = sport;
    p.tos = 0x02;
    p.ttl = 64;
    p.dest_qp = qp;
    return p;
}

TEST(RoceEncode, AckAndNakAreVectorC) {
    const Ipv4Path path = vector_c_path(ip(10, 0, 0, 2), ip(10, 0, 0, 1), 0xC001, 0x11);
    uint8_t buf[128];
    size_t n = encode_ack(buf, sizeof buf, path, 0, Reply{aeth::kAckUnlimited, 0x100, 5});
    EXPECT_EQ(Bytes(buf, buf + n), kAck);
    n = encode_ack(buf, sizeof buf, path, 0, Reply{aeth::kNakPsnSequence, 0x100, 5});
    EXPECT_EQ(Bytes(buf, buf + n), kNak);
}

TEST(RoceEncode, WriteOnlyIsVectorC) {
    const Ipv4Path path = vector_c_path(ip(10, 0, 0, 1), ip(10, 0, 0, 2), 0xC002, 0x22);
    Transmit tx;
    tx.opcode = op::kWriteOnly;
    tx.psn = 0x200;
    tx.ack_req = true;
    tx.has_reth = true;
    tx.reth = {0x7f0000001000, 0x1234, 16};
    tx.length = 16;
    const uint8_t payload[16] = {0x3f, 0x80, 0, 0, 0x40, 0, 0, 0, 0x40, 0x40, 0, 0, 0x40, 0x80, 0, 0};
    uint8_t buf[256];
    const size_t n = encode_write(buf, sizeof buf, path, 0, tx, payload);
    EXPECT_EQ(Bytes(buf, buf + n), kWrite);
}

TEST(RoceEncode, CnpIsVectorA) {
    Ipv4Path path;
    path.src_ip = ip(10, 0, 17, 1);
    path.dst_ip = ip(10, 0, 18, 1);
    path.src_port = 0;
    path.tos = 0xC2;  // CNP_DSCP 48, ECN 10, as the ConnectX-4 Lx sent it
    path.ttl = 64;
    path.dest_qp = 0x118;
    const uint8_t dst[6] = {0xe4, 0x1d, 0x2d, 0xab, 0x2b, 0xc2};
    const uint8_t src[6] = {0x7c, 0xfe, 0x90, 0x64, 0x3b, 0x32};
    uint8_t buf[128];
    size_t n = write_ethernet(buf, sizeof buf, dst, src);
    ASSERT_EQ(n, kEthernetBytes);
    n += encode_cnp(buf + n, sizeof buf - n, path, 0x718c);
    EXPECT_EQ(Bytes(buf, buf + n), kCnpFrame);
}

// The packet path's frame encoders (ICRC in one pass over the frame) give the reference
// vectors' bytes behind the Ethernet header, their ICRC is what the const path sums, and a
// buffer one byte short gets nothing.
TEST(RoceEncode, FrameEncodersAreTheVectorsBehindAnEthernetHeader) {
    const uint8_t dst[6] = {0xe4, 0x1d, 0x2d, 0xab, 0x2b, 0xc2};
    const uint8_t src[6] = {0x7c, 0xfe, 0x90, 0x64, 0x3b, 0x32};
    const Ipv4Path path = vector_c_path(ip(10, 0, 0, 2), ip(10, 0, 0, 1), 0xC001, 0x11);
    for (const uint8_t syndrome : {aeth::kAckUnlimited, aeth::kNakPsnSequence}) {
        uint8_t frame[128];
        const size_t n = encode_ack_frame(frame, sizeof frame, dst, src, path, 0,
                                          Reply{syndrome, 0x100, 5});
        ASSERT_EQ(n, kEthernetBytes + kAck.size());
        EXPECT_EQ(Bytes(frame, frame + 6), Bytes(dst, dst + 6));
        EXPECT_EQ(Bytes(frame + 6, frame + 12), Bytes(src, src + 6));
        EXPECT_EQ(Bytes(frame + kEthernetBytes, frame + n),
                  syndrome == aeth::kAckUnlimited ? kAck : kNak);
        EXPECT_EQ(icrc(frame + kEthernetBytes, n - kEthernetBytes), read_icrc(frame + n));
        uint8_t small[128];
        EXPECT_EQ(encode_ack_frame(small, n - 1, dst, src, path, 0, Reply{syndrome, 0x100, 5}),
                  0u);
    }
    Ipv4Path cnp_path;
    cnp_path.src_ip = ip(10, 0, 17, 1);
    cnp_path.dst_ip = ip(10, 0, 18, 1);
    cnp_path.src_port = 0;
    cnp_path.tos = 0xC2;
    cnp_path.ttl = 64;
    cnp_path.dest_qp = 0x118;
    uint8_t frame[128];
    const size_t n = encode_cnp_frame(frame, sizeof frame, dst, src, cnp_path, 0x718c);
    EXPECT_EQ(Bytes(frame, frame + n), kCnpFrame);
    EXPECT_EQ(encode_cnp_frame(frame, n - 1, dst, src, cnp_path, 0x718c), 0u);
}

// Notification point: CE on a contribution earns its QP one CNP per interval, no more.
TEST(RoceCnp, CeEarnsOneCnpPerIntervalPerQp) {
    EXPECT_TRUE(ce_marked(0x03));
    EXPECT_TRUE(ce_marked(0xC3));
    EXPECT_FALSE(ce_marked(0x02)) << "ECT(0)";
    EXPECT_FALSE(ce_marked(0x01)) << "ECT(1)";
    EXPECT_FALSE(ce_marked(0xC2));
    CnpLimiter qp1;
    CnpLimiter qp2;
    EXPECT_TRUE(qp1.on_ce(0)) << "the first CE at time 0 counts";
    EXPECT_FALSE(qp1.on_ce(1));
    EXPECT_FALSE(qp1.on_ce(CnpLimiter::kDefaultIntervalNs - 1));
    EXPECT_TRUE(qp2.on_ce(10)) << "limited per QP";
    EXPECT_TRUE(qp1.on_ce(CnpLimiter::kDefaultIntervalNs));
    EXPECT_FALSE(qp1.on_ce(CnpLimiter::kDefaultIntervalNs + 5));
    EXPECT_EQ(qp1.sent(), 2u);
    EXPECT_EQ(qp1.suppressed(), 3u);
    // A steady CE stream for 1 ms: 250 CNPs at 4 us.
    CnpLimiter busy;
    for (uint64_t t = 0; t < 1000000; t += 100) {
        busy.on_ce(t);
    }
    EXPECT_EQ(busy.sent(), 250u);
}

TEST(RoceEncode, TooSmallABufferWritesNothing) {
    const Ipv4Path path = vector_c_path(ip(10, 0, 0, 1), ip(10, 0, 0, 2), 0xC002, 0x22);
    Transmit tx;
    tx.opcode = op::kWriteOnlyImm;
    tx.has_reth = tx.has_imm = true;
    tx.length = 64;
    const uint8_t payload[64] = {};
    for (size_t cap = 0; cap < 28 + 12 + 16 + 4 + 64 + 4; ++cap) {
        std::vector<uint8_t> buf(cap + 1, 0xEE);
        EXPECT_EQ(encode_write(buf.data(), cap, path, 0, tx, payload), 0u) << cap;
        EXPECT_TRUE(std::all_of(buf.begin(), buf.end(), [](uint8_t b) { return b == 0xEE; })) << cap;
        if (cap < 28 + 12 + 4 + 4) {
            EXPECT_EQ(encode_ack(buf.data(), cap, path, 0, Reply{}), 0u) << cap;
        }
        if (cap < 28 + 12 + 16 + 4) {
            EXPECT_EQ(encode_cnp(buf.data(), cap, path, 0), 0u) << cap;
        }
        if (cap < kEthernetBytes) {
            EXPECT_EQ(write_ethernet(buf.data(), cap, payload, payload), 0u) << cap;
        }
    }
}

// Every WRITE opcode, odd lengths (pad 1..3), immediate: parse() reads back what was encoded
// and the ICRC verifies.
TEST(RoceEncode, WritesParseBackWithPadAndImmediate) {
    const Ipv4Path path = vector_c_path(ip(192, 168, 1, 9), ip(192, 168, 1, 7), 0xD123, 0xABCDE);
    for (const uint8_t opcode : {op::kWriteFirst, op::kWriteMiddle, op::kWriteLast, op::kWriteLastImm,
                                 op::kWriteOnly, op::kWriteOnlyImm}) {
        for (const uint32_t len : {0u, 1u, 2u, 3u, 4u, 257u, 1024u}) {
            Transmit tx;
            tx.opcode = opcode;
            tx.psn = 0xFFFFFF;
            tx.ack_req = (len & 1) != 0;
            tx.has_reth = opcode == op::kWriteFirst || opcode == op::kWriteOnly ||
                          opcode == op::kWriteOnlyImm;
            tx.has_imm = opcode == op::kWriteLastImm || opcode == op::kWriteOnlyImm;
            tx.reth = {0x123456789A, 0xFEDCBA98, 99999};
            tx.imm = 0x01020304;
            tx.length = len;
            std::vector<uint8_t> payload(len);
            for (uint32_t i = 0; i < len; ++i) {
                payload[i] = static_cast<uint8_t>(i * 7 + 1);
            }
            std::vector<uint8_t> buf(2048, 0xEE);
            const size_t n = encode_write(buf.data(), buf.size(), path, 77, tx, payload.data());
            ASSERT_NE(n, 0u);
            ASSERT_EQ(n % 4, 0u) << "pad to 4 bytes";
            const auto r = parse(buf.data() + 28, n - 28);
            ASSERT_TRUE(r.packet) << to_string(r.error);
            const Packet& p = *r.packet;
            EXPECT_EQ(p.bth.opcode, opcode);
            EXPECT_EQ(p.bth.psn, 0xFFFFFFu);
            EXPECT_EQ(p.bth.dest_qp, 0xABCDEu);
            EXPECT_EQ(p.bth.ack_req, tx.ack_req);
            EXPECT_EQ(p.bth.pad, (0u - len) & 3u);
            EXPECT_EQ(p.payload_bytes, len);
            if (tx.has_reth) {
                EXPECT_EQ(p.reth.va, tx.reth.va);
                EXPECT_EQ(p.reth.rkey, tx.reth.rkey);
                EXPECT_EQ(p.reth.dma_len, tx.reth.dma_len);
            }
            if (tx.has_imm) {
                EXPECT_EQ(p.imm, 0x01020304u);
            }
            EXPECT_EQ(Bytes(buf.begin() + 28 + p.header_bytes,
                            buf.begin() + 28 + p.header_bytes + len),
                      payload);
            EXPECT_EQ(icrc(buf.data(), n), p.icrc);
            EXPECT_EQ(buf[n], 0xEE) << "wrote past the packet";
        }
    }
}

// IPv6 underlay: the frames parse back, the ICRC verifies, and the fields a router or ECN
// marker rewrites (traffic class, flow label, hop limit) are outside it.
// The per-QP ACK template writes what encode_ack_frame writes, byte for byte, for every reply:
// every identification (both bytes move the ICRC), PSNs and MSNs across their 24 bits and past
// them (masked), every kind of syndrome; over IPv4 and IPv6. The ICRC is checked by the const
// path as well, so a template and an encoder wrong the same way would still fail.
TEST(RoceEncode, AckTemplateIsTheEncoderByteForByte) {
    const uint8_t dst[6] = {0xe4, 0x1d, 0x2d, 0xab, 0x2b, 0xc2};
    const uint8_t src[6] = {0x7c, 0xfe, 0x90, 0x64, 0x3b, 0x32};
    const Ipv4Path path = vector_c_path(ip(10, 0, 0, 2), ip(10, 0, 0, 1), 0xC001, 0x11);
    Ipv6Path path6;
    path6.src_ip = {0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1};
    path6.dst_ip = {0xfe, 0x80, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2};
    path6.flow_label = 0xABCDE;
    path6.dest_qp = 0x33;
    const AckFrameTemplate t4(dst, src, path);
    const AckFrameTemplate t6(dst, src, path6);
    std::mt19937 g(11);
    const uint8_t syndromes[] = {aeth::kAckUnlimited, 0x00, aeth::kRnrNak | 0x0E,
                                 aeth::kNakPsnSequence, aeth::kNakInvalidRequest,
                                 aeth::kNakRemoteAccess};
    for (uint32_t i = 0; i < 70000; ++i) {
        // The first 65536 replies take every identification; the rest random ones.
        const auto id = static_cast<uint16_t>(i < 65536 ? i : g());
        const Reply r{syndromes[g() % 6], static_cast<uint32_t>(g()), static_cast<uint32_t>(g())};
        uint8_t want[128];
        uint8_t got[128];
        std::memset(got, 0xEE, sizeof got);
        const size_t n = encode_ack_frame(want, sizeof want, dst, src, path, id, r);
        ASSERT_EQ(t4.write(got, sizeof got, id, r), n);
        ASSERT_EQ(Bytes(got, got + n), Bytes(want, want + n)) << "id " << id;
        if (i % 1024 == 0) {
            ASSERT_EQ(icrc(got + kEthernetBytes, n - kEthernetBytes), read_icrc(got + n));
            const size_t n6 = encode_ack_frame(want, sizeof want, dst, src, path6, r);
            ASSERT_EQ(t6.write(got, sizeof got, id, r), n6);
            ASSERT_EQ(Bytes(got, got + n6), Bytes(want, want + n6));
            ASSERT_EQ(icrc(got + kEthernetBytes, n6 - kEthernetBytes), read_icrc(got + n6));
        }
    }
    uint8_t small[128];
    EXPECT_EQ(t4.write(small, t4.bytes() - 1, 1, Reply{}), 0u);
    EXPECT_EQ(AckFrameTemplate{}.write(small, sizeof small, 1, Reply{}), 0u) << "empty";
}

TEST(RoceEncode, Ipv6FramesParseBackAndTheirIcrcMasksTheVariantFields) {
    Ipv6Path path;
    path.src_ip = {0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1};
    path.dst_ip = {0xfe, 0x80, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2};
    path.src_port = 0xC123;
    path.traffic_class = 0x02;
    path.flow_label = 0xABCDE;
    path.hop_limit = 64;
    path.dest_qp = 0x33;
    uint8_t frame[2048];
    Transmit tx;
    tx.opcode = op::kWriteOnlyImm;
    tx.psn = 0x123456;
    tx.ack_req = true;
    tx.has_reth = tx.has_imm = true;
    tx.reth = {0x1000, 0x99, 5};
    tx.imm = 0xCAFEF00D;
    tx.length = 5;
    const uint8_t payload[5] = {1, 2, 3, 4, 5};
    const size_t sizes[] = {encode_write(frame, sizeof frame, path, tx, payload),
                            encode_ack(frame, sizeof frame, path, Reply{aeth::kNakPsnSequence, 7, 3}),
                            encode_cnp(frame, sizeof frame, path)};
    EXPECT_EQ(sizes[0], 40u + 8 + 12 + 16 + 4 + 8 + 4);
    EXPECT_EQ(sizes[1], 40u + 8 + 12 + 4 + 4);
    EXPECT_EQ(sizes[2], 40u + 8 + 12 + 16 + 4);
    // The last one built is the CNP; rebuild the WRITE to look at it.
    const size_t n = encode_write(frame, sizeof frame, path, tx, payload);
    EXPECT_EQ(frame[0] >> 4, 6);
    EXPECT_EQ(detail::be16(frame + 4), n - 40) << "payload length";
    EXPECT_EQ(frame[6], 17);
    EXPECT_EQ(frame[7], 64);
    EXPECT_EQ((detail::be32(frame) >> 20) & 0xFF, 0x02u) << "traffic class";
    EXPECT_EQ(detail::be32(frame) & 0xFFFFF, 0xABCDEu) << "flow label";
    EXPECT_EQ(detail::be16(frame + 40 + 2), kUdpPort);
    EXPECT_EQ(detail::be16(frame + 40 + 6), 0) << "UDP checksum";
    const auto r = parse(frame + 48, n - 48);
    ASSERT_TRUE(r.packet) << to_string(r.error);
    EXPECT_EQ(r.packet->bth.opcode, op::kWriteOnlyImm);
    EXPECT_EQ(r.packet->bth.psn, 0x123456u);
    EXPECT_EQ(r.packet->imm, 0xCAFEF00Du);
    EXPECT_EQ(r.packet->payload_bytes, 5u);
    EXPECT_EQ(r.packet->bth.pad, 3);
    const uint32_t crc = icrc(frame, n);
    EXPECT_EQ(crc, r.packet->icrc);
    frame[1] ^= 0xFF;  // traffic class and flow label bits
    frame[3] ^= 0x55;
    frame[7] = 3;      // hop limit
    EXPECT_EQ(icrc(frame, n), crc);
    frame[8] ^= 1;     // the source address is covered
    EXPECT_NE(icrc(frame, n), crc);
    uint8_t eth[kEthernetBytes];
    const uint8_t dst_mac[6] = {0x02, 0, 0, 0, 0, 1};
    const uint8_t src_mac[6] = {0x02, 0, 0, 0, 0, 2};
    ASSERT_EQ(write_ethernet(eth, sizeof eth, dst_mac, src_mac, kEthertypeIpv6), kEthernetBytes);
    EXPECT_EQ(std::memcmp(eth, dst_mac, 6), 0);
    EXPECT_EQ(std::memcmp(eth + 6, src_mac, 6), 0);
    EXPECT_EQ(detail::be16(eth + 12), 0x86DD);
}

TEST(RoceEncode, SourcePortIsPerQpEntropyInTheRoceRange) {
    std::vector<uint16_t> ports;
    for (uint32_t qp = 1; qp < 4096; ++qp) {
        const uint16_t port = source_port_for_qp(qp);
        EXPECT_GE(port, 0xC000);
        EXPECT_EQ(port, source_port_for_qp(qp)) << "stable per QP";
        ports.push_back(port);
    }
    std::sort(ports.begin(), ports.end());
    ports.erase(std::unique(ports.begin(), ports.end()), ports.end());
    EXPECT_GT(ports.size(), 3000u) << "spread over the range";
}

// A link for whole IP packets that drops, duplicates and delays (so reorders) them.
class Link {
public:
    Link(uint32_t seed, double loss, double dup, bool reorder)
        : rng_(seed), loss_(loss), dup_(dup), max_delay_(reorder ? 4000 : 500) {}
    void send(uint64_t now, const uint8_t* p, size_t n) {
        std::uniform_real_distribution<double> u(0, 1);
        if (u(rng_) < loss_) {
            return;
        }
        const int copies = u(rng_) < dup_ ? 2 : 1;
        for (int i = 0; i < copies; ++i) {
            std::uniform_int_distribution<uint64_t> delay(500, max_delay_);
            queue_.push_back({now + delay(rng_), Bytes(p, p + n)});
        }
    }
    // The packets due at `now`, earliest first.
    std::vector<Bytes> due(uint64_t now) {
        std::stable_sort(queue_.begin(), queue_.end(),
                         [](const auto& a, const auto& b) { return a.first < b.first; });
        std::vector<Bytes> out;
        while (!queue_.empty() && queue_.front().first <= now) {
            out.push_back(std::move(queue_.front().second));
            queue_.erase(queue_.begin());
        }
        return out;
    }

private:
    std::mt19937 rng_;
    double loss_;
    double dup_;
    uint64_t max_delay_;
    std::vector<std::pair<uint64_t, Bytes>> queue_;
};

Packet parse_checked(const Bytes& ip_packet) {
    const auto r = parse(ip_packet.data() + 28, ip_packet.size() - 28);
    EXPECT_TRUE(r.packet);
    EXPECT_EQ(icrc(ip_packet.data(), ip_packet.size()), r.packet->icrc);
    return *r.packet;
}

struct LoopbackResult {
    uint64_t completed = 0;
    uint64_t retransmitted = 0;
    bool region_exact = false;
    uint32_t responder_msn = 0;
};

// The switch's requester WRITEs `messages` results into a worker modelled by a Responder; the
// worker stores each executed payload at its region offset, then commits.
LoopbackResult run_loopback(uint32_t seed, double loss, double dup, bool reorder,
                            uint32_t messages, uint32_t initial_psn, double refuse = 0.0) {
    constexpr uint32_t kPmtu = 256;
    constexpr uint64_t kVa = 0x5000000;
    constexpr uint32_t kSlot = 4096;
    RequesterConfig rc;
    rc.initial_psn = initial_psn;
    rc.pmtu = kPmtu;
    rc.timeout = 4;  // 65.5 us
    rc.retry_cnt = 7;
    rc.max_inflight_packets = 32;
    rc.ack_req_every = 8;
    Requester requester(rc);
    ResponderConfig wc;
    wc.initial_psn = initial_psn;
    wc.pmtu = kPmtu;
    wc.region = {kVa, uint64_t{messages} * kSlot, 0x42};
    wc.min_rnr_timer = 1;  // 10 us
    Responder responder(wc);
    responder.post_receives(messages);

    std::mt19937 rng(seed);
    std::vector<Bytes> payloads(messages);
    Bytes expected(uint64_t{messages} * kSlot, 0);
    for (uint32_t m = 0; m < messages; ++m) {
        payloads[m].resize(rng() % kSlot);
        for (auto& b : payloads[m]) {
            b = static_cast<uint8_t>(rng());
        }
        std::copy(payloads[m].begin(), payloads[m].end(), expected.begin() + uint64_t{m} * kSlot);
    }
    Bytes region(expected.size(), 0);
    const Ipv4Path to_worker = vector_c_path(ip(10, 0, 0, 1), ip(10, 0, 0, 2), 0xC005, 0x99);
    const Ipv4Path to_switch = vector_c_path(ip(10, 0, 0, 2), ip(10, 0, 0, 1), 0xC006, 0x77);
    Link forward(seed * 2 + 1, loss, dup, reorder);
    Link backward(seed * 2 + 2, loss, dup, reorder);
    uint32_t posted = 0;
    uint8_t buf[4096];
    for (uint64_t now = 0; now < 2'000'000'000 && requester.completed_messages() < messages &&
                           requester.state() == Requester::State::ready;
         now += 1000) {
        uint64_t seq = 0;
        while (posted < messages &&
               requester.post(WriteRequest{kVa + uint64_t{posted} * kSlot, 0x42,
                                           static_cast<uint32_t>(payloads[posted].size()),
                                           (posted & 1) != 0, posted, posted},
                              seq)) {
            ++posted;
        }
        requester.tick(now);
        Transmit tx;
        for (int burst = 0; burst < 8 && requester.next(now, tx); ++burst) {
            const size_t n = encode_write(buf, sizeof buf, to_worker, 0, tx,
                                          payloads[tx.cookie].data() + tx.offset);
            forward.send(now, buf, n);
        }
        for (const Bytes& f : forward.due(now)) {
            const Packet p = parse_checked(f);
            const Verdict v = responder.receive(p);
            if (v.action == Action::execute &&
                std::uniform_real_distribution<double>(0, 1)(rng) < refuse) {
                const size_t n = encode_ack(buf, sizeof buf, to_switch, 0, responder.refuse());
                backward.send(now, buf, n);
            } else if (v.action == Action::execute) {
                std::memcpy(region.data() + v.where.region_offset, f.data() + 28 + p.header_bytes,
                            v.where.length);
                responder.commit();
            } else if (v.action == Action::reply) {
                const size_t n = encode_ack(buf, sizeof buf, to_switch, 0, v.reply);
                backward.send(now, buf, n);
            }
        }
        Reply ack;
        if (responder.take_ack(ack)) {  // once per burst: coalesced
            const size_t n = encode_ack(buf, sizeof buf, to_switch, 0, ack);
            backward.send(now, buf, n);
        }
        for (const Bytes& f : backward.due(now)) {
            requester.on_response(parse_checked(f), now);
        }
    }
    return {requester.completed_messages(), requester.retransmitted_packets(), region == expected,
            responder.msn()};
}

TEST(RoceLoopback, ReorderingAloneCostsRetransmissionsButNoData) {
    const auto r = run_loopback(9, 0.0, 0.0, true, 100, 5);
    EXPECT_EQ(r.completed, 100u);
    EXPECT_EQ(r.responder_msn, 100u);
    EXPECT_TRUE(r.region_exact);
}

// The worker refuses a fifth of what it could store (RNR NAK, as the switch does when it has
// no free slot): everything still lands once, and the retry budget of 7 never runs out.
TEST(RoceLoopback, BackPressureByRnrStillDeliversExactlyOnce) {
    for (uint32_t seed = 20; seed < 23; ++seed) {
        const auto r = run_loopback(seed, 0.02, 0.0, true, 120, seed * 1000, 0.2);
        EXPECT_EQ(r.completed, 120u) << "seed " << seed;
        EXPECT_EQ(r.responder_msn, 120u) << "seed " << seed;
        EXPECT_TRUE(r.region_exact) << "seed " << seed;
    }
}

TEST(RoceLoopback, LosslessDeliversEverythingOnceWithoutRetransmission) {
    const auto r = run_loopback(1, 0.0, 0.0, false, 200, 1000);
    EXPECT_EQ(r.completed, 200u);
    EXPECT_EQ(r.responder_msn, 200u);
    EXPECT_EQ(r.retransmitted, 0u);
    EXPECT_TRUE(r.region_exact);
}

TEST(RoceLoopback, LossDuplicationAndReorderingStillDeliverExactlyOnce) {
    for (uint32_t seed = 1; seed <= 6; ++seed) {
        const auto r = run_loopback(seed, 0.05, 0.05, true, 150, 0xFFFF00 + seed * 16);
        EXPECT_EQ(r.completed, 150u) << "seed " << seed;
        EXPECT_EQ(r.responder_msn, 150u) << "seed " << seed << ": each message completed once";
        EXPECT_GT(r.retransmitted, 0u) << "seed " << seed << ": loss was recovered";
        EXPECT_TRUE(r.region_exact) << "seed " << seed;
    }
}

}  // namespace
}  // namespace ina::roce
