// SPDX-License-Identifier: Apache-2.0
#include "features/roce/datapath_roce.h"

#include <rte_ip.h>
#include <rte_ring.h>
#include <rte_udp.h>

#include <algorithm>
#include <array>
#include <bit>
#include <cstring>
#include <stdexcept>
#include <utility>

#include "pipeline/mbuf_chain.h"
#include "pipeline/originate.h"
#include "pipeline/packet_meta.h"
#include "pipeline/pipeline.h"
#include "roce/cm.h"
#include "roce/crc32.h"
#include "roce/icrc.h"
#include "roce/wire.h"

namespace ina::features::roce {

namespace rc = ina::roce;
using pipeline::EdgeBatches;
using pipeline::FeatureEdge;
using pipeline::LcoreContext;

namespace {

// Where a result packet's payload and its frame are built in the lcore's scratch (a packet's
// payload is at most the PMTU, 4096 bytes, a frame at most 14 + 20 + 8 + 12 + 16 + 4 + 4096 + 4).
constexpr size_t kFrameAt = 0;
constexpr size_t kPayloadAt = 8192;
static_assert(kPayloadAt + 4096 <= LcoreContext::kScratchBytes);

agg::AckParams ack_params(const JobParams& p, const ParentParams& parent) {
    if (p.world == 0 || p.world > kMaxRanks) {
        throw std::invalid_argument("rdma job: world out of range");
    }
    agg::AckParams a;
    std::vector<wire::BfrId> ranks;
    for (uint16_t r = 1; r <= p.world; ++r) {
        ranks.push_back(static_cast<wire::BfrId>(r));
    }
    a.core.contributors = *wire::BitString::from_bfr_ids(kContributorBsl, 0, ranks);
    a.core.op = p.op;
    a.core.elem_type = p.dtype;
    a.core.max_elems = static_cast<uint32_t>(p.chunk_bytes / reduce::elem_size(p.dtype));
    a.core.slots = p.window;
    a.core.deterministic = p.deterministic;
    a.core.fraction_bits = p.fraction_bits;
    a.receivers = a.core.contributors;
    // Results are retransmitted by each QP's requester (go-back-N), not by the table's sweep;
    // an aggregator's sweep re-sends partials the parent has not answered (parent_tick).
    a.retransmit_timeout = parent.parent_ip != 0 ? parent.timeout_ns : UINT64_MAX / 2;
    return a;
}

uint64_t& lcore_counter(LcoreContext& ctx, LcoreCounter c) {
    return ctx.feature_counters[kFeatureRoce][static_cast<size_t>(c)];
}

// Hiding the ICRC check (bench/notes.md "roce-rate2"): the CRC is bound by the carry-less
// multiplier, the add by loads, adds and stores on other ports, so one pass doing both costs
// what the CRC does. A contribution must not touch its slot before its own ICRC is known good,
// so the pass pairs two packets: while packet i (checked) is added, the ICRC of packet i + 1 of
// the burst is folded (roce_input arms `t_next_check`; the job's table calls the fused kernels
// below through its kernel table). Packet i + 1 then compares that CRC, or sums its own when
// no add carried it (no contribution, another type, no VPCLMULQDQ).
struct NextCheck {
    rc::IcrcSpan span;
    const rte_mbuf* m = nullptr;  // the packet whose ICRC this is
    uint32_t crc = 0;
    bool done = false;
};
// Per lcore (each worker thread its own): set only around one packet's responder and add.
thread_local NextCheck* t_next_check = nullptr;

// The element types whose sum the fused pass computes (rc::FusedAdd), and the process table's
// own kernels of each, written once: the fallback when no add carries a check.
constexpr std::array<std::pair<reduce::ElemType, rc::FusedAdd>, 4> kFusedTypes{{
    {reduce::ElemType::fp32, rc::FusedAdd::fp32},
    {reduce::ElemType::int32, rc::FusedAdd::int32},
    {reduce::ElemType::fp16, rc::FusedAdd::fp16},
    {reduce::ElemType::bf16, rc::FusedAdd::bf16},
}};
std::array<reduce::TypeKernels, kFusedTypes.size()> g_plain;

template <size_t kType, bool kFirst>
void fused(void* acc, const void* in, size_t n) {
    NextCheck* c = t_next_check;
    if (c != nullptr && !c->done &&
        rc::crc32_masked_with_add(c->crc, c->span.start, c->span.len, c->span.mask,
                                  kFusedTypes[kType].second, acc, in, n, kFirst)) {
        c->done = true;
        return;
    }
    if (kFirst) {
        g_plain[kType].load(acc, in, n);
    } else {
        g_plain[kType].accumulate(acc, in, n, reduce::Op::sum);
    }
}

template <size_t kType>
void install_fused(reduce::Kernels& k) {
    reduce::TypeKernels& t = k.types[static_cast<size_t>(kFusedTypes[kType].first)];
    g_plain[kType] = t;
    t.load = fused<kType, true>;
    t.accumulate_fn[static_cast<size_t>(reduce::Op::sum)] = fused<kType, false>;
}

// The kernel table of a job whose adds carry the next packet's ICRC (a sum of fp32, int32, fp16
// or bf16 on a CPU with VPCLMULQDQ: crc32_masked_with_add's sum is the reduce library's, bit
// for bit); the process table otherwise.
bool fuses(const JobParams& p) {
    const bool type_fuses = std::any_of(kFusedTypes.begin(), kFusedTypes.end(),
                                        [&](const auto& t) { return t.first == p.dtype; });
    // A deterministic job's slots quantize instead of adding floats: the fused kernels, which
    // check the next packet's ICRC inside the float add, would never run.
    return type_fuses && p.op == reduce::Op::sum && !p.deterministic &&
           rc::crc32_isa() == rc::CrcIsa::vpclmul512;
}
const reduce::Kernels& job_kernels(const JobParams& p) {
    static const reduce::Kernels table = [] {
        reduce::Kernels k = reduce::kernels();
        install_fused<0>(k);
        install_fused<1>(k);
        install_fused<2>(k);
        install_fused<3>(k);
        return k;
    }();
    return fuses(p) ? table : reduce::kernels();
}

}  // namespace

rte_mbuf* frame_of(LcoreContext& ctx, const uint8_t* bytes, size_t len, uint16_t port) {
    rte_mbuf* m = pipeline::originated_frame(ctx.pool, bytes, len, port);
    if (m == nullptr) [[unlikely]] {
        ++lcore_counter(ctx, LcoreCounter::no_mbuf);
    }
    return m;
}

namespace {

constexpr uint8_t kZeroMac[6] = {0, 0, 0, 0, 0, 0};  // routing writes both MACs

// A fresh mbuf of ctx's pool (nullptr, counted, when the pool is empty).
rte_mbuf* fresh_mbuf(LcoreContext& ctx) {
    rte_mbuf* m = rte_pktmbuf_alloc(ctx.pool);
    if (m == nullptr) [[unlikely]] {
        ++lcore_counter(ctx, LcoreCounter::no_mbuf);
    }
    return m;
}

// m, built in place with `len` bytes, as one of q's frames: sent from q's port, marked
// originated (routing keeps its TTL).
rte_mbuf* originated(rte_mbuf* m, size_t len, const QpState& q) {
    m->data_len = static_cast<uint16_t>(len);
    m->pkt_len = static_cast<uint32_t>(len);
    m->port = q.last_port;
    m->ol_flags = pipeline::g_originated_flag;
    return m;
}

// q's ACK/NAK (from its template) or CNP (encode_cnp_frame, its ICRC in one pass over the
// frame) written straight into a fresh mbuf: no frame on the stack copied in.
template <class Encode>
rte_mbuf* small_frame(LcoreContext& ctx, QpState& q, Encode encode) {
    rte_mbuf* m = fresh_mbuf(ctx);
    if (m == nullptr) [[unlikely]] {
        return nullptr;
    }
    const size_t len = encode(rte_pktmbuf_mtod(m, uint8_t*), rte_pktmbuf_tailroom(m));
    if (len == 0) [[unlikely]] {
        rte_pktmbuf_free(m);  // never: an mbuf's data room holds far more than 74 bytes
        ++lcore_counter(ctx, LcoreCounter::no_mbuf);
        return nullptr;
    }
    ++q.ip_id;
    q.counters.packets_out += 1;
    q.counters.bytes_out += len - rc::kEthernetBytes;
    return originated(m, len, q);
}

// From the QP's template: no header encoding, no CRC pass (rc::AckFrameTemplate).
rte_mbuf* ack_frame(LcoreContext& ctx, QpState& q, const rc::Reply& reply) {
    return small_frame(ctx, q, [&](uint8_t* d, size_t room) {
        return q.ack.write(d, room, q.ip_id, reply);
    });
}

rte_mbuf* cnp_frame(LcoreContext& ctx, QpState& q) {
    return small_frame(ctx, q, [&](uint8_t* d, size_t room) {
        return q.params.ipv6 ? rc::encode_cnp_frame(d, room, kZeroMac, kZeroMac, q.path6)
                             : rc::encode_cnp_frame(d, room, kZeroMac, kZeroMac, q.path, q.ip_id);
    });
}

// The Ethernet header and a result WRITE's headers for q's family; 0 when they do not fit.
size_t result_headers(uint8_t* d, size_t room, const QpState& q, const rc::Transmit& tx,
                      size_t& l2) {
    l2 = rc::write_ethernet(d, room, kZeroMac, kZeroMac,
                            q.params.ipv6 ? rc::kEthertypeIpv6 : rc::kEthertypeIpv4);
    if (l2 == 0) {
        return 0;
    }
    return q.params.ipv6 ? rc::write_request_headers(d + l2, room - l2, q.path6, tx)
                         : rc::write_request_headers(d + l2, room - l2, q.path, q.ip_id, tx);
}

void count_reply(QpState& q, const rc::Reply& r) {
    switch (rc::aeth::kind(r.syndrome)) {
    case rc::aeth::Kind::ack: ++q.counters.acks_sent; break;
    case rc::aeth::Kind::rnr_nak: ++q.counters.rnr_naks_sent; break;
    default: ++q.counters.naks_sent; break;
    }
}

void count_result(QpState& q, const rc::Transmit& tx, size_t l3) {
    if (tx.retransmission) {
        ++q.counters.retransmissions;
    } else if (tx.length != 0) {
        ++q.counters.results_sent;  // (a failure notice counts where it is posted)
    }
    q.counters.packets_out += 1;
    q.counters.bytes_out += l3;
}

// The ICRC of result WRITE packet tx, of l3_bytes with `headers` header bytes at l3 behind an
// Ethernet header (its payload and pad in place). A whole segment's (every packet but the last
// of a short final chunk): the rank's headers summed and joined to the segment payload's CRC,
// summed once per (key, segment) for all ranks; any other length: one pass over the frame.
uint32_t result_write_icrc(JobState& job, uint8_t* l3, size_t headers, size_t l3_bytes,
                           const rc::Transmit& tx) {
    const size_t payload = l3_bytes - headers - rc::kIcrcBytes;  // with its pad
    // A whole chunk's result (every packet of a one-packet job) is segment 0: no division.
    const uint32_t segment =
        tx.offset == 0 ? 0 : static_cast<uint32_t>(tx.offset / job.segment_bytes);
    if (payload != job.result_icrc.payload_bytes() || segment >= job.segment_crc.size()) {
        return rc::icrc_in_frame(l3, l3_bytes);  // the Ethernet header before
    }
    const auto key = static_cast<uint32_t>(tx.cookie);
    JobState::SegmentCrc& c = job.segment_crc[segment];
    if (!c.valid || c.key != key) {
        c.crc = rc::icrc_payload(l3 + headers, payload);
        c.key = key;
        c.valid = true;
    }
    return job.result_icrc.join(rc::icrc_headers_in_frame(l3, headers), c.crc);
}

// The result bytes of packet tx (the slot's, or the parent's for an aggregator) written to
// `payload`; false (counted) when the result is not there: it left the table, which cannot be
// while the rank has not acknowledged it. The packet is then skipped, the worker's timeout or a
// later NAK brings the requester back.
[[gnu::always_inline]] inline bool result_bytes(QpState& q, const rc::Transmit& tx,
                                                uint8_t* payload) {
    if (tx.length == 0) [[unlikely]] {
        return true;  // a probe or a failure notice: no result bytes
    }
    const uint32_t shift = q.job->elem_shift;
    const uint32_t n = tx.length >> shift;
    if ((tx.length & ((1u << shift) - 1)) != 0 ||
        rank_result(*q.job, static_cast<uint32_t>(tx.cookie), tx.offset >> shift, n, payload) !=
            n) [[unlikely]] {
        ++q.counters.bad_contributions;
        return false;
    }
    return true;
}

// Result packet `tx` (any packet of the message: its offset and length) built in one fresh
// mbuf: headers written in place, its part of the rank's result stored straight behind them
// (its one copy), pad, ICRC in place. False when the frame does not fit one mbuf (the caller
// builds it in scratch); true otherwise, with `out` the frame or nullptr (no mbuf, or no
// result: counted).
bool result_in_place(LcoreContext& ctx, QpState& q, const rc::Transmit& tx, rte_mbuf*& out) {
    rte_mbuf* m = fresh_mbuf(ctx);
    if (m == nullptr) [[unlikely]] {
        return true;
    }
    const size_t room = rte_pktmbuf_tailroom(m);
    auto* d = rte_pktmbuf_mtod(m, uint8_t*);
    size_t l2 = 0;
    const size_t headers = result_headers(d, room, q, tx, l2);
    const uint32_t pad = rc::write_request_pad_bytes(tx.length);
    const size_t l3 = headers + tx.length + pad + rc::kIcrcBytes;
    if (headers == 0 || l2 + l3 > room) {
        rte_pktmbuf_free(m);
        return false;
    }
    uint8_t* payload = d + l2 + headers;
    if (!result_bytes(q, tx, payload)) [[unlikely]] {
        rte_pktmbuf_free(m);
        return true;
    }
    std::memset(payload + tx.length, 0, pad);
    rc::write_icrc(d + l2 + l3, result_write_icrc(*q.job, d + l2, headers, l3, tx));
    ++q.ip_id;
    count_result(q, tx, l3);
    out = originated(m, l2 + l3, q);
    return true;
}

// The next packet of q's requester as a frame, if one may go now; false when none may.
bool next_result(LcoreContext& ctx, QpState& q, uint64_t t_ns, rte_mbuf*& out) {
    rc::Transmit tx;
    // A QP whose receive side is in error (it sent a fatal NAK) is in error: nothing more goes.
    if (q.responder.state() != rc::Responder::State::ready || !q.requester.next(t_ns, tx)) {
        return false;
    }
    out = nullptr;
    if (result_in_place(ctx, q, tx, out)) {
        return true;
    }
    // A frame larger than one mbuf: its part of the result in scratch, the frame built behind
    // it and copied into a chain.
    uint8_t* payload = ctx.scratch.data() + kPayloadAt;
    if (!result_bytes(q, tx, payload)) [[unlikely]] {
        return true;
    }
    uint8_t* frame = ctx.scratch.data() + kFrameAt;
    const size_t l2 = rc::write_ethernet(frame, kPayloadAt, kZeroMac, kZeroMac,
                                         q.params.ipv6 ? rc::kEthertypeIpv6 : rc::kEthertypeIpv4);
    const size_t l3 =
        q.params.ipv6
            ? rc::encode_write(frame + l2, kPayloadAt - l2, q.path6, tx, payload)
            : rc::encode_write(frame + l2, kPayloadAt - l2, q.path, q.ip_id, tx, payload);
    ++q.ip_id;
    count_result(q, tx, l3);
    out = frame_of(ctx, frame, l2 + l3, q.last_port);
    return true;
}

// A unit completed: its result goes to every rank (posted now, sent as the requesters pump).
void post_results(JobState& job, uint32_t key, uint32_t length, uint64_t t_ns) {
    ++job.results_completed;
    const uint32_t s = key & 0xFFFFFF;
    for (uint16_t r = 1; r <= job.params.world; ++r) {
        QpState* q = job.rank_qp[r];
        if (q == nullptr) {
            ++job.post_failures;  // a rank without a QP here never acknowledges: slot stays
            continue;
        }
        const uint64_t chunks = q->params.result_length / job.params.chunk_bytes;
        rc::WriteRequest w;
        w.remote_va = q->params.result_addr + (s % chunks) * job.params.chunk_bytes;
        w.rkey = q->params.result_rkey;
        w.length = length;
        w.has_imm = true;
        w.imm = s << 8 | (job.params.world & 0xFF);
        w.cookie = key;
        uint64_t seq = 0;
        if (!q->requester.post(w, seq)) {
            ++job.post_failures;
            continue;
        }
        q->message_key[seq % q->message_key.size()] = key;
        q->control_message[seq % q->control_message.size()] = false;
    }
    job.table.mark_sent(key, t_ns);
}

// Posts q a zero-length WRITE to its result ring's start (with immediate `imm` if has_imm): a
// failure notice or a liveness probe. A control message: its ACK releases no key. False when the
// requester cannot take it.
bool post_control_write(QpState& q, bool has_imm, uint32_t imm = 0) {
    rc::WriteRequest w;
    w.remote_va = q.params.result_addr;
    w.rkey = q.params.result_rkey;
    w.length = 0;
    w.has_imm = has_imm;
    w.imm = imm;
    uint64_t seq = 0;
    if (!q.requester.post(w, seq)) {
        return false;
    }
    q.control_message[seq % q.control_message.size()] = true;
    return true;
}

// The session of q's job fails (the first QP to go into error; a rank that cannot go on
// leaves chunks no other rank can complete): every other rank's live QP gets a failure notice
// behind the results already posted to it (a zero-length WRITE with immediate: count 0, the
// failed rank, why), so its worker ends the call at once instead of at its deadline, as a
// collective library aborts a communicator. From here on the job takes no more requests.
void fail_session(JobState& job, uint16_t rank, uint8_t failure) {
    if (job.failed_rank != 0) {
        return;
    }
    job.failed_rank = rank;
    job.failure = failure;
    for (uint16_t r = 1; r <= job.params.world; ++r) {
        QpState* q = job.rank_qp[r];
        if (q == nullptr || r == rank || qp_state_code(*q) != 0) {
            continue;
        }
        if (post_control_write(*q, true, rdma::failure_notice_imm(rank, failure))) {
            ++q->counters.failure_notices;
        }
    }
}

// Probes q's worker when it has been silent for kProbeAfterSilenceNs while its job holds slots
// (others' contributions wait for it, or results for its ACK) and nothing is in flight to it
// (an outstanding result is a probe already): see kProbeAfterSilenceNs.
void probe_if_silent(QpState& q, uint64_t t_ns) {
    if (q.last_heard_ns == 0) {
        q.last_heard_ns = t_ns;  // the QP's first tick: silence counts from here
        return;
    }
    const JobState& job = *q.job;
    if (job.failed_rank != 0 || qp_state_code(q) != 0 || job.table.in_use() == 0 ||
        q.requester.posted_messages() != q.requester.completed_messages() ||
        t_ns - q.last_heard_ns < kProbeAfterSilenceNs ||
        t_ns - q.last_probe_ns < kProbeAfterSilenceNs) {
        return;
    }
    if (post_control_write(q, false)) {
        q.last_probe_ns = t_ns;
        ++q.counters.probes_sent;
    }
}

// Whether request p (a WRITE carrying its chunk's immediate) is for a chunk the rank that left
// never contributed to (JobState::left_rank), which can therefore never complete.
bool beyond_the_rank_that_left(JobState& job, const rc::Packet& p) {
    if (p.bth.opcode != rc::op::kWriteOnlyImm && p.bth.opcode != rc::op::kWriteLastImm) {
        return false;  // FIRST, MIDDLE: staged; the LAST decides
    }
    const uint32_t key = job.extend(p.imm >> 8);
    return !job.left_contributed || static_cast<int32_t>(key - job.left_high_key) > 0;
}

// Whether q (touched by a response, a request or its timer) has just failed its job's session.
bool fails_session(const QpState& q) { return q.job->failed_rank == 0 && qp_state_code(q) != 0; }

struct Burst {
    // Not an aggregate: `touched` is read in [0, n_touched) only, so it is left uncleared.
    Burst(LcoreContext& c, EdgeBatches<FeatureEdge>& o, uint64_t t) : ctx(c), out(o), t_ns(t) {}
    LcoreContext& ctx;
    EdgeBatches<FeatureEdge>& out;
    uint64_t t_ns;
    std::array<QpState*, pipeline::kMaxBurst * 2> touched;
    uint16_t n_touched = 0;
    const dp::Snapshot* snap = nullptr;  // set by the caller: routes of an aggregator's partials

