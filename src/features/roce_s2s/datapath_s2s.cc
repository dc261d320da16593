// SPDX-License-Identifier: Apache-2.0
#include "features/roce_s2s/datapath_s2s.h"

#include <rte_ip.h>
#include <rte_udp.h>

#include <cstring>
#include <stdexcept>
#include <vector>

#include "pipeline/originate.h"
#include "pipeline/packet_meta.h"
#include "pipeline/pipeline.h"
#include "roce/cm.h"
#include "roce/icrc.h"
#include "roce/wire.h"

namespace ina::features::roce_s2s {

namespace rc = ina::roce;
using pipeline::EdgeBatches;
using pipeline::FeatureEdge;
using pipeline::LcoreContext;
using pipeline::now_ns;

namespace {

// Where a parsed datagram, an aggregate's payload and its frame sit in the lcore's scratch.
constexpr size_t kFrameAt = 0;
constexpr size_t kPayloadAt = 8192;
static_assert(kPayloadAt + 4096 <= LcoreContext::kScratchBytes);

agg::AckParams ack_params(const JobParams& p) {
    if (p.n_conns == 0 || p.n_conns > kMaxConns || p.window == 0 || p.window > kMaxSlots) {
        throw std::invalid_argument("rdma_s2s job: connections or window out of range");
    }
    agg::AckParams a;
    std::vector<wire::BfrId> ranks;
    for (uint16_t i = 0; i < p.n_conns; ++i) {
        ranks.push_back(static_cast<wire::BfrId>(p.conns[i].rank));
    }
    auto contributors = wire::BitString::from_bfr_ids(kContributorBsl, 0, ranks);
    auto carrier = wire::BitString::from_bfr_ids(kContributorBsl, 0,
                                                 std::vector<wire::BfrId>{ranks.front()});
    if (!contributors || !carrier) {
        throw std::invalid_argument("rdma_s2s job: rank out of range");
    }
    a.core.contributors = *contributors;
    a.core.op = p.op;
    a.core.elem_type = p.dtype;
    a.core.max_elems = static_cast<uint32_t>(p.chunk_bytes / reduce::elem_size(p.dtype));
    a.core.slots = p.window;
    // The one receiver of an aggregate is the root, on the carrier connection.
    a.receivers = *carrier;
    // Aggregates are retransmitted by the carrier leg's requester (go-back-N), not the sweep.
    a.retransmit_timeout = UINT64_MAX / 2;
    return a;
}

rc::RequesterConfig root_leg_config(const JobParams& p, uint32_t initial_psn) {
    rc::RequesterConfig c;
    c.initial_psn = initial_psn;
    c.pmtu = p.pmtu;
    c.timeout = p.timeout;
    c.retry_cnt = p.retry_cnt;
    c.rnr_retry = 7;
    return c;
}

uint64_t& lcore_counter(LcoreContext& ctx, LcoreCounter c) {
    return ctx.feature_counters[kFeatureS2s][static_cast<size_t>(c)];
}

// An originated frame from the lcore's pool; nullptr (counted) when the pool is empty.
rte_mbuf* frame_of(LcoreContext& ctx, const uint8_t* bytes, size_t len, uint16_t port) {
    rte_mbuf* m = pipeline::originated_frame(ctx.pool, bytes, len, port);
    if (m == nullptr) [[unlikely]] {
        ++lcore_counter(ctx, LcoreCounter::no_mbuf);
    }
    return m;
}

constexpr uint8_t kZeroMac[6] = {0, 0, 0, 0, 0, 0};  // routing writes both MACs

// An ACK or NAK to connection c's worker, from the root's address.
rte_mbuf* reply_frame(LcoreContext& ctx, Connection& c, const rc::Reply& reply) {
    uint8_t buf[128];
    const size_t l2 = rc::write_ethernet(buf, sizeof buf, kZeroMac, kZeroMac);
    const size_t l3 = rc::encode_ack(buf + l2, sizeof buf - l2, c.to_worker, c.ip_id++, reply);
    return frame_of(ctx, buf, l2 + l3, c.last_port);
}

rte_mbuf* cnp_frame(LcoreContext& ctx, Connection& c) {
    uint8_t buf[128];
    const size_t l2 = rc::write_ethernet(buf, sizeof buf, kZeroMac, kZeroMac);
    const size_t l3 = rc::encode_cnp(buf + l2, sizeof buf - l2, c.to_worker, c.ip_id++);
    return frame_of(ctx, buf, l2 + l3, c.last_port);
}

// The next packet of the job's aggregate leg as a frame, if one may go now; false when none may.
bool next_aggregate(LcoreContext& ctx, JobState& job, uint64_t t_ns, rte_mbuf*& out) {
    rc::Transmit tx;
    if (job.leg_ended || !job.root_leg.next(t_ns, tx)) {
        return false;
    }
    out = nullptr;
    uint8_t* payload = ctx.scratch.data() + kPayloadAt;
    const uint32_t count = job.table.store_result(static_cast<uint32_t>(tx.cookie), payload);
    const auto bytes = count * static_cast<uint32_t>(reduce::elem_size(job.params.dtype));
    if (tx.offset + tx.length > bytes) [[unlikely]] {
        // Cannot be while the root has not acknowledged the aggregate (its slot is held).
        ++job.counters.bad_contributions;
        return true;
    }
    uint8_t* frame = ctx.scratch.data() + kFrameAt;
    const size_t l2 = rc::write_ethernet(frame, kPayloadAt, kZeroMac, kZeroMac);
    const size_t l3 = rc::encode_write(frame + l2, kPayloadAt - l2, job.to_root,
                                       job.root_ip_id++, tx, payload + tx.offset);
    ++(tx.retransmission ? job.counters.retransmits : job.counters.aggregates_sent);
    out = frame_of(ctx, frame, l2 + l3, job.root_port);
    return true;
}

// Request opcodes of RC (what a worker sends toward the root): SEND, WRITE, READ REQUEST,
// atomics, SEND with invalidate. Responses, ACKs and CNPs are not.
bool rc_request(uint8_t opcode) {
    return opcode <= 0x0C || opcode == 0x13 || opcode == 0x14 || opcode == 0x16 ||
           opcode == 0x17;
}

bool rewrite_icrc(rte_mbuf* m, uint32_t l3_offset);

// Rewrites BTH.PSN (and AETH.MSN when `msn` is set) of a forwarded packet, then its ICRC.
// The BTH and AETH sit in the first segment (eth_input keeps the first 128 bytes there); the
// ICRC may lie in any segment. False (nothing written) if the layout is not as expected.
bool translate(rte_mbuf* m, uint32_t l3_offset, uint32_t l4_offset, uint32_t psn,
               const uint32_t* msn) {
    const uint32_t bth = l4_offset + static_cast<uint32_t>(sizeof(rte_udp_hdr));
    if (rte_pktmbuf_data_len(m) < bth + 16) {
        return false;
    }
    auto* b = rte_pktmbuf_mtod_offset(m, uint8_t*, bth);
    b[9] = static_cast<uint8_t>(psn >> 16);
    b[10] = static_cast<uint8_t>(psn >> 8);
    b[11] = static_cast<uint8_t>(psn);
    if (msn != nullptr) {
        b[13] = static_cast<uint8_t>(*msn >> 16);
        b[14] = static_cast<uint8_t>(*msn >> 8);
        b[15] = static_cast<uint8_t>(*msn);
    }
    return rewrite_icrc(m, l3_offset);
}

// Recomputes a RoCEv2 frame's ICRC after the switch changed it (any mbuf chain). False
// (nothing written) if the ICRC's bytes are not where the IP length says.
bool rewrite_icrc(rte_mbuf* m, uint32_t l3_offset) {
    const auto* ip = rte_pktmbuf_mtod_offset(m, const rte_ipv4_hdr*, l3_offset);
    uint32_t at = l3_offset + rte_be_to_cpu_16(ip->total_length) - 4;
    const uint32_t crc = rc::icrc(m, l3_offset);
    uint8_t bytes[4] = {static_cast<uint8_t>(crc), static_cast<uint8_t>(crc >> 8),
                        static_cast<uint8_t>(crc >> 16), static_cast<uint8_t>(crc >> 24)};
    rte_mbuf* seg = m;
    for (const uint8_t x : bytes) {
        // The 4 bytes may straddle a segment boundary: each one in the segment holding it.
        while (seg != nullptr && at >= seg->data_len) {
            at -= seg->data_len;
            seg = seg->next;
        }
        if (seg == nullptr) {
            return false;
        }
        rte_pktmbuf_mtod(seg, uint8_t*)[at++] = x;
    }
    return true;
}

// The INAR private data of the CM exchange (src/worker/rdma/protocol.h, fixed big-endian
// layouts), read in place: no allocation on the packet path. The stage test builds its REQs and
// REPs with ConnectRequest::encode and ConnectReply::encode, so a layout change fails it.
constexpr uint32_t kInarMagic = 0x494E4152;  // "INAR"
constexpr uint8_t kInarVersion = 1;

uint32_t be32(const uint8_t* b) {
    return uint32_t{b[0]} << 24 | uint32_t{b[1]} << 16 | uint32_t{b[2]} << 8 | b[3];
}

// The root's REP private data (rdma_accept's own, no rdma_cm header before it): an accepting
// ConnectReply of job `job_id` (magic, version, status 0 at byte 5, job id at 8) whose flags
// (byte 24) say `resumed`: the rank is taken back into the running AllReduce.
bool rep_accepts(const uint8_t* inar, uint32_t job_id) {
    return be32(inar) == kInarMagic && inar[4] == kInarVersion && inar[5] == 0 &&
           be32(inar + 8) == job_id;
}
bool rep_resumes(const uint8_t* inar, uint32_t job_id) {
    return rep_accepts(inar, job_id) && (inar[24] & 1) != 0;
}

// A resuming INAR connect request's resume-from (MAD byte 164 + 36 + 48: the REQ's private
// data, rdma_cm's header, the field) set to `chunk` in the frame, the ICRC recomputed. False
// when the MAD does not lie in the first segment (eth_input gathers only the first 128 bytes).
bool raise_resume_from(rte_mbuf* m, const pipeline::PacketMeta& pm, const rc::Packet& p,
                       uint32_t chunk) {
    constexpr uint32_t kResumeFromInMad = 164 + 36 + 48;
    const uint32_t at = pm.l4_offset + static_cast<uint32_t>(sizeof(rte_udp_hdr)) +
                        p.header_bytes + kResumeFromInMad;
    if (rte_pktmbuf_data_len(m) < at + 4) {
        return false;
    }
    auto* b = rte_pktmbuf_mtod_offset(m, uint8_t*, at);
    b[0] = static_cast<uint8_t>(chunk >> 24);
    b[1] = static_cast<uint8_t>(chunk >> 16);
    b[2] = static_cast<uint8_t>(chunk >> 8);
    b[3] = static_cast<uint8_t>(chunk);
    return rewrite_icrc(m, pm.l3_offset);
}

// A resumed REP's INAR reply (ConnectReply) that says which chunks the root has complete
// (flags bit 1; bytes 32..67: complete_from, then a bitmap of the 256 chunks from there) and
// lacks chunk `chunk`. An older root's reply says nothing: it lacks nothing as far as this
// knows (a second copy could be a wrong sum).
bool root_lacks(const uint8_t* inar, uint32_t chunk) {
    if ((inar[24] & 2) == 0) {
        return false;
    }
    const uint32_t from = be32(inar + 32);
    const uint32_t i = chunk - from;
    return chunk >= from && (i >= 256 || (inar[36 + i / 8] >> (i % 8) & 1) == 0);
}

// The connection index of a REQ's INAR connect request's rank (after rdma_cm's header: magic,
// version, mode, then job id and rank) of server-to-server job `job`; n_conns when it is another
// job's, or a rank not through this switch, or one the root will refuse.
uint16_t inar_request_conn(const uint8_t* inar, const JobState& job) {
    constexpr uint8_t kModeServerToServer = 1;
    const uint32_t rank = uint32_t{inar[12]} << 8 | inar[13];
    if (be32(inar) != kInarMagic || inar[4] != kInarVersion || inar[5] != kModeServerToServer ||
        be32(inar + 8) != job.params.job_id || rank == 0) {
        return job.params.n_conns;
    }
    return job.rank_index(rank);
}

constexpr uint32_t kInarFlags = 44, kInarResumeFrom = 48;

// Connection c's REQ `req` from `src_ip` (its INAR request `inar`), noted until its REP. A
// retransmission of the REQ noted (its REP not seen yet) changes nothing.
void note_request(Connection& c, const rc::cm::Req& req, const uint8_t* inar, uint32_t src_ip,
                  uint32_t branch) {
    if (c.pending && c.req.ip == src_ip && c.req.qpn == req.local_qpn) {
        return;
    }
    c.pending = true;
    c.req.branch = branch;
    c.req.comm_id = req.local_comm_id;
    c.req.qpn = req.local_qpn;
    c.req.ip = src_ip;
    // Replication: the root sends from the REQ's Starting PSN ("RDMA CM messages"), into the
    // result buffer the INAR request names (result_addr at byte 32, result_rkey at 40).
    c.req.root_psn = req.starting_psn & 0xFFFFFF;
    c.req.result_addr = uint64_t{be32(inar + 32)} << 32 | be32(inar + 36);
    c.req.result_rkey = be32(inar + 40);
}

// The RDMA WRITE opcodes a result travels in (FIRST/MIDDLE/LAST[_IMM]/ONLY[_IMM]).
bool write_request(uint8_t opcode) {
    return opcode >= rc::op::kWriteFirst && opcode <= rc::op::kWriteOnlyImm;
}

// Cuts a chain to its first `len` bytes (freeing the segments past them, which for a clone
// drops its references only). `len` is at most the chain's length.
void truncate_chain(rte_mbuf* m, uint32_t len) {
    m->pkt_len = len;
    uint16_t segs = 1;
    for (rte_mbuf* s = m;; s = s->next, ++segs) {
        if (len <= s->data_len || s->next == nullptr) {
            s->data_len = static_cast<uint16_t>(std::min<uint32_t>(len, s->data_len));
            rte_pktmbuf_free(s->next);  // nullptr: nothing
            s->next = nullptr;
            m->nb_segs = segs;
            return;
        }
        len -= s->data_len;
    }
}

// Connection i's copy of the carrier's result WRITE `m` (its BTH and extension headers in the
// first segment: eth_input's pull-up): a private header mbuf (Ethernet, IPv4, UDP, BTH, RETH,
// immediate) rewritten to the worker's leg, chained to a clone of the shared payload, then a
// 4-byte mbuf for the copy's own ICRC. nullptr when an mbuf is missing or the layout is not so.
rte_mbuf* result_copy(LcoreContext& ctx, const JobState& job, uint16_t i, rte_mbuf* m,
                      const pipeline::PacketMeta& pm, const rc::Packet& p) {
    const Connection& c = job.conns[i];
    const uint32_t l3 = pm.l3_offset;
    const auto* ip_in = rte_pktmbuf_mtod_offset(m, const rte_ipv4_hdr*, l3);
    const uint32_t ip_total = rte_be_to_cpu_16(ip_in->total_length);
    const uint32_t hdr_end = pm.l4_offset + static_cast<uint32_t>(sizeof(rte_udp_hdr)) +
                             p.header_bytes;
    const uint32_t hdr_l3 = hdr_end - l3;  // IPv4 .. immediate
    if (rte_pktmbuf_data_len(m) < hdr_end || ip_total < hdr_l3 + 4 ||
        l3 + ip_total > rte_pktmbuf_pkt_len(m) || 14 + hdr_l3 > 256) [[unlikely]] {
        return nullptr;
    }
    const uint32_t body_len = ip_total - hdr_l3 - 4;  // payload and pad, not the ICRC
    rte_mbuf* h = rte_pktmbuf_alloc(ctx.pool);
    rte_mbuf* tail = rte_pktmbuf_alloc(ctx.pool);
    rte_mbuf* body = body_len != 0 ? rte_pktmbuf_clone(m, ctx.pool) : nullptr;
    auto* d = h != nullptr ? reinterpret_cast<uint8_t*>(rte_pktmbuf_append(h, 14 + hdr_l3))
                           : nullptr;
    if (d == nullptr || tail == nullptr || rte_pktmbuf_append(tail, 4) == nullptr ||
        (body_len != 0 && body == nullptr)) [[unlikely]] {
        rte_pktmbuf_free(h);
        rte_pktmbuf_free(tail);
        rte_pktmbuf_free(body);
        ++lcore_counter(ctx, LcoreCounter::no_mbuf);
        return nullptr;
    }
    rc::write_ethernet(d, 14, kZeroMac, kZeroMac);
    std::memcpy(d + 14, rte_pktmbuf_mtod_offset(m, const uint8_t*, l3), hdr_l3);
    auto* ip = reinterpret_cast<rte_ipv4_hdr*>(d + 14);
    ip->dst_addr = rte_cpu_to_be_32(c.params.worker_ip);
    ip->hdr_checksum = 0;
    ip->hdr_checksum = rte_ipv4_cksum(ip);
    auto* udp = reinterpret_cast<rte_udp_hdr*>(d + 14 + (pm.l4_offset - l3));
    udp->src_port = rte_cpu_to_be_16(rc::source_port_for_qp(c.params.root_qpn));
    udp->dgram_cksum = 0;
    uint8_t* bth = reinterpret_cast<uint8_t*>(udp + 1);
    const uint32_t qpn = c.params.worker_qpn;
    const uint32_t psn = job.from_carrier(i, p.bth.psn);
    const uint8_t qp_psn[] = {static_cast<uint8_t>(qpn >> 16), static_cast<uint8_t>(qpn >> 8),
                              static_cast<uint8_t>(qpn)};
    std::memcpy(bth + 5, qp_psn, 3);
    bth[9] = static_cast<uint8_t>(psn >> 16);
    bth[10] = static_cast<uint8_t>(psn >> 8);
    bth[11] = static_cast<uint8_t>(psn);
    if (p.bth.opcode == rc::op::kWriteFirst || p.bth.opcode == rc::op::kWriteOnly ||
        p.bth.opcode == rc::op::kWriteOnlyImm) {
        // RETH: the same offset into the worker's result buffer as into the carrier's.
        const uint64_t va = c.params.result_addr + (p.reth.va - job.conns[0].params.result_addr);
        uint8_t* reth = bth + 12;
        for (int k = 0; k < 8; ++k) {
            reth[k] = static_cast<uint8_t>(va >> (56 - 8 * k));
        }
        const uint32_t rkey = c.params.result_rkey;
        for (int k = 0; k < 4; ++k) {
            reth[8 + k] = static_cast<uint8_t>(rkey >> (24 - 8 * k));
        }
    }
    if (body != nullptr) {
        rte_pktmbuf_adj(body, static_cast<uint16_t>(hdr_end));  // headers sit in segment 1
        truncate_chain(body, body_len);
    }
    if (body != nullptr && rte_pktmbuf_chain(h, body) != 0) [[unlikely]] {
        rte_pktmbuf_free(h);
        rte_pktmbuf_free(body);
        rte_pktmbuf_free(tail);
        return nullptr;
    }
    if (rte_pktmbuf_chain(h, tail) != 0) [[unlikely]] {
        rte_pktmbuf_free(h);  // and the body chained to it
        rte_pktmbuf_free(tail);
        return nullptr;
    }
    rc::write_icrc(rte_pktmbuf_mtod(tail, uint8_t*) + 4, rc::icrc(h, 14));
    h->port = m->port;
    h->ol_flags = pipeline::g_originated_flag;
    return h;
}

// The move's fill (docs/rdma.md "The carrier resuming with replicate: true"): zero-length
// WRITE ONLY packets, ACK requested, on connection c's result leg from the root's address, PSNs
// [from, c.res_fill_end). A PSN the worker already has is a duplicate (re-ACKed, not executed),
// one it lacks is executed as a no-op (no data, no completion: a WRITE without immediate), so
// afterwards its ePSN is res_fill_end whatever copies of the old source it lost. The RETH names
// its own result buffer (a zero-length WRITE needs none, C9-88, but a strict responder checks).
// At most kMaxFillPackets a call: a leg is never further behind than the root's send queue.
constexpr uint32_t kMaxFillPackets = 2 * kMaxSlots + 2;
// An unanswered fill is sent again after this (an RC-timeout-like wait, well past a round trip:
// a shorter one resends the fill several times while its ACKs are on their way).
constexpr uint64_t kFillRetryNs = 250'000'000;

void send_fill(LcoreContext& ctx, const dp::Snapshot& snap, JobState& job, Connection& c,
               uint32_t from, uint64_t t_ns) {
    c.res_fill_ns = t_ns | 1;
    rte_mbuf* frames[pipeline::kMaxBurst];
    uint16_t n = 0;
    uint32_t sent = 0;
    for (uint32_t psn = from; rc::psn_diff(psn, c.res_fill_end) < 0 && sent < kMaxFillPackets;
         psn = rc::psn_add(psn, 1), ++sent) {
        rc::Transmit tx;
        tx.opcode = rc::op::kWriteOnly;
        tx.psn = psn;
        tx.ack_req = true;
        tx.has_reth = true;
        tx.reth = {c.params.result_addr, c.params.result_rkey, 0};
        uint8_t buf[128];
        const size_t l2 = rc::write_ethernet(buf, sizeof buf, kZeroMac, kZeroMac);
        const size_t l3 =
            rc::encode_write(buf + l2, sizeof buf - l2, c.to_worker, c.ip_id++, tx, nullptr);
        if (rte_mbuf* m = frame_of(ctx, buf, l2 + l3, c.last_port); m != nullptr) {
            frames[n++] = m;
            ++job.counters.result_fill_sent;
        }
        if (n == pipeline::kMaxBurst) {
            pipeline::route_emitted(ctx, snap, frames, n);
            n = 0;
        }
    }
    if (n != 0) {
        pipeline::route_emitted(ctx, snap, frames, n);
    }
}

// Fills due (just moved: res_fill_ns 0) or unanswered past kFillRetryNs, from where the worker
// acknowledged.
void send_due_fills(LcoreContext& ctx, const dp::Snapshot& snap, JobState& job, uint64_t t_ns) {
    for (uint16_t i = 0; i < job.params.n_conns; ++i) {
        Connection& c = job.conns[i];
        if (c.res_filling && c.res_live &&
            (c.res_fill_ns == 0 || t_ns - c.res_fill_ns >= kFillRetryNs)) {
            send_fill(ctx, snap, job, c, c.res_next, t_ns);
        }
    }
}

struct Burst {
    LcoreContext& ctx;
    const dp::Snapshot& snap;
    EdgeBatches<FeatureEdge>& out;
    uint64_t t_ns;
    struct Owed {
        JobState* job;
        Connection* conn;
    };
    std::array<Owed, pipeline::kMaxBurst * 2> conns{};
    uint16_t n_conns = 0;
    std::array<JobState*, pipeline::kMaxBurst> jobs{};
    uint16_t n_jobs = 0;

