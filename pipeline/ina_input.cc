// SPDX-License-Identifier: Apache-2.0
#include "pipeline/ina_input.h"

#include <rte_ip.h>
#include <rte_prefetch.h>
#include <rte_udp.h>

#include <bit>
#include <cstring>

#include "ina/chunk_table.h"
#include "ina/protocol.h"
#include "net/checksum.h"
#include "pipeline/ina_encode.h"
#include "pipeline/classify.h"
#include "pipeline/ipv4_forward.h"
#include "pipeline/mbuf_chain.h"
#include "pipeline/packet_meta.h"

namespace ina::pipeline {

static_assert(dp::kInaParseErrors == proto::kNumParseErrors);

namespace {

constexpr size_t kL2 = sizeof(rte_ether_hdr);
constexpr size_t kL3 = sizeof(rte_ipv4_hdr);
constexpr size_t kL4 = sizeof(rte_udp_hdr);

// Writes a whole INA datagram (Ethernet, IPv4, UDP, the header `h` with BitString `bs`, and the
// result of `h.seq` from `table`) to `d` (the shared encoder, pipeline/ina_encode.h). With
// `offload` its UDP checksum is left to the device (the elements are stored, not summed).
void write_ina(uint8_t* d, const ina::ChunkTable& table, const proto::Header& h,
               const uint8_t* bs, uint32_t src, uint32_t dst, uint16_t port, bool offload) {
    uint8_t* elements = write_ina_headers(d, h, bs, src, dst, port);
    if (offload) {
        table.store_result(h.seq, elements, table.encoding_of(h.elem_type), nullptr);
        seal_ina_datagram_offloaded(d);
        return;
    }
    // A deterministic job's partial (int64 element type) carries the exact fixed-point sum.
    // The store kernel sums the elements as it writes them: the seal sums only the headers.
    uint32_t elements_sum = 0;
    if (table.store_result(h.seq, elements, table.encoding_of(h.elem_type), &elements_sum) != 0)
        [[likely]] {
        seal_ina_datagram(d, elements, elements_sum);
    } else {
        seal_ina_datagram(d);  // nothing stored: the checksum covers whatever the bytes are
    }
}

// Rewrites `m` as a fresh INA datagram carrying `h` with BitString `bs` and the result of
// `h.seq` from `table`. The old contents are not read (the accumulator lives in the table). The
// frame goes in m's own buffer; a larger one (a small data room, or a chained contribution) is
// built in the lcore's scratch and spread over m and further segments from ctx.pool. Returns
// false when no mbuf could be had (m then holds a truncated frame the caller drops). `offload`:
// the UDP checksum is the device's (only for a datagram routed as plain IPv4: not over BIER),
// and only when the frame fits one mbuf: a chain gets the core's. DPDK 22.11's net_tap sums each
// segment's 16-bit words from the segment's own start, so a chain whose segment before the last
// holds an odd number of the datagram's bytes left the tap with a wrong checksum
// (e2e-tap-checksum-offload); a chain only comes of a data room below the frame, a rare setup.
bool build_ina(LcoreContext& ctx, rte_mbuf* m, const ina::ChunkTable& table,
               const proto::Header& h, const uint8_t* bs, uint32_t src, uint32_t dst,
               uint16_t port, bool offload) {
    const size_t frame = kL2 + kL3 + kL4 + h.total_bytes();
    if (!RTE_MBUF_DIRECT(m) || rte_mbuf_refcnt_read(m) != 1) [[unlikely]] {
        return false;  // a shared buffer is never written (received frames are never shared)
    }
    if (m->nb_segs != 1) {
        rte_pktmbuf_free(m->next);  // the contribution's tail: its bytes are not needed
        m->next = nullptr;
        m->nb_segs = 1;
    }
    m->data_off = RTE_PKTMBUF_HEADROOM;
    m->ol_flags = g_originated_flag;
    const size_t room = static_cast<size_t>(m->buf_len) - RTE_PKTMBUF_HEADROOM;
    if (frame <= room) [[likely]] {
        if (offload) {
            mark_udp_checksum_offload(m);
        }
        m->data_len = static_cast<uint16_t>(frame);
        m->pkt_len = static_cast<uint32_t>(frame);
        write_ina(rte_pktmbuf_mtod(m, uint8_t*), table, h, bs, src, dst, port, offload);
        return true;
    }
    if (frame > ctx.scratch.size() || room < kHeadBytes) [[unlikely]] {
        return false;
    }
    write_ina(ctx.scratch.data(), table, h, bs, src, dst, port, false);
    m->data_len = static_cast<uint16_t>(room);
    m->pkt_len = static_cast<uint32_t>(room);
    std::memcpy(rte_pktmbuf_mtod(m, uint8_t*), ctx.scratch.data(), room);
    for (size_t done = room; done < frame;) {
        rte_mbuf* seg = rte_pktmbuf_alloc(ctx.pool);
        if (seg == nullptr) [[unlikely]] {
            return false;
        }
        const auto take = static_cast<uint16_t>(std::min<size_t>(frame - done,
                                                                 rte_pktmbuf_tailroom(seg)));
        std::memcpy(rte_pktmbuf_append(seg, take), ctx.scratch.data() + done, take);
        if (rte_pktmbuf_chain(m, seg) != 0) [[unlikely]] {
            rte_pktmbuf_free(seg);
            return false;
        }
        done += take;
    }
    return true;
}

void retarget(rte_mbuf* m, uint32_t dst) {
    auto* ip = rte_pktmbuf_mtod_offset(m, rte_ipv4_hdr*, kL2);
    const uint32_t old_dst = ip->dst_addr;
    ip->dst_addr = rte_cpu_to_be_32(dst);
    ip->hdr_checksum = 0;
    ip->hdr_checksum = static_cast<uint16_t>(~ipv4_header_sum20(ip));
    // The UDP checksum covers the destination through the pseudo-header.
    ina_udp_checksum_retarget(ip, reinterpret_cast<rte_udp_hdr*>(ip + 1), old_dst,
                              (m->ol_flags & RTE_MBUF_F_TX_UDP_CKSUM) != 0);
}

// Takes the contribution's header by value (and the stage copies it for header_mismatch):
// the parsed header's own address is never taken, so the stage keeps its fields in registers
// instead of a stack copy on every contribution.
struct Emitter {
    LcoreContext& ctx;
    const dp::Snapshot& snap;
    EdgeBatches<FeatureEdge>& out;