    void touch(QpState& q) {
        if (q.touched || n_touched == touched.size()) {
            return;  // listed already (or, never with 64 inputs and 64 ranks, no room)
        }
        q.touched = true;
        touched[n_touched++] = &q;
    }
    void touch_ranks(JobState& job) {
        for (uint16_t r = 1; r <= job.params.world; ++r) {
            if (job.rank_qp[r] != nullptr) {
                touch(*job.rank_qp[r]);
            }
        }
    }
    void emit(rte_mbuf* m) {
        if (m != nullptr) {
            out.push(FeatureEdge::route, m);
        }
    }

    void on_response(QpState& q, const rc::Packet& p) {
        switch (rc::aeth::kind(p.aeth.syndrome)) {
        case rc::aeth::Kind::ack: ++q.counters.acks_received; break;
        case rc::aeth::Kind::rnr_nak: ++q.counters.rnr_naks_received; break;
        default: ++q.counters.naks_received; break;
        }
        const rc::ResponseOutcome o = q.requester.on_response(p, t_ns);
        JobState& job = *q.job;
        // A failed session's slots are never used again: its keys' ACKs are not counted.
        for (uint32_t k = 0; k < o.completed && job.failed_rank == 0; ++k) {
            const uint64_t seq = o.first_completed + k;
            if (q.control_message[seq % q.control_message.size()]) {
                continue;  // a probe's or a notice's: no key
            }
            const uint32_t key = q.message_key[seq % q.message_key.size()];
            if (job.table.ack(key, q.rank_bits.data()) == agg::AckResult::released) {
                ++job.results_released;
            }
        }
        touch(q);
    }

