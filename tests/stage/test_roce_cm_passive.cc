// SPDX-License-Identifier: Apache-2.0
// The switch's passive RDMA CM (src/features/roce/control_roce_cm.h) against a recording fake of
// the control plane's connect/disconnect: CM MADs built by roce/cm.h as Linux's rdma_cm builds
// them, and the REQ Linux sent in tests/data/rxe-rocev2-sample.pcap (its own private data, then
// with the INAR connect request in place of perftest's zeros). REQ -> one connect and a REP
// whose fields the worker's rdma_cm applies; RTU; retransmitted REQ -> the same REP, no second
// QP; DREQ -> disconnect and DREP; the worker's REJ -> disconnect; every refusal a REJ with the
// INAR reason; malformed and unsupported MADs counted and unanswered.
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "features/roce/control_roce_cm.h"
#include "pcap_frames.h"
#include "roce/wire.h"

namespace ina::features::roce {
namespace {

namespace cm = ina::roce::cm;
using Bytes = std::vector<uint8_t>;

constexpr uint32_t ip(uint8_t a, uint8_t b, uint8_t c, uint8_t d) {
    return uint32_t{a} << 24 | uint32_t{b} << 16 | uint32_t{c} << 8 | d;
}
constexpr uint32_t kWorkerIp = ip(10, 77, 1, 2);
constexpr uint32_t kSwitchIp = ip(10, 77, 1, 1);
constexpr uint16_t kPort = 7471;
constexpr uint32_t kJob = 7;

struct Call {
    uint32_t job_id;
    ConnectRequest request;
    std::optional<uint32_t> switch_psn;
};

class FakeQps : public CmQpControl {
public:
    ConnectOutcome connect_qp(uint32_t job_id, const ConnectRequest& r,
                              std::optional<uint32_t> switch_psn) override {
        connects.push_back({job_id, r, switch_psn});
        ConnectOutcome o;
        o.refusal = refuse_with;
        if (o.ok()) {
            o.switch_qpn = 0x100 + static_cast<uint32_t>(connects.size()) - 1;
            o.switch_psn = switch_psn.value_or(0);
            o.switch_ip = kSwitchIp;
            o.area_length = uint64_t{r.window} * r.chunk_bytes;
            o.pmtu = r.pmtu;
        }
        return o;
    }
    bool disconnect_qp(uint32_t job_id, uint16_t rank) override {
        disconnects.emplace_back(job_id, rank);
        return true;
    }
    Refusal refuse_with = Refusal::none;
    std::vector<Call> connects;
    std::vector<std::pair<uint32_t, uint16_t>> disconnects;
};

rdma::ConnectRequest inar_request(uint16_t rank) {
    rdma::ConnectRequest r;
    r.mode = rdma::Mode::server_to_switch;
    r.elem_type = reduce::ElemType::int32;
    r.op = reduce::Op::sum;
    r.job_id = kJob;
    r.rank = rank;
    r.world = 2;
    r.elements = 1 << 18;
    r.chunk_bytes = 1024;
    r.window = 64;
    r.result_addr = 0x7f0000001000;
    r.result_rkey = 0x4321;
    return r;
}

void put_inar(cm::Req& req, const rdma::ConnectRequest& inar) {
    const auto bytes = inar.encode();
    std::memcpy(req.private_data.data() + cm::kCmaHeaderBytes, bytes.data(), bytes.size());
}

// A REQ as Linux's rdma_cm sends it for rdma_connect() to kSwitchIp:port.
cm::Message make_req(uint32_t comm_id, uint16_t port, const rdma::ConnectRequest& inar) {
    cm::Message m;
    m.header.attr_id = static_cast<uint16_t>(cm::Attr::req);
    m.header.transaction_id = 0x00000002'00000000ull | comm_id;
    cm::Req& r = m.req;
    r.local_comm_id = comm_id;
    r.service_id = cm::service_id_for_tcp_port(port);
    r.local_ca_guid = 0x505400fffe770002ull;
    r.local_qpn = 0x11;
    r.responder_resources = 1;
    r.initiator_depth = 1;
    r.starting_psn = 0x5d50b2;
    r.retry_count = 7;
    r.rnr_retry_count = 7;
    r.path_mtu = 3;  // 1024
    r.pkey = 0xFFFF;
    r.primary.local_gid = cm::ipv4_gid(kWorkerIp);
    r.primary.remote_gid = cm::ipv4_gid(kSwitchIp);
    r.primary.hop_limit = 64;
    r.primary.local_ack_timeout = 19;
    cm::CmaHeader cma;
    cma.port = 40001;
    cma.src = cm::ipv4_gid(kWorkerIp);
    cma.dst = cm::ipv4_gid(kSwitchIp);
    cm::write_cma_header(r.private_data, cma);
    put_inar(r, inar);
    return m;
}

Bytes mad_of(const cm::Message& m) {
    Bytes out(cm::kMadBytes);
    EXPECT_EQ(cm::build(m, out.data(), out.size()), cm::kMadBytes);
    return out;
}

// What the worker's rdma_cm receives: the answer as it goes on the wire, parsed back.
cm::Message on_wire(const std::optional<cm::Message>& answer) {
    EXPECT_TRUE(answer.has_value());
    cm::Message back;
    cm::CmError e{};
    const Bytes mad = mad_of(*answer);
    EXPECT_TRUE(cm::parse(mad.data(), mad.size(), back, e));
    return back;
}

rdma::ConnectReply reply_in(const uint8_t* private_data, size_t n) {
    std::string why;
    auto r = rdma::ConnectReply::decode(
        std::as_bytes(std::span<const uint8_t>(private_data, n)), &why);
    EXPECT_TRUE(r.has_value()) << why;
    return r.value_or(rdma::ConnectReply{});
}

cm::Message rtu_for(const cm::Message& rep) {
    cm::Message m;
    m.header.attr_id = static_cast<uint16_t>(cm::Attr::rtu);
    m.header.transaction_id = rep.header.transaction_id;
    m.rtu.local_comm_id = rep.rep.remote_comm_id;
    m.rtu.remote_comm_id = rep.rep.local_comm_id;
    return m;
}

cm::Message dreq_for(const cm::Message& rep) {
    cm::Message m;
    m.header.attr_id = static_cast<uint16_t>(cm::Attr::dreq);
    m.header.transaction_id = 0x99;
    m.dreq.local_comm_id = rep.rep.remote_comm_id;
    m.dreq.remote_comm_id = rep.rep.local_comm_id;
    m.dreq.remote_qpn = rep.rep.local_qpn;
    return m;
}

std::optional<cm::Message> feed(CmPassive& cmp, const cm::Message& m, uint32_t from = kWorkerIp) {
    const Bytes mad = mad_of(m);
    return cmp.on_mad(mad.data(), mad.size(), from);
}

TEST(RoceCmPassive, ReqConnectsOnceAndRepCarriesTheSwitchSide) {
    FakeQps qps;
    CmPassive cmp(qps, kPort);
    const cm::Message req = make_req(0x7d67a7f4, kPort, inar_request(2));
    const cm::Message rep = on_wire(feed(cmp, req));
    ASSERT_EQ(qps.connects.size(), 1u);
    const Call& c = qps.connects[0];
    EXPECT_EQ(c.job_id, kJob);
    EXPECT_EQ(c.request.qp.rank, 2);
    EXPECT_EQ(c.request.qp.ip, kWorkerIp);
    EXPECT_EQ(c.request.qp.qpn, 0x11u);
    EXPECT_EQ(c.request.qp.result_addr, 0x7f0000001000u);
    EXPECT_EQ(c.request.qp.result_rkey, 0x4321u);
    EXPECT_EQ(c.request.qp.result_length, 64u * 1024);
    EXPECT_EQ(c.request.qp.timeout, 19);
    EXPECT_EQ(c.request.qp.retry_cnt, 7);
    EXPECT_EQ(c.request.qp.rnr_retry, 7);
    EXPECT_EQ(c.request.pmtu, 1024u);
    EXPECT_EQ(c.request.chunk_bytes, 1024u);
    EXPECT_EQ(c.request.window, 64u);
    EXPECT_EQ(c.request.world, 2);
    EXPECT_EQ(c.request.dtype, reduce::ElemType::int32);
    ASSERT_TRUE(c.switch_psn.has_value());
    EXPECT_EQ(*c.switch_psn, 0x5d50b2u) << "the switch sends from the REQ's Starting PSN";

    EXPECT_EQ(rep.header.attr_id, static_cast<uint16_t>(cm::Attr::rep));
    EXPECT_EQ(rep.header.transaction_id, req.header.transaction_id);
    EXPECT_EQ(rep.rep.remote_comm_id, 0x7d67a7f4u);
    EXPECT_NE(rep.rep.local_comm_id, 0u);
    EXPECT_EQ(rep.rep.local_qpn, 0x100u);
    EXPECT_EQ(rep.rep.starting_psn, c.request.qp.psn) << "the worker sends from the REP's PSN";
    EXPECT_EQ(rep.rep.rnr_retry_count, 7);
    EXPECT_EQ(rep.rep.responder_resources, 0);
    const rdma::ConnectReply accept = reply_in(rep.rep.private_data.data(), 196);
    EXPECT_EQ(accept.status, 0);
    EXPECT_EQ(accept.job_id, kJob);
    EXPECT_EQ(accept.contribution_addr, kAreaAddr);
    EXPECT_EQ(accept.contribution_rkey, kAreaRkey);
    EXPECT_EQ(cmp.connections(), 1u);
    EXPECT_EQ(cmp.counters().reps_sent, 1u);
}

TEST(RoceCmPassive, RetransmittedReqGetsTheSameRepAndNoSecondQp) {
    FakeQps qps;
    CmPassive cmp(qps, kPort);
    const cm::Message req = make_req(0x1234, kPort, inar_request(1));
    const Bytes first = mad_of(*feed(cmp, req));
    const Bytes again = mad_of(*feed(cmp, req));
    EXPECT_EQ(first, again);
    EXPECT_EQ(qps.connects.size(), 1u);
    EXPECT_EQ(cmp.counters().reqs_retransmitted, 1u);
    // The same communication ID from another address does not match the kept connection (and
    // this one is refused: its GID is not the address it came from).
    const auto other = feed(cmp, make_req(0x1234, kPort, inar_request(2)), kWorkerIp + 1);
    ASSERT_TRUE(other.has_value());
    EXPECT_EQ(other->header.attr_id, static_cast<uint16_t>(cm::Attr::rej));
    EXPECT_EQ(qps.connects.size(), 1u);
}

TEST(RoceCmPassive, RtuEstablishesAndDreqDisconnectsWithDrep) {
    FakeQps qps;
    CmPassive cmp(qps, kPort);
    const cm::Message rep = on_wire(feed(cmp, make_req(0x42, kPort, inar_request(1))));
    EXPECT_FALSE(cmp.established(kWorkerIp, 0x42));
    EXPECT_FALSE(feed(cmp, rtu_for(rep)).has_value()) << "an RTU is not answered";
    EXPECT_TRUE(cmp.established(kWorkerIp, 0x42));
    EXPECT_EQ(cmp.counters().rtus, 1u);

    const cm::Message dreq = dreq_for(rep);
    const cm::Message drep = on_wire(feed(cmp, dreq));
    EXPECT_EQ(drep.header.attr_id, static_cast<uint16_t>(cm::Attr::drep));
    EXPECT_EQ(drep.header.transaction_id, dreq.header.transaction_id);
    EXPECT_EQ(drep.drep.local_comm_id, rep.rep.local_comm_id);
    EXPECT_EQ(drep.drep.remote_comm_id, 0x42u);
    ASSERT_EQ(qps.disconnects.size(), 1u);
    EXPECT_EQ(qps.disconnects[0], std::make_pair(kJob, uint16_t{1}));
    EXPECT_EQ(cmp.connections(), 0u);
    // Our DREP lost: the DREQ again gets a DREP, and nothing is torn down twice.
    EXPECT_TRUE(feed(cmp, dreq).has_value());
    EXPECT_EQ(qps.disconnects.size(), 1u);
    // The rank connects again: a new QP.
    on_wire(feed(cmp, make_req(0x43, kPort, inar_request(1))));
    EXPECT_EQ(qps.connects.size(), 2u);
}

TEST(RoceCmPassive, TheWorkersRejTearsTheQpDown) {
    FakeQps qps;
    CmPassive cmp(qps, kPort);
    const cm::Message rep = on_wire(feed(cmp, make_req(0x50, kPort, inar_request(2))));
    cm::Message rej;
    rej.header.attr_id = static_cast<uint16_t>(cm::Attr::rej);
    rej.rej.local_comm_id = 0x50;
    rej.rej.remote_comm_id = rep.rep.local_comm_id;
    rej.rej.message_rejected = 1;
    rej.rej.reason = 1;  // e.g. its REP timer
    EXPECT_FALSE(feed(cmp, rej).has_value());
    ASSERT_EQ(qps.disconnects.size(), 1u);
    EXPECT_EQ(qps.disconnects[0].second, 2);
    EXPECT_EQ(cmp.counters().rejs_received, 1u);
    // An RTU or REJ naming no connection of ours is stray, not a disconnect.
    EXPECT_FALSE(feed(cmp, rtu_for(rep)).has_value());
    EXPECT_FALSE(feed(cmp, rej).has_value());
    EXPECT_EQ(cmp.counters().stray, 2u);
    EXPECT_EQ(qps.disconnects.size(), 1u);
}

// Each refusal reaches the worker as a REJ whose private data is the INAR reply with the reason
// it prints; the REJ answers the REQ's transaction and communication ID.
void expect_rej(const std::optional<cm::Message>& answer, const cm::Message& req,
                uint16_t cm_reason, std::optional<rdma::RejectReason> reason) {
    const cm::Message rej = on_wire(answer);
    EXPECT_EQ(rej.header.attr_id, static_cast<uint16_t>(cm::Attr::rej));
    EXPECT_EQ(rej.header.transaction_id, req.header.transaction_id);
    EXPECT_EQ(rej.rej.remote_comm_id, req.req.local_comm_id);
    EXPECT_EQ(rej.rej.message_rejected, 0);
    EXPECT_EQ(rej.rej.reason, cm_reason);
    if (reason) {
        EXPECT_EQ(reply_in(rej.rej.private_data.data(), 148).status,
                  static_cast<uint8_t>(*reason));
    }
}

TEST(RoceCmPassive, RefusalsAreRejsWithTheReasonTheWorkerPrints) {
    const struct {
        Refusal refusal;
        rdma::RejectReason reason;
    } rows[] = {
        {Refusal::no_job, rdma::RejectReason::wrong_job},
        {Refusal::differs, rdma::RejectReason::wrong_job},
        {Refusal::bad_rank, rdma::RejectReason::bad_rank},
        {Refusal::rank_taken, rdma::RejectReason::bad_rank},
        {Refusal::no_resources, rdma::RejectReason::no_resources},
        {Refusal::malformed, rdma::RejectReason::malformed},
    };
    for (const auto& row : rows) {
        SCOPED_TRACE(static_cast<int>(row.refusal));
        FakeQps qps;
        qps.refuse_with = row.refusal;
        CmPassive cmp(qps, kPort);
        const cm::Message req = make_req(0x60, kPort, inar_request(1));
        expect_rej(feed(cmp, req), req, cm::kRejConsumerReject, row.reason);
        EXPECT_EQ(cmp.connections(), 0u);
        EXPECT_EQ(cmp.counters().rejs_sent, 1u);
    }
}

TEST(RoceCmPassive, RequestsTheSwitchCannotServeAreRefusedBeforeAnyConnect) {
    FakeQps qps;
    CmPassive cmp(qps, kPort);
    // Another port: no listener there.
    const cm::Message other_port = make_req(1, kPort + 1, inar_request(1));
    expect_rej(feed(cmp, other_port), other_port, cm::kRejInvalidServiceId, std::nullopt);
    // Server-to-server mode is the root's, not the switch's.
    rdma::ConnectRequest s2s = inar_request(1);
    s2s.mode = rdma::Mode::server_to_server;
    const cm::Message wrong_mode = make_req(2, kPort, s2s);
    expect_rej(feed(cmp, wrong_mode), wrong_mode, cm::kRejConsumerReject,
               rdma::RejectReason::unsupported);
    // Private data that is not the INAR request (another magic).
    cm::Message garbage = make_req(3, kPort, inar_request(1));
    garbage.req.private_data[cm::kCmaHeaderBytes] ^= 0xFF;
    expect_rej(feed(cmp, garbage), garbage, cm::kRejConsumerReject,
               rdma::RejectReason::malformed);
    // A path MTU outside 256..4096, a UC QP.
    cm::Message bad_mtu = make_req(4, kPort, inar_request(1));
    bad_mtu.req.path_mtu = 7;
    expect_rej(feed(cmp, bad_mtu), bad_mtu, cm::kRejConsumerReject,
               rdma::RejectReason::malformed);
    cm::Message uc = make_req(5, kPort, inar_request(1));
    uc.req.transport_service_type = 1;
    expect_rej(feed(cmp, uc), uc, cm::kRejConsumerReject, rdma::RejectReason::unsupported);
    EXPECT_TRUE(qps.connects.empty());
    EXPECT_EQ(cmp.counters().rejs_sent, 5u);
}

TEST(RoceCmPassive, MalformedAndUnsupportedMadsAreCountedAndUnanswered) {
    FakeQps qps;
    CmPassive cmp(qps, kPort);
    Bytes mad = mad_of(make_req(9, kPort, inar_request(1)));
    EXPECT_FALSE(cmp.on_mad(mad.data(), 255, kWorkerIp).has_value()) << "truncated";
    Bytes not_cm = mad;
    not_cm[1] = 0x81;  // another management class
    EXPECT_FALSE(cmp.on_mad(not_cm.data(), not_cm.size(), kWorkerIp).has_value());
    Bytes response = mad;
    response[3] = 0x83;  // a response method
    EXPECT_FALSE(cmp.on_mad(response.data(), response.size(), kWorkerIp).has_value());
    EXPECT_EQ(cmp.counters().malformed, 3u);
    Bytes mra = mad;
    mra[16] = 0x00;
    mra[17] = 0x11;  // MRA
    EXPECT_FALSE(cmp.on_mad(mra.data(), mra.size(), kWorkerIp).has_value());
    cm::Message rep;
    rep.header.attr_id = static_cast<uint16_t>(cm::Attr::rep);  // the switch sends no REQ
    EXPECT_FALSE(feed(cmp, rep).has_value());
    EXPECT_EQ(cmp.counters().unsupported, 2u);
    EXPECT_TRUE(qps.connects.empty());
}

// The REQ Linux's rdma_cm sent in the capture (10.77.0.2 -> 10.77.0.1, port 0x1c06).
struct CapturedReq {
    cm::Message m;
    uint32_t from = 0;
    CapturedReq() {
        const auto frames = test::read_pcap_frames(INA_TEST_DATA "/rxe-rocev2-sample.pcap");
        const Bytes& f = frames.at(16);
        constexpr size_t kMadAt = 14 + 20 + 8 + ina::roce::kBthBytes + ina::roce::kDethBytes;
        cm::CmError e{};
        EXPECT_TRUE(cm::parse(f.data() + kMadAt, f.size() - kMadAt, m, e));
        from = ina::roce::detail::be32(f.data() + 14 + 12);
    }
};

TEST(RoceCmPassive, TheCapturedReqWithoutInarDataIsRefusedMalformed) {
    const CapturedReq c;
    FakeQps qps;
    CmPassive cmp(qps, 0x1c06);
    expect_rej(feed(cmp, c.m, c.from), c.m, cm::kRejConsumerReject,
               rdma::RejectReason::malformed);
    EXPECT_TRUE(qps.connects.empty());
}

TEST(RoceCmPassive, TheCapturedReqWithInarDataConnects) {
    CapturedReq c;
    put_inar(c.m.req, inar_request(1));
    FakeQps qps;
    CmPassive cmp(qps, 0x1c06);
    const cm::Message rep = on_wire(feed(cmp, c.m, c.from));
    ASSERT_EQ(rep.header.attr_id, static_cast<uint16_t>(cm::Attr::rep));
    EXPECT_EQ(rep.header.transaction_id, 0x00000002f4a7677dull);
    EXPECT_EQ(rep.rep.remote_comm_id, 0x7d67a7f4u);
    ASSERT_EQ(qps.connects.size(), 1u);
    EXPECT_EQ(qps.connects[0].request.qp.qpn, 0x12u) << "the captured RC QP";
    EXPECT_EQ(qps.connects[0].request.qp.ip, ip(10, 77, 0, 2));
    EXPECT_EQ(qps.connects[0].switch_psn.value_or(0), 0x5d50b2u);
    EXPECT_EQ(qps.connects[0].request.pmtu, 1024u);
}

// A worker whose GID is an IPv6 address (RoCEv2 over an IPv6 underlay): rdma_cm's header says
// IPv6 and carries the addresses whole; the path's GIDs are the addresses themselves.
cm::Message make_req6(uint32_t comm_id, const cm::Gid& worker, const cm::Gid& own,
                      const rdma::ConnectRequest& inar) {
    cm::Message m = make_req(comm_id, kPort, inar);
    m.req.primary.local_gid = worker;
    m.req.primary.remote_gid = own;
    cm::CmaHeader cma;
    cma.ip_version = 6;
    cma.port = 40001;
    cma.src = worker;
    cma.dst = own;
    cm::write_cma_header(m.req.private_data, cma);
    put_inar(m.req, inar);
    return m;
}

TEST(RoceCmPassive, Ipv6ReqConnectsAnIpv6QpAndIsTrackedByItsAddress) {
    const cm::Gid w6 = {0x20, 0x01, 0x0d, 0xb8, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2};
    const cm::Gid sw6 = {0x20, 0x01, 0x0d, 0xb8, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1};
    FakeQps qps;
    CmPassive cmp(qps, kPort);
    const cm::Message req = make_req6(0x4242, w6, sw6, inar_request(1));
    const Bytes mad = mad_of(req);
    const cm::Message rep = on_wire(cmp.on_mad(mad.data(), mad.size(), w6));
    ASSERT_EQ(qps.connects.size(), 1u);
    const ConnectRequest& r = qps.connects[0].request;
    ASSERT_TRUE(r.qp.ip6.has_value()) << "the QP runs over IPv6";
    EXPECT_EQ(r.qp.ip6->bytes, w6);
    EXPECT_EQ(r.qp.ip, 0u);
    EXPECT_EQ(rep.header.attr_id, static_cast<uint16_t>(cm::Attr::rep));
    EXPECT_EQ(rep.rep.local_qpn, 0x100u);
    // RTU from the same address establishes it; the same ID from the IPv4-mapped form of
    // another address is another worker.
    const Bytes rtu = mad_of(rtu_for(rep));
    EXPECT_FALSE(cmp.on_mad(rtu.data(), rtu.size(), w6).has_value());
    EXPECT_TRUE(cmp.established(w6, 0x4242));
    EXPECT_FALSE(cmp.established(kWorkerIp, 0x4242));
    // A REQ whose path GID is not the address it came from, or whose rdma_cm header says IPv4
    // while it came over IPv6, is refused before any connect.
    cm::Gid other = w6;
    other[15] = 9;
    const Bytes spoofed = mad_of(make_req6(0x4343, other, sw6, inar_request(2)));
    auto rej = cmp.on_mad(spoofed.data(), spoofed.size(), w6);
    ASSERT_TRUE(rej.has_value());
    EXPECT_EQ(rej->header.attr_id, static_cast<uint16_t>(cm::Attr::rej));
    cm::Message v4_header = make_req6(0x4444, w6, sw6, inar_request(2));
    cm::CmaHeader cma = cm::parse_cma_header(v4_header.req.private_data);
    cma.ip_version = 4;
    cm::write_cma_header(v4_header.req.private_data, cma);
    const Bytes mixed = mad_of(v4_header);
    rej = cmp.on_mad(mixed.data(), mixed.size(), w6);
    ASSERT_TRUE(rej.has_value());
    EXPECT_EQ(rej->header.attr_id, static_cast<uint16_t>(cm::Attr::rej));
    EXPECT_EQ(qps.connects.size(), 1u);
}

// An IPv6 worker's REQ sent to one of several addresses of the switch's port: the QP's source
// is that address (the worker's QP takes packets only from the address it connected to);
// without the address the REQ came to, the connect names none (the first on the prefix).
TEST(RoceCmPassive, Ipv6ReqMakesTheAddressItCameToTheQpsSource) {
    const cm::Gid w6 = {0x20, 0x01, 0x0d, 0xb8, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2};
    const cm::Gid second = {0x20, 0x01, 0x0d, 0xb8, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 9};
    FakeQps qps;
    CmPassive cmp(qps, kPort);
    const Bytes mad = mad_of(make_req6(0x4242, w6, second, inar_request(1)));
    ASSERT_TRUE(cmp.on_mad(mad.data(), mad.size(), w6, &second).has_value());
    ASSERT_EQ(qps.connects.size(), 1u);
    const ConnectRequest& r = qps.connects[0].request;
    ASSERT_TRUE(r.qp.source6.has_value());
    EXPECT_EQ(r.qp.source6->bytes, second);
    const Bytes other = mad_of(make_req6(0x4343, w6, second, inar_request(2)));
    ASSERT_TRUE(cmp.on_mad(other.data(), other.size(), w6).has_value());
    ASSERT_EQ(qps.connects.size(), 2u);
    EXPECT_FALSE(qps.connects[1].request.qp.source6.has_value());
}

// The same for an IPv4 worker whose REQ went to a secondary address of the switch's port
// (rdma_connect() to 10.77.3.1 while the worker is on 10.77.1.0/24): that address is the QP's
// source; without the address the REQ came to, the connect names none (the one on its subnet).
TEST(RoceCmPassive, Ipv4ReqMakesTheAddressItCameToTheQpsSource) {
    constexpr uint32_t kSecondary = ip(10, 77, 3, 1);
    const cm::Gid own4 = cm::ipv4_gid(kSecondary);
    FakeQps qps;
    CmPassive cmp(qps, kPort);
    cm::Message req = make_req(0x4444, kPort, inar_request(1));
    req.req.primary.remote_gid = own4;
    cm::CmaHeader cma = cm::parse_cma_header(req.req.private_data);
    cma.dst = own4;
    cm::write_cma_header(req.req.private_data, cma);
    const Bytes v4 = mad_of(req);
    ASSERT_TRUE(cmp.on_mad(v4.data(), v4.size(), cm::ipv4_gid(kWorkerIp), &own4).has_value());
    ASSERT_EQ(qps.connects.size(), 1u);
    const ConnectRequest& r = qps.connects[0].request;
    EXPECT_EQ(r.qp.ip, kWorkerIp);
    ASSERT_TRUE(r.qp.source4.has_value());
    EXPECT_EQ(r.qp.source4->value, kSecondary);
    EXPECT_FALSE(r.qp.source6.has_value());
    const Bytes other = mad_of(make_req(0x4545, kPort, inar_request(2)));
    ASSERT_TRUE(cmp.on_mad(other.data(), other.size(), kWorkerIp).has_value());
    ASSERT_EQ(qps.connects.size(), 2u);
    EXPECT_FALSE(qps.connects[1].request.qp.source4.has_value());
}

TEST(RoceCmPassive, RefusalsMapToTheApisStatuses) {
    EXPECT_EQ(http_status(Refusal::none), 200);
    EXPECT_EQ(http_status(Refusal::malformed), 400);
    EXPECT_EQ(http_status(Refusal::bad_rank), 400);
    EXPECT_EQ(http_status(Refusal::no_job), 404);
    EXPECT_EQ(http_status(Refusal::differs), 409);
    EXPECT_EQ(http_status(Refusal::rank_taken), 409);
    EXPECT_EQ(http_status(Refusal::no_resources), 503);
}

}  // namespace
}  // namespace ina::features::roce
