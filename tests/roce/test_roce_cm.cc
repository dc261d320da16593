// SPDX-License-Identifier: Apache-2.0
// The RDMA CM MAD codec (src/roce/cm.h) against the connection Linux rdma_cm set up in
// tests/data/rxe-rocev2-sample.pcap (REQ, REP, RTU, DREQ between 10.77.0.2 and 10.77.0.1): every
// field decodes to what the rest of the capture confirms (the RC QP 0x12 and the PSNs it then
// uses, the GIDs, the rdma_cm port), and each MAD and each whole UD packet re-encodes to the
// captured bytes, ICRC included. REJ and DREP, absent from the capture, round-trip with their
// fields at the documented offsets.
#include <gtest/gtest.h>

#include <vector>

#include "pcap_frames.h"
#include "roce/cm.h"
#include "roce/wire.h"

namespace ina::roce::cm {
namespace {

using Bytes = std::vector<uint8_t>;
constexpr size_t kEth = 14, kIp = 20, kUdp = 8;
constexpr size_t kMadAt = kEth + kIp + kUdp + kBthBytes + kDethBytes;

constexpr uint32_t ip(uint8_t a, uint8_t b, uint8_t c, uint8_t d) {
    return uint32_t{a} << 24 | uint32_t{b} << 16 | uint32_t{c} << 8 | d;
}

struct Capture {
    std::vector<Bytes> frames = test::read_pcap_frames(INA_TEST_DATA "/rxe-rocev2-sample.pcap");
    // The CM exchange: frames 16 (REQ), 17 (REP), 18 (RTU), 35 (DREQ).
    const Bytes& at(size_t i) const { return frames.at(i); }
};

Message parse_frame(const Bytes& f) {
    Message m;
    CmError e = CmError::count;
    EXPECT_TRUE(parse(f.data() + kMadAt, f.size() - kMadAt, m, e)) << static_cast<int>(e);
    return m;
}

// The capture's frame `f` rebuilt by encode_packet from its own IP/UDP/BTH fields and the
// parsed MAD.
Bytes reencode(const Bytes& f, const Message& m) {
    const uint8_t* l3 = f.data() + kEth;
    Ipv4Path path;
    path.src_ip = detail::be32(l3 + 12);
    path.dst_ip = detail::be32(l3 + 16);
    path.tos = l3[1];
    path.ttl = l3[8];
    path.src_port = detail::be16(l3 + kIp);
    const Bth bth = read_bth(l3 + kIp + kUdp);
    path.dest_qp = bth.dest_qp;
    std::vector<uint8_t> out(1024);
    const size_t n = encode_packet(out.data(), out.size(), path, detail::be16(l3 + 4), bth.psn, m);
    out.resize(n);
    return out;
}

TEST(RoceCm, CaptureHoldsTheExchange) {
    const Capture c;
    ASSERT_EQ(c.frames.size(), 48u);
    for (const size_t i : {16u, 17u, 18u, 35u}) {
        const auto r = roce::parse(c.at(i).data() + kEth + kIp + kUdp,
                                   c.at(i).size() - kEth - kIp - kUdp);
        ASSERT_TRUE(r.packet) << i;
        EXPECT_EQ(r.packet->bth.opcode, op::kUdSendOnly) << i;
        EXPECT_EQ(r.packet->bth.dest_qp, kCmQpn) << i;
        EXPECT_EQ(r.packet->deth.qkey, kQp1Qkey) << i;
        EXPECT_EQ(r.packet->deth.src_qp, kCmQpn) << i;
        EXPECT_EQ(r.packet->payload_bytes, kMadBytes) << i;
    }
}

TEST(RoceCm, ReqDecodesToWhatTheConnectionThenUses) {
    const Capture c;
    const Message m = parse_frame(c.at(16));
    EXPECT_EQ(m.header.attr_id, static_cast<uint16_t>(Attr::req));
    EXPECT_EQ(m.header.method, kMethodSend);
    EXPECT_EQ(m.header.transaction_id, 0x00000002f4a7677dull);
    const Req& r = m.req;
    EXPECT_EQ(r.local_comm_id, 0x7d67a7f4u);
    EXPECT_EQ(r.service_id, service_id_for_tcp_port(0x1c06));
    EXPECT_EQ(r.local_ca_guid, 0x505400fffe770002ull);
    EXPECT_EQ(r.local_qpn, 0x12u) << "the RC QP the data frames use";
    EXPECT_EQ(r.responder_resources, 1);
    EXPECT_EQ(r.initiator_depth, 1);
    EXPECT_EQ(r.transport_service_type, 0) << "RC";
    EXPECT_EQ(r.remote_cm_response_timeout, 20);
    EXPECT_EQ(r.local_cm_response_timeout, 20);
    EXPECT_EQ(r.retry_count, 7);
    EXPECT_EQ(r.rnr_retry_count, 7);
    EXPECT_EQ(r.max_cm_retries, 15);
    EXPECT_EQ(r.pkey, 0xFFFF);
    EXPECT_EQ(r.path_mtu, 3) << "IBV_MTU_1024: the SEND FIRST/MIDDLE frames carry 1024 bytes";
    EXPECT_EQ(r.starting_psn, 0x5d50b2u);
    EXPECT_EQ(r.primary.local_lid, 0xFFFF);
    EXPECT_TRUE(is_ipv4_gid(r.primary.local_gid));
    EXPECT_EQ(gid_ipv4(r.primary.local_gid), ip(10, 77, 0, 2));
    EXPECT_EQ(gid_ipv4(r.primary.remote_gid), ip(10, 77, 0, 1));
    EXPECT_EQ(r.primary.local_gid, ipv4_gid(ip(10, 77, 0, 2)));
    EXPECT_EQ(r.primary.hop_limit, 64);
    EXPECT_EQ(r.primary.local_ack_timeout, 19);
    const CmaHeader cma = parse_cma_header(r.private_data);
    EXPECT_EQ(cma.cma_version, 0);
    EXPECT_EQ(cma.ip_version, 4);
    EXPECT_EQ(gid_ipv4(cma.src), ip(10, 77, 0, 2));
    EXPECT_EQ(gid_ipv4(cma.dst), ip(10, 77, 0, 1));
    EXPECT_NE(cma.port, 0);
    // The PSNs: the passive side (10.77.0.1) sends from the REQ's Starting PSN.
    const Bth read_req_frame = read_bth(c.at(20).data() + kEth + kIp + kUdp);
    EXPECT_EQ(read_req_frame.opcode, op::kReadRequest);
    EXPECT_EQ(read_req_frame.psn, r.starting_psn);
    EXPECT_EQ(detail::be32(c.at(20).data() + kEth + 12), ip(10, 77, 0, 1));
}

TEST(RoceCm, RepRtuDreqDecode) {
    const Capture c;
    Message m = parse_frame(c.at(17));
    EXPECT_EQ(m.header.attr_id, static_cast<uint16_t>(Attr::rep));
    EXPECT_EQ(m.rep.local_comm_id, 0x65330d4bu);
    EXPECT_EQ(m.rep.remote_comm_id, 0x7d67a7f4u) << "the REQ's local ID";
    EXPECT_EQ(m.rep.local_qpn, 0x12u);
    EXPECT_EQ(m.rep.starting_psn, 0xd24ad7u);
    EXPECT_EQ(m.rep.responder_resources, 1);
    EXPECT_EQ(m.rep.initiator_depth, 1);
    EXPECT_EQ(m.rep.target_ack_delay, 15);
    EXPECT_EQ(m.rep.rnr_retry_count, 7);
    EXPECT_EQ(m.rep.local_ca_guid, 0x505400fffe770001ull);
    // The active side (10.77.0.2) sends from the REP's Starting PSN.
    const Bth send = read_bth(c.at(19).data() + kEth + kIp + kUdp);
    EXPECT_EQ(send.psn, m.rep.starting_psn);
    EXPECT_EQ(detail::be32(c.at(19).data() + kEth + 12), ip(10, 77, 0, 2));

    m = parse_frame(c.at(18));
    EXPECT_EQ(m.header.attr_id, static_cast<uint16_t>(Attr::rtu));
    EXPECT_EQ(m.rtu.local_comm_id, 0x7d67a7f4u);
    EXPECT_EQ(m.rtu.remote_comm_id, 0x65330d4bu);

    m = parse_frame(c.at(35));
    EXPECT_EQ(m.header.attr_id, static_cast<uint16_t>(Attr::dreq));
    EXPECT_EQ(m.dreq.local_comm_id, 0x7d67a7f4u);
    EXPECT_EQ(m.dreq.remote_comm_id, 0x65330d4bu);
    EXPECT_EQ(m.dreq.remote_qpn, 0x12u);
}

TEST(RoceCm, EveryCapturedMadAndPacketReencodesIdentically) {
    const Capture c;
    for (const size_t i : {16u, 17u, 18u, 35u}) {
        const Bytes& f = c.at(i);
        const Message m = parse_frame(f);
        uint8_t mad[kMadBytes];
        ASSERT_EQ(build(m, mad, sizeof mad), kMadBytes) << i;
        EXPECT_EQ(Bytes(mad, mad + kMadBytes), Bytes(f.begin() + kMadAt, f.begin() + kMadAt + kMadBytes))
            << "frame " << i;
        EXPECT_EQ(reencode(f, m), Bytes(f.begin() + kEth, f.end())) << "frame " << i;
    }
}

TEST(RoceCm, TheRepBuiltFromTheCapturedReqIsTheCapturedRep) {
    const Capture c;
    const Message req = parse_frame(c.at(16));
    const Message rep = parse_frame(c.at(17));
    RepParams p;
    p.local_comm_id = rep.rep.local_comm_id;
    p.local_qpn = rep.rep.local_qpn;
    p.starting_psn = rep.rep.starting_psn;
    p.local_ca_guid = rep.rep.local_ca_guid;
    p.responder_resources = rep.rep.responder_resources;
    p.initiator_depth = rep.rep.initiator_depth;
    const Message made = make_rep(req, p);
    uint8_t mad[kMadBytes];
    ASSERT_EQ(build(made, mad, sizeof mad), kMadBytes);
    const Bytes& f = c.at(17);
    EXPECT_EQ(Bytes(mad, mad + kMadBytes), Bytes(f.begin() + kMadAt, f.begin() + kMadAt + kMadBytes));
    EXPECT_EQ(reencode(f, made), Bytes(f.begin() + kEth, f.end()));
}

TEST(RoceCm, RejAndDrepAnswerWhatTheyAnswer) {
    const Capture c;
    const Message req = parse_frame(c.at(16));
    Message rej = make_rej(req, kRejInvalidServiceId);
    EXPECT_EQ(rej.header.transaction_id, req.header.transaction_id);
    EXPECT_EQ(rej.header.attr_id, static_cast<uint16_t>(Attr::rej));
    EXPECT_EQ(rej.rej.remote_comm_id, req.req.local_comm_id);
    EXPECT_EQ(rej.rej.reason, kRejInvalidServiceId);
    const Message dreq = parse_frame(c.at(35));
    const Message drep = make_drep(dreq);
    EXPECT_EQ(drep.header.transaction_id, dreq.header.transaction_id);
    EXPECT_EQ(drep.header.attr_id, static_cast<uint16_t>(Attr::drep));
    EXPECT_EQ(drep.drep.local_comm_id, dreq.dreq.remote_comm_id);
    EXPECT_EQ(drep.drep.remote_comm_id, dreq.dreq.local_comm_id);
    uint8_t mad[kMadBytes];
    EXPECT_EQ(build(rej, mad, sizeof mad), kMadBytes);
    EXPECT_EQ(build(drep, mad, sizeof mad), kMadBytes);
}

TEST(RoceCm, RejAndDrepRoundTripAtTheirOffsets) {
    Message m;
    m.header.attr_id = static_cast<uint16_t>(Attr::rej);
    m.header.transaction_id = 0x1122334455667788;
    m.rej.local_comm_id = 0xA1A2A3A4;
    m.rej.remote_comm_id = 0xB1B2B3B4;
    m.rej.message_rejected = 0;  // the REQ
    m.rej.reject_info_length = 5;
    m.rej.reason = 28;           // consumer reject
    m.rej.additional_info[0] = 0xCC;
    m.rej.private_data[147] = 0xDD;
    uint8_t mad[kMadBytes];
    ASSERT_EQ(build(m, mad, sizeof mad), kMadBytes);
    EXPECT_EQ(detail::be16(mad + 16), 0x0012);
    EXPECT_EQ(detail::be32(mad + 24), 0xA1A2A3A4u);
    EXPECT_EQ(detail::be32(mad + 28), 0xB1B2B3B4u);
    EXPECT_EQ(mad[32], 0x00);
    EXPECT_EQ(mad[33], 5 << 1);
    EXPECT_EQ(detail::be16(mad + 34), 28);
    EXPECT_EQ(mad[36], 0xCC);
    EXPECT_EQ(mad[255], 0xDD);
    Message back;
    CmError e = CmError::count;
    ASSERT_TRUE(parse(mad, sizeof mad, back, e));
    EXPECT_EQ(back.rej.reason, 28);
    EXPECT_EQ(back.rej.reject_info_length, 5);
    EXPECT_EQ(back.rej.additional_info, m.rej.additional_info);
    EXPECT_EQ(back.rej.private_data, m.rej.private_data);

    m = {};
    m.header.attr_id = static_cast<uint16_t>(Attr::drep);
    m.drep.local_comm_id = 1;
    m.drep.remote_comm_id = 2;
    m.drep.private_data[223] = 0xEE;
    ASSERT_EQ(build(m, mad, sizeof mad), kMadBytes);
    EXPECT_EQ(mad[255], 0xEE);
    ASSERT_TRUE(parse(mad, sizeof mad, back, e));
    EXPECT_EQ(back.drep.local_comm_id, 1u);
    EXPECT_EQ(back.drep.remote_comm_id, 2u);
    EXPECT_EQ(back.drep.private_data, m.drep.private_data);
}

TEST(RoceCm, BuiltReqParsesBackFieldForField) {
    Message m;
    m.header.attr_id = static_cast<uint16_t>(Attr::req);
    Req& r = m.req;
    r.local_comm_id = 0x01020304;
    r.service_id = service_id_for_tcp_port(4791);
    r.local_qpn = 0xABCDEF;
    r.responder_resources = 4;
    r.initiator_depth = 3;
    r.remote_cm_response_timeout = 31;
    r.transport_service_type = 1;
    r.end_to_end_flow_control = true;
    r.starting_psn = 0xFFFFFF;
    r.local_cm_response_timeout = 17;
    r.retry_count = 5;
    r.pkey = 0x8001;
    r.path_mtu = 5;
    r.rdc_exists = true;
    r.rnr_retry_count = 6;
    r.max_cm_retries = 9;
    r.srq = true;
    r.extended_transport_type = 2;
    r.primary.local_gid = ipv4_gid(ip(192, 168, 1, 1));
    r.primary.flow_label = 0xFFFFF;
    r.primary.packet_rate = 0x3F;
    r.primary.sl = 0xF;
    r.primary.subnet_local = true;
    r.primary.local_ack_timeout = 31;
    r.alternate.hop_limit = 9;
    write_cma_header(r.private_data, {0, 4, 0xBEEF, ipv4_gid(ip(1, 2, 3, 4)), ipv4_gid(ip(5, 6, 7, 8))});
    uint8_t mad[kMadBytes];
    ASSERT_EQ(build(m, mad, sizeof mad), kMadBytes);
    Message back;
    CmError e = CmError::count;
    ASSERT_TRUE(parse(mad, sizeof mad, back, e));
    uint8_t again[kMadBytes];
    ASSERT_EQ(build(back, again, sizeof again), kMadBytes);
    EXPECT_EQ(Bytes(mad, mad + kMadBytes), Bytes(again, again + kMadBytes));
    EXPECT_EQ(back.req.local_qpn, 0xABCDEFu);
    EXPECT_EQ(back.req.starting_psn, 0xFFFFFFu);
    EXPECT_EQ(back.req.transport_service_type, 1);
    EXPECT_TRUE(back.req.end_to_end_flow_control);
    EXPECT_EQ(back.req.path_mtu, 5);
    EXPECT_TRUE(back.req.rdc_exists);
    EXPECT_EQ(back.req.rnr_retry_count, 6);
    EXPECT_EQ(back.req.max_cm_retries, 9);
    EXPECT_TRUE(back.req.srq);
    EXPECT_EQ(back.req.extended_transport_type, 2);
    EXPECT_EQ(back.req.primary.flow_label, 0xFFFFFu);
    EXPECT_EQ(back.req.primary.packet_rate, 0x3F);
    EXPECT_EQ(back.req.primary.sl, 0xF);
    EXPECT_TRUE(back.req.primary.subnet_local);
    EXPECT_EQ(back.req.primary.local_ack_timeout, 31);
    EXPECT_EQ(back.req.alternate.hop_limit, 9);
    const CmaHeader cma = parse_cma_header(back.req.private_data);
    EXPECT_EQ(cma.port, 0xBEEF);
    EXPECT_EQ(gid_ipv4(cma.dst), ip(5, 6, 7, 8));
}

TEST(RoceCm, NotACmMadIsRefusedWithItsReason) {
    const Capture c;
    const Bytes& f = c.at(16);
    Message m;
    CmError e = CmError::count;
    EXPECT_FALSE(parse(f.data() + kMadAt, kMadBytes - 1, m, e));
    EXPECT_EQ(e, CmError::truncated);
    Bytes mad(f.begin() + kMadAt, f.begin() + kMadAt + kMadBytes);
    mad[1] = 0x01;  // subnet management, not CM
    EXPECT_FALSE(parse(mad.data(), mad.size(), m, e));
    EXPECT_EQ(e, CmError::not_cm);
    mad = Bytes(f.begin() + kMadAt, f.begin() + kMadAt + kMadBytes);
    mad[17] = 0x11;  // MRA
    EXPECT_FALSE(parse(mad.data(), mad.size(), m, e));
    EXPECT_EQ(e, CmError::unknown_attr);
    Message mra;
    mra.header.attr_id = static_cast<uint16_t>(Attr::mra);
    uint8_t out[kMadBytes];
    EXPECT_EQ(build(mra, out, sizeof out), 0u);
    EXPECT_EQ(build(m, out, kMadBytes - 1), 0u);
}

}  // namespace
}  // namespace ina::roce::cm
