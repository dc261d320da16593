// SPDX-License-Identifier: Apache-2.0
#include "roce/cm.h"

#include <algorithm>
#include <cstring>
#include <type_traits>

namespace ina::roce::cm {

namespace {

using detail::be16;
using detail::be24;
using detail::be32;
using detail::be64;
using detail::put16;
using detail::put24;
using detail::put32;
using detail::put64;

// Byte offsets inside the MAD (IBA vol. 1 ch. 12.6 message layouts).
namespace at {
constexpr size_t kLocalCommId = 24;
constexpr size_t kRemoteCommId = 28;
// REQ
constexpr size_t kReqServiceId = 32;
constexpr size_t kReqCaGuid = 40;
constexpr size_t kReqQkey = 52;
constexpr size_t kReqQpn = 56;          // QPN(24) | responder resources(8)
constexpr size_t kReqEecn = 60;         // local EECN(24) | initiator depth(8)
constexpr size_t kReqRemoteEecn = 64;   // remote EECN(24) | timeout(5) TST(2) E2E(1)
constexpr size_t kReqPsn = 68;          // PSN(24) | local CM timeout(5) retry(3)
constexpr size_t kReqPkey = 72;
constexpr size_t kReqMtu = 74;          // MTU(4) RDC(1) RNR retry(3)
constexpr size_t kReqCmRetries = 75;    // max CM retries(4) SRQ(1) ext transport(3)
constexpr size_t kReqPrimary = 76;
constexpr size_t kReqAlternate = 120;
constexpr size_t kReqPrivate = 164;
// REP
constexpr size_t kRepQkey = 32;
constexpr size_t kRepQpn = 36;
constexpr size_t kRepEecn = 40;
constexpr size_t kRepPsn = 44;
constexpr size_t kRepResources = 48;
constexpr size_t kRepDepth = 49;
constexpr size_t kRepAckDelay = 50;     // target ACK delay(5) failover(2) E2E(1)
constexpr size_t kRepRnr = 51;          // RNR retry(3) SRQ(1)
constexpr size_t kRepCaGuid = 52;
constexpr size_t kRepPrivate = 60;
// RTU, DREP
constexpr size_t kRtuPrivate = 32;
// REJ
constexpr size_t kRejMessage = 32;      // message rejected(2)
constexpr size_t kRejInfoLength = 33;   // reject info length(7)
constexpr size_t kRejReason = 34;
constexpr size_t kRejInfo = 36;
constexpr size_t kRejPrivate = 108;
// DREQ
constexpr size_t kDreqQpn = 32;
constexpr size_t kDreqPrivate = 36;
}  // namespace at

constexpr size_t kPathBytes = 44;

void read_path(const uint8_t* p, Path& path) {
    path.local_lid = be16(p);
    path.remote_lid = be16(p + 2);
    std::memcpy(path.local_gid.data(), p + 4, 16);
    std::memcpy(path.remote_gid.data(), p + 20, 16);
    const uint32_t w = be32(p + 36);
    path.flow_label = w >> 12;
    path.packet_rate = w & 0x3F;
    path.traffic_class = p[40];
    path.hop_limit = p[41];
    path.sl = p[42] >> 4;
    path.subnet_local = (p[42] & 0x08) != 0;
    path.local_ack_timeout = p[43] >> 3;
}

void write_path(uint8_t* p, const Path& path) {
    put16(p, path.local_lid);
    put16(p + 2, path.remote_lid);
    std::memcpy(p + 4, path.local_gid.data(), 16);
    std::memcpy(p + 20, path.remote_gid.data(), 16);
    put32(p + 36, (path.flow_label & 0xFFFFF) << 12 | (path.packet_rate & 0x3F));
    p[40] = path.traffic_class;
    p[41] = path.hop_limit;
    p[42] = static_cast<uint8_t>((path.sl & 0xF) << 4 | (path.subnet_local ? 0x08 : 0));
    p[43] = static_cast<uint8_t>((path.local_ack_timeout & 0x1F) << 3);
}

template <size_t N>
void read_bytes(const uint8_t* p, std::array<uint8_t, N>& out) {
    std::memcpy(out.data(), p, N);
}
template <size_t N>
void write_bytes(uint8_t* p, const std::array<uint8_t, N>& in) {
    std::memcpy(p, in.data(), N);
}

void read_req(const uint8_t* m, Req& r) {
    r.local_comm_id = be32(m + at::kLocalCommId);
    r.service_id = be64(m + at::kReqServiceId);
    r.local_ca_guid = be64(m + at::kReqCaGuid);
    r.local_qkey = be32(m + at::kReqQkey);
    r.local_qpn = be24(m + at::kReqQpn);
    r.responder_resources = m[at::kReqQpn + 3];
    r.local_eecn = be24(m + at::kReqEecn);
    r.initiator_depth = m[at::kReqEecn + 3];
    r.remote_eecn = be24(m + at::kReqRemoteEecn);
    const uint8_t t = m[at::kReqRemoteEecn + 3];
    r.remote_cm_response_timeout = t >> 3;
    r.transport_service_type = (t >> 1) & 3;
    r.end_to_end_flow_control = (t & 1) != 0;
    r.starting_psn = be24(m + at::kReqPsn);
    r.local_cm_response_timeout = m[at::kReqPsn + 3] >> 3;
    r.retry_count = m[at::kReqPsn + 3] & 7;
    r.pkey = be16(m + at::kReqPkey);
    r.path_mtu = m[at::kReqMtu] >> 4;
    r.rdc_exists = (m[at::kReqMtu] & 0x08) != 0;
    r.rnr_retry_count = m[at::kReqMtu] & 7;
    r.max_cm_retries = m[at::kReqCmRetries] >> 4;
    r.srq = (m[at::kReqCmRetries] & 0x08) != 0;
    r.extended_transport_type = m[at::kReqCmRetries] & 7;
    read_path(m + at::kReqPrimary, r.primary);
    read_path(m + at::kReqAlternate, r.alternate);
    read_bytes(m + at::kReqPrivate, r.private_data);
}

void write_req(uint8_t* m, const Req& r) {
    put32(m + at::kLocalCommId, r.local_comm_id);
    put64(m + at::kReqServiceId, r.service_id);
    put64(m + at::kReqCaGuid, r.local_ca_guid);
    put32(m + at::kReqQkey, r.local_qkey);
    put24(m + at::kReqQpn, r.local_qpn);
    m[at::kReqQpn + 3] = r.responder_resources;
    put24(m + at::kReqEecn, r.local_eecn);
    m[at::kReqEecn + 3] = r.initiator_depth;
    put24(m + at::kReqRemoteEecn, r.remote_eecn);
    m[at::kReqRemoteEecn + 3] =
        static_cast<uint8_t>((r.remote_cm_response_timeout & 0x1F) << 3 |
                             (r.transport_service_type & 3) << 1 | (r.end_to_end_flow_control ? 1 : 0));
    put24(m + at::kReqPsn, r.starting_psn);
    m[at::kReqPsn + 3] =
        static_cast<uint8_t>((r.local_cm_response_timeout & 0x1F) << 3 | (r.retry_count & 7));
    put16(m + at::kReqPkey, r.pkey);
    m[at::kReqMtu] = static_cast<uint8_t>((r.path_mtu & 0xF) << 4 | (r.rdc_exists ? 0x08 : 0) |
                                          (r.rnr_retry_count & 7));
    m[at::kReqCmRetries] = static_cast<uint8_t>((r.max_cm_retries & 0xF) << 4 |
                                                (r.srq ? 0x08 : 0) | (r.extended_transport_type & 7));
    write_path(m + at::kReqPrimary, r.primary);
    write_path(m + at::kReqAlternate, r.alternate);
    write_bytes(m + at::kReqPrivate, r.private_data);
}

void read_rep(const uint8_t* m, Rep& r) {
    r.local_comm_id = be32(m + at::kLocalCommId);
    r.remote_comm_id = be32(m + at::kRemoteCommId);
    r.local_qkey = be32(m + at::kRepQkey);
    r.local_qpn = be24(m + at::kRepQpn);
    r.local_eecn = be24(m + at::kRepEecn);
    r.starting_psn = be24(m + at::kRepPsn);
    r.responder_resources = m[at::kRepResources];
    r.initiator_depth = m[at::kRepDepth];
    r.target_ack_delay = m[at::kRepAckDelay] >> 3;
    r.failover_accepted = (m[at::kRepAckDelay] >> 1) & 3;
    r.end_to_end_flow_control = (m[at::kRepAckDelay] & 1) != 0;
    r.rnr_retry_count = m[at::kRepRnr] >> 5;
    r.srq = (m[at::kRepRnr] & 0x10) != 0;
    r.local_ca_guid = be64(m + at::kRepCaGuid);
    read_bytes(m + at::kRepPrivate, r.private_data);
}

void write_rep(uint8_t* m, const Rep& r) {
    put32(m + at::kLocalCommId, r.local_comm_id);
    put32(m + at::kRemoteCommId, r.remote_comm_id);
    put32(m + at::kRepQkey, r.local_qkey);
    put24(m + at::kRepQpn, r.local_qpn);
    put24(m + at::kRepEecn, r.local_eecn);
    put24(m + at::kRepPsn, r.starting_psn);
    m[at::kRepResources] = r.responder_resources;
    m[at::kRepDepth] = r.initiator_depth;
    m[at::kRepAckDelay] = static_cast<uint8_t>((r.target_ack_delay & 0x1F) << 3 |
                                               (r.failover_accepted & 3) << 1 |
                                               (r.end_to_end_flow_control ? 1 : 0));
    m[at::kRepRnr] = static_cast<uint8_t>((r.rnr_retry_count & 7) << 5 | (r.srq ? 0x10 : 0));
    put64(m + at::kRepCaGuid, r.local_ca_guid);
    write_bytes(m + at::kRepPrivate, r.private_data);
}

void read_ids(const uint8_t* m, uint32_t& local, uint32_t& remote) {
    local = be32(m + at::kLocalCommId);
    remote = be32(m + at::kRemoteCommId);
}

void write_ids(uint8_t* m, uint32_t local, uint32_t remote) {
    put32(m + at::kLocalCommId, local);
    put32(m + at::kRemoteCommId, remote);
}

// RTU and DREP share one layout.
void read_rtu(const uint8_t* m, Rtu& r) {
    read_ids(m, r.local_comm_id, r.remote_comm_id);
    read_bytes(m + at::kRtuPrivate, r.private_data);
}

void write_rtu(uint8_t* m, const Rtu& r) {
    write_ids(m, r.local_comm_id, r.remote_comm_id);
    write_bytes(m + at::kRtuPrivate, r.private_data);
}

}  // namespace

Gid ipv4_gid(uint32_t ipv4) {
    Gid g{};
    g[10] = g[11] = 0xFF;
    put32(g.data() + 12, ipv4);
    return g;
}

bool is_ipv4_gid(const Gid& gid) {
    return std::all_of(gid.begin(), gid.begin() + 10, [](uint8_t b) { return b == 0; }) &&
           gid[10] == 0xFF && gid[11] == 0xFF;
}

bool parse(const uint8_t* m, size_t len, Message& out, CmError& error) {
    if (len < kMadBytes) {
        error = CmError::truncated;
        return false;
    }
    MadHeader& h = out.header;
    h.base_version = m[0];
    h.mgmt_class = m[1];
    h.class_version = m[2];
    h.method = m[3];
    h.status = be16(m + 4);
    h.class_specific = be16(m + 6);
    h.transaction_id = be64(m + 8);
    h.attr_id = be16(m + 16);
    h.attr_modifier = be32(m + 20);
    if (h.base_version != kBaseVersion || h.mgmt_class != kMgmtClassCm ||
        h.class_version != kClassVersion) {
        error = CmError::not_cm;
        return false;
    }
    switch (static_cast<Attr>(h.attr_id)) {
    case Attr::req: read_req(m, out.req); break;
    case Attr::rep: read_rep(m, out.rep); break;
    case Attr::rtu: read_rtu(m, out.rtu); break;
    case Attr::drep: read_rtu(m, out.drep); break;
    case Attr::rej:
        read_ids(m, out.rej.local_comm_id, out.rej.remote_comm_id);
        out.rej.message_rejected = m[at::kRejMessage] >> 6;
        out.rej.reject_info_length = m[at::kRejInfoLength] >> 1;
        out.rej.reason = be16(m + at::kRejReason);
        read_bytes(m + at::kRejInfo, out.rej.additional_info);
        read_bytes(m + at::kRejPrivate, out.rej.private_data);
        break;
    case Attr::dreq:
        read_ids(m, out.dreq.local_comm_id, out.dreq.remote_comm_id);
        out.dreq.remote_qpn = be24(m + at::kDreqQpn);
        read_bytes(m + at::kDreqPrivate, out.dreq.private_data);
        break;
    default:
        error = CmError::unknown_attr;
        return false;
    }
    return true;
}

size_t build(const Message& message, uint8_t* m, size_t capacity) {
    const Attr attr = static_cast<Attr>(message.header.attr_id);
    const bool known = attr == Attr::req || attr == Attr::rep || attr == Attr::rtu ||
                       attr == Attr::rej || attr == Attr::dreq || attr == Attr::drep;
    if (capacity < kMadBytes || !known) {
        return 0;
    }
    std::memset(m, 0, kMadBytes);
    const MadHeader& h = message.header;
    m[0] = h.base_version;
    m[1] = h.mgmt_class;
    m[2] = h.class_version;
    m[3] = h.method;
    put16(m + 4, h.status);
    put16(m + 6, h.class_specific);
    put64(m + 8, h.transaction_id);
    put16(m + 16, h.attr_id);
    put32(m + 20, h.attr_modifier);
    switch (attr) {
    case Attr::req: write_req(m, message.req); break;
    case Attr::rep: write_rep(m, message.rep); break;
    case Attr::rtu: write_rtu(m, message.rtu); break;
    case Attr::drep: write_rtu(m, message.drep); break;
    case Attr::rej: {
        const Rej& r = message.rej;
        write_ids(m, r.local_comm_id, r.remote_comm_id);
        m[at::kRejMessage] = static_cast<uint8_t>((r.message_rejected & 3) << 6);
        m[at::kRejInfoLength] = static_cast<uint8_t>((r.reject_info_length & 0x7F) << 1);
        put16(m + at::kRejReason, r.reason);
        write_bytes(m + at::kRejInfo, r.additional_info);
        write_bytes(m + at::kRejPrivate, r.private_data);
        break;
    }
    case Attr::dreq:
        write_ids(m, message.dreq.local_comm_id, message.dreq.remote_comm_id);
        put24(m + at::kDreqQpn, message.dreq.remote_qpn);
        write_bytes(m + at::kDreqPrivate, message.dreq.private_data);
        break;
    default:
        return 0;
    }
    return kMadBytes;
}

namespace {
Message answer(const Message& to, Attr attr) {
    Message m;
    m.header.transaction_id = to.header.transaction_id;
    m.header.attr_id = static_cast<uint16_t>(attr);
    return m;
}
}  // namespace

Message make_rep(const Message& req, const RepParams& p) {
    Message m = answer(req, Attr::rep);
    Rep& r = m.rep;
    r.local_comm_id = p.local_comm_id;
    r.remote_comm_id = req.req.local_comm_id;
    r.local_qpn = p.local_qpn & 0xFFFFFF;
    r.starting_psn = p.starting_psn & 0xFFFFFF;
    r.responder_resources = p.responder_resources;
    r.initiator_depth = p.initiator_depth;
    r.target_ack_delay = p.target_ack_delay;
    r.rnr_retry_count = p.rnr_retry_count;
    r.srq = req.req.srq;
    r.local_ca_guid = p.local_ca_guid;
    return m;
}

Message make_rej(const Message& req, uint16_t reason) {
    Message m = answer(req, Attr::rej);
    m.rej.remote_comm_id = req.req.local_comm_id;
    m.rej.message_rejected = 0;
    m.rej.reason = reason;
    return m;
}

Message make_drep(const Message& dreq) {
    Message m = answer(dreq, Attr::drep);
    m.drep.local_comm_id = dreq.dreq.remote_comm_id;
    m.drep.remote_comm_id = dreq.dreq.local_comm_id;
    return m;
}

CmaHeader parse_cma_header(const std::array<uint8_t, 92>& p) {
    CmaHeader h;
    h.cma_version = p[0];
    h.ip_version = p[1] >> 4;
    h.port = be16(p.data() + 2);
    std::memcpy(h.src.data(), p.data() + 4, 16);
    std::memcpy(h.dst.data(), p.data() + 20, 16);
    return h;
}

void write_cma_header(std::array<uint8_t, 92>& p, const CmaHeader& h) {
    p[0] = h.cma_version;
    p[1] = static_cast<uint8_t>((h.ip_version & 0xF) << 4);
    put16(p.data() + 2, h.port);
    std::memcpy(p.data() + 4, h.src.data(), 16);
    std::memcpy(p.data() + 20, h.dst.data(), 16);
}

namespace {

template <class Path>
size_t packet_of(uint8_t* out, size_t capacity, const Path& path, uint16_t ip_id, uint32_t psn,
                 const Message& message) {
    constexpr bool v6 = std::is_same_v<Path, Ipv6Path>;
    const size_t headers = (v6 ? kIpv6Bytes : kIpv4Bytes) + kUdpBytes + kBthBytes + kDethBytes;
    const size_t total = headers + kMadBytes + kIcrcBytes;
    if (capacity < total || build(message, out + headers, capacity - headers) != kMadBytes) {
        return 0;
    }
    Transmit tx;  // the UD header fields, written by the request header writer
    tx.opcode = op::kUdSendOnly;
    tx.psn = psn;
    tx.ack_req = true;
    tx.length = kMadBytes + kDethBytes;  // the DETH rides where a payload would start
    if constexpr (v6) {
        write_request_headers(out, capacity, path, tx);
    } else {
        write_request_headers(out, capacity, path, ip_id, tx);
    }
    put32(out + headers - kDethBytes, kQp1Qkey);
    out[headers - kDethBytes + 4] = 0;
    put24(out + headers - kDethBytes + 5, kCmQpn);
    finish_icrc(out, total);
    return total;
}

}  // namespace

size_t encode_packet(uint8_t* out, size_t capacity, const Ipv4Path& path, uint16_t ip_id,
                     uint32_t psn, const Message& message) {
    return packet_of(out, capacity, path, ip_id, psn, message);
}
size_t encode_packet(uint8_t* out, size_t capacity, const Ipv6Path& path, uint32_t psn,
                     const Message& message) {
    return packet_of(out, capacity, path, 0, psn, message);
}

}  // namespace ina::roce::cm