    void on_request(QpState& q, const rc::Packet& p, const uint8_t* payload, bool ce) {
        // One state per QP (IBA 10.3): with its result side in error (retries exhausted, a
        // fatal NAK) the QP is. The worker's next request is answered with NAK remote
        // operational error, which ends the worker's QP at once (rxe retransmits dropped WRITEs
        // until the worker's deadline, never counting them out: roce-vm-switch-allreduce round
        // 6); whatever follows it is dropped, never RNR-NAKed on a slot no result will free.
        if (q.requester.state() != rc::Requester::State::ready) [[unlikely]] {
            if (q.responder.state() == rc::Responder::State::ready) {
                const rc::Reply r = q.responder.fail(rc::aeth::kNakRemoteOperational);
                count_reply(q, r);
                emit(ack_frame(ctx, q, r));
            }
            ++q.counters.dropped_in_error;
            return;
        }
        JobState& job = *q.job;
        if ((job.left_rank | job.failed_rank) != 0) [[unlikely]] {  // one test on the common path
            // A chunk the rank that left never sent can never complete: the session fails.
            if (job.left_rank != 0 && beyond_the_rank_that_left(job, p)) {
                fail_session(job, job.left_rank, rdma::kFailureRankLeft);
                touch_ranks(job);
            }
            // Nothing of a failed session completes: the worker learns of it from the failure
            // notice (or, without reading it, from its own retries running out).
            if (job.failed_rank != 0 && q.responder.state() == rc::Responder::State::ready) {
                ++q.counters.dropped_session_failed;
                return;
            }
        }
        if (ce) {
            q.ce_pending = true;
            if (q.cnp.on_ce(t_ns)) {
                ++q.counters.cnps_sent;
                emit(cnp_frame(ctx, q));
            }
        }
        if (q.responder.posted_receives() < (1u << 20)) {
            q.responder.post_receives(1u << 30);  // the switch's receive queue never runs dry
        }
        // The common case, an in-order WRITE ONLY the responder takes as it stands, without
        // its general verdict (~85 instructions a contribution fewer, callgrind).
        rc::Placement w;
        if (q.responder.take_write_only(p, w)) [[likely]] {
            execute(q, w, payload);
            touch(q);
            return;
        }
        const rc::Verdict v = q.responder.receive(p);
        if (v.action == rc::Action::drop) {
            // Under loss most drops are the packets a requester had pipelined behind a gap
            // (RC drops them silently after the one NAK-sequence, and they come again): loss,
            // not a misbehaving worker, so they are not counted as refusals.
            ++(v.drop == rc::DropReason::nak_outstanding ? q.counters.out_of_sequence
               : v.drop == rc::DropReason::qp_error      ? q.counters.dropped_in_error
                                                          : q.counters.refused);
            return;
        }
        if (v.action == rc::Action::reply) {
            if (rc::aeth::kind(v.reply.syndrome) == rc::aeth::Kind::ack) {
                ++q.counters.duplicates;
            } else if (v.fatal) {
                ++q.counters.refused;
                if (v.reply.syndrome == rc::aeth::kNakInvalidRequest) {
                    ++q.counters.invalid_requests;
                } else if (v.reply.syndrome == rc::aeth::kNakRemoteAccess) {
                    ++q.counters.access_errors;
                }
            }
            count_reply(q, v.reply);
            emit(ack_frame(ctx, q, v.reply));
            if (v.fatal) {
                touch(q);  // its receive side is in error: the session fails (finish)
            }
            return;
        }
        if (v.where.first && v.where.last) {
            execute(q, v.where, payload);
        } else {
            execute_segment(q, v.where, payload);
        }
        touch(q);
    }