    void touch(JobState& j, Connection& c) {
        if (!c.touched && n_conns < conns.size()) {
            c.touched = true;
            conns[n_conns++] = Owed{&j, &c};
        }
    }
    void touch(JobState& j) {
        if (!j.touched && n_jobs < jobs.size()) {
            j.touched = true;
            jobs[n_jobs++] = &j;
        }
    }
    void emit(rte_mbuf* m) {
        if (m != nullptr) {
            out.push(FeatureEdge::route, m);
        }
    }
    void send_fill(JobState& job, Connection& c, uint32_t from) {
        roce_s2s::send_fill(ctx, snap, job, c, from, t_ns);
    }
    void send_due_fills(JobState& job, uint64_t t) { roce_s2s::send_due_fills(ctx, snap, job, t); }
    void reply(JobState& job, Connection& c, const rc::Reply& r) {
        switch (rc::aeth::kind(r.syndrome)) {
        case rc::aeth::Kind::ack: ++job.counters.acks_synthesized; break;
        case rc::aeth::Kind::rnr_nak: ++job.counters.rnr_naks_sent; break;
        default: ++job.counters.naks_sent; break;
        }
        emit(reply_frame(ctx, c, r));
    }

    // A worker's request on connection i, at the switch as the root's responder (§3.1).
    void on_worker_request(JobState& job, uint16_t i, const rc::Packet& p, const uint8_t* payload,
                           bool ce, bool draining) {
        Connection& c = job.conns[i];
        WorkerLeg& leg = c.leg;
        if (ce && c.cnp.on_ce(t_ns)) {
            ++job.counters.cnps_sent;
            emit(cnp_frame(ctx, c));
        }
        if (!leg.known) {
            leg.known = true;
            leg.epsn = p.bth.psn;
            c.first_psn = p.bth.psn;
            if (i == 0) {
                job.root_leg = rc::Requester(root_leg_config(job.params, p.bth.psn));
            }
        }
        const int32_t d = rc::psn_diff(p.bth.psn, leg.epsn);
        if (d > 0) {
            // A gap: one NAK-sequence with the PSN the root expects, then silence until it comes.
            if (!leg.nak_sent) {
                leg.nak_sent = true;
                leg.ack_owed = false;
                reply(job, c, rc::Reply{rc::aeth::kNakPsnSequence, leg.epsn, leg.msn});
            }
            return;
        }
        if (d < 0) {
            // Already absorbed: re-ACK everything so far, never add again.
            ++job.counters.duplicates;
            leg.ack_owed = false;
            reply(job, c, rc::Reply{rc::aeth::kAckUnlimited, rc::psn_add(leg.epsn, 0xFFFFFF),
                                    leg.msn});
            return;
        }
        if (p.bth.opcode != rc::op::kWriteOnlyImm) {
            // Only contributions travel on a job connection (the root's protocol): anything
            // else is not executed, so it is not acknowledged either.
            ++job.counters.not_contribution;
            return;
        }
        const uint32_t elem = static_cast<uint32_t>(reduce::elem_size(job.params.dtype));
        const uint32_t len = p.payload_bytes;
        const uint32_t k = p.imm & 0xFF;
        const bool shaped = len != 0 && len <= job.params.chunk_bytes && len % elem == 0 &&
                            k != 0 && p.reth.dma_len == len;
        if (!shaped) {
            ++job.counters.bad_contributions;
            commit(job, c, p);  // in the connection's sequence, but no part of an aggregate
            return;
        }
        const uint32_t key = job.extend(p.imm >> 8);
        const uint32_t slot = key & (job.params.window - 1);
        const uint32_t held = job.table.holds(key) ? job.slot_count[slot] : 0;
        if (job.params.count_complete && held + k > job.params.n_conns) {
            // More contributions than ranks through this switch: a downstream switch that
            // counts a rank this one counts too (a configuration error). Adding it would send
            // the root a count past world; in sequence, acknowledged, not added.
            ++job.counters.count_beyond;
            commit(job, c, p);
            return;
        }
        if (draining && !job.table.holds(key)) {
            // Leaving the job: only the chunks already held are finished. A new one waits (the
            // worker retries the same PSN) until the switch forwards instead.
            ++job.counters.drain_refused;
            reply(job, c, rc::Reply{static_cast<uint8_t>(rc::aeth::kRnrNak | 1), p.bth.psn,
                                    leg.msn});
            return;
        }
        agg::AckVerdict v = job.table.contribute(key, c.bit.data(), len / elem, payload, t_ns);
        switch (v) {
        case agg::AckVerdict::absorbed:
        case agg::AckVerdict::completed: {
            job.slot_count[slot] = static_cast<uint16_t>(held + k);
            if (v == agg::AckVerdict::absorbed && job.params.count_complete &&
                job.slot_count[slot] == job.params.n_conns && job.table.complete_now(key, t_ns)) {
                // Counts make the tree: every rank through this switch is in, some of them in
                // a downstream switch's aggregate; the connections that carried nothing here
                // never will for this chunk (exactly once per connection and chunk stays).
                v = agg::AckVerdict::completed;
                ++job.counters.completed_by_count;
            }
            if (i == 0) {
                job.slot_va[slot] = p.reth.va;
                job.slot_rkey[slot] = p.reth.rkey;
            }
            if (rc::psn_diff((p.imm >> 8) + 1, c.next_chunk) > 0) {
                c.next_chunk = ((p.imm >> 8) + 1) & 0xFFFFFF;
            }
            // Every connection's RETH: the carrier may move to it (a carrier that rejoins).
            job.conn_va[size_t{i} * job.params.window + slot] = p.reth.va;
            job.conn_rkey[size_t{i} * job.params.window + slot] = p.reth.rkey;
            ++job.counters.absorbed;
            // Stored in a held slot: only now may the worker hear "received".
            commit(job, c, p);
            if (v == agg::AckVerdict::completed) {
                post_aggregate(job, key, len);
            }
            break;
        }
        case agg::AckVerdict::no_slot:
            // The slot still holds an older chunk the root has not acknowledged: back-pressure,
            // the worker comes back with this PSN after the RNR timer.
            reply(job, c, rc::Reply{static_cast<uint8_t>(rc::aeth::kRnrNak | 1), p.bth.psn,
                                    leg.msn});
            break;
        default:
            // A second contribution of this connection to one chunk (new PSN): a protocol
            // error of the worker's; in sequence, acknowledged, not added.
            ++job.counters.bad_contributions;
            commit(job, c, p);
            break;
        }
    }

