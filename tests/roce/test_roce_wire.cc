// SPDX-License-Identifier: Apache-2.0
// RoCEv2 codec and ICRC against independent bytes: the vectors of reference/rocev2.md §2 (a CNP
// captured on a ConnectX-4 Lx, scapy's UC SEND_ONLY, frames derived by the recipe and decoded
// by tshark) and 48 frames Linux rdma_rxe sent (tests/data/rxe-rocev2-sample.pcap).
#include <gtest/gtest.h>

#include <cstdio>
#include <string>
#include <vector>

#include "pcap_frames.h"
#include "rocev2_vectors.h"
#include "roce/icrc.h"
#include "roce/wire.h"

namespace ina::roce {
namespace {

using namespace test_vectors;  // NOLINT: the vectors are this file's subject

ParseResult parse_ip(const Bytes& ip) {
    return parse(ip.data() + kIpv4 + kUdp, ip.size() - kIpv4 - kUdp);
}

TEST(RoceIcrc, ReferenceVectors) {
    const Bytes cnp_ip(kCnpFrame.begin() + 14, kCnpFrame.end());
    for (const Bytes* ip : {&cnp_ip, &kUcSend, &kAck, &kNak, &kWrite}) {
        EXPECT_EQ(icrc(ip->data(), ip->size()), read_icrc(ip->data() + ip->size()));
    }
    EXPECT_EQ(icrc(cnp_ip.data(), cnp_ip.size()), 0x2a00fd82u) << "zlib.crc32 of the masked CNP";
    EXPECT_EQ(read_icrc(kUcSend.data() + kUcSend.size()), 0xf353f378u)
        << "sent least-significant byte first: 78 f3 53 f3";
}

TEST(RoceIcrc, MaskedFieldsDoNotCountEverythingElseDoes) {
    Bytes w = kWrite;
    const uint32_t good = icrc(w.data(), w.size());
    // Masked: TOS/ECN, TTL, IPv4 checksum, UDP checksum, FECN/BECN byte.
    for (size_t at : {size_t{1}, size_t{8}, size_t{10}, size_t{11}, kIpv4 + 6, kIpv4 + kUdp + 4}) {
        Bytes v = w;
        v[at] ^= 0x5A;
        EXPECT_EQ(icrc(v.data(), v.size()), good) << "byte " << at << " is masked";
    }
    // Covered: every other byte before the ICRC.
    for (size_t at = 0; at + kIcrcBytes < w.size(); ++at) {
        if (at == 1 || at == 8 || at == 10 || at == 11 || at == kIpv4 + 6 || at == kIpv4 + 7 ||
            at == kIpv4 + kUdp + 4) {
            continue;
        }
        Bytes v = w;
        v[at] ^= 0x01;
        EXPECT_NE(icrc(v.data(), v.size()), good) << "byte " << at << " is covered";
    }
}

TEST(RoceIcrc, NotRoce) {
    EXPECT_EQ(icrc(kAck.data(), 20), 0u) << "too short";
    Bytes v6 = kAck;
    v6[0] = 0x75;  // version 7
    EXPECT_EQ(icrc(v6.data(), v6.size()), 0u);
    Bytes short_ihl = kAck;
    short_ihl[0] = 0x44;
    EXPECT_EQ(icrc(short_ihl.data(), short_ihl.size()), 0u);
}

TEST(RoceWire, ParsesTheVectors) {
    const Bytes cnp_ip(kCnpFrame.begin() + 14, kCnpFrame.end());
    auto r = parse_ip(cnp_ip);
    ASSERT_TRUE(r.packet) << to_string(r.error);
    EXPECT_EQ(r.packet->bth.opcode, op::kCnp);
    EXPECT_TRUE(r.packet->bth.becn);
    EXPECT_EQ(r.packet->bth.dest_qp, 0x118u);
    EXPECT_EQ(r.packet->payload_bytes, 0u);
    EXPECT_EQ(r.packet->header_bytes, kBthBytes + kCnpPadBytes);

    r = parse_ip(kUcSend);
    ASSERT_TRUE(r.packet) << to_string(r.error);
    EXPECT_EQ(r.packet->bth.opcode, op::kUc | op::kSendOnly);
    EXPECT_TRUE(r.packet->bth.mig_req);
    EXPECT_EQ(r.packet->bth.pad, 2);
    EXPECT_EQ(r.packet->bth.psn, 0xCF1710u);
    EXPECT_EQ(r.packet->bth.dest_qp, 0xD3u);
    EXPECT_EQ(r.packet->payload_bytes, 18u);

    r = parse_ip(kAck);
    ASSERT_TRUE(r.packet);
    EXPECT_EQ(r.packet->bth.opcode, op::kAcknowledge);
    EXPECT_EQ(r.packet->aeth.syndrome, aeth::kAckUnlimited);
    EXPECT_EQ(aeth::kind(r.packet->aeth.syndrome), aeth::Kind::ack);
    EXPECT_EQ(r.packet->aeth.msn, 5u);
    EXPECT_EQ(r.packet->bth.psn, 0x100u);
    r = parse_ip(kNak);
    ASSERT_TRUE(r.packet);
    EXPECT_EQ(aeth::kind(r.packet->aeth.syndrome), aeth::Kind::nak);
    EXPECT_EQ(r.packet->aeth.syndrome, aeth::kNakPsnSequence);

    r = parse_ip(kWrite);
    ASSERT_TRUE(r.packet);
    EXPECT_EQ(r.packet->bth.opcode, op::kWriteOnly);
    EXPECT_TRUE(r.packet->bth.ack_req);
    EXPECT_EQ(r.packet->reth.va, 0x7f0000001000u);
    EXPECT_EQ(r.packet->reth.rkey, 0x1234u);
    EXPECT_EQ(r.packet->reth.dma_len, 16u);
    EXPECT_EQ(r.packet->payload_bytes, 16u);
    EXPECT_EQ(r.packet->icrc, read_icrc(kWrite.data() + kWrite.size()));
}

TEST(RoceWire, BuildsTheVectorsHeaders) {
    // ACK: BTH + AETH as the vector has them.
    uint8_t b[kBthBytes + kAethBytes];
    Bth bth;
    bth.opcode = op::kAcknowledge;
    bth.dest_qp = 0x11;
    bth.psn = 0x100;
    write_bth(b, bth);
    write_aeth(b + kBthBytes, Aeth{aeth::kAckUnlimited, 5});
    EXPECT_EQ(Bytes(b, b + sizeof b), Bytes(kAck.begin() + 28, kAck.begin() + 44));
    // WRITE_ONLY: BTH (A set) + RETH.
    uint8_t w[kBthBytes + kRethBytes];
    bth = {};
    bth.opcode = op::kWriteOnly;
    bth.dest_qp = 0x22;
    bth.ack_req = true;
    bth.psn = 0x200;
    write_bth(w, bth);
    write_reth(w + kBthBytes, Reth{0x7f0000001000, 0x1234, 16});
    EXPECT_EQ(Bytes(w, w + sizeof w), Bytes(kWrite.begin() + 28, kWrite.begin() + 56));
}

TEST(RoceWire, MalformedInputGivesItsReasonAndNeverOverreads) {
    // Every truncation of every vector parses or fails without reading past `len` (run under
    // ASan this also proves the bound); lengths short of the opcode's headers are `truncated`.
    for (const Bytes* ip : {&kUcSend, &kAck, &kNak, &kWrite}) {
        const Bytes roce(ip->begin() + kIpv4 + kUdp, ip->end());
        for (size_t len = 0; len < roce.size(); ++len) {
            const Bytes cut(roce.begin(), roce.begin() + static_cast<long>(len));
            const auto r = parse(cut.data(), cut.size());
            const auto info = opcode_info(roce[0]);
            if (len < kBthBytes + ext_bytes(info.ext) + kIcrcBytes) {
                EXPECT_FALSE(r.packet) << "len " << len;
                EXPECT_EQ(r.error, ParseError::truncated) << "len " << len;
            }
        }
    }
    Bytes v(kAck.begin() + 28, kAck.end());
    v[1] = 0x01;  // TVer 1
    EXPECT_EQ(parse(v.data(), v.size()).error, ParseError::bad_tver);
    v = Bytes(kAck.begin() + 28, kAck.end());
    v[0] = 0x1F;  // RC opcode 0x1F: reserved
    EXPECT_EQ(parse(v.data(), v.size()).error, ParseError::unknown_opcode);
    v[0] = 0x2C;  // UC READ REQUEST does not exist
    EXPECT_EQ(parse(v.data(), v.size()).error, ParseError::unknown_opcode);
    v = Bytes(kAck.begin() + 28, kAck.end());
    v.insert(v.end() - 4, {0, 0, 0, 0});  // an ACK carries no payload
    EXPECT_EQ(parse(v.data(), v.size()).error, ParseError::bad_length);
    v = Bytes(kWrite.begin() + 28, kWrite.end());
    v.erase(v.begin() + kBthBytes + kRethBytes, v.end() - 4);  // no payload ...
    v[1] = 0x30;                                               // ... but PadCnt 3
    EXPECT_EQ(parse(v.data(), v.size()).error, ParseError::bad_pad);
}

TEST(RoceWire, PsnSerialArithmetic) {
    EXPECT_EQ(psn_diff(5, 3), 2);
    EXPECT_EQ(psn_diff(3, 5), -2);
    EXPECT_EQ(psn_diff(0, 0xFFFFFF), 1) << "wraps at 2^24";
    EXPECT_EQ(psn_diff(0xFFFFFF, 0), -1);
    EXPECT_EQ(psn_add(0xFFFFFE, 3), 1u);
}

// The rxe capture's IPv4 packets (Ethernet stripped).
std::vector<Bytes> rxe_frames() {
    std::vector<Bytes> out;
    for (const auto& f : test::read_pcap_frames(INA_TEST_DATA "/rxe-rocev2-sample.pcap")) {
        out.emplace_back(f.begin() + 14, f.end());
    }
    return out;
}

TEST(RoceRxe, EveryFrameLinuxSentParsesAndItsIcrcVerifies) {
    const auto frames = rxe_frames();
    ASSERT_EQ(frames.size(), 48u) << "tests/data/rxe-rocev2-sample.pcap";
    int opcodes[256] = {};
    for (size_t i = 0; i < frames.size(); ++i) {
        const Bytes& ip = frames[i];
        const size_t total = static_cast<size_t>(ip[2]) << 8 | ip[3];
        ASSERT_LE(total, ip.size());
        const auto r = parse(ip.data() + kIpv4 + kUdp, total - kIpv4 - kUdp);
        ASSERT_TRUE(r.packet) << "frame " << i << ": " << to_string(r.error);
        ++opcodes[r.packet->bth.opcode];
        EXPECT_EQ(icrc(ip.data(), total), r.packet->icrc) << "frame " << i;
        // One flipped payload or header bit is caught.
        Bytes bad(ip.begin(), ip.begin() + static_cast<long>(total));
        bad[kIpv4 + kUdp + 9] ^= 0x01;  // a PSN bit
        EXPECT_NE(icrc(bad.data(), bad.size()), r.packet->icrc) << "frame " << i;
        // Re-encoding the parsed BTH gives the same 12 bytes.
        uint8_t bth[kBthBytes];
        write_bth(bth, r.packet->bth);
        EXPECT_EQ(Bytes(bth, bth + kBthBytes),
                  Bytes(ip.begin() + kIpv4 + kUdp, ip.begin() + kIpv4 + kUdp + kBthBytes))
            << "frame " << i;
    }
    // 4 frames each of RC SEND F/M/L/ONLY, ACK, WRITE ONLY, READ REQ/RESP ONLY, UC SEND F/M/L
    // and UD SEND ONLY (rdma_cm MADs).
    for (int code : {0x00, 0x01, 0x02, 0x04, 0x11, 0x0A, 0x0C, 0x10, 0x20, 0x21, 0x22, 0x64}) {
        EXPECT_EQ(opcodes[code], 4) << "opcode " << code;
    }
}

}  // namespace
}  // namespace ina::roce