    // Aggregator: the chunk's partial result to the parent, P-BM = A-BM.
    void partial(rte_mbuf* m, const dp::InaJobView& job, const ina::ChunkTable& table,
                 proto::Header h, bool resend) {
        h.type = proto::PacketType::data;
        h.elem_type = table.partial_elem_type();  // int64 fixed point in a deterministic job
        h.flags = static_cast<uint8_t>(table.result_flags(h.seq) |
                                       (resend ? proto::kFlagRetransmit : 0));
        // The least lowest missing result of its contributions, when every one stated it.
        h.lowest_missing = 0;
        if (table.partial_lowest_missing(h.seq, &h.lowest_missing)) {
            h.flags |= proto::kFlagLowestMissing;
        }
        const uint32_t src = ina_source_for(snap, ctx.neighbours, job.source, job.parent);
        if (!build_ina(ctx, m, table, h, job.abm.data(), src, job.parent, snap.ina_udp_port,
                       snap.udp_checksum_offload)) {
            count_drop(ctx, dp::DropReason::ina_no_mbuf);
            out.push(FeatureEdge::drop, m);
            return;
        }
        ++(resend ? ctx.counters.ina_resent : ctx.counters.ina_partials_sent);
        out.push(FeatureEdge::route, m);
    }

    // Root: the result to every worker, or (a retransmission) to the one that asked.
    // `resend`: a re-send of a complete chunk (counted apart from first results).
    void result(rte_mbuf* m, const dp::InaJobView& job, const ina::ChunkTable& table,
                proto::Header h, uint32_t requester, bool resend = false) {
        h.type = proto::PacketType::result;
        // The job's type, also when the last contribution was a fixed-point partial.
        h.elem_type = static_cast<uint8_t>(table.params().elem_type);
        h.flags = table.result_flags(h.seq);
        // Over BIER the result leaves from the root's own address (no single egress interface);
        // a unicast re-send of such a job uses the same source, so workers see one sender.
        const uint32_t bier_src = job.source != 0 ? job.source : job.parent;
        if (job.results_bier && requester == 0) {
            // One packet; the BFIR stage puts the A-BM on it as the BitString and the BFERs
            // address the copies to their workers (the inner destination is a placeholder).
            // A BIER header goes before it: a device cannot find its UDP header (software).
            if (!build_ina(ctx, m, table, h, job.abm.data(), bier_src, 0, snap.ina_udp_port,
                           false)) {
                count_drop(ctx, dp::DropReason::ina_no_mbuf);
                out.push(FeatureEdge::drop, m);
                return;
            }
            ++(resend ? ctx.counters.ina_resent : ctx.counters.ina_results_sent);
            out.push(FeatureEdge::bier, m);
            return;
        }
        const uint32_t first = requester != 0 ? requester : job.worker_ip[0];
        const uint32_t src = job.results_bier
                                 ? bier_src
                                 : ina_source_for(snap, ctx.neighbours, job.source, first);
        if (!build_ina(ctx, m, table, h, job.abm.data(), src, first, snap.ina_udp_port,
                       snap.udp_checksum_offload)) {
            count_drop(ctx, dp::DropReason::ina_no_mbuf);
            out.push(FeatureEdge::drop, m);
            return;
        }
        if (requester != 0) {
            ++ctx.counters.ina_resent;
            out.push(FeatureEdge::route, m);
            return;
        }
        ++(resend ? ctx.counters.ina_resent : ctx.counters.ina_results_sent);
        out.push(FeatureEdge::route, m);
        // results: unicast — one full copy per further worker (BIER shares one payload instead).
        for (uint16_t w = 1; w < job.n_workers; ++w) {
            rte_mbuf* copy = rte_pktmbuf_copy(m, ctx.pool, 0, UINT32_MAX);
            if (copy == nullptr) {
                ++ctx.counters.drops[static_cast<size_t>(dp::DropReason::ina_no_mbuf)];
                continue;
            }
            copy->port = m->port;
            retarget(copy, job.worker_ip[w]);
            ++(resend ? ctx.counters.ina_resent : ctx.counters.ina_results_sent);
            out.push(FeatureEdge::route, copy);
        }
    }
};

// Counts a rejection; true when the job drops rejected contributions (counted as a drop),
// false when they continue where they were going.
bool rejected_drops(LcoreContext& ctx, const dp::InaJobView& job) {
    ++ctx.counters.ina_rejected;
    if (job.drop_rejected) {
        count_drop(ctx, dp::DropReason::ina_rejected);
        return true;
    }
    return false;
}

// Enqueues `owner`'s batch of hand-offs; what the ring has no room for is dropped and counted.
void send_handoffs(LcoreContext& ctx, uint16_t owner) {
    auto& batch = ctx.handoff_out[owner];
    const unsigned sent = rte_ring_sp_enqueue_burst(
        ctx.handoff[owner], reinterpret_cast<void* const*>(batch.pkts.data()), batch.n, nullptr);
    ctx.counters.ina_handed_off += sent;
    if (sent != batch.n) [[unlikely]] {
        const unsigned lost = batch.n - sent;
        ctx.counters.drops[static_cast<size_t>(dp::DropReason::ina_handoff_full)] += lost;
        ctx.counters.ina_packets += lost;  // seen here and never by the owner
        rte_pktmbuf_free_bulk(batch.pkts.data() + sent, lost);
    }
    batch.n = 0;
    ctx.handoff_pending &= ~(uint32_t{1} << owner);
}

// Where a stage call's frames come from, which decides what the stage still checks.
enum class Input : uint8_t {
    classified,  // classify checked them and stored their metadata (FeatureStage::input)
    unchecked,   // nobody classified them: classify's checks and binding run here
    handed,      // another lcore checked, parsed and steered them here (their metadata travels)
};

// How many contributions ahead the stage fetches a frame's header lines (Ethernet .. INA header
// and BitString: the first two). The burst's prefetch at its start is not enough: each
// contribution before it moves 3 KiB through L1 (payload, accumulator read and written), which
// evicts the later frames' headers, and the stage then waits on L2 per contribution. 2, 3 and
// 6 measured alike (+1.6 to +2.4 %, 8 workers, 1 KiB, cpu_mpps, alternating runs).
constexpr uint16_t kInaPrefetchAhead = 3;

// Every line of a frame's first segment after its first two (which the loop fetches anyway),
// fetched non-temporally: the elements are read once, by the reduction kernel, and a burst's
// frames (~35 KiB at 1 KiB payloads) would otherwise push the accumulators, the chunk table's
// lines and the stage's batches out of a 48 KiB L1. A frame from a NIC comes from the LLC or
// DRAM, one handed over from the other core's cache; the stream prefetcher does not run ahead
// across frames. Measured (bench/notes.md, session 17): NIC-like input +8 to +12 % on one lcore
// and on two chunk-steered (prefetch0: +9 % on one), generator-written input within noise; the
// hand-off's bodies as before. Not for frames this lcore hands over (their owner reads them):
// fetched anyway, they cost the by-address hand-off 3.5 %.
// At most the frame's first 1152 bytes (a 1 KiB payload with its headers): a whole 4 KiB frame
// at once fills the core's miss queue ahead of the current frame's own loads (4 KiB input from
// the generator: 0.95 whole, 0.99 capped); its later lines the stream prefetcher follows.
constexpr uint32_t kBodyPrefetchBytes = 1152;
inline void prefetch_frame_body(const rte_mbuf* m) {
    const auto* at = rte_pktmbuf_mtod(m, const uint8_t*) + 2 * RTE_CACHE_LINE_SIZE;
    const uint32_t end = std::min<uint32_t>(m->data_len, kBodyPrefetchBytes);
    const uint32_t lines =
        end > 2 * RTE_CACHE_LINE_SIZE
            ? (end - 2 * RTE_CACHE_LINE_SIZE + RTE_CACHE_LINE_SIZE - 1) / RTE_CACHE_LINE_SIZE
            : 0;
    // Unrolled: as a loop its increment, compare and branch cost twice the prefetches
    // (callgrind: 113 -> 45 instructions per 1 KiB contribution; +1.3 to +2.2 %, session 19).
#pragma GCC unroll 16
    for (uint32_t k = 0; k < lines; ++k) {
        rte_prefetch_non_temporal(at + k * RTE_CACHE_LINE_SIZE);
    }
}

template <Input kIn>
uint16_t ina_run(LcoreContext& ctx, const dp::Snapshot& snap, rte_mbuf** pkts, uint16_t n,
                 FeatureEdge pass, EdgeBatches<FeatureEdge>& out) {
    Emitter emit{ctx, snap, out};
    // The job and attached table of the previous contribution: a burst's contributions are
    // mostly one job's, and neither the snapshot nor the lcore's attachments change within
    // this call, so a repeat of the job id skips both lookups.
    uint32_t memo_id = 0;
    const dp::InaJobView* memo_job = nullptr;
    ina::ChunkTable* memo_table = nullptr;
    // The metadata's flag and place, read once: the counter increments below may alias any
    // global, so classified() would read both again per contribution.
    const uint64_t classified_flag = g_classified_flag;
    const int meta_offset = g_meta_offset;
    BindingMemo binding{snap.features, dp::kScopeRouted};  // unchecked input only
    const bool prefetch_bodies = ctx.prefetch_received_bodies;
    uint16_t handed_over = 0;
    uint16_t i = 0;
    for (; i < n; ++i) {
        if (!out.room_for(kInaEmitReserve)) {
            break;
        }
        rte_mbuf* m = pkts[i];
        if (i + kInaPrefetchAhead < n) {
            const auto* ahead = rte_pktmbuf_mtod(pkts[i + kInaPrefetchAhead], const uint8_t*);
            rte_prefetch0(ahead);
            rte_prefetch0(ahead + RTE_CACHE_LINE_SIZE);
        }
        // The next frame's body, while this one is absorbed: always for handed frames (every
        // one is this lcore's), for received ones unless most go to other lcores.
        if (i + 1 < n && (kIn == Input::handed || prefetch_bodies)) {
            prefetch_frame_body(pkts[i + 1]);
        }
        // The frame's metadata, in registers. Unchecked input: classified here, by the
        // classifier's own checks and the registration table (one walk over the headers), and
        // stored only if the frame is not consumed (`on`). Otherwise read from the mbuf, where
        // classify (or the lcore that handed the frame over) stored it. The IPv4, UDP and INA
        // fixed headers are in the first segment (eth_input gathered them); the BitString and
        // elements may span segments.
        PacketMeta pm;
        if constexpr (kIn == Input::unchecked) {
            pm.l3_offset = sizeof(rte_ether_hdr);
            if (classify_ipv4(ctx, pm, m)) [[likely]] {
                pm.feature = binding.feature_for(pm.udp_dport);
            }
            if (pm.feature != dp::kFeatureIna) [[unlikely]] {
                // Not INA's (another port, not UDP, unsound IPv4): routed with the metadata
                // classify would have given it; routing drops a bad header by its verdict.
                store_meta(m, pm);
                out.push(FeatureEdge::route, m);
                continue;
            }
        } else {
            if constexpr (kIn == Input::classified) {
                if ((m->ol_flags & classified_flag) == 0) [[unlikely]] {  // classified() == nullptr
                    out.push(pass, m);
                    continue;
                }
            }
            pm = *RTE_MBUF_DYNFIELD(m, meta_offset, const PacketMeta*);
        }
        // A frame leaving unmodified on `e` (pass, or the dropping of nothing): with its
        // metadata, which unchecked input has only in registers.
        const auto on = [&](FeatureEdge e) {
            if constexpr (kIn == Input::unchecked) {
                store_meta(m, pm);
            }
            out.push(e, m);
        };
        if constexpr (kIn != Input::handed) {
            if ((pm.flags & kMetaUdpSound) == 0) [[unlikely]] {
                ++ctx.counters.ina_not_ina;  // its UDP length disagrees with IPv4 (udp_malformed)
                on(pass);
                continue;
            }
        }
        // The memo holds job `id` and this lcore's table of it (nullptr: none attached).
        const auto look_up = [&](uint32_t id) {
            if (id != memo_id || memo_table == nullptr) {
                memo_job = snap.ina_job(id);
                memo_table = memo_job != nullptr ? static_cast<ina::ChunkTable*>(ctx.feature_state(
                                                       memo_job->state_slot, dp::kFeatureIna, id))
                                                 : nullptr;
                memo_id = id;
            }
        };
        const auto* frame = rte_pktmbuf_mtod(m, const uint8_t*);
        const auto* ip = reinterpret_cast<const rte_ipv4_hdr*>(frame + pm.l3_offset);
        const auto* udp = reinterpret_cast<const rte_udp_hdr*>(frame + pm.l4_offset);
        const size_t udp_len = pm.l4_length;
        if constexpr (kIn != Input::handed) {
            if (udp_len - kL4 > ctx.scratch.size()) {
                ++ctx.counters.ina_not_ina;
                on(pass);
                continue;
            }
        }
        if constexpr (kIn != Input::handed) {
            // Another lcore's chunk goes to it before this one parses anything. A first look at
            // the fixed header names the job and the chunk (an INA chunk's owner comes from
            // ina::chunk_place, its table's lane_of, the rule that also picks its slot index
            // there); the owner holds the slot, parses the packet and makes every check that
            // depends on the job (ingress, header, checksum) before it aggregates. The frame goes
            // unchanged, its metadata with it, in the burst's batch for that owner: no lock, no
            // shared slot state, no payload read here. What the look does not take is no
            // contribution of an attached job (a result, unknown, malformed): it stays here.
            uint8_t fixed_copy[16];
            const auto* fixed = static_cast<const uint8_t*>(rte_pktmbuf_read(
                m, static_cast<uint32_t>(pm.l4_offset + kL4), sizeof fixed_copy, fixed_copy));
            uint32_t peek_job = 0;
            uint32_t peek_seq = 0;
            if (ctx.n_workers > 1 && udp_len >= kL4 + proto::kFixedHeaderBytes &&
                fixed != nullptr && proto::peek_data(fixed, peek_job, peek_seq)) {
                look_up(peek_job);
                const uint16_t owner =
                    memo_table != nullptr ? memo_table->lane_of(peek_seq) : ctx.worker_index;
                if (owner != ctx.worker_index) {
                    if constexpr (kIn == Input::unchecked) {
                        store_meta(m, pm);
                    }
                    auto& batch = ctx.handoff_out[owner];
                    if (batch.n == batch.pkts.size()) [[unlikely]] {
                        send_handoffs(ctx, owner);
                    }
                    batch.pkts[batch.n++] = m;
                    ++handed_over;
                    ctx.handoff_pending |= uint32_t{1} << owner;
                    ctx.flush_pending =
                        static_cast<uint8_t>(ctx.flush_pending | 1u << dp::kFeatureIna);
                    continue;
                }
            }
        }
        // In place when the datagram sits in the first segment, else gathered into scratch.
        const auto* ina_bytes = static_cast<const uint8_t*>(rte_pktmbuf_read(
            m, static_cast<uint32_t>(pm.l4_offset + kL4), static_cast<uint32_t>(udp_len - kL4),
            ctx.scratch.data()));
        proto::Parsed packet;
        // A handed frame is parsed here only: its sender looked at the chunk alone. One that
        // fails is counted and passed on here, as its sender would have.
        if (!proto::parse_into(ina_bytes, udp_len - kL4, packet)) [[unlikely]] {
            ++ctx.counters.ina_not_ina;
            ++ctx.counters.ina_malformed[static_cast<size_t>(
                proto::parse_error(ina_bytes, udp_len - kL4))];
            on(pass);
            continue;
        }
        ++ctx.counters.ina_packets;
        const proto::Header& h = packet.header;
        look_up(h.job_id);
        const dp::InaJobView* job = memo_job;
        ina::ChunkTable* table = memo_table;
        if (table == nullptr) {
            const uint8_t handler = job == nullptr && h.type == proto::PacketType::result
                                        ? snap.ina_job_handler(h.job_id)
                                        : dp::kFeatureNone;
            const FeatureInputFn terminate = feature_stage(handler).ina_result;
            if (terminate != nullptr) {
                // A result of a job another feature terminates here (a RoCE aggregator's
                // parent answering): that feature decides, on these edges.
                if constexpr (kIn == Input::unchecked) {
                    store_meta(m, pm);
                }
                terminate(ctx, snap, &m, 1, pass, out);
                continue;
            }
            ++ctx.counters.ina_unknown_job;  // another switch's job, or not attached yet
            on(pass);
            continue;
        }
        if (h.type != proto::PacketType::data) {
            on(pass);  // results travel to the workers untouched
            continue;
        }
        const uint32_t src = rte_be_to_cpu_32(ip->src_addr);
        const int ingress = job->ingress_violation(m->port, src);
        const uint8_t mismatch =
            table->header_matches(h) ? 0 : ina::header_mismatch(proto::Header{h}, table->params());
        if (ingress != 0 || mismatch != 0) {
            table->count_reject(ingress == 1   ? ina::kRejectIngressPort
                                : ingress == 2 ? ina::kRejectIngressSource
                                               : static_cast<size_t>(std::countr_zero(mismatch)));
            on(rejected_drops(ctx, *job) ? FeatureEdge::drop : pass);
            continue;
        }
        if (!ina_udp_checksum_ok(m, ip, udp, pm.l4_offset, udp_len)) [[unlikely]] {
            count_drop(ctx, dp::DropReason::ina_bad_checksum);
            out.push(FeatureEdge::drop, m);
            continue;
        }
        // A CE-marked contribution (RFC 3168) makes the chunk's result carry ECN echo, so the
        // workers' senders learn of the congestion on the way up.
        const bool ce = (ip->type_of_service & 0x03) == 0x03;
        const uint8_t flags = static_cast<uint8_t>(h.flags | (ce ? proto::kFlagEcnEcho : 0));
        const ina::Verdict v = table->on_data(packet.bitstring, h.seq, h.elem_count,
                                              packet.payload, flags, ctx.now_tsc,
                                              table->encoding_of(h.elem_type), h.lowest_missing);
        switch (v) {
        case ina::Verdict::not_mine:
            on(pass);
            break;
        case ina::Verdict::outside_abm:
        case ina::Verdict::bad_length:
        case ina::Verdict::count_mismatch:
            on(rejected_drops(ctx, *job) ? FeatureEdge::drop : pass);
            break;
        case ina::Verdict::absorbed:
            ++ctx.counters.ina_absorbed;
            out.push(FeatureEdge::drop, m);
            break;
        case ina::Verdict::duplicate:
        case ina::Verdict::overlap:
        case ina::Verdict::stale:
            count_drop(ctx, dp::DropReason::ina_duplicate);
            out.push(FeatureEdge::drop, m);
            break;
        case ina::Verdict::no_slot:
            count_drop(ctx, dp::DropReason::ina_no_slot);
            out.push(FeatureEdge::drop, m);
            break;
        case ina::Verdict::fallback: {
            // The contribution continues to the root; only the flags octet changes, so the UDP
            // checksum (if any) is updated for its 16-bit word (RFC 1624), not recomputed.
            auto* hdr = reinterpret_cast<uint8_t*>(const_cast<rte_udp_hdr*>(udp) + 1);
            uint16_t old_word;
            std::memcpy(&old_word, hdr + 2, 2);
            proto::set_flags(hdr, static_cast<uint8_t>(h.flags | proto::kFlagFallback));
            uint16_t new_word;
            std::memcpy(&new_word, hdr + 2, 2);
            auto* mutable_udp = const_cast<rte_udp_hdr*>(udp);
            if (mutable_udp->dgram_cksum != 0) {
                mutable_udp->dgram_cksum = net::udp_checksum_field(static_cast<uint16_t>(
                    ~net::checksum_update16(mutable_udp->dgram_cksum, old_word, new_word)));
            }
            ++ctx.counters.ina_fallbacks;
            on(pass);  // its headers' places and lengths are unchanged: the metadata holds
            break;
        }
        case ina::Verdict::completed:
            ++ctx.counters.ina_absorbed;
            if (job->is_root) {
                emit.result(m, *job, *table, h, 0);
            } else {
                emit.partial(m, *job, *table, h, false);
            }
            break;
        case ina::Verdict::resend_result:
        case ina::Verdict::cached_result:  // (root only) released, but still in its cache
            if (job->is_root) {
                // A worker asking again gets the result by unicast. Anything else is a child
                // switch re-sending its partial for workers that lost the result (even when its
                // A-BM has one bit): the answer must reach the workers, so all of them get it
                // again. Unicast jobs know their workers; a BIER job lists none, so there a
                // one-bit P-BM stands for a worker.
                const bool from_worker =
                    job->results_bier
                        ? wire::bits_popcount(packet.bitstring, h.bitstring_bytes()) == 1
                        : job->is_worker(src);
                emit.result(m, *job, *table, h, from_worker ? src : 0, true);
            } else {
                emit.partial(m, *job, *table, h, true);
            }
            break;
        }
    }
    if constexpr (kIn != Input::handed) {
        // More than a quarter handed over: the input is spread by address, not by chunk.
        ctx.prefetch_received_bodies = handed_over * 4u <= i;
    }
    return i;
}

}  // namespace

namespace {

uint16_t ina_input_unchecked(LcoreContext& ctx, const dp::Snapshot& snap, rte_mbuf** pkts,
                             uint16_t n, FeatureEdge pass, EdgeBatches<FeatureEdge>& out) {
    return ina_run<Input::unchecked>(ctx, snap, pkts, n, pass, out);
}

uint16_t ina_input_handed(LcoreContext& ctx, const dp::Snapshot& snap, rte_mbuf** pkts,
                          uint16_t n, FeatureEdge pass, EdgeBatches<FeatureEdge>& out) {
    return ina_run<Input::handed>(ctx, snap, pkts, n, pass, out);
}

void ina_flush_handoffs(LcoreContext& ctx) {
    while (ctx.handoff_pending != 0) {
        send_handoffs(ctx, static_cast<uint16_t>(std::countr_zero(ctx.handoff_pending)));
    }
}

// A chunk table's idle slots are freed a few entries per tick, resuming where the last sweep
// stopped: a large window is swept over many loops instead of stalling one (timeouts are
// seconds, the tick a millisecond).
constexpr size_t kExpireEntriesPerTick = 256;

void ina_tick(LcoreContext&, const dp::Snapshot&, void* state, uint64_t now_tsc) {
    static_cast<ina::ChunkTable*>(state)->expire(now_tsc, kExpireEntriesPerTick);
}

}  // namespace

uint16_t ina_input(LcoreContext& ctx, const dp::Snapshot& snap, rte_mbuf** pkts, uint16_t n,
                   FeatureEdge pass, EdgeBatches<FeatureEdge>& out) {
    return ina_run<Input::classified>(ctx, snap, pkts, n, pass, out);
}

FeatureStage ina_stage() {
    FeatureStage s{"ina", ina_input, kInaEmitReserve, ina_tick, 1000};
    s.input_unchecked = ina_input_unchecked;
    s.input_handed = ina_input_handed;
    s.flush = ina_flush_handoffs;
    return s;
}

}  // namespace ina::pipeline