    // The packet of q's last execute verdict cannot be taken now: its RNR NAK, nothing
    // advances.
    void refuse(QpState& q) {
        const rc::Reply r = q.responder.refuse();
        count_reply(q, r);
        emit(ack_frame(ctx, q, r));
    }

    // Whether w, a whole WRITE message of `length` bytes from region offset `start` with w's
    // immediate, is one contribution of this job: the chunk s of its immediate, into s's slot
    // of the area, a whole number of elements, at most one chunk.
    static bool shaped(const JobState& job, const rc::Placement& w, uint64_t start,
                       uint64_t length) {
        const uint32_t elem = static_cast<uint32_t>(reduce::elem_size(job.params.dtype));
        const uint32_t s = w.imm >> 8;
        return w.write && w.last && w.has_imm && (w.imm & 0xFF) == 1 && length != 0 &&
               length <= job.params.chunk_bytes && length % elem == 0 &&
               start == uint64_t{s % job.params.window} * job.params.chunk_bytes;
    }

    // A packet of a multi-packet WRITE (the responder checked its place in the message: every
    // packet but the LAST exactly one PMTU, in PSN order). Staged at its message offset; the
    // LAST adds the staged chunk. Every packet but the LAST is committed at once: it is stored
    // (in the staging), so the ACK that may cover it says the truth.
    // Out of line: the one-packet path (execute) stays inlined into roce_input.
    [[gnu::noinline]] void execute_segment(QpState& q, const rc::Placement& w,
                                           const uint8_t* payload) {
        JobState& job = *q.job;
        if (w.first) {
            q.message_bad = false;
            // The slot the RETH names holds a complete result some rank has not acknowledged:
            // this rank contributed to it, so this message is a later chunk of that slot, whose
            // LAST would be refused. Refused here instead (RNR NAK for the FIRST): rxe resends
            // a refused LAST's whole WRITE from its FIRST, so refusing the LAST costs the
            // message's packets again each time.
            if (q.staging != nullptr && w.write && w.region_offset % job.params.chunk_bytes == 0 &&
                job.table.slot_complete(
                    static_cast<uint32_t>(w.region_offset / job.params.chunk_bytes))) {
                refuse(q);
                return;
            }
        }
        const uint64_t end = w.message_offset + w.length;
        if (q.staging == nullptr || !w.write || end > job.params.chunk_bytes) {
            q.message_bad = true;  // no multi-packet chunks in this job, a SEND, or too long
        }
        if (q.message_bad) {
            if (w.last) {
                ++q.counters.bad_contributions;  // once per message
            }
            q.responder.commit();
            return;
        }
        std::memcpy(q.staging.get() + w.message_offset, payload, w.length);
        if (!w.last) {
            ++q.counters.segments;
            q.responder.commit();
            return;
        }
        if (!shaped(job, w, w.region_offset - w.message_offset, end)) {
            ++q.counters.bad_contributions;
            q.responder.commit();
            return;
        }
        if (contribute(q, w, static_cast<uint32_t>(end), q.staging.get())) {
            ++q.counters.segments;  // a refused LAST comes again: counted when taken
        }
    }