    // A packet of the next session while its state is not attached (`old` superseded, no
    // successor yet). Nothing of it may reach the root or be ACKed: the successor learns the
    // connection with the worker at its REP's PSN, so the root must not have seen a request of
    // it, nor the worker heard one acknowledged. A request of the reconnecting rank at its
    // first PSN gets an RNR NAK (the worker retries it after the timer: rnr_retry 7 is
    // unlimited), any other request toward the root is dropped unACKed (the worker's RC timer
    // resends it; the switch cannot answer without the connection's QPNs). The root's packets
    // pass: it has received nothing of the new connections to answer. A connection the root
    // took back into this session (resumed) is nobody's: it passes.
    void hold(JobState& old, rte_mbuf* m, const pipeline::PacketMeta& pm, const rc::Packet& p,
              bool to_root, uint32_t worker, FeatureEdge pass) {
        if (!to_root || !rc_request(p.bth.opcode) ||
            old.is_resumed(to_root, worker, p.bth.dest_qp)) {
            ++lcore_counter(ctx, LcoreCounter::passed);
            out.push(pass, m);
            return;
        }
        ++old.counters.rejoin_held;
        Connection& h = old.held;
        if (old.held_known && worker == h.params.worker_ip &&
            p.bth.dest_qp == h.params.root_qpn && p.bth.psn == h.leg.epsn &&
            rc::icrc(m, pm.l3_offset) == p.icrc) {
            h.last_port = m->port;
            reply(old, h, rc::Reply{static_cast<uint8_t>(rc::aeth::kRnrNak | 1), p.bth.psn, 0});
        }
        out.push(FeatureEdge::drop, m);
    }

    void commit(JobState& job, Connection& c, const rc::Packet& p) {
        c.leg.epsn = rc::psn_add(c.leg.epsn, 1);
        c.leg.msn = (c.leg.msn + 1) & 0xFFFFFF;
        c.leg.nak_sent = false;
        if (p.bth.ack_req) {
            c.leg.ack_owed = true;
            touch(job, c);
        }
    }

    // Chunk `key` is complete: ONE WRITE toward the root on the carrier (JobState::post_aggregate).
    void post_aggregate(JobState& job, uint32_t key, uint32_t length) {
        job.post_aggregate(key, length, t_ns);
        touch(job);
    }

    // The root's ACK or NAK on connection i (it acknowledges aggregates): consumed.
    void on_root_response(JobState& job, uint16_t i, const rc::Packet& p) {
        if (rc::aeth::kind(p.aeth.syndrome) == rc::aeth::Kind::ack) {
            ++job.counters.root_acks_consumed;
        } else {
            ++job.counters.root_naks_consumed;
        }
        if (i != job.carrier) {
            return;  // the root saw nothing on this connection since the switch absorbs it
        }
        const rc::ResponseOutcome o = job.root_leg.on_response(p, t_ns);
        for (uint32_t n = 0; n < o.completed; ++n) {
            const uint64_t seq = o.first_completed + n;
            const uint32_t key = job.message_key[seq % job.message_key.size()];
            if (job.release_at_root(key)) {
                ++job.counters.aggregates_acked;
            }
        }
        touch(job);
    }

    // The root slows the carrier: every contributor's data rides on it, so each one is told.
    void fan_out_cnp(JobState& job) {
        rte_mbuf* frames[kMaxConns];
        uint16_t n = 0;
        for (uint16_t i = 0; i < job.params.n_conns; ++i) {
            if (job.conns[i].behind_switch) {
                continue;  // its switch fans out the CNP it gets on its branch carrier
            }
            if (rte_mbuf* m = cnp_frame(ctx, job.conns[i]); m != nullptr) {
                frames[n++] = m;
                ++job.counters.cnps_fanned_out;
            }
        }
        if (n != 0) {
            pipeline::route_emitted(ctx, snap, frames, n);
        }
    }

    // Replication: the carrier's result WRITE `m` (which itself goes on to the carrier's
    // worker) copied onto every other live connection.
    void replicate(JobState& job, rte_mbuf* m, const pipeline::PacketMeta& pm,
                   const rc::Packet& p) {
        const uint32_t after = rc::psn_add(p.bth.psn, 1);
        if (rc::psn_diff(after, job.res_sent) > 0) {
            job.res_sent = after;
        }
        if (!job.conns[0].res_live) {
            // The carrier's worker left: nobody answers a duplicate in its place but the
            // switch. A retransmission of what every worker acknowledged (the aggregated ACK
            // was lost) hears, at the burst's end, where the workers are, as from a responder.
            uint32_t floor = 0, msn = 0;
            if (job.result_floor(floor, msn) && rc::psn_diff(p.bth.psn, floor) < 0) {
                job.res_duplicate = true;
                job.res_ack_owed = true;
                touch(job);
            }
        }
        rte_mbuf* frames[kMaxConns];
        uint16_t n = 0;
        for (uint16_t i = 1; i < job.params.n_conns; ++i) {
            if (!job.conns[i].res_live || job.conns[i].behind_switch ||
                rc::psn_diff(job.from_carrier(i, p.bth.psn), job.conns[i].res_start) < 0) {
                // (A result sent before this leg's connection existed; or a connection behind
                // a downstream switch, which copies its branch carrier's: one copy per branch.)
                continue;
            }
            if (rte_mbuf* f = result_copy(ctx, job, i, m, pm, p); f != nullptr) {
                frames[n++] = f;
                ++job.counters.results_replicated;
            } else {
                ++job.counters.replicate_failed;
            }
        }
        if (n != 0) {
            pipeline::route_emitted(ctx, snap, frames, n);
        }
    }

    // A frame to the root on the carrier connection, as its worker (ACK/NAK or CNP).
    void to_root_frame(JobState& job, const rc::Reply* reply) {
        uint8_t buf[128];
        const size_t l2 = rc::write_ethernet(buf, sizeof buf, kZeroMac, kZeroMac);
        const size_t l3 = reply != nullptr
                              ? rc::encode_ack(buf + l2, sizeof buf - l2, job.res_to_root,
                                               job.root_ip_id++, *reply)
                              : rc::encode_cnp(buf + l2, sizeof buf - l2, job.res_to_root,
                                               job.root_ip_id++);
        rte_mbuf* f = frame_of(ctx, buf, l2 + l3, job.root_port);
        if (f != nullptr) {
            pipeline::route_emitted(ctx, snap, &f, 1);
        }
    }

