// SPDX-License-Identifier: Apache-2.0
// The aggregator role of an rdma job (docs/rdma.md "Aggregator role"): a chunk every local rank
// contributed goes up as INA contributions (P-BM = the job's A-BM) to the job's INA parent,
// built by the shared INA encoder (pipeline/ina_encode.h): ONE with seq = the chunk's key when
// the chunk fits a packet, else one per pmtu segment j with seq = key x segments + j (the INA
// job is chunked at the pmtu; a short last chunk has fewer). The slot stays held; the parent's
// INA results for the chunk (every segment's), addressed to this switch, are what every rank's
// result WRITE carries once all are in (the root role's requester path, one WRITE of the whole
// chunk), and the slot is released when every rank acknowledged, as for a root. Segments
// without an answer are sent again on the job's tick after the job's timeout (the parent
// answers a duplicate partial with the result).
// Per-lcore state on the job's home lcore, allocated with the JobState (control plane).
#pragma once

#include <cstdint>
#include <vector>

#include "pipeline/feature_stages.h"
#include "wire/bitstring.h"

namespace ina::features::roce {

struct JobState;

// What makes a job an aggregator; parent_ip 0: the job is its own root.
struct ParentParams {
    uint32_t parent_ip = 0;  // host order
    uint32_t source_ip = 0;  // 0: the egress interface's address
    uint8_t bsl_code = 1;    // RFC 8296 code of the P-BM's length
    uint8_t set_id = 0;
    wire::BitString abm;     // P-BM of every partial: the BFR-ids the job's ranks stand for
    uint64_t timeout_ns = 0; // a partial without result is sent again after this
};

// Events of the parent link, X(name, help): inaswitch_rdma_job_parent_total{job,event}.
#define INA_ROCE_PARENT_EVENTS(X)                                                              \
    X(partial_sent, "INA contributions sent up to the parent (one per chunk, or per pmtu segment)") \
    X(partial_resent, "INA contributions sent again: no result within partial_timeout_ms")     \
    X(result_in, "INA results of the parent taken for the ranks' result WRITEs (one per segment)") \
    X(result_duplicate, "INA results for a chunk whose result is already in (dropped)")         \
    X(result_not_held, "INA results for a chunk this switch does not hold (dropped)")          \
    X(result_bad, "INA results that disagree with the job (type, op, count, P-BM) or checksum")\
    X(no_mbuf, "Partials not sent for want of an mbuf or a route (sent again on the tick)")

struct ParentCounters {
#define INA_ROCE_PARENT_FIELD(name, help) uint64_t name = 0;
    INA_ROCE_PARENT_EVENTS(INA_ROCE_PARENT_FIELD)
#undef INA_ROCE_PARENT_FIELD
};

// The parent's results, one per slot (the slot's key tells whose): what the ranks' WRITEs read.
struct ParentLink {
    // segment_bytes: one INA contribution's bytes (chunk_bytes, or the pmtu when the chunk is
    // above it; chunk_bytes is then a multiple of it).
    ParentLink(const ParentParams& p, uint32_t window, uint32_t chunk_bytes,
               uint32_t segment_bytes);
    ParentParams params;
    uint32_t chunk_bytes;
    uint32_t segment_bytes;
    uint32_t segments;   // INA seqs per chunk (1: the chunk is one INA packet)
    uint32_t seg_words;  // 64-bit words of a slot's bitmap of arrived segments
    std::vector<uint8_t> results;        // window x chunk_bytes
    std::vector<uint32_t> result_key;    // by slot: the key whose result `results` holds
    std::vector<uint32_t> result_elems;  // by slot: its element count, 0 for none (or partial)
    // By slot: the key whose segments are coming in, and which have (bit j: INA seq
    // key x segments + j). The result is whole, and has_result, when every segment of the
    // local chunk is in.
    std::vector<uint32_t> arriving_key;
    std::vector<uint64_t> arrived;       // window x seg_words
    // By slot: key + 1 of the last chunk a CE-marked contribution went into (0: none); its
    // partial carries ECN echo, as an INA aggregator's does for a CE-marked contribution.
    std::vector<uint32_t> ce_key;
    ParentCounters counters;

    uint32_t slot(uint32_t key) const {
        return key & (static_cast<uint32_t>(result_key.size()) - 1);
    }
    bool has_result(uint32_t key) const {
        const uint32_t s = slot(key);
        return result_elems[s] != 0 && result_key[s] == key;
    }
    // Whether segment `seg` of `key`'s result is in (a whole result has every one).
    bool has_segment(uint32_t key, uint32_t seg) const {
        const uint32_t s = slot(key);
        return has_result(key) ||
               (arriving_key[s] == key &&
                (arrived[size_t{s} * seg_words + seg / 64] >> (seg % 64) & 1) != 0);
    }
};

// Elements [first, first + n) of key's result as the ranks get it: the parent's (aggregator)
// or the table's own (root); one packet of a result WRITE. Writes them to `out`, returns n;
// 0 (nothing written) when there is no such result or the range is not inside it.
uint32_t rank_result(const JobState& job, uint32_t key, uint32_t first, uint32_t n,
                     uint8_t* out);

// A chunk is complete at an aggregator: its partial goes up (frame on `out` when there is
// room and an mbuf; else counted, the tick sends it). The slot's clock starts.
void send_partial(pipeline::LcoreContext& ctx, const dp::Snapshot& snap, JobState& job,
                  uint32_t key, uint64_t t_ns,
                  pipeline::EdgeBatches<pipeline::FeatureEdge>& out);

// The job's tick: partials without result for timeout_ns are sent again.
void parent_tick(pipeline::LcoreContext& ctx, const dp::Snapshot& snap, JobState& job,
                 uint64_t t_ns);

// FeatureStage::ina_result of the feature: a parent's INA result for an aggregator job.
uint16_t roce_ina_result(pipeline::LcoreContext& ctx, const dp::Snapshot& snap, rte_mbuf** pkts,
                         uint16_t n, pipeline::FeatureEdge pass,
                         pipeline::EdgeBatches<pipeline::FeatureEdge>& out);

}  // namespace ina::features::roce
