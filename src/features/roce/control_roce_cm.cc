// SPDX-License-Identifier: Apache-2.0
#include "features/roce/control_roce_cm.h"

#include <algorithm>
#include <cstring>
#include <span>

namespace ina::features::roce {

namespace cm = ina::roce::cm;

int http_status(Refusal r) {
    switch (r) {
    case Refusal::none: return 200;
    case Refusal::no_job: return 404;
    case Refusal::differs:
    case Refusal::rank_taken: return 409;
    case Refusal::no_resources: return 503;
    case Refusal::malformed:
    case Refusal::bad_rank: break;
    }
    return 400;
}

rdma::RejectReason reject_reason(Refusal r) {
    switch (r) {
    case Refusal::no_job:
    case Refusal::differs: return rdma::RejectReason::wrong_job;
    case Refusal::bad_rank:
    case Refusal::rank_taken: return rdma::RejectReason::bad_rank;
    case Refusal::no_resources: return rdma::RejectReason::no_resources;
    case Refusal::none:
    case Refusal::malformed: break;
    }
    return rdma::RejectReason::malformed;
}

namespace {

// The REQ's path MTU (the verbs enum: 1 = 256 ... 5 = 4096) in bytes, 0 when out of range.
uint32_t mtu_bytes(uint8_t code) {
    return code >= 1 && code <= 5 ? 128u << code : 0;
}

// The PSN the worker sends from (the REP's Starting PSN): any 24-bit value is valid; one drawn
// from the worker's communication ID differs between successive connections.
uint32_t worker_psn_for(uint32_t worker_comm_id) {
    return (worker_comm_id * 2654435761u) & 0xFFFFFF;
}

template <size_t N>
void put_reply(std::array<uint8_t, N>& private_data, const rdma::ConnectReply& reply) {
    static_assert(N >= rdma::ConnectReply::kEncodedSize);
    const auto bytes = reply.encode();
    std::memcpy(private_data.data(), bytes.data(), bytes.size());
}

}  // namespace

std::optional<cm::Message> CmPassive::on_mad(const uint8_t* mad, size_t len,
                                             const cm::Gid& worker, const cm::Gid* own) {
    cm::Message m;
    cm::CmError error{};
    if (!cm::parse(mad, len, m, error)) {
        ++(error == cm::CmError::unknown_attr ? counters_.unsupported : counters_.malformed);
        return std::nullopt;
    }
    if (m.header.method != cm::kMethodSend) {
        ++counters_.malformed;
        return std::nullopt;
    }
    switch (static_cast<cm::Attr>(m.header.attr_id)) {
    case cm::Attr::req: return on_req(m, worker, own);
    case cm::Attr::rtu: {
        auto it = find_local(worker, m.rtu.remote_comm_id);
        if (it == connections_.end() || it->first.second != m.rtu.local_comm_id) {
            ++counters_.stray;
            return std::nullopt;
        }
        ++counters_.rtus;
        it->second.established = true;
        return std::nullopt;
    }
    case cm::Attr::dreq: {
        ++counters_.dreqs;
        auto it = find_local(worker, m.dreq.remote_comm_id);
        if (it != connections_.end()) {
            qps_.disconnect_qp(it->second.job_id, it->second.rank);
            connections_.erase(it);
        }
        ++counters_.dreps_sent;
        return cm::make_drep(m);
    }
    case cm::Attr::rej: {
        auto it = find_local(worker, m.rej.remote_comm_id);
        if (it == connections_.end()) {
            ++counters_.stray;
            return std::nullopt;
        }
        ++counters_.rejs_received;
        qps_.disconnect_qp(it->second.job_id, it->second.rank);
        connections_.erase(it);
        return std::nullopt;
    }
    default:
        ++counters_.unsupported;  // a REP or DREP: the switch never connects or disconnects
        return std::nullopt;
    }
}

std::optional<cm::Message> CmPassive::on_req(const cm::Message& m, const cm::Gid& worker,
                                             const cm::Gid* own) {
    ++counters_.reqs;
    const cm::Req& req = m.req;
    if (auto it = connections_.find({worker, req.local_comm_id}); it != connections_.end()) {
        ++counters_.reqs_retransmitted;
        ++counters_.reps_sent;
        return it->second.rep;
    }
    if (req.service_id != cm::service_id_for_tcp_port(port_)) {
        return reject(m, cm::kRejInvalidServiceId, std::nullopt, 0);
    }
    const cm::CmaHeader cma = cm::parse_cma_header(req.private_data);
    const std::span<const uint8_t> after_cma(req.private_data.data() + cm::kCmaHeaderBytes,
                                             req.private_data.size() - cm::kCmaHeaderBytes);
    const auto inar = rdma::ConnectRequest::decode(std::as_bytes(after_cma), nullptr);
    if (!inar) {
        return reject(m, cm::kRejConsumerReject, rdma::RejectReason::malformed, 0);
    }
    const uint32_t pmtu = mtu_bytes(req.path_mtu);
    // RC, rdma_cm's header of the worker's family, and the path's GID the packet's source (an
    // IPv4-mapped GID for IPv4, the IPv6 address itself otherwise).
    const bool ipv4 = cm::is_ipv4_gid(worker);
    const bool rc_own_gid = req.transport_service_type == 0 &&
                            cma.ip_version == (ipv4 ? 4 : 6) && req.primary.local_gid == worker;
    if (inar->mode != rdma::Mode::server_to_switch || !rc_own_gid) {
        return reject(m, cm::kRejConsumerReject, rdma::RejectReason::unsupported, inar->job_id);
    }
    if (pmtu == 0 || req.local_qpn == 0) {
        return reject(m, cm::kRejConsumerReject, rdma::RejectReason::malformed, inar->job_id);
    }
    ConnectRequest r;
    r.qp.rank = inar->rank;
    // The worker's QP takes packets only from the address it connected to: the QP's source.
    if (ipv4) {
        r.qp.ip = cm::gid_ipv4(worker);
        if (own != nullptr) {
            r.qp.source4 = net::Ipv4Addr{cm::gid_ipv4(*own)};
        }
    } else {
        r.qp.ip6 = net::Ipv6Addr{worker};
        if (own != nullptr) {
            r.qp.source6 = net::Ipv6Addr{*own};
        }
    }
    r.qp.qpn = req.local_qpn;
    r.qp.psn = worker_psn_for(req.local_comm_id);
    r.qp.result_addr = inar->result_addr;
    r.qp.result_rkey = inar->result_rkey;
    // The worker's result staging ring: one slot per window entry (as over the API).
    r.qp.result_length = uint64_t{inar->window} * inar->chunk_bytes;
    if (req.primary.local_ack_timeout != 0) {
        r.qp.timeout = req.primary.local_ack_timeout;
    }
    r.qp.retry_cnt = req.retry_count;
    r.qp.rnr_retry = req.rnr_retry_count;
    r.qp.from_api = true;
    r.pmtu = pmtu;
    r.chunk_bytes = inar->chunk_bytes;
    r.window = inar->window;
    r.dtype = inar->elem_type;
    r.op = inar->op;
    r.world = inar->world;
    // The switch's requester sends from the REQ's Starting PSN (docs/rdma.md, cm.h).
    const ConnectOutcome out = qps_.connect_qp(inar->job_id, r, req.starting_psn);
    if (!out.ok()) {
        return reject(m, cm::kRejConsumerReject, reject_reason(out.refusal), inar->job_id);
    }
    cm::RepParams p;
    p.local_comm_id = next_comm_id_++;
    p.local_qpn = out.switch_qpn;
    p.starting_psn = r.qp.psn;
    const uint32_t low24 = out.switch_ip6 ? uint32_t{out.switch_ip6->bytes[13]} << 16 |
                                                uint32_t{out.switch_ip6->bytes[14]} << 8 |
                                                out.switch_ip6->bytes[15]
                                          : out.switch_ip & 0xFFFFFF;
    p.local_ca_guid = uint64_t{0x020000fffe} << 24 | low24;
    // The switch executes no RDMA READ and issues none.
    p.responder_resources = 0;
    p.initiator_depth = 0;
    p.rnr_retry_count = 7;  // the worker may retry our RNR NAKs (back-pressure) forever
    cm::Message rep = cm::make_rep(m, p);
    rdma::ConnectReply accept;
    accept.status = 0;
    accept.job_id = inar->job_id;
    accept.contribution_addr = kAreaAddr;
    accept.contribution_rkey = kAreaRkey;
    put_reply(rep.rep.private_data, accept);
    connections_[{worker, req.local_comm_id}] =
        Connection{inar->job_id, inar->rank, p.local_comm_id, false, rep};
    ++counters_.reps_sent;
    return rep;
}

cm::Message CmPassive::reject(const cm::Message& req, uint16_t cm_reason,
                              std::optional<rdma::RejectReason> reason, uint32_t job_id) {
    cm::Message rej = cm::make_rej(req, cm_reason);
    if (reason) {
        rdma::ConnectReply reply;
        reply.status = static_cast<uint8_t>(*reason);
        reply.job_id = job_id;
        put_reply(rej.rej.private_data, reply);
    }
    ++counters_.rejs_sent;
    return rej;
}

std::map<CmPassive::Key, CmPassive::Connection>::iterator CmPassive::find_local(
    const cm::Gid& worker, uint32_t local_comm_id) {
    return std::find_if(connections_.begin(), connections_.end(), [&](const auto& kv) {
        return kv.first.first == worker && kv.second.local_comm_id == local_comm_id;
    });
}

bool CmPassive::established(const cm::Gid& worker, uint32_t worker_comm_id) const {
    auto it = connections_.find({worker, worker_comm_id});
    return it != connections_.end() && it->second.established;
}

}  // namespace ina::features::roce