    // Replication: worker i's ACK or NAK of a result WRITE copy (its leg's PSN space), consumed.
    // An ACK raises what the worker acknowledged; the root hears, at the burst's end, the least
    // over the workers. A NAK goes to the root at once, at the least of its PSN and every other
    // worker's first unacknowledged one (a NAK acknowledges what is before it), once per gap.
    void on_result_ack(JobState& job, uint16_t i, const rc::Packet& p) {
        ++job.counters.result_acks_consumed;
        Connection& c = job.conns[i];
        if (c.behind_switch) {
            return;  // its switch copies and answers for it on the branch carrier: not ours
        }
        const bool ack = rc::aeth::kind(p.aeth.syndrome) == rc::aeth::Kind::ack;
        const uint32_t next = ack ? rc::psn_add(p.bth.psn, 1) : p.bth.psn;
        if (rc::psn_diff(next, c.res_next) > 0) {
            c.res_next = next;
        } else if (ack && !(c.res_fill_any && next == c.res_fill_end)) {
            // A re-ACK: the root is retransmitting (not the worker answering the move's fill,
            // whose duplicates it re-ACKs at the fill's end).
            job.res_duplicate = true;
        }
        if (rc::psn_diff(p.aeth.msn, c.res_msn) > 0) {
            c.res_msn = p.aeth.msn & 0xFFFFFF;
        }
        if (c.res_filling && rc::psn_diff(next, c.res_fill_end) >= 0) {
            // The fill is in: the worker's ePSN is the fill's end, its MSN there this one's less
            // the messages (one per packet: chunk_bytes <= pmtu) it completed past the end.
            c.res_filling = false;
            c.res_msn_delta = (p.aeth.msn - rc::psn_diff(next, c.res_fill_end)) & 0xFFFFFF;
            c.res_msn_known = true;
        }
        if (ack) {
            job.res_ack_owed = true;
            touch(job);
            return;
        }
        if (c.res_filling && rc::psn_diff(p.bth.psn, c.res_fill_end) < 0) {
            // A fill packet lost: the worker waits for it (it NAKs a gap once); again from there.
            send_fill(job, c, p.bth.psn);
        }
        uint32_t floor = 0, msn = 0;
        job.result_floor(floor, msn);
        const uint32_t at = job.to_carrier(i, p.bth.psn);
        uint32_t psn = rc::psn_diff(at, floor) < 0 ? at : floor;
        if (job.res_moved && rc::psn_diff(psn, job.res_told) < 0) {
            // Inside a fill: the root resends from the new source's first, if it sent it yet.
            psn = job.res_told;
            if (rc::psn_diff(job.res_sent, psn) <= 0) {
                return;
            }
        }
        if (job.res_nak_any && psn == job.res_nak_psn && c.res_nak_round != job.res_nak_round) {
            // Another worker's report of the gap the root already goes back for.
            c.res_nak_round = job.res_nak_round;
            ++job.counters.result_naks_merged;
            return;
        }
        job.res_nak_any = true;
        job.res_nak_psn = psn;
        c.res_nak_round = ++job.res_nak_round;
        if (rc::psn_diff(psn, job.res_told) > 0) {
            job.res_told = psn;
        }
        ++job.counters.result_naks_forwarded;
        const rc::Reply r{p.aeth.syndrome, psn, msn};
        to_root_frame(job, &r);
    }

    // Replication: a worker's CNP (for the root's QP of its connection, which sends it nothing)
    // slows the carrier, which carries everything the root sends it; at most one per 4 us.
    void forward_cnp(JobState& job) {
        if (job.root_cnp.on_ce(t_ns)) {
            ++job.counters.result_cnps_forwarded;
            to_root_frame(job, nullptr);
        }
    }

    // End of the burst for a job whose workers ACKed results: the root hears the least PSN
    // every worker acknowledged, when it moved (or when a re-ACK shows the root retransmits).
    void finish_result_acks(JobState& job) {
        job.res_ack_owed = false;
        uint32_t floor = 0, msn = 0;
        if (!job.result_floor(floor, msn) || rc::psn_diff(floor, job.res_told) < 0) {
            // (Behind what the root was told: a leg still being filled after the source moved.)
            return;
        }
        if (rc::psn_diff(floor, job.res_told) > 0 || job.res_duplicate) {
            job.res_duplicate = false;
            if (rc::psn_diff(floor, job.res_told) > 0) {
                job.res_told = floor;
            }
            ++job.counters.result_acks_forwarded;
            if (uint32_t departed = 0;
                job.departed_floor(departed) && rc::psn_diff(floor, departed) > 0) {
                // The departure rule: a worker that left no longer holds the root back.
                ++job.counters.departure_acks;
            }
            const rc::Reply r{rc::aeth::kAckUnlimited, rc::psn_add(floor, 0xFFFFFF), msn};
            to_root_frame(job, &r);
        }
    }