    void execute(QpState& q, const rc::Placement& w, const uint8_t* payload) {
        if (!shaped(*q.job, w, w.region_offset, w.length)) {
            // Executed by RC rules (inside the area, in order) but no contribution: consumed
            // and counted, so the connection goes on.
            ++q.counters.bad_contributions;
            q.responder.commit();
            return;
        }
        contribute(q, w, w.length, payload);
    }

    // q's contribution to `key` is in: committed and counted, the QP's last key (its chunks come
    // in order; JobState::left_high_key when it leaves).
    static void took(QpState& q, uint32_t key) {
        ++q.counters.contributions;
        q.responder.commit();
        q.high_key = key;
        q.contributed = true;
    }

    // The chunk of w's immediate, `length` bytes at `payload`, added under its key; commits, or
    // refuses (RNR NAK) when its slot is busy. False when refused.
    [[gnu::always_inline]] bool contribute(QpState& q, const rc::Placement& w, uint32_t length,
                                           const uint8_t* payload) {
        JobState& job = *q.job;
        const uint32_t elem = static_cast<uint32_t>(reduce::elem_size(job.params.dtype));
        const uint32_t key = job.extend(w.imm >> 8);
        const agg::AckVerdict a = job.table.contribute(key, q.rank_bits.data(), length / elem,
                                                       payload, t_ns);
        if (q.ce_pending && (a == agg::AckVerdict::absorbed || a == agg::AckVerdict::completed)) {
            q.ce_pending = false;
            if (job.parent != nullptr) {
                job.parent->ce_key[job.parent->slot(key)] = key + 1;
            }
        }
        switch (a) {
        case agg::AckVerdict::absorbed:
            took(q, key);
            break;
        case agg::AckVerdict::completed:
            took(q, key);
            if (job.parent != nullptr) {
                send_partial(ctx, *snap, job, key, t_ns, out);  // the result comes from above
                break;
            }
            post_results(job, key, length, t_ns);
            touch_ranks(job);
            break;
        case agg::AckVerdict::no_slot: {
            // The slot still holds an older result some rank has not acknowledged:
            // back-pressure, the worker comes back with the same PSN after the RNR timer.
            refuse(q);
            return false;
        }
        default:
            // duplicate/overlap/stale/count_mismatch/...: nothing added; the packet is part
            // of the connection (its PSN was new), so it is acknowledged and counted.
            ++q.counters.bad_contributions;
            q.responder.commit();
            break;
        }
        return true;
    }

