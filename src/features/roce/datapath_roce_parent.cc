// SPDX-License-Identifier: Apache-2.0
#include "features/roce/datapath_roce_parent.h"

#include <rte_ip.h>
#include <rte_udp.h>

#include <algorithm>
#include <bit>
#include <cstring>

#include "features/roce/datapath_roce.h"
#include "ina/protocol.h"
#include "pipeline/ina_encode.h"
#include "pipeline/mbuf_chain.h"
#include "pipeline/packet_meta.h"
#include "pipeline/pipeline.h"
#include "reduce/fixed_point.h"
#include "reduce/reduce.h"

namespace ina::features::roce {

using pipeline::EdgeBatches;
using pipeline::FeatureEdge;
using pipeline::LcoreContext;

namespace {

// A partial's frame is built at the start of the lcore's scratch (the contribution that
// completed the chunk was consumed before): head + INA header + BitString (<= 512) + one
// segment (<= the pmtu, 4096; a deterministic job's int64 segment too: config_roce keeps it so).
constexpr size_t kPartialMax = pipeline::kInaFrameHeadBytes + proto::kFixedHeaderBytes + 512 +
                               4096;
static_assert(kPartialMax <= LcoreContext::kScratchBytes / 2);

// The element count of key's complete local chunk (0: not held).
uint32_t local_count(const JobState& job, uint32_t key) {
    return job.table.holds(key) ? job.table.core().count(key & (job.table.slots() - 1)) : 0;
}

// The INA contributions a chunk of `count` elements goes up as.
uint32_t segments_of(const JobState& job, uint32_t count) {
    const uint32_t seg_elems = job.parent->segment_bytes >> job.elem_shift;
    return (count + seg_elems - 1) / seg_elems;
}

// Segment `seg` of key's partial as a frame to the parent (nullptr, counted: no route or no
// mbuf). Its INA seq is key x segments + seg (the key itself for one-packet chunks); INA seqs
// are 32 bits, so a session's keys stay below 2^32 / segments.
rte_mbuf* partial_frame(LcoreContext& ctx, const dp::Snapshot& snap, JobState& job, uint32_t key,
                        uint32_t seg, bool resend) {
    ParentLink& up = *job.parent;
    const ParentParams& pp = up.params;
    // A deterministic job's partial carries the exact int64 fixed-point sums (as an INA
    // deterministic aggregator's): 8 bytes an element on the wire, its parent adds them as is.
    const bool fixed = job.params.deterministic;
    const agg::Encoding enc = fixed ? agg::Encoding::fixed_point : agg::Encoding::native;
    constexpr unsigned kFixedShift =
        std::countr_zero(reduce::elem_size(reduce::kFixedWireType));  // 8-byte elements
    const unsigned wire_shift = fixed ? kFixedShift : job.elem_shift;
    proto::Header h;
    h.type = proto::PacketType::data;
    h.flags = static_cast<uint8_t>((resend ? proto::kFlagRetransmit : 0) |
                                   (up.ce_key[up.slot(key)] == key + 1 ? proto::kFlagEcnEcho : 0));
    h.op = static_cast<uint8_t>(job.params.op);
    h.elem_type = static_cast<uint8_t>(fixed ? reduce::kFixedWireType : job.params.dtype);
    h.bsl_code = pp.bsl_code;
    h.set_id = pp.set_id;
    h.job_id = job.params.job_id;
    h.seq = key * up.segments + seg;
    const uint32_t seg_elems = up.segment_bytes >> job.elem_shift;
    // Built straight into a fresh mbuf when the largest such frame fits its data room (as INA
    // builds its partial in an mbuf): no frame in scratch copied over. A larger one is built in
    // scratch and copied into a chain.
    const size_t head = pipeline::kInaFrameHeadBytes + proto::kFixedHeaderBytes +
                        h.bitstring_bytes();
    // (An empty pool takes the scratch path too, where frame_of counts it.)
    rte_mbuf* direct = rte_pktmbuf_alloc(ctx.pool);
    if (direct != nullptr &&
        head + (size_t{seg_elems} << wire_shift) > rte_pktmbuf_tailroom(direct)) {
        rte_pktmbuf_free(direct);
        direct = nullptr;
    }
    uint8_t* frame = direct != nullptr ? rte_pktmbuf_mtod(direct, uint8_t*) : ctx.scratch.data();
    // The elements' place does not depend on their count: the table writes them there first.
    uint8_t* elements = frame + head;
    const uint32_t total = local_count(job, key);
    const uint32_t first = seg * seg_elems;
    // The elements' one's-complement sum for the UDP checksum, taken as they are written: a
    // whole chunk by the store kernel's own pass (store_sum, as INA's partial), a segment of one
    // by the vector byte sum over what store_range just wrote (hot). Summing the datagram after
    // it was built with the scalar add-with-carry chain cost 8 bytes a cycle: at 4 KiB ~25 ns
    // per contribution, a third of the RoCE-only cost that grew with the payload.
    uint32_t elements_sum = 0;
    uint32_t count = 0;
    if (total != 0 && first == 0 && total <= seg_elems) {
        // key holds its slot (local_count): the slot's result is key's.
        count = job.table.core().store_result(key & (job.table.slots() - 1), elements, enc,
                                              &elements_sum);
    } else if (first < total) {
        // A segment's start is a multiple of the pmtu: store_range's alignment holds.
        count = job.table.store_range(key, first, std::min(seg_elems, total - first), elements,
                                      enc);
        static const reduce::SumBytesFn sum_bytes = reduce::kernels().sum_bytes;
        elements_sum = sum_bytes(elements, size_t{count} << wire_shift);
    }
    const uint32_t src =
        pipeline::ina_source_for(snap, ctx.neighbours, pp.source_ip, pp.parent_ip);
    if (count == 0 || src == 0) [[unlikely]] {
        rte_pktmbuf_free(direct);
        ++up.counters.no_mbuf;  // no route to the parent: the tick tries again
        return nullptr;
    }
    h.elem_count = static_cast<uint16_t>(count);
    pipeline::write_ina_headers(frame, h, pp.abm.data(), src, pp.parent_ip, snap.ina_udp_port);
    pipeline::seal_ina_datagram(frame, elements, elements_sum);
    const size_t len = pipeline::kInaFrameHeadBytes + h.total_bytes();
    rte_mbuf* m = direct;
    if (m != nullptr) {
        m->data_len = static_cast<uint16_t>(len);
        m->pkt_len = static_cast<uint32_t>(len);
        m->port = 0;
        m->ol_flags = pipeline::g_originated_flag;
    } else {
        m = frame_of(ctx, frame, len, 0);
        if (m == nullptr) [[unlikely]] {
            ++up.counters.no_mbuf;
            return nullptr;
        }
    }
    ++(resend ? up.counters.partial_resent : up.counters.partial_sent);
    return m;
}

const JobView* job_view(const RoceView& view, uint32_t job_id) {
    for (const auto& j : view.jobs) {
        if (j.job_id == job_id) {
            return &j;
        }
    }
    return nullptr;
}

// Every segment of key's partial whose result is not in yet, routed from here in bursts (a
// chunk of many segments may not fit the stage's edges).
void send_segments(LcoreContext& ctx, const dp::Snapshot& snap, JobState& job, uint32_t key,
                   bool resend) {
    const uint32_t n_seg = segments_of(job, local_count(job, key));
    rte_mbuf* frames[pipeline::kMaxBurst];
    uint16_t n = 0;
    for (uint32_t seg = 0; seg < n_seg; ++seg) {
        if (job.parent->has_segment(key, seg)) {
            continue;
        }
        if (rte_mbuf* m = partial_frame(ctx, snap, job, key, seg, resend)) {
            frames[n++] = m;
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

}  // namespace

ParentLink::ParentLink(const ParentParams& p, uint32_t window, uint32_t chunk, uint32_t segment)
    : params(p),
      chunk_bytes(chunk),
      segment_bytes(segment),
      segments(chunk / segment),
      seg_words((chunk / segment + 63) / 64),
      results(size_t{window} * chunk),
      result_key(window),
      result_elems(window),
      arriving_key(window),
      arrived(size_t{window} * seg_words),
      ce_key(window) {}

uint32_t rank_result(const JobState& job, uint32_t key, uint32_t first, uint32_t n,
                     uint8_t* out) {
    if (job.parent == nullptr) {
        return job.table.store_range(key, first, n, out);
    }
    const ParentLink& up = *job.parent;
    if (!up.has_result(key)) {
        return 0;
    }
    const uint32_t s = up.slot(key);
    const uint32_t elems = up.result_elems[s];
    if (n == 0 || first > elems || n > elems - first) {
        return 0;
    }
    const size_t esize = reduce::elem_size(job.params.dtype);
    std::memcpy(out, up.results.data() + size_t{s} * up.chunk_bytes + first * esize, n * esize);
    return n;
}

void send_partial(LcoreContext& ctx, const dp::Snapshot& snap, JobState& job, uint32_t key,
                  uint64_t t_ns, EdgeBatches<FeatureEdge>& out) {
    job.table.mark_sent(key, t_ns);  // the clock of the partial's retransmission starts
    if (job.parent->segments > 1) {
        send_segments(ctx, snap, job, key, false);
    } else if (rte_mbuf* m = partial_frame(ctx, snap, job, key, 0, false)) {
        out.push(FeatureEdge::route, m);
    }
}

void parent_tick(LcoreContext& ctx, const dp::Snapshot& snap, JobState& job, uint64_t t_ns) {
    if (job.table.in_use() == 0) {
        return;
    }
    uint32_t keys[pipeline::kMaxBurst];
    rte_mbuf* frames[pipeline::kMaxBurst];
    uint16_t n = 0;
    // Complete chunks last sent timeout_ns ago. One whose result is in waits for the ranks'
    // ACKs; their requesters retransmit the WRITEs, so only unanswered partials go again.
    const size_t due = job.table.collect_due(t_ns, keys, pipeline::kMaxBurst, 64);
    for (size_t i = 0; i < due; ++i) {
        if (job.parent->has_result(keys[i])) {
            continue;
        }
        if (job.parent->segments > 1) {
            send_segments(ctx, snap, job, keys[i], true);  // the segments still unanswered
            continue;
        }
        if (rte_mbuf* m = partial_frame(ctx, snap, job, keys[i], 0, true)) {
            frames[n++] = m;
        }
    }
    if (n != 0) {
        pipeline::route_emitted(ctx, snap, frames, n);
    }
}

uint16_t roce_ina_result(LcoreContext& ctx, const dp::Snapshot& snap, rte_mbuf** pkts, uint16_t n,
                         FeatureEdge pass, EdgeBatches<FeatureEdge>& out) {
    const RoceView* view = snap.feature_view<RoceView>(kFeatureRoce);
    for (uint16_t i = 0; i < n; ++i) {
        rte_mbuf* m = pkts[i];
        // The INA stage parsed it: classified, a sound UDP datagram.
        const pipeline::PacketMeta* pm = pipeline::classified(m);
        const auto* ip = rte_pktmbuf_mtod_offset(m, const rte_ipv4_hdr*, pm->l3_offset);
        if (view == nullptr || !for_switch(snap, rte_be_to_cpu_32(ip->dst_addr))) {
            out.push(pass, m);  // the job's results on their way to other hosts
            continue;
        }
        const uint32_t len = pm->l4_length - sizeof(rte_udp_hdr);
        const auto* bytes = static_cast<const uint8_t*>(rte_pktmbuf_read(
            m, static_cast<uint32_t>(pm->l4_offset + sizeof(rte_udp_hdr)), len,
            ctx.scratch.data()));
        const proto::ParseResult parsed =
            bytes != nullptr ? proto::parse(bytes, len) : proto::ParseResult{};
        const JobView* jv = parsed.packet ? job_view(*view, parsed.packet->header.job_id)
                                          : nullptr;
        if (jv == nullptr) {
            out.push(pass, m);
            continue;
        }
        if (away_from_home(ctx, m, jv->home, out)) {
            continue;  // the job's slots live on its home lcore
        }
        auto* tag = static_cast<StateTag*>(
            ctx.feature_state(jv->slot, kFeatureRoce, job_state_id(jv->job_id)));
        auto* job = tag != nullptr && tag->kind == StateKind::job ? static_cast<JobState*>(tag)
                                                                  : nullptr;
        if (job == nullptr || job->parent == nullptr) {
            out.push(pass, m);  // not attached yet
            continue;
        }
        ParentLink& up = *job->parent;
        const proto::Header& h = parsed.packet->header;
        const auto* udp = rte_pktmbuf_mtod_offset(m, const rte_udp_hdr*, pm->l4_offset);
        const size_t elem = reduce::elem_size(job->params.dtype);
        // The job's result: its op and type, a segment's count, a P-BM (the root's A-BM) in the
        // job's BitString that holds every rank's BFR-id.
        if (h.op != static_cast<uint8_t>(job->params.op) ||
            h.elem_type != static_cast<uint8_t>(job->params.dtype) || h.elem_count == 0 ||
            h.elem_count * elem > up.segment_bytes || h.bsl_code != up.params.bsl_code ||
            h.set_id != up.params.set_id ||
            !wire::bits_subset(up.params.abm.data(), parsed.packet->bitstring,
                               h.bitstring_bytes()) ||
            !pipeline::ina_udp_checksum_ok(m, ip, udp, pm->l4_offset, pm->l4_length)) {
            ++up.counters.result_bad;
            out.push(FeatureEdge::drop, m);
            continue;
        }
        const uint32_t key = h.seq / up.segments;
        const uint32_t seg = h.seq % up.segments;
        const uint32_t s = up.slot(key);
        uint8_t* result = up.results.data() + size_t{s} * up.chunk_bytes;
        // Held and complete here (the table has its local sum): else not a chunk this switch
        // sent up, or one already released (a late copy). The record of a released key's
        // result stays until its slot's next result, so holding is asked first.
        uint8_t unacked[kContributorBsl / 8];
        if (!job->table.missing(key, unacked)) {
            ++up.counters.result_not_held;
            out.push(FeatureEdge::drop, m);
            continue;
        }
        if (up.has_segment(key, seg)) {
            ++up.counters.result_duplicate;  // another copy (one per BFR-id at a unicast root)
            out.push(FeatureEdge::drop, m);
            continue;
        }
        // The segment's count is the local chunk's there (a short last chunk has fewer).
        const uint32_t total = local_count(*job, key);
        const uint32_t seg_elems = up.segment_bytes >> job->elem_shift;
        const uint32_t first = seg * seg_elems;
        if (first >= total || h.elem_count != std::min(seg_elems, total - first)) {
            ++up.counters.result_bad;
            out.push(FeatureEdge::drop, m);
            continue;
        }
        uint64_t* arrived = up.arrived.data() + size_t{s} * up.seg_words;
        if (up.arriving_key[s] != key) {
            // The slot's first segment of this key: the previous key's result was released.
            up.arriving_key[s] = key;
            up.result_elems[s] = 0;
            std::fill(arrived, arrived + up.seg_words, 0);
        }
        std::memcpy(result + size_t{first} * elem, parsed.packet->payload, h.payload_bytes());
        arrived[seg / 64] |= uint64_t{1} << (seg % 64);
        ++up.counters.result_in;
        out.push(FeatureEdge::drop, m);  // consumed: it becomes the ranks' WRITEs
        const uint32_t n_seg = segments_of(*job, total);
        uint32_t have = 0;
        for (uint32_t w = 0; w < up.seg_words; ++w) {
            have += static_cast<uint32_t>(std::popcount(arrived[w]));
        }
        if (have != n_seg) {
            continue;  // the rest of the chunk's segments are still to come
        }
        up.result_key[s] = key;
        up.result_elems[s] = total;
        deliver_result(ctx, snap, *job, key, static_cast<uint32_t>(total * elem), out);
    }
    return n;
}

}  // namespace ina::features::roce