    // End of the burst: one coalesced ACK per connection owed one, then the aggregate legs'
    // packets as far as the edge has room (the rest go at the next burst or tick).
    void finish() {
        for (uint16_t i = 0; i < n_conns; ++i) {
            Connection& c = *conns[i].conn;
            c.touched = false;
            if (c.leg.ack_owed) {
                c.leg.ack_owed = false;
                reply(*conns[i].job, c,
                      rc::Reply{rc::aeth::kAckUnlimited, rc::psn_add(c.leg.epsn, 0xFFFFFF),
                                c.leg.msn});
            }
        }
        for (uint16_t i = 0; i < n_jobs; ++i) {
            JobState& job = *jobs[i];
            job.touched = false;
            if (job.res_moved) {
                send_due_fills(job, t_ns);
            }
            if (job.res_ack_owed) {
                finish_result_acks(job);
            }
            rte_mbuf* m = nullptr;
            for (uint16_t tries = 0;
                 tries < pipeline::kMaxBurst && out.room_for(1) && next_aggregate(ctx, job, t_ns, m);
                 ++tries) {
                emit(m);
            }
        }
    }
};

}  // namespace

JobState::JobState(const JobParams& p)
    : params(p),
      table(ack_params(p)),
      root_leg(root_leg_config(p, p.conns[0].psn)),
      conn_va(size_t{p.n_conns} * p.window, 0),
      conn_rkey(size_t{p.n_conns} * p.window, 0) {
    for (uint16_t i = 0; i < p.n_conns; ++i) {
        const ConnParams& cp = p.conns[i];
        Connection& c = conns[i];
        c.params = cp;
        c.live = !p.learn;
        c.res_live = c.live;
        c.leg.known = cp.psn_known;
        c.leg.epsn = cp.psn & 0xFFFFFF;
        c.first_psn = c.leg.epsn;
        // Frames to the worker are the root's: its address, the worker's QPN.
        c.to_worker.src_ip = p.root_ip;
        c.to_worker.dst_ip = cp.worker_ip;
        c.to_worker.src_port = rc::source_port_for_qp(cp.root_qpn);
        c.to_worker.dest_qp = cp.worker_qpn;
        c.bit = *wire::BitString::from_bfr_ids(
            kContributorBsl, 0, std::vector<wire::BfrId>{static_cast<wire::BfrId>(cp.rank)});
        c.res_start = c.res_next = cp.root_psn & 0xFFFFFF;
    }
    res_told = res_sent = p.conns[0].root_psn & 0xFFFFFF;
    // Aggregates are the carrier worker's: its address and source port, the root's QPN.
    to_root.src_ip = p.conns[0].worker_ip;
    to_root.dst_ip = p.root_ip;
    to_root.src_port = rc::source_port_for_qp(p.conns[0].worker_qpn);
    to_root.dest_qp = p.conns[0].root_qpn;
    res_to_root = to_root;
}

uint32_t JobState::key_near(uint32_t chunk) const {
    return high_key + static_cast<uint32_t>(rc::psn_diff(chunk & 0xFFFFFF, high_key & 0xFFFFFF));
}

uint32_t JobState::extend(uint32_t chunk) {
    chunk &= 0xFFFFFF;
    if (!any_key) {
        any_key = true;
        high_key = chunk;
        return chunk;
    }
    const uint32_t key = key_near(chunk);
    if (static_cast<int32_t>(key - high_key) > 0) {
        high_key = key;
    }
    return key;
}

bool JobState::awaits_root_result(const rc::Packet& p, uint32_t& key) const {
    if ((p.bth.opcode != rc::op::kWriteOnlyImm && p.bth.opcode != rc::op::kWriteLastImm) ||
        !any_key) {
        return false;
    }
    key = key_near(p.imm >> 8);
    const uint32_t slot = key & (params.window - 1);
    // A complete unit still held is one posted on the leg and not acknowledged (post_aggregate
    // runs at completion; the root's ACK releases it).
    return table.holds(key) && table.core().state(slot) == agg::SlotState::complete &&
           root_has[slot] != (kRootHas | key);
}

void JobState::root_result_seen(uint32_t key) {
    const uint32_t slot = key & (params.window - 1);
    root_has[slot] = kRootHas | key;
    if (leg_ended && release_at_root(key)) {
        ++counters.carrier_ended_unacked;
    }
}

bool JobState::release_at_root(uint32_t key) {
    if (table.ack(key, conns[0].bit.data()) != agg::AckResult::released) {
        return false;
    }
    slot_count[key & (params.window - 1)] = 0;
    return true;
}

void JobState::end_aggregate_leg() {
    leg_ended = true;
    // The outstanding messages, not the keys below the highest (a chunk a window ahead may be
    // held unsent): those the root holds are released; the others stay held for what says
    // whether the root has them (a resumed REP: supersede) or for the next session's reset.
    const uint32_t w = params.window;
    for (uint64_t seq = root_leg.completed_messages(); seq < root_leg.posted_messages(); ++seq) {
        const uint32_t key = message_key[seq % message_key.size()];
        if (root_has[key & (w - 1)] == (kRootHas | key) && table.holds(key) &&
            release_at_root(key)) {
            ++counters.carrier_ended_unacked;
        }
    }
}

int32_t JobState::psn_delta(uint16_t i) const {
    const Connection& c = conns[i];
    if (!c.leg.known) {
        return 0;
    }
    // The root's ePSN on the connection: the carrier's advances by one per aggregate, the
    // others' stays where the worker started (the switch absorbs everything they send).
    const uint32_t root_next = i == carrier ? root_leg.next_psn() : c.first_psn;
    return rc::psn_diff(root_next, c.leg.epsn);
}

uint32_t JobState::to_carrier(uint16_t i, uint32_t psn) const {
    const uint32_t d = res_moved ? conns[i].res_psn_delta
                                 : conns[i].params.root_psn - conns[0].params.root_psn;
    return rc::psn_add(psn, (0x1000000 - (d & 0xFFFFFF)) & 0xFFFFFF);
}

uint32_t JobState::from_carrier(uint16_t i, uint32_t psn) const {
    const uint32_t d = res_moved ? conns[i].res_psn_delta
                                 : conns[i].params.root_psn - conns[0].params.root_psn;
    return rc::psn_add(psn, d & 0xFFFFFF);
}

bool JobState::branch_live(uint32_t branch) const {
    if (branch == 0) {
        return false;
    }
    for (uint16_t i = 0; i < params.n_conns; ++i) {
        if (conns[i].branch == branch && conns[i].res_live && in_results(i)) {
            return true;
        }
    }
    return false;
}

uint16_t JobState::rank_index(uint32_t rank) const {
    for (uint16_t i = 0; i < params.n_conns; ++i) {
        if (params.conns[i].rank == rank) {
            return i;
        }
    }
    return params.n_conns;
}

void JobState::mark_branches() {
    for (uint16_t i = 0; i < params.n_conns; ++i) {
        Connection& c = conns[i];
        const bool was = c.behind_switch;
        c.behind_switch = false;
        if (i == 0 || c.branch == 0 || c.session != session) {
            continue;
        }
        for (uint16_t j = 0; j < i && !c.behind_switch; ++j) {
            c.behind_switch = conns[j].session == session && conns[j].branch == c.branch;
        }
        if (c.behind_switch && !was) {
            ++counters.connections_behind_switch;
        }
    }
}

uint16_t JobState::find_res_live(bool toward_root, uint32_t worker_ip, uint32_t dest_qp) const {
    return find_where(&Connection::res_live, toward_root, worker_ip, dest_qp);
}

uint16_t JobState::find_where(bool Connection::*alive, bool toward_root, uint32_t worker_ip,
                              uint32_t dest_qp) const {
    for (uint16_t i = 0; i < params.n_conns; ++i) {
        const Connection& c = conns[i];
        if (c.*alive && c.params.worker_ip == worker_ip &&
            (toward_root ? c.params.root_qpn : c.params.worker_qpn) == dest_qp) {
            return i;
        }
    }
    return params.n_conns;
}

void JobState::use_leg_deltas() {
    if (res_moved) {
        return;
    }
    for (uint16_t j = 0; j < params.n_conns; ++j) {
        Connection& c = conns[j];
        c.res_psn_delta = (c.params.root_psn - conns[0].params.root_psn) & 0xFFFFFF;
        c.res_msn_delta = 0;
        c.res_msn_known = true;
    }
    res_moved = true;
}

void JobState::take_resumed_leg(Connection& c, uint32_t rep_root_qpn) {
    c.params.worker_ip = c.req.ip;
    c.params.worker_qpn = c.req.qpn;
    c.params.root_qpn = rep_root_qpn;
    c.params.root_psn = c.req.root_psn;
    c.params.result_addr = c.req.result_addr;
    c.params.result_rkey = c.req.result_rkey;
    c.res_live = true;
    c.res_old = false;
    c.res_start = c.res_next = c.req.root_psn;
    c.res_msn = 0;
    c.res_nak_round = 0;
    c.res_filling = c.res_fill_any = false;
}

void JobState::retarget_results(uint16_t i, uint32_t rep_root_qpn) {
    use_leg_deltas();
    Connection& c = conns[i];
    // The new connection's worker QP expects the root's first PSN on it: it has received
    // nothing, so no fill. Copies of carrier PSNs from res_sent on go there; the carrier had
    // completed (res_sent - its first) one-packet messages before.
    take_resumed_leg(c, rep_root_qpn);
    c.res_psn_delta = (c.req.root_psn - res_sent) & 0xFFFFFF;
    c.res_msn_delta = (0x1000000 - ((res_sent - conns[0].params.root_psn) & 0xFFFFFF)) & 0xFFFFFF;
    c.res_msn_known = true;
    ++counters.result_legs_resumed;
}

void JobState::move_result_source(uint32_t rep_root_qpn) {
    Connection& car = conns[0];
    use_leg_deltas();
    // Every other leg's PSN where copies of the new source start: past every copy of the old
    // one (the worker's ePSN is at most that; the fill makes it exactly that).
    for (uint16_t j = 1; j < params.n_conns; ++j) {
        Connection& c = conns[j];
        if (!in_results(j) || c.behind_switch) {
            continue;
        }
        if (!c.res_live) {
            c.res_old = true;  // it left holding every result it needs: out of the floors
            continue;
        }
        c.res_fill_end = from_carrier(j, res_sent);
        c.res_filling = c.res_fill_any = rc::psn_diff(c.res_next, c.res_fill_end) < 0;
        c.res_fill_ns = 0;
        c.res_msn_known = !c.res_filling;
        c.res_msn_delta = c.res_msn;
    }
    // The resumed connection is the carrier's result leg now: its identity, its REQ's root PSN
    // (where the root sends from on it) and result buffer. Its request leg passes (resumed).
    take_resumed_leg(car, rep_root_qpn);
    car.res_psn_delta = 0;
    car.res_msn_delta = 0;
    car.res_msn_known = true;
    const uint32_t first = car.req.root_psn;
    for (uint16_t j = 1; j < params.n_conns; ++j) {
        if (conns[j].res_live && in_results(j) && !conns[j].behind_switch) {
            conns[j].res_psn_delta = (conns[j].res_fill_end - first) & 0xFFFFFF;
        }
    }
    res_told = res_sent = first;
    res_ack_owed = res_duplicate = res_nak_any = false;
    res_to_root.src_ip = car.req.ip;
    res_to_root.dst_ip = params.root_ip;
    res_to_root.src_port = rc::source_port_for_qp(car.req.qpn);
    res_to_root.dest_qp = rep_root_qpn;
    ++counters.result_source_moved;
}

bool JobState::in_results(uint16_t i) const {
    const Connection& c = conns[i];
    if (!params.learn) {
        return c.live;  // static: always
    }
    // A connection still live from an earlier session (its DREQ lost) is no part of this one.
    return c.session != 0 && c.session == session;
}

uint16_t JobState::find_in_results(bool toward_root, uint32_t worker_ip, uint32_t dest_qp) const {
    for (uint16_t i = 0; i < params.n_conns; ++i) {
        const Connection& c = conns[i];
        if (in_results(i) && c.params.worker_ip == worker_ip &&
            (toward_root ? c.params.root_qpn : c.params.worker_qpn) == dest_qp) {
            return i;
        }
    }
    return params.n_conns;
}

bool JobState::result_floor(uint32_t& psn, uint32_t& msn) const {
    if (!carrier_open()) {
        return false;
    }
    // Over the live workers of the session: an ended one holds nothing back (it left holding
    // every result). Its departure acknowledges nothing for the others.
    bool any = false;
    bool any_msn = false;
    uint32_t high_msn = 0;
    for (uint16_t i = 0; i < params.n_conns; ++i) {
        const Connection& c = conns[i];
        if (!in_results(i) || c.res_old || c.behind_switch) {
            continue;
        }
        // The MSN in the carrier's space (after a move: known once the leg's fill is in).
        const bool msn_known = !res_moved || c.res_msn_known;
        const uint32_t m = (c.res_msn - (res_moved ? c.res_msn_delta : 0)) & 0xFFFFFF;
        if (msn_known && rc::psn_diff(m, high_msn) > 0) {
            high_msn = m;
        }
        if (!c.res_live && !branch_live(c.branch)) {
            continue;
        }
        const uint32_t next = to_carrier(i, c.res_next);
        if (!any || rc::psn_diff(next, psn) < 0) {
            psn = next;
        }
        any = true;
        if (msn_known && (!any_msn || rc::psn_diff(m, msn) < 0)) {
            msn = m;
            any_msn = true;
        }
    }
    if (!any) {
        // Every worker of the session left after the last result they had: all the root sent
        // is acknowledged (its QP on the carrier still waits for that, their ACKs consumed).
        psn = res_sent;
        msn = high_msn;
    }
    return true;
}

bool JobState::departed_floor(uint32_t& psn) const {
    bool any = false;
    for (uint16_t i = 0; i < params.n_conns; ++i) {
        if (!in_results(i) || conns[i].res_live || conns[i].res_old || conns[i].behind_switch ||
            branch_live(conns[i].branch)) {
            continue;
        }
        const uint32_t next = to_carrier(i, conns[i].res_next);
        if (!any || rc::psn_diff(next, psn) < 0) {
            psn = next;
        }
        any = true;
    }
    return any;
}

void JobState::leave_tick(uint64_t t_ns) {
    const uint64_t timeout = leave_timeout_ns.load(std::memory_order_relaxed);
    if (timeout == 0 || left.load(std::memory_order_relaxed) || awaiting_successor()) {
        // (A superseded state is not over before its successor adopted what it noted: the
        // successor reads it once, at its first packet or tick.)
        return;
    }
    if (!leave_clock) {
        leave_clock = true;
        leave_last_ns = t_ns;
    }
    uint16_t live = 0;
    for (uint16_t i = 0; i < params.n_conns; ++i) {
        live = static_cast<uint16_t>(live + (conns[i].live ? 1 : 0));
    }
    // With replication the root's last result WRITEs may still wait for the aggregated ACKs
    // after every worker's DREQ (docs/rdma.md "Departures"): such a job ends by the timeout,
    // unless nothing of its results can be owed any more: its carrier never went live in its
    // session (no result was copied or acknowledged through it), or the root accepted a
    // connection of its next AllReduce (results_round_over: it serves one at a time, so the
    // last one's results are all acknowledged there). Waiting for the timeout then kept states
    // of AllReduces long over, and the root's next CM exchanges kept refreshing their clock:
    // in roce-vm-s2s-rejoin four replicating ones outlived a reload, and the fifth state
    // leaving on the root, the running AllReduce's, went unmatched (kMaxLeavingPerRoot).
    // A session a resume left holding chunks for ranks that have not connected yet waits for
    // them (join_missing) until the idle timeout.
    const bool results_owed = params.replicate && carrier_open() && !results_round_over;
    const bool awaits_ranks = resumed_session && !results_round_over && table.in_use() != 0;
    if (live == 0 && !results_owed && !awaits_ranks) {
        left.store(true, std::memory_order_relaxed);
        return;
    }
    if (t_ns - leave_last_ns >= timeout) {
        counters.leave_ended_timeout += live;
        left.store(true, std::memory_order_relaxed);
    }
}

bool JobState::try_forwarding() {
    if (forwarding) {
        return true;
    }
    // (An ended leg sends nothing more: what it still lists was released.)
    if (table.in_use() != 0 ||
        (!leg_ended && (root_leg.inflight_packets() != 0 ||
                        root_leg.oldest_unacked_psn() != root_leg.next_psn()))) {
        return false;
    }
    for (uint16_t i = 0; i < params.n_conns; ++i) {
        Connection& c = conns[i];
        c.fwd_psn_delta = static_cast<uint32_t>(psn_delta(i)) & 0xFFFFFF;
        // The root completed one message per aggregate on the carrier, none on the others.
        const uint32_t root_msn = i == carrier ? root_messages : 0;
        c.fwd_msn_delta = (root_msn - c.leg.msn) & 0xFFFFFF;
    }
    forwarding = true;
    return true;
}

uint16_t JobState::find_live(bool toward_root, uint32_t worker_ip, uint32_t dest_qp) const {
    return find_where(&Connection::live, toward_root, worker_ip, dest_qp);
}

bool JobState::start_session_if_new(uint16_t i) {
    // A new session when nothing is live (every connection of the last one ended by DREQ),
    // or when this rank already went live in the current one: its DREQ was lost (the workers
    // of the next AllReduce connect before the root's CM retries it) or the worker reconnects
    // alone, and the chunk indices start over all the same. Decided at the REP, not the REQ: a
    // REQ the root refuses (REJ: e.g. a rank it still has connected) changes nothing, so what
    // the live ranks' held chunks hold, ACKed to them, still completes and reaches the root.
    bool any_live = false;
    bool others_live = false;
    for (uint16_t k = 0; k < params.n_conns; ++k) {
        any_live = any_live || conns[k].live;
        others_live = others_live || (k != i && conns[k].live);
    }
    if (any_live && conns[i].session != session) {
        return true;
    }
    if (others_live) {
        // Another rank's connection is live: it may be mid-AllReduce (the switch cannot tell a
        // lost DREQ from a rank still running), its contributions held and ACKed as the root.
        // Emptying them broke "ACKed only once it will reach the root"; this state leaves
        // instead and a fresh one takes the session (supersede).
        return false;
    }
    ++session;
    resumed.fill(Resumed{});  // connections taken back into the last session are over
    if (any_key || table.in_use() != 0) {
        // What the previous session left held was never going to be acknowledged by the root:
        // no connection of it is live but this rank's own, which its REP replaces.
        table.reset();
        slot_count.fill(0);
        root_has.fill(0);
        any_key = false;
        high_key = 0;
        ++counters.sessions;
    }
    return true;
}

bool JobState::post_aggregate(uint32_t key, uint32_t length, uint64_t t_ns) {
    const uint32_t slot = key & (params.window - 1);
    rc::WriteRequest w;
    // The carrier's RETH of this chunk (its contribution lands in its own area at the root).
    const size_t at = size_t{carrier} * params.window + slot;
    w.remote_va = carrier == 0 ? slot_va[slot] : conn_va[at];
    w.rkey = carrier == 0 ? slot_rkey[slot] : conn_rkey[at];
    w.length = length;
    w.has_imm = true;
    w.imm = (key & 0xFFFFFF) << 8 | std::min<uint32_t>(slot_count[slot], 0xFF);
    w.cookie = key;
    uint64_t seq = 0;
    if (!root_leg.post(w, seq)) {
        ++counters.bad_contributions;  // the leg is in error: nothing more goes out
        return false;
    }
    ++root_messages;
    message_key[seq % message_key.size()] = key;
    table.mark_sent(key, t_ns);
    return true;
}

void JobState::supersede(uint16_t i, uint32_t src_ip, uint32_t dst_ip, const uint8_t* mad,
                         uint32_t len, uint32_t rep_root_qpn, uint32_t rep_psn, uint64_t t_ns,
                         bool resume, const uint8_t* rep_inar) {
    superseded = true;
    ++counters.rejoins;
    // A new session's connection accepted: the root's AllReduce of this state is over (it
    // serves one at a time), nothing of a later one is followed (follow_results).
    results_round_over = results_round_over || !resume;
    resumed_session = resumed_session || resume;
    Connection& c = conns[i];
    n_notes = 0;
    if (!resume) {
        // The rank's new connection, held back (RNR NAK from its first PSN) until the successor
        // takes it: the root expects its first request at the REP's PSN and has seen none.
        held.params.rank = c.params.rank;
        held.params.worker_ip = c.req.ip;
        held.params.worker_qpn = c.req.qpn;
        held.params.root_qpn = rep_root_qpn;
        held.leg.epsn = rep_psn & 0xFFFFFF;
        held.to_worker.src_ip = params.root_ip;
        held.to_worker.dst_ip = c.req.ip;
        held.to_worker.src_port = rc::source_port_for_qp(rep_root_qpn);
        held.to_worker.dest_qp = c.req.qpn;
        held_known = true;
        note(src_ip, dst_ip, mad, len);  // the successor learns the connection from this REP
    }
    // The rank's old connection: the root replaced it (it accepted the new one), so it carries
    // nothing more. Its contributions already held stay in their chunks (ACKed to it).
    if (c.live) {
        ++counters.connections_replaced;  // its DREQ never passed this switch
    }
    end_connection(i);
    std::array<uint32_t, kMaxSlots> resend{};
    uint32_t n_resend = 0;
    if (resume && params.replicate && carrier_open()) {
        // The root writes the results on the carrier's resumed connection now: the copies'
        // source moves onto it (docs/rdma.md "The carrier resuming with replicate: true"); a
        // resumed non-carrier connection becomes a copy target.
        if (i == 0) {
            move_result_source(rep_root_qpn);
        } else {
            retarget_results(i, rep_root_qpn);
        }
    }
    const size_t elem = reduce::elem_size(params.dtype);
    const auto elem_bytes = static_cast<uint32_t>(elem);
    if (i == carrier && !forwarding && params.n_conns > 1) {
        // The aggregates rode the old connection, which the root closed: they go on the lowest
        // rank still live, from the PSN the root expects there (it saw nothing on it: the
        // switch absorbed everything), with that rank's RETH of each chunk.
        uint16_t k = 0;
        while (k < params.n_conns && (k == i || !conns[k].live)) {
            ++k;
        }
        if (k < params.n_conns) {
            // Complete chunks already sent on the old connection and not acknowledged: the
            // root may hold them (its ACK lost, or passed after the DREQ ended the
            // connection here), so a second copy on another connection could be a wrong sum.
            // A resumed REP says which the root has (it ended the old connection and took its
            // completions before answering, so what it lacks never arrives): those it lacks go
            // again on the moved leg, the rest are released. Without that answer all are
            // released (counted); the root stalls visibly if it lacks them. Found by the
            // messages the old leg has outstanding, not by keys below the highest seen: a
            // worker ahead may have sent (RNR-NAKed) chunk k + window while k is unacknowledged,
            // and k stayed held for good (roce-vm-s2s-rejoin, the carrier round).
            const uint32_t w = params.window;
            for (uint64_t seq = root_leg.completed_messages(); seq < root_leg.posted_messages();
                 ++seq) {
                const uint32_t key = message_key[seq % message_key.size()];
                if (!table.holds(key) ||
                    table.core().state(key & (w - 1)) != agg::SlotState::complete) {
                    continue;
                }
                if (rep_inar != nullptr && root_lacks(rep_inar, key & 0xFFFFFF) &&
                    n_resend < resend.size()) {
                    resend[n_resend++] = key;
                } else if (release_at_root(key)) {
                    ++counters.rejoin_carrier_unacked;
                }
            }
            carrier = k;
            const Connection& n = conns[k];
            root_leg = rc::Requester(root_leg_config(params, n.first_psn));
            leg_ended = false;
            root_messages = 0;
            to_root.src_ip = n.params.worker_ip;
            to_root.src_port = rc::source_port_for_qp(n.params.worker_qpn);
            to_root.dest_qp = n.params.root_qpn;
            root_port = n.last_port;
            ++counters.rejoin_carrier_moved;
            for (uint32_t r = 0; r < n_resend; ++r) {
                const uint32_t slot = resend[r] & (w - 1);
                if (post_aggregate(resend[r], table.core().count(slot) * elem_bytes, t_ns)) {
                    ++counters.rejoin_carrier_resent;
                }
            }
        }
    }
    // Partial-aggregate flush: the old connection is out of every held chunk. Those it had not
    // contributed to go with the others' contributions (k < world); the ones every other rank
    // is in go now.
    for (uint32_t s = 0; s < params.window; ++s) {
        if (table.core().state(s) == agg::SlotState::aggregating &&
            !wire::bits_intersect(table.core().added(s), c.bit.data(),
                                  table.core().set_bytes())) {
            ++counters.rejoin_partial_chunks;
        }
    }
    uint32_t keys[kMaxSlots];
    const size_t n = table.exclude(c.bit.data(), keys, kMaxSlots, t_ns);
    for (size_t k = 0; k < n; ++k) {
        const uint32_t slot = keys[k] & (params.window - 1);
        post_aggregate(keys[k], table.core().count(slot) * static_cast<uint32_t>(elem), t_ns);
    }
    wants_successor.store(true, std::memory_order_release);
}

bool JobState::is_resumed(bool toward_root, uint32_t worker_ip, uint32_t dest_qp) const {
    for (uint16_t k = 0; k < params.n_conns; ++k) {
        const Resumed& r = resumed[k];
        if (r.worker_qpn != 0 && r.worker_ip == worker_ip &&
            dest_qp == (toward_root ? r.root_qpn : r.worker_qpn)) {
            return true;
        }
    }
    return false;
}

void JobState::note(uint32_t src_ip, uint32_t dst_ip, const uint8_t* mad, uint32_t len) {
    if (n_notes == notes.size() || len > kCmNoteBytes) {
        ++counters.rejoin_cm_lost;
        return;
    }
    CmNote& x = notes[n_notes++];
    x.src_ip = src_ip;
    x.dst_ip = dst_ip;
    x.branch = cm_branch;
    x.len = static_cast<uint16_t>(len);
    std::memcpy(x.mad.data(), mad, len);
}

void JobState::adopt_predecessor() {
    JobState* old = predecessor;
    if (old == nullptr) {
        return;
    }
    predecessor = nullptr;
    old->successor = this;
    // REQs the old state noted (the reconnecting rank's, and any other rank's seen before its
    // REP): their REPs are among the notes.
    for (uint16_t k = 0; k < params.n_conns && k < old->params.n_conns; ++k) {
        const Connection& o = old->conns[k];
        if (!o.pending) {
            continue;
        }
        conns[k].pending = true;
        conns[k].req = o.req;
    }
    for (uint16_t k = 0; k < old->n_notes; ++k) {
        const CmNote& x = old->notes[k];
        cm_branch = x.branch;
        snoop_cm(x.src_ip, x.dst_ip, x.mad.data(), x.len);
    }
    old->n_notes = 0;
    old->held_known = false;
}

void JobState::go_live(uint16_t i, uint32_t worker_ip, uint32_t worker_qpn, uint32_t root_qpn,
                       uint32_t worker_psn) {
    Connection& c = conns[i];
    c.params.worker_ip = worker_ip;
    c.params.worker_qpn = worker_qpn;
    c.params.root_qpn = root_qpn;
    c.params.psn_known = true;
    c.params.psn = worker_psn;
    c.leg = WorkerLeg{worker_psn, 0, true, false, false};
    c.next_chunk = 0;
    c.first_psn = worker_psn;
    c.res_start = c.res_next = c.params.root_psn;  // set from the REQ
    c.res_msn = 0;
    c.res_nak_round = 0;
    c.to_worker.src_ip = params.root_ip;
    c.to_worker.dst_ip = worker_ip;
    c.to_worker.src_port = rc::source_port_for_qp(root_qpn);
    c.to_worker.dest_qp = worker_qpn;
    c.ip_id = 0;
    c.pending = false;
    if (c.live) {
        ++counters.connections_replaced;  // its DREQ never passed this switch
    }
    c.live = true;
    c.res_live = true;
    c.res_old = false;
    c.res_filling = c.res_fill_any = false;
    c.session = session;
    c.branch = c.req.branch;
    mark_branches();
    if (i == 0) {
        // The carrier: the root's first ePSN on it is the worker's starting PSN.
        root_leg = rc::Requester(root_leg_config(params, worker_psn));
        leg_ended = false;
        to_root.src_ip = worker_ip;
        to_root.src_port = rc::source_port_for_qp(worker_qpn);
        to_root.dest_qp = root_qpn;
        res_to_root = to_root;
        res_moved = false;
        res_told = res_sent = c.params.root_psn;
        res_ack_owed = res_duplicate = res_nak_any = false;
    }
    ++counters.connections_learned;
}

bool JobState::join_missing(rc::cm::Attr attr, const rc::cm::Message& msg, uint32_t src_ip,
                            uint32_t dst_ip) {
    if (!resumed_session || results_round_over) {
        return false;
    }
    if (attr == rc::cm::Attr::req && dst_ip == params.root_ip) {
        const uint8_t* inar = msg.req.private_data.data() + rc::cm::kCmaHeaderBytes;
        const uint16_t i = inar_request_conn(inar, *this);
        if (i == params.n_conns || conns[i].session == session) {
            return false;  // (a rank of this session: the next AllReduce's, or a resume)
        }
        note_request(conns[i], msg.req, inar, src_ip, cm_branch);
        return true;
    }
    if (attr != rc::cm::Attr::rep || src_ip != params.root_ip) {
        return false;
    }
    const uint8_t* inar = msg.rep.private_data.data();
    for (uint16_t i = 0; i < params.n_conns; ++i) {
        Connection& c = conns[i];
        if (!c.pending || c.req.ip != dst_ip || c.req.comm_id != msg.rep.remote_comm_id ||
            c.session == session) {
            continue;
        }
        c.pending = false;
        if (!rep_accepts(inar, params.job_id) || rep_resumes(inar, params.job_id)) {
            return false;
        }
        // The rank's first connection of this AllReduce (the root serves one at a time, and
        // this one cannot end without the rank): it joins the session the held chunks wait
        // for, as a leaving one (what is held finishes with it, then it is translated).
        c.params.root_psn = c.req.root_psn;
        c.params.result_addr = c.req.result_addr;
        c.params.result_rkey = c.req.result_rkey;
        go_live(i, dst_ip, c.req.qpn, msg.rep.local_qpn, msg.rep.starting_psn);
        ++counters.rejoin_joined;
        return true;
    }
    return false;
}

void JobState::follow_results(rc::cm::Attr attr, const rc::cm::Message& msg, uint32_t src_ip,
                              uint32_t dst_ip) {
    if (results_round_over) {
        return;
    }
    if (attr == rc::cm::Attr::req && dst_ip == params.root_ip) {
        const uint8_t* inar = msg.req.private_data.data() + rc::cm::kCmaHeaderBytes;
        const uint16_t i = inar_request_conn(inar, *this);
        if (i != params.n_conns && in_results(i)) {  // (the REP says whether it resumes)
            note_request(conns[i], msg.req, inar, src_ip, cm_branch);
        }
        return;
    }
    if (attr != rc::cm::Attr::rep || src_ip != params.root_ip) {
        return;
    }
    const uint8_t* inar = msg.rep.private_data.data();
    if (rep_accepts(inar, params.job_id) && !rep_resumes(inar, params.job_id)) {
        // The root accepted a connection of its next AllReduce (it serves one at a time): this
        // state's is over there; a later resume is of an AllReduce it never had.
        results_round_over = true;
        return;
    }
    for (uint16_t i = 0; i < params.n_conns; ++i) {
        Connection& c = conns[i];
        if (!c.pending || c.req.ip != dst_ip || c.req.comm_id != msg.rep.remote_comm_id) {
            continue;
        }
        c.pending = false;
        if (!rep_resumes(inar, params.job_id)) {
            return;  // refused, or another job's
        }
        // The root writes this rank's results on the new connection (the carrier's) or copies
        // go there (another rank's): the result leg follows it, as at the first resume.
        resumed[i] = Resumed{dst_ip, c.req.qpn, msg.rep.local_qpn};
        if (i == 0) {
            move_result_source(msg.rep.local_qpn);
        } else {
            retarget_results(i, msg.rep.local_qpn);
        }
        return;
    }
}

void JobState::snoop_cm(uint32_t src_ip, uint32_t dst_ip, const uint8_t* mad, uint32_t len,
                        bool leaving_job, uint64_t t_ns) {
    rc::cm::Message msg;
    rc::cm::CmError error{};
    if (!rc::cm::parse(mad, len, msg, error)) {
        return;  // MRA, LAP, SIDR ...: nothing this mode learns from
    }
    const auto attr = static_cast<rc::cm::Attr>(msg.header.attr_id);
    if (superseded && !leaving_job) {
        // The configured job's packet reached this state (the snapshot still names it): its own
        // connections' DREQs are its (and a rank joining the session a resume left waiting),
        // everything else is the next session's.
        cm_claimed = false;
        snoop_cm(src_ip, dst_ip, mad, len, true);
        if (cm_claimed) {
            return;
        }
        if (successor != nullptr) {
            successor->snoop_cm(src_ip, dst_ip, mad, len, false, t_ns);
        } else if (awaiting_successor()) {
            note(src_ip, dst_ip, mad, len);
        }
        return;
    }
    if (leaving_job) {
        // Removed: it keeps the connections it knew until their DREQ; a REQ or REP is a new
        // connection, the configured job's (or nobody's).
        if (attr == rc::cm::Attr::dreq) {
            const bool from_worker = dst_ip == params.root_ip;
            const uint32_t worker_ip = from_worker ? src_ip : dst_ip;
            uint16_t i = find_live(from_worker, worker_ip, msg.dreq.remote_qpn);
            if (i < params.n_conns && i == carrier) {
                end_aggregate_leg();
            }
            if (i == params.n_conns) {
                // The carrier's resumed connection, the result source after a move.
                i = find_res_live(from_worker, worker_ip, msg.dreq.remote_qpn);
            }
            if (i < params.n_conns) {
                end_connection(i);
                ++counters.connections_ended;
                ++counters.leave_ended_dreq;
            }
        } else if (join_missing(attr, msg, src_ip, dst_ip)) {
            cm_claimed = true;
        } else if (params.replicate && carrier_open()) {
            follow_results(attr, msg, src_ip, dst_ip);
        }
        return;
    }
    if (attr == rc::cm::Attr::req && dst_ip == params.root_ip) {
        const uint8_t* inar = msg.req.private_data.data() + rc::cm::kCmaHeaderBytes;
        const uint16_t at = inar_request_conn(inar, *this);
        if (at == params.n_conns) {
            return;  // another job's, a rank not through this switch, or one refused
        }
        Connection& c = conns[at];
        if ((inar[kInarFlags] & 1) != 0 && session != 0 && c.session == session &&
            rc::psn_diff(c.next_chunk, be32(inar + kInarResumeFrom)) > 0) {
            // A rank of this session resuming: everything below next_chunk the switch ACKed as
            // the root, and it reaches the root in an aggregate the root cannot attribute to
            // the rank. A worker that kept its state says as much (it waited for those ACKs);
            // a restarted process says 0: the switch says it for it, so nothing is added twice.
            req_resume_from = c.next_chunk;
        }
        if (c.live && c.params.worker_ip == src_ip && c.params.worker_qpn == msg.req.local_qpn) {
            // A retransmitted REQ of a connection already live: this switch saw the REP, which
            // was then lost or slow on the way to the worker. The root answers with the same
            // REP, so there is nothing to learn; learning again would reset the worker leg of a
            // connection whose WRITEs may already be absorbed (seen under netem loss in
            // roce-vm-s2s-allreduce).
            return;
        }
        // Only noted (a retransmitted REQ whose REP this switch has not seen yet: once): the
        // root may still refuse it (REJ), and until its REP nothing of the session or of a
        // live connection of this rank changes.
        note_request(c, msg.req, inar, src_ip, cm_branch);
        return;
    }
    if (attr == rc::cm::Attr::rep && src_ip == params.root_ip) {
        for (uint16_t i = 0; i < params.n_conns; ++i) {
            Connection& c = conns[i];
            if (c.pending && c.req.ip == dst_ip &&
                c.req.comm_id == msg.rep.remote_comm_id) {
                if (rep_resumes(msg.rep.private_data.data(), params.job_id)) {
                    // The root took the rank back into the running AllReduce: the worker
                    // WRITEs on from a chunk the root chose, straight to the root. Nobody
                    // aggregates on the new connection (no state could complete a chunk with
                    // it: the other ranks stay on their connections); the rank's old one
                    // leaves this session, which drains and is translated (supersede). A
                    // fresh state takes the job's next session.
                    c.pending = false;
                    ++counters.rejoin_resumed;
                    resumed[i] = Resumed{dst_ip, c.req.qpn, msg.rep.local_qpn};
                    if (session != 0 && c.session == session) {
                        supersede(i, src_ip, dst_ip, mad, len, msg.rep.local_qpn,
                                  msg.rep.starting_psn, t_ns, true,
                                  msg.rep.private_data.data());
                    }
                    return;
                }
                if (!start_session_if_new(i)) {
                    supersede(i, src_ip, dst_ip, mad, len, msg.rep.local_qpn,
                              msg.rep.starting_psn, t_ns);
                    return;
                }
                c.params.root_psn = c.req.root_psn;
                c.params.result_addr = c.req.result_addr;
                c.params.result_rkey = c.req.result_rkey;
                // The active side (the worker) sends from the REP's starting PSN (docs/rdma.md
                // "RDMA CM messages").
                go_live(i, dst_ip, c.req.qpn, msg.rep.local_qpn, msg.rep.starting_psn);
                return;
            }
        }
        return;
    }
    if (attr == rc::cm::Attr::rej) {
        for (uint16_t i = 0; i < params.n_conns; ++i) {
            Connection& c = conns[i];
            if (c.pending && (c.req.comm_id == msg.rej.remote_comm_id ||
                              c.req.comm_id == msg.rej.local_comm_id)) {
                c.pending = false;
            }
        }
        return;
    }
    if (attr == rc::cm::Attr::dreq) {
        // From the worker: remote_qpn is the root's QPN; from the root: the worker's.
        const bool from_worker = dst_ip == params.root_ip;
        const uint32_t worker_ip = from_worker ? src_ip : dst_ip;
        const uint16_t i = find_live(from_worker, worker_ip, msg.dreq.remote_qpn);
        if (i < params.n_conns) {
            end_connection(i);
            ++counters.connections_ended;
            if (i == carrier) {
                end_aggregate_leg();
            }
        }
    }
}

namespace {

// The neighbouring switch `worker` is routed through (its address), 0 when none: the worker is
// this switch's own (docs/rdma.md "Several switches"). Read once per CM packet, not per data
// packet.
uint32_t branch_of(const dp::Snapshot& snap, const S2sView& view, uint32_t worker) {
    if (view.switches.empty()) {
        return 0;
    }
    const dp::NextHop* nh = snap.route(worker);
    return nh != nullptr && nh->kind == dp::NextHopKind::gateway && view.is_switch(nh->gateway)
               ? nh->gateway
               : 0;
}

}  // namespace

uint16_t s2s_input(LcoreContext& ctx, const dp::Snapshot& snap, rte_mbuf** pkts, uint16_t n,
                   FeatureEdge pass, EdgeBatches<FeatureEdge>& out) {
    const S2sView* view = snap.feature_view<S2sView>(kFeatureS2s);
    Burst b{ctx, snap, out, now_ns(ctx)};
    uint16_t i = 0;
    for (; i < n; ++i) {
        // Room for this input's own frames, one ACK per connection owed one so far, and this
        // one's.
        if (!out.room_for(static_cast<uint16_t>(kS2sEmitPerInput + b.n_conns + 1))) {
            break;
        }
        rte_mbuf* m = pkts[i];
        const pipeline::PacketMeta* pm = pipeline::classified(m);
        if (pm == nullptr || (pm->flags & pipeline::kMetaUdpSound) == 0 || view == nullptr ||
            pm->l4_length < sizeof(rte_udp_hdr)) {
            out.push(pass, m);
            continue;
        }
        const auto* ip = rte_pktmbuf_mtod_offset(m, const rte_ipv4_hdr*, pm->l3_offset);
        const uint32_t len = pm->l4_length - sizeof(rte_udp_hdr);
        // In place when the datagram sits in the first segment, else gathered into scratch.
        const auto* bytes = len <= kPayloadAt
                                ? static_cast<const uint8_t*>(rte_pktmbuf_read(
                                      m, static_cast<uint32_t>(pm->l4_offset + sizeof(rte_udp_hdr)),
                                      len, ctx.scratch.data()))
                                : nullptr;
        const rc::ParseResult parsed = bytes != nullptr ? rc::parse(bytes, len) : rc::ParseResult{};
        if (!parsed.packet) {
            ++lcore_counter(ctx, LcoreCounter::malformed);  // not ours to judge: forwarded
            out.push(pass, m);
            continue;
        }
        const rc::Packet& p = *parsed.packet;
        const uint32_t src = rte_be_to_cpu_32(ip->src_addr);
        const uint32_t dst = rte_be_to_cpu_32(ip->dst_addr);
        const ConnView* cv = view->find(ConnKey{src, dst, p.bth.dest_qp});
        const LearnView* lv = cv == nullptr ? view->learning_root(src, dst) : nullptr;
        // Removed learning jobs on this root that still translate the connections they knew.
        const LearnView* gone[kMaxLeavingPerRoot];
        const uint16_t n_gone =
            cv == nullptr ? view->leaving_roots(src, dst, gone, kMaxLeavingPerRoot) : 0;
        const LearnView* any_lv = lv != nullptr ? lv : n_gone != 0 ? gone[0] : nullptr;
        if (cv == nullptr && any_lv == nullptr) {
            ++lcore_counter(ctx, LcoreCounter::passed);  // RoCE of no job: bit for bit
            out.push(pass, m);
            continue;
        }
        const uint8_t opcode = p.bth.opcode;
        const bool to_root = cv != nullptr ? cv->dir == Direction::to_root
                                           : dst == any_lv->root_ip;
        const bool cm = cv == nullptr && p.bth.dest_qp == rc::cm::kCmQpn;
        // What the switch takes part in: the worker's requests toward the root, and the root's
        // ACK/NAKs and CNPs toward the worker (and, learning, the CM exchange it reads). The
        // other direction's PSN space (the root's result WRITEs and the workers' ACKs of them,
        // the workers' CNPs) passes untouched.
        // Replication (replicate: true) takes the other PSN space too: the root's result WRITEs
        // (copied from the carrier), the workers' ACKs of them and their CNPs (to the root).
        // With several jobs on one root (a configured one and leaving ones) the packet is
        // taken if any of them may want it; the one whose connection it is decides below.
        bool any_replicate = cv != nullptr ? cv->replicate : lv != nullptr && lv->replicate;
        for (uint16_t g = 0; g < n_gone; ++g) {
            any_replicate = any_replicate || gone[g]->replicate;
        }
        const auto is_result = [&](bool replicate) {
            return replicate && !cm &&
                   (to_root ? (opcode == rc::op::kAcknowledge || opcode == rc::op::kCnp)
                            : write_request(opcode));
        };
        // The root's result WRITEs on a learned connection are taken without replication too,
        // only to be looked at and passed: one that names a chunk whose aggregate the root has
        // not acknowledged shows that the root holds it (below; every packet of the WRITEs, so
        // that none overtakes another on the way to the home lcore).
        const bool root_result = !to_root && !cm && write_request(opcode);
        const bool ours = cm || is_result(any_replicate) || (root_result && cv == nullptr) ||
                          (to_root ? rc_request(opcode)
                                   : (opcode == rc::op::kAcknowledge || opcode == rc::op::kCnp));
        if (!ours) {
            ++lcore_counter(ctx, LcoreCounter::passed);
            out.push(pass, m);
            continue;
        }
        // A configured job on the root of a leaving one has the leaving one's home lcore.
        const uint16_t home = cv != nullptr ? cv->home : any_lv->home;
        if (ctx.n_workers > 1 && home != ctx.worker_index) {
            // The job's state lives on its home lcore: the packet re-enters its pipeline there.
            if (home < ctx.handoff.size() && ctx.handoff[home] != nullptr &&
                rte_ring_sp_enqueue(ctx.handoff[home], m) == 0) {
                ++lcore_counter(ctx, LcoreCounter::handed_off);
            } else {
                ++lcore_counter(ctx, LcoreCounter::handoff_full);
                out.push(FeatureEdge::drop, m);
            }
            continue;
        }
        const auto state_of = [&](uint16_t slot, uint32_t job_id) {
            return static_cast<JobState*>(
                ctx.feature_state(slot, kFeatureS2s, job_state_id(job_id)));
        };
        if (root_result && !any_replicate) {
            // Not replicating: the root's result WRITE passes untouched whatever it names. Only
            // one naming a chunk whose aggregate a state awaits the root's ACK of (rare: that
            // ACK is lost or still on its way) is looked at further: on a connection of that
            // state's session, its ICRC sound, it shows the root holds the aggregate.
            const auto note = [&](JobState* st) {
                uint32_t key = 0;
                if (st == nullptr || st->left.load(std::memory_order_relaxed) ||
                    !st->awaits_root_result(p, key) ||
                    st->find_in_results(false, dst, p.bth.dest_qp) == st->params.n_conns) {
                    return false;
                }
                if (rc::icrc(m, pm->l3_offset) == p.icrc) {
                    st->root_result_seen(key);
                }
                return true;
            };
            bool noted = false;
            for (uint16_t g = 0; g < n_gone && !noted; ++g) {
                noted = note(state_of(gone[g]->slot, gone[g]->job_id));
            }
            if (JobState* st = lv != nullptr ? state_of(lv->slot, lv->job_id) : nullptr;
                !noted && st != nullptr && !note(st) && st->superseded) {
                note(st->successor);
            }
            ++lcore_counter(ctx, LcoreCounter::passed);
            out.push(pass, m);
            continue;
        }
        if (cm) {
            // The CM exchange passes untouched; a valid one teaches the job its connection (a
            // leaving job only hears its connections' DREQs; a superseded one keeps the rest for
            // its successor until that is attached).
            if (opcode == rc::op::kUdSendOnly && rc::icrc(m, pm->l3_offset) == p.icrc) {
                const uint8_t* mad = bytes + p.header_bytes;
                const uint32_t branch = branch_of(snap, *view, to_root ? src : dst);
                JobState* learner = lv != nullptr ? state_of(lv->slot, lv->job_id) : nullptr;
                if (learner != nullptr) {
                    learner->adopt_predecessor();
                }
                JobState* waiting = nullptr;
                bool claimed = false;
                for (uint16_t g = 0; g < n_gone; ++g) {
                    if (JobState* st = state_of(gone[g]->slot, gone[g]->job_id);
                        st != nullptr && !st->left.load(std::memory_order_relaxed)) {
                        st->leave_last_ns = b.t_ns;
                        st->cm_claimed = false;
                        st->cm_branch = branch;
                        st->snoop_cm(src, dst, mad, p.payload_bytes, true);
                        claimed = claimed || st->cm_claimed;
                        waiting = st->awaiting_successor() ? st : waiting;
                    }
                }
                if (claimed) {
                    // A rank joining a session a resume left waiting for it: not the next one.
                } else if (learner != nullptr) {
                    learner->req_resume_from = 0;
                    learner->cm_branch = branch;
                    learner->snoop_cm(src, dst, mad, p.payload_bytes, false, b.t_ns);
                    b.touch(*learner);  // a rejoin's partial aggregates go at the burst's end
                    if (learner->req_resume_from != 0 &&
                        raise_resume_from(m, *pm, p, learner->req_resume_from)) {
                        ++learner->counters.rejoin_resume_raised;
                    }
                } else if (waiting != nullptr) {
                    // The snapshot names the successor, whose attach has not arrived yet.
                    waiting->cm_branch = branch;
                    waiting->note(src, dst, mad, p.payload_bytes);
                }
            }
            ++lcore_counter(ctx, LcoreCounter::passed);
            out.push(pass, m);
            continue;
        }
        const uint32_t worker = to_root ? src : dst;
        JobState* job = nullptr;
        uint16_t conn = 0;
        bool result_path = false;
        bool leaving = false;
        bool draining = false;
        // A superseded state whose successor is not attached yet: the next session's packets
        // are held back (docs/rdma.md "A worker that reconnects alone").
        JobState* waiting = nullptr;
        const auto find_conn = [&](const JobState& st, bool res) {
            return res ? st.find_in_results(to_root, worker, p.bth.dest_qp)
                       : st.find_live(to_root, worker, p.bth.dest_qp);
        };
        if (cv != nullptr) {
            job = state_of(cv->slot, cv->job_id);
            conn = cv->conn;
            result_path = is_result(cv->replicate);
            leaving = cv->leaving;
            draining = cv->drain || cv->leaving;
        } else {
            // A leaving job keeps the connections it knew; every other one is the configured
            // job's (docs/rdma.md "Leaving a job").
            for (uint16_t g = 0; g < n_gone && job == nullptr; ++g) {
                JobState* st = state_of(gone[g]->slot, gone[g]->job_id);
                if (st == nullptr) {
                    continue;
                }
                waiting = st->awaiting_successor() ? st : waiting;
                const bool res = is_result(gone[g]->replicate);
                const uint16_t at = find_conn(*st, res);
                if (at < st->params.n_conns) {
                    job = st;
                    conn = at;
                    result_path = res;
                    leaving = draining = true;
                }
            }
            if (job == nullptr && lv != nullptr) {
                job = state_of(lv->slot, lv->job_id);
                result_path = is_result(lv->replicate);
                draining = lv->drain;
                if (job != nullptr) {
                    job->adopt_predecessor();
                    conn = find_conn(*job, result_path);
                }
                if (job != nullptr && job->superseded && conn < job->params.n_conns) {
                    // The snapshot still names the superseded state: its own connections
                    // leave with it.
                    leaving = draining = true;
                } else if (job != nullptr && job->superseded) {
                    // Any other is the next session's: the successor's once attached.
                    JobState* next = job->successor;
                    waiting = job->awaiting_successor() ? job : waiting;
                    job = next;
                    if (next != nullptr) {
                        conn = find_conn(*next, result_path);
                    }
                }
            } else if (job == nullptr && waiting == nullptr) {
                ++lcore_counter(ctx, LcoreCounter::passed);  // no connection of a leaving job
                out.push(pass, m);
                continue;
            }
        }
        if (job == nullptr && waiting != nullptr) {
            b.hold(*waiting, m, *pm, p, to_root, worker, pass);
            continue;
        }
        if (job == nullptr || (cv != nullptr && conn >= job->params.n_conns)) {
            // No state (not attached yet, or lost): the endpoints' own transport carries on.
            ++lcore_counter(ctx, LcoreCounter::fallback);
            out.push(pass, m);
            continue;
        }
        const bool request_leg = to_root ? rc_request(opcode)
                                         : (opcode == rc::op::kAcknowledge || opcode == rc::op::kCnp);
        if (!result_path && !request_leg) {
            ++lcore_counter(ctx, LcoreCounter::passed);  // a result path this job does not take
            out.push(pass, m);
            continue;
        }
        if (conn >= job->params.n_conns) {
            ++lcore_counter(ctx, LcoreCounter::passed);  // to or from the root, no connection
            out.push(pass, m);
            continue;
        }
        if (leaving) {
            if (job->left.load(std::memory_order_relaxed)) {
                // Over (every DREQ seen, or idle past the timeout): the state awaits release.
                ++job->counters.leave_passed;
                out.push(pass, m);
                continue;
            }
            job->leave_last_ns = b.t_ns;
        }
        if (rc::icrc(m, pm->l3_offset) != p.icrc) {
            ++job->counters.icrc_errors;  // the endpoint would drop it too
            out.push(FeatureEdge::drop, m);
            continue;
        }
        Connection& c = job->conns[conn];
        if (result_path && !job->carrier_open()) {
            // Learning, the carrier not connected in this session (yet): nothing to copy from
            // or to answer on; the packet is the endpoints' own. Once it was, the leg stays open
            // after its DREQ: the root still waits for its last results to be acknowledged.
            ++lcore_counter(ctx, LcoreCounter::passed);
            out.push(pass, m);
            continue;
        }
        if (result_path) {
            // Independent of the aggregation and of a drain: the root writes once all along.
            if (!to_root) {
                if (uint32_t key = 0; job->awaits_root_result(p, key)) {
                    job->root_result_seen(key);  // (its ICRC checked above)
                }
                if (conn == 0) {
                    b.replicate(*job, m, *pm, p);
                }
                ++lcore_counter(ctx, LcoreCounter::passed);  // the carrier's own copy
                out.push(pass, m);
            } else if (opcode == rc::op::kAcknowledge) {
                if (conn == 0) {
                    job->root_port = m->port;
                }
                b.on_result_ack(*job, conn, p);
                out.push(FeatureEdge::drop, m);
            } else if (conn == 0) {
                out.push(pass, m);  // a CNP for the carrier's own QP
            } else {
                b.forward_cnp(*job);
                out.push(FeatureEdge::drop, m);
            }
            continue;
        }
        if (draining && job->try_forwarding()) {
            // Left: the endpoints talk directly again, each PSN (and the root's MSN) moved
            // into the other side's space. What the switch absorbed earlier stays its to ACK.
            if (to_root && rc::psn_diff(p.bth.psn, c.leg.epsn) < 0) {
                c.last_port = m->port;
                ++job->counters.duplicates;
                b.reply(*job, c, rc::Reply{rc::aeth::kAckUnlimited,
                                           rc::psn_add(c.leg.epsn, 0xFFFFFF), c.leg.msn});
                out.push(FeatureEdge::drop, m);
                continue;
            }
            bool ok = true;
            if (to_root) {
                ok = translate(m, pm->l3_offset, pm->l4_offset,
                               rc::psn_add(p.bth.psn, c.fwd_psn_delta), nullptr);
            } else if (opcode == rc::op::kAcknowledge) {
                const uint32_t msn = (p.aeth.msn - c.fwd_msn_delta) & 0xFFFFFF;
                ok = translate(m, pm->l3_offset, pm->l4_offset,
                               rc::psn_add(p.bth.psn, (0x1000000 - c.fwd_psn_delta) & 0xFFFFFF),
                               &msn);
            }
            ++job->counters.forwarded;
            if (leaving && !c.leave_translated) {
                c.leave_translated = true;
                ++job->counters.leave_connections_translated;
            }
            out.push(ok ? pass : FeatureEdge::drop, m);
            continue;
        }
        if (to_root) {
            c.last_port = m->port;
            if (conn == job->carrier) {
                job->root_port = m->port;
            }
            b.on_worker_request(*job, conn, p, bytes + p.header_bytes,
                                rc::ce_marked(ip->type_of_service), draining);
        } else if (opcode == rc::op::kAcknowledge) {
            b.on_root_response(*job, conn, p);
        } else if (conn == job->carrier) {
            b.fan_out_cnp(*job);
        } else {
            // A root CNP on a connection that carries nothing to it: not ours after all.
            out.push(pass, m);
            continue;
        }
        out.push(FeatureEdge::drop, m);  // consumed: what it causes was emitted or is owed
    }
    b.finish();
    return i;
}

void s2s_tick(LcoreContext& ctx, const dp::Snapshot& snap, void* state, uint64_t) {
    JobState& job = *static_cast<JobState*>(state);
    const uint64_t t = now_ns(ctx);
    job.adopt_predecessor();  // a fresh state for a rejoin: what its predecessor noted
    job.leave_tick(t);
    if (!job.leg_ended) {
        job.root_leg.tick(t);
    }
    if (job.res_moved) {
        send_due_fills(ctx, snap, job, t);
    }
    rte_mbuf* frames[pipeline::kMaxBurst];
    uint16_t n = 0;
    rte_mbuf* m = nullptr;
    // At most one burst of packets per tick, frames or not (an empty pool gives none).
    for (uint16_t tries = 0; tries < pipeline::kMaxBurst && next_aggregate(ctx, job, t, m);
         ++tries) {
        if (m != nullptr) {
            frames[n++] = m;
        }
    }
    if (n != 0) {
        pipeline::route_emitted(ctx, snap, frames, n);
    }
}

pipeline::FeatureStage stage() {
    pipeline::FeatureStage s;
    s.name = "roce_s2s";
    s.input = s2s_input;
    s.max_emit = kS2sEmitPerInput + 1;
    s.tick = s2s_tick;
    s.tick_us = 100;
    return s;
}

}  // namespace ina::features::roce_s2s