    // End of the burst: one coalesced ACK per touched QP, then as many result packets as the
    // edges have room for (the rest go at the next burst or tick).
    void finish() {
        // n_touched may grow in the loop: a failed session's QPs are pumped too.
        for (uint16_t i = 0; i < n_touched; ++i) {
            QpState& q = *touched[i];
            if (fails_session(q)) [[unlikely]] {
                fail_session(*q.job, q.params.rank, session_failure(q));
                touch_ranks(*q.job);
            }
            rc::Reply r;
            if (q.responder.take_ack(r)) {
                count_reply(q, r);
                emit(ack_frame(ctx, q, r));
            }
        }
        for (uint16_t i = 0; i < n_touched; ++i) {
            QpState& q = *touched[i];
            q.touched = false;
            rte_mbuf* m = nullptr;
            for (uint16_t tries = 0;
                 tries < pipeline::kMaxBurst && out.room_for(1) && next_result(ctx, q, t_ns, m);
                 ++tries) {
                emit(m);
            }
        }
    }
};

void drop(EdgeBatches<FeatureEdge>& out, rte_mbuf* m) { out.push(FeatureEdge::drop, m); }

}  // namespace

bool for_switch(const dp::Snapshot& snap, uint32_t dst) {
    const dp::NextHop* nh = snap.route(dst);
    return nh != nullptr && nh->kind == dp::NextHopKind::local;
}

bool for_switch6(const dp::Snapshot& snap, const uint8_t* dst6) {
    const dp::NextHop6* nh = snap.route6(dst6);
    return nh != nullptr && nh->kind == dp::NextHopKind::local;
}

bool away_from_home(LcoreContext& ctx, rte_mbuf* m, uint16_t home, EdgeBatches<FeatureEdge>& out) {
    if (ctx.n_workers <= 1 || home == ctx.worker_index) {
        return false;
    }
    // The job's QPs and slots live on its home lcore: the packet re-enters its pipeline there
    // unchanged (no lock, no shared QP state).
    if (home < ctx.handoff.size() && ctx.handoff[home] != nullptr &&
        rte_ring_sp_enqueue(ctx.handoff[home], m) == 0) {
        ++lcore_counter(ctx, LcoreCounter::handed_off);
    } else {
        ++lcore_counter(ctx, LcoreCounter::handoff_full);
        drop(out, m);
    }
    return true;
}

JobState::JobState(const JobParams& p, const ParentParams& up)
    : StateTag(StateKind::job),
      params(p),
      fused(fuses(p)),
      table(ack_params(p, up), job_kernels(p)),
      elem_shift(static_cast<uint8_t>(std::countr_zero(reduce::elem_size(p.dtype)))),
      segment_bytes(p.pmtu != 0 && p.chunk_bytes > p.pmtu ? p.pmtu : p.chunk_bytes),
      result_icrc(segment_bytes + rc::write_request_pad_bytes(segment_bytes)),
      segment_crc((p.chunk_bytes + segment_bytes - 1) / segment_bytes) {
    if (p.chunk_bytes == 0 || p.chunk_bytes > kMaxStagedBytes) {
        throw std::invalid_argument("rdma job: chunk_bytes out of range");
    }
    if (up.parent_ip != 0) {
        parent = std::make_unique<ParentLink>(up, p.window, p.chunk_bytes, segment_bytes);
    }
}

void deliver_result(LcoreContext& ctx, const dp::Snapshot& snap, JobState& job, uint32_t key,
                    uint32_t length, EdgeBatches<FeatureEdge>& out) {
    Burst b{ctx, out, now_ns(ctx)};
    b.snap = &snap;
    post_results(job, key, length, b.t_ns);
    b.touch_ranks(job);
    b.finish();
}

uint32_t JobState::extend(uint32_t s) {
    s &= 0xFFFFFF;
    if (!any_key) {
        any_key = true;
        high_key = s;
        return s;
    }
    const uint32_t key = high_key + static_cast<uint32_t>(rc::psn_diff(s, high_key & 0xFFFFFF));
    if (static_cast<int32_t>(key - high_key) > 0) {
        high_key = key;
    }
    return key;
}

QpState::QpState(const QpParams& p, JobState* j)
    : StateTag(StateKind::qp),
      params(p),
      job(j),
      responder([&] {
          rc::ResponderConfig c;
          c.initial_psn = p.worker_psn;
          c.pmtu = p.pmtu;
          c.region = {p.area_addr, uint64_t{j->params.window} * j->params.chunk_bytes,
                      p.area_rkey};
          return c;
      }()),
      requester([&] {
          rc::RequesterConfig c;
          c.initial_psn = p.switch_psn;
          c.pmtu = p.pmtu;
          c.timeout = p.timeout;
          c.retry_cnt = p.retry_cnt;
          c.rnr_retry = p.rnr_retry;
          return c;
      }()),
      rank_bits(*wire::BitString::from_bfr_ids(
          kContributorBsl, 0, std::vector<wire::BfrId>{static_cast<wire::BfrId>(p.rank)})) {
    path.src_ip = p.switch_ip;
    path.dst_ip = p.worker_ip;
    path.src_port = rc::source_port_for_qp(p.switch_qpn);
    path.dest_qp = p.worker_qpn;
    path6.src_ip = p.switch_ip6;
    path6.dst_ip = p.worker_ip6;
    path6.src_port = path.src_port;
    path6.dest_qp = p.worker_qpn;
    ack = p.ipv6 ? rc::AckFrameTemplate(kZeroMac, kZeroMac, path6)
                 : rc::AckFrameTemplate(kZeroMac, kZeroMac, path);
    responder.post_receives(1u << 30);
    if (j->params.chunk_bytes > p.pmtu) {
        staging = std::make_unique<uint8_t[]>(j->params.chunk_bytes);
    }
}

namespace {
// A packet to QP1: a CM MAD (UD SEND ONLY, a whole MAD after the DETH) with a good ICRC goes to
// the control thread's RDMA CM over this lcore's ring (never waited on: full drops and counts;
// the worker's CM retransmits), anything else is dropped and counted.
void to_cm(LcoreContext& ctx, const RoceView& view, rte_mbuf* m, const rc::Packet& p,
           uint16_t l3_offset, EdgeBatches<FeatureEdge>& out) {
    rte_ring* ring = ctx.worker_index < view.cm_rings.size() ? view.cm_rings[ctx.worker_index]
                                                               : nullptr;
    if (ring == nullptr || p.bth.opcode != rc::op::kUdSendOnly ||
        p.payload_bytes < rc::cm::kMadBytes) {
        ++lcore_counter(ctx, LcoreCounter::cm_unsupported);
        drop(out, m);
        return;
    }
    if (rc::icrc(m, l3_offset) != p.icrc) {
        ++lcore_counter(ctx, LcoreCounter::icrc_error);
        drop(out, m);
        return;
    }
    if (rte_ring_sp_enqueue(ring, m) != 0) {
        ++lcore_counter(ctx, LcoreCounter::cm_full);
        drop(out, m);
        return;
    }
    ++lcore_counter(ctx, LcoreCounter::cm_received);
}
}  // namespace

uint16_t roce_input(LcoreContext& ctx, const dp::Snapshot& snap, rte_mbuf** pkts, uint16_t n,
                    FeatureEdge pass, EdgeBatches<FeatureEdge>& out) {
    const RoceView* view = snap.feature_view<RoceView>(kFeatureRoce);
    Burst b{ctx, out, now_ns(ctx)};
    b.snap = &snap;
    uint16_t i = 0;
    // parse_into fills every field of a packet it accepts: one for the burst, not zeroed per
    // packet.
    rc::Packet p;
    NextCheck next_check;  // the ICRC of pkts[i + 1], folded into packet i's add
    bool have_last = false;
    uint32_t last_dst = 0;  // network order
    bool last_local = false;
    for (; i < n; ++i) {
        // Room for this input's own frames, one ACK per QP touched so far and this one's.
        if (!out.room_for(static_cast<uint16_t>(kRoceEmitPerInput + b.n_touched + 1))) {
            break;
        }
        rte_mbuf* m = pkts[i];
        const pipeline::PacketMeta* pm = pipeline::classified(m);
        if (pm == nullptr || (pm->flags & pipeline::kMetaUdpSound) == 0 || view == nullptr) {
            out.push(pass, m);
            continue;
        }
        // The IP fields the stage reads: RoCE over IPv4 or IPv6 (the classifier's flag).
        const bool v6 = (pm->flags & pipeline::kMetaIpv6) != 0;
        const auto* ip = rte_pktmbuf_mtod_offset(m, const rte_ipv4_hdr*, pm->l3_offset);
        const auto* ip6 = rte_pktmbuf_mtod_offset(m, const rte_ipv6_hdr*, pm->l3_offset);
        // A burst's contributions share a few destinations (the switch's addresses): the
        // route of the last IPv4 one is remembered for the burst (one snapshot throughout).
        bool local = false;
        if (v6) {
            local = for_switch6(snap, ip6->dst_addr);
        } else if (have_last && ip->dst_addr == last_dst) {
            local = last_local;
        } else {
            local = for_switch(snap, rte_be_to_cpu_32(ip->dst_addr));
            have_last = true;
            last_dst = ip->dst_addr;
            last_local = local;
        }
        if (!local) {
            ++lcore_counter(ctx, LcoreCounter::passed);  // RoCE between other hosts
            out.push(pass, m);
            continue;
        }
        const uint32_t len = pm->l4_length - sizeof(rte_udp_hdr);
        if (pm->l4_length < sizeof(rte_udp_hdr) || len > kPayloadAt) {
            ++lcore_counter(ctx, LcoreCounter::malformed);
            drop(out, m);
            continue;
        }
        // In place when the datagram sits in the first segment, else gathered into scratch.
        const auto* bytes = static_cast<const uint8_t*>(rte_pktmbuf_read(
            m, static_cast<uint32_t>(pm->l4_offset + sizeof(rte_udp_hdr)), len,
            ctx.scratch.data()));
        rc::ParseError parse_error = rc::ParseError::truncated;
        if (bytes == nullptr || !rc::parse_into(bytes, len, p, parse_error)) {
            ++lcore_counter(ctx, LcoreCounter::malformed);
            drop(out, m);
            continue;
        }
        if (p.bth.dest_qp == kCmQpn) {
            to_cm(ctx, *view, m, p, pm->l3_offset, out);
            continue;
        }
        const QpView* qv = view->qp(p.bth.dest_qp);
        if (qv == nullptr) {
            ++lcore_counter(ctx, LcoreCounter::unknown_qp);
            drop(out, m);
            continue;
        }
        if (away_from_home(ctx, m, qv->home, out)) {
            continue;
        }
        auto* tag = static_cast<StateTag*>(
            ctx.feature_state(qv->slot, kFeatureRoce, qp_state_id(p.bth.dest_qp)));
        if (tag == nullptr || tag->kind != StateKind::qp) {
            ++lcore_counter(ctx, LcoreCounter::unknown_qp);  // not attached yet
            drop(out, m);
            continue;
        }
        QpState& q = *static_cast<QpState*>(tag);
        // A QP is its address and its QPN, as the worker's RC connected to them: the same QPN
        // at another of the switch's addresses is no packet of it (rxe would not send it).
        if (v6 ? std::memcmp(ip6->dst_addr, q.path6.src_ip.data(), 16) != 0
               : rte_be_to_cpu_32(ip->dst_addr) != q.path.src_ip) {
            ++lcore_counter(ctx, LcoreCounter::wrong_address);
            drop(out, m);
            continue;
        }
        ++q.counters.packets_in;
        q.counters.bytes_in += v6 ? sizeof(rte_ipv6_hdr) + rte_be_to_cpu_16(ip6->payload_len)
                                  : rte_be_to_cpu_16(ip->total_length);
        const uint32_t icrc = next_check.m == m && next_check.done
                                  ? next_check.crc
                                  : rc::icrc_writable(m, pm->l3_offset);
        if (icrc != p.icrc) {
            ++q.counters.icrc_errors;
            ++lcore_counter(ctx, LcoreCounter::icrc_error);
            drop(out, m);
            continue;
        }
        q.last_port = m->port;
        q.last_heard_ns = b.t_ns;  // alive (probe_if_silent)
        if (p.bth.opcode == rc::op::kAcknowledge) {
            b.on_response(q, p);
        } else if (p.bth.opcode == rc::op::kCnp) {
            ++q.counters.cnps_received;
            q.requester.on_cnp(b.t_ns);
        } else {
            // The ECN bits: the IPv4 TOS byte's, or the IPv6 traffic class's (bits 20..27).
            const uint8_t tos =
                v6 ? static_cast<uint8_t>(rte_be_to_cpu_32(ip6->vtc_flow) >> 20)
                   : ip->type_of_service;
            // The next frame's ICRC rides on this packet's add when it is one icrc_writable
            // would sum in one masked pass (so the value is the same).
            next_check.done = false;
            next_check.m = nullptr;
            if (q.job->fused && i + 1 < n) {
                rte_mbuf* next = pkts[i + 1];
                const pipeline::PacketMeta* nm = pipeline::classified(next);
                if (nm != nullptr && rc::icrc_masked_span(next, nm->l3_offset, next_check.span)) {
                    next_check.m = next;
                    t_next_check = &next_check;
                }
            }
            b.on_request(q, p, bytes + p.header_bytes, rc::ce_marked(tos));
            t_next_check = nullptr;
        }
        drop(out, m);  // consumed: what it causes was emitted or is owed
    }
    b.finish();
    return i;
}

void roce_tick(LcoreContext& ctx, const dp::Snapshot& snap, void* state, uint64_t) {
    auto* tag = static_cast<StateTag*>(state);
    if (tag->kind != StateKind::qp) {
        auto* job = static_cast<JobState*>(tag);
        if (job->parent != nullptr) {
            parent_tick(ctx, snap, *job, now_ns(ctx));
        }
        return;
    }
    QpState& q = *static_cast<QpState*>(tag);
    const uint64_t t = now_ns(ctx);
    q.requester.tick(t);
    if (fails_session(q)) [[unlikely]] {
        // The other QPs send their notices at their own ticks.
        fail_session(*q.job, q.params.rank, session_failure(q));
    }
    probe_if_silent(q, t);
    rte_mbuf* frames[pipeline::kMaxBurst];
    uint16_t n = 0;
    rte_mbuf* m = nullptr;
    // At most one burst of packets per tick, frames or not (an empty pool gives none).
    for (uint16_t tries = 0; tries < pipeline::kMaxBurst && next_result(ctx, q, t, m); ++tries) {
        if (m != nullptr) {
            frames[n++] = m;
        }
    }
    if (n != 0) {
        pipeline::route_emitted(ctx, snap, frames, n);
    }
}

void roce_attach(void* state) {
    auto* tag = static_cast<StateTag*>(state);
    if (tag->kind == StateKind::qp) {
        auto* q = static_cast<QpState*>(tag);
        if (q->params.rank >= 1 && q->params.rank <= kMaxRanks) {
            q->job->rank_qp[q->params.rank] = q;
            if (q->job->left_rank == q->params.rank) {
                q->job->left_rank = 0;  // back (a rank alone reconnecting: not supported here)
            }
        }
    }
}

namespace {

// QP q left its job (its rank's entry already cleared) while the session goes on for others.
// A QP in error has failed the session (or is about to: its tick is gone); one whose job went
// beyond its last contribution fails it now; otherwise the first contribution beyond that does
// (on_request). A rank that leaves after its last call leaves nothing the others need: every
// chunk they still send it contributed to.
void leaves(JobState& job, const QpState& q) {
    if (job.failed_rank != 0 || job.left_rank != 0) {
        return;
    }
    bool others = false;
    for (uint16_t r = 1; r <= job.params.world && !others; ++r) {
        others = job.rank_qp[r] != nullptr;
    }
    if (!others) {
        return;  // the session ends with its last QP: the next one starts fresh
    }
    if (qp_state_code(q) != 0) {
        fail_session(job, q.params.rank, session_failure(q));
    } else if (job.any_key &&
               (!q.contributed || static_cast<int32_t>(job.high_key - q.high_key) > 0)) {
        fail_session(job, q.params.rank, rdma::kFailureRankLeft);
    } else {
        job.left_rank = q.params.rank;
        job.left_contributed = q.contributed;
        job.left_high_key = q.high_key;
    }
}

}  // namespace

void roce_detach(void* state) {
    auto* tag = static_cast<StateTag*>(state);
    if (tag->kind == StateKind::qp) {
        auto* q = static_cast<QpState*>(tag);
        if (q->params.rank >= 1 && q->params.rank <= kMaxRanks &&
            q->job->rank_qp[q->params.rank] == q) {
            q->job->rank_qp[q->params.rank] = nullptr;
            leaves(*q->job, *q);
        }
    }
}

pipeline::FeatureStage stage() {
    pipeline::FeatureStage s;
    s.name = "roce";
    s.input = roce_input;
    s.max_emit = kRoceEmitPerInput + 1;
    s.tick = roce_tick;
    s.tick_us = 100;
    s.on_attach = roce_attach;
    s.on_detach = roce_detach;
    s.ina_result = roce_ina_result;
    return s;
}

}  // namespace ina::features::roce
