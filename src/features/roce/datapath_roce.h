// SPDX-License-Identifier: Apache-2.0
// The RoCEv2 server-to-switch stage (docs/rdma.md "Server-to-switch mode"): the switch
// terminates one RC QP per worker, aggregates the contributions a job's ranks WRITE with
// immediate (one WRITE_ONLY packet, or FIRST/MIDDLE.../LAST when a chunk is larger than the
// PMTU: staged per QP, added whole at the LAST) and WRITEs the result back to every rank (as
// many packets as the PMTU needs), releasing it once every rank's ACK covers it. Per-lcore state: one JobState per job and one QpState per QP, all on the job's
// home lcore, allocated by the control plane (control_roce) and attached through the command
// ring; the stage finds a QP by the snapshot's RoceView (switch QPN -> slot) and hands packets
// that arrive on another lcore to the home lcore. Nothing here allocates per packet: emitted
// frames come from ctx.pool.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <string_view>
#include <vector>

#include "agg/ack_table.h"
#include "features/roce/datapath_roce_parent.h"
#include "features/roce/view_roce.h"
#include "pipeline/feature_stages.h"
#include "roce/cnp.h"
#include "roce/encode.h"
#include "roce/icrc.h"
#include "roce/rc_requester.h"
#include "roce/rc_responder.h"
#include "wire/bitstring.h"
#include "worker/rdma/switch_exchange.h"

namespace ina::features::roce {

inline constexpr uint16_t kMaxRanks = 64;  // = config kMaxWorld
inline constexpr uint16_t kContributorBsl = 64;

struct JobParams {
    uint32_t job_id = 0;
    uint16_t world = 0;
    reduce::Op op = reduce::Op::sum;
    reduce::ElemType dtype = reduce::ElemType::fp32;
    uint32_t chunk_bytes = 0;
    uint32_t window = 0;  // power of two: the aggregation's slots
    // Every QP's path MTU (0: chunk_bytes). A chunk above it travels as a multi-packet WRITE
    // both ways; config keeps chunk_bytes then a multiple of it, at most kMaxChunkBytes.
    uint32_t pmtu = 0;
    // Exact int64 fixed-point slots with this many fraction bits (reduce/fixed_point.h).
    bool deterministic = false;
    uint8_t fraction_bits = 0;
};

// The largest chunk (= config kMaxChunkBytes): a multi-packet contribution is staged per QP.
inline constexpr uint32_t kMaxStagedBytes = 65536;

struct QpState;

// What a feature slot of the feature holds: a job or a QP, told apart by this base. The
// control plane attaches a StateTag* (never the derived pointer), so the hooks cast back.
enum class StateKind : uint8_t { job, qp };
struct StateTag {
    explicit StateTag(StateKind k) : kind(k) {}
    StateKind kind;
};

// A job's aggregation on its home lcore. Keys are session sequences extended to 32 bits.
struct alignas(64) JobState : StateTag {
    // Throws on bad params (control plane only). `parent`: the aggregator role, when its
    // parent_ip is set.
    explicit JobState(const JobParams& p, const ParentParams& parent = {});
    JobParams params;
    // fused: the table adds fp32 sums through fused_check_kernels(), which fold the next
    // packet's ICRC into each add (roce_input); set before the table is built.
    bool fused = false;
    agg::AckTable table;
    std::unique_ptr<ParentLink> parent;  // aggregator role; nullptr: the job is its own root
    // The rank's QP, by rank (1..world); written on the lcore by the QP's attach/detach.
    std::array<QpState*, kMaxRanks + 1> rank_qp{};
    uint32_t high_key = 0;  // the highest key seen: 24-bit sequences extend around it
    bool any_key = false;
    uint64_t results_completed = 0;
    uint64_t results_released = 0;
    uint64_t post_failures = 0;  // a result that could not be posted on some rank's QP
    // The session failed (docs/rdma.md "A rank that fails"): the rank whose QP went into error
    // first (0: none) and how (session_failure()). Set once, on the home lcore; from then on the
    // other ranks' requests are dropped and each live QP carries a failure notice. A new session
    // is a new JobState.
    uint16_t failed_rank = 0;
    uint8_t failure = 0;
    // A rank whose QP left (DELETE, disconnect) while others stayed, having contributed every
    // key up to left_high_key (RC delivers a worker's chunks in order) or none: a chunk beyond
    // that can never complete, so the first contribution to one fails the session (rank_left).
    uint16_t left_rank = 0;
    bool left_contributed = false;
    uint32_t left_high_key = 0;
    uint8_t elem_shift = 0;  // log2 of the element's bytes (1, 2, 4, 8)
    // A result packet's payload: min(chunk_bytes, pmtu); a chunk is chunk_bytes / this many
    // packets (the last of a short final chunk shorter).
    uint32_t segment_bytes = 0;
    // A whole segment's result packet: its ICRC joined from the rank's headers and the
    // segment payload's CRC, which the first rank's packet of a (key, segment) sums and the
    // others reuse (a key's result never changes while it is held; keys are never reused).
    // Indexed by segment: every rank sends a message's packets in order, so a rank's FIRST
    // must not evict the CRC another rank's LAST still needs.
    ina::roce::IcrcJoin result_icrc;
    struct SegmentCrc {
        uint32_t key = 0;
        uint32_t crc = 0;
        bool valid = false;
    };
    std::vector<SegmentCrc> segment_crc;

    // The 32-bit key of 24-bit session sequence `s` (serial arithmetic around high_key).
    uint32_t extend(uint32_t s);
};

struct QpParams {
    uint32_t switch_qpn = 0;
    uint32_t switch_psn = 0;
    uint32_t switch_ip = 0;  // host order: the QP's source, an address of the worker's port
    uint32_t worker_qpn = 0;
    uint32_t worker_psn = 0;
    uint32_t worker_ip = 0;
    // An IPv6 worker (its GID is a global IPv6 address): the two addresses below, network order,
    // replace switch_ip and worker_ip (then 0), and the QP's frames are IPv6.
    bool ipv6 = false;
    std::array<uint8_t, 16> switch_ip6{};
    std::array<uint8_t, 16> worker_ip6{};
    uint16_t rank = 0;
    uint32_t pmtu = 1024;
    uint64_t result_addr = 0;
    uint32_t result_rkey = 0;
    uint64_t result_length = 0;
    uint8_t timeout = 14;
    uint8_t retry_cnt = 7;
    uint8_t rnr_retry = 7;
    uint64_t area_addr = 0;
    uint32_t area_rkey = 0;
};

struct alignas(64) QpState : StateTag {
    QpState(const QpParams& p, JobState* job);
    QpParams params;
    JobState* job;
    ina::roce::Responder responder;
    ina::roce::Requester requester;
    ina::roce::CnpLimiter cnp;
    // The QP's addressing: path for an IPv4 worker, path6 for an IPv6 one (params.ipv6).
    ina::roce::Ipv4Path path;
    ina::roce::Ipv6Path path6;
    // Its ACK/NAK frames, written once from the path above (which never changes on a QP).
    ina::roce::AckFrameTemplate ack;
    wire::BitString rank_bits;
    // The key of each posted result message, by message sequence mod kMaxMessages;
    // control_message: the message is no result but a probe or a failure notice, whose ACK
    // releases nothing.
    std::array<uint32_t, ina::roce::Requester::kMaxMessages> message_key{};
    std::array<bool, ina::roce::Requester::kMaxMessages> control_message{};
    // Liveness (docs/rdma.md "A rank that fails"): when the worker was last heard from (any
    // packet with a good ICRC; 0 until the QP's first tick) and last probed.
    uint64_t last_heard_ns = 0;
    uint64_t last_probe_ns = 0;
    // The highest key this QP contributed (its chunks come in order), once it contributed.
    uint32_t high_key = 0;
    bool contributed = false;
    // The multi-packet contribution in progress (FIRST..LAST, in PSN order: the responder's
    // rules): its bytes at their message offset, added to the table whole at the LAST, which is
    // the only packet carrying the chunk's sequence (the immediate). Empty for a job whose
    // chunks fit one packet. A refused LAST (no slot) keeps it: the retransmitted LAST finds
    // every earlier packet still here, and nothing before the LAST was added anywhere.
    std::unique_ptr<uint8_t[]> staging;
    bool message_bad = false;  // a packet of this message was no contribution: not added
    // A packet since this QP's last contribution was CE-marked (RFC 3168): the next chunk it
    // contributes to makes an aggregator's partial carry ECN echo (INA's, to the root's result).
    bool ce_pending = false;
    uint16_t ip_id = 0;
    uint16_t last_port = 0;  // where the worker's packets last came in (emitted frames' m->port)
    bool touched = false;    // in the current burst's list of QPs to ACK and pump
    QpCounters counters;
};

// 0 ready, 1 responder in error, 2 requester in error, 3 both (the qp_state metric).
inline uint8_t qp_state_code(const QpState& q) {
    return static_cast<uint8_t>(
        (q.responder.state() == ina::roce::Responder::State::error ? 1 : 0) |
        (q.requester.state() == ina::roce::Requester::State::error ? 2 : 0));
}

// Why a session failed, from the QP that failed (JobState::failure, the failure notice's top
// byte, rdma::failure_notice_imm): its result side's rc::RequesterError (1..6: retries or RNR
// retries exhausted, a fatal NAK received), or rdma::kFailureReceiveSide (it was sent a fatal
// NAK: its requests were invalid).
inline uint8_t session_failure(const QpState& q) {
    return q.requester.state() == ina::roce::Requester::State::error
               ? static_cast<uint8_t>(q.requester.error())
               : rdma::kFailureReceiveSide;
}
// A failure code's name: "none", the requester error's ("retry_exceeded", ...),
// "fatal_nak_sent" or "rank_left".
constexpr std::string_view session_failure_name(uint8_t failure) {
    if (failure == rdma::kFailureReceiveSide) {
        return "fatal_nak_sent";
    }
    if (failure == rdma::kFailureRankLeft) {
        return "rank_left";
    }
    return failure < static_cast<uint8_t>(ina::roce::RequesterError::count)
               ? ina::roce::to_string(static_cast<ina::roce::RequesterError>(failure))
               : "unknown";
}

// A worker silent this long while its job holds slots is probed: a zero-length WRITE (no
// immediate, nothing consumed at the worker) that a live peer's NIC acknowledges and a dead
// one's does not, so its QP runs out of retries and fails the session. A process that died
// (its QP destroyed) with no result owed it would otherwise never be noticed, and the others
// would wait for their deadline.
inline constexpr uint64_t kProbeAfterSilenceNs = 1'000'000'000;

// Frames one input may put on the edges before the burst's end: a CNP and a NAK/re-ACK.
inline constexpr uint16_t kRoceEmitPerInput = 2;

uint16_t roce_input(pipeline::LcoreContext& ctx, const dp::Snapshot& snap, rte_mbuf** pkts,
                    uint16_t n, pipeline::FeatureEdge pass,
                    pipeline::EdgeBatches<pipeline::FeatureEdge>& out);

// Timer work on one attached state: a QP's retransmission timeout and unsent results.
void roce_tick(pipeline::LcoreContext& ctx, const dp::Snapshot& snap, void* state,
               uint64_t now_tsc);
// Attach hooks: a QP enters / leaves its job's rank table (on the lcore).
void roce_attach(void* state);
void roce_detach(void* state);

// A result for `key` is in (the root's own completion, or an aggregator's parent's answer):
// posted on every rank's requester, as many of its packets sent on `out` as there is room for
// (the rest at the next burst or tick).
void deliver_result(pipeline::LcoreContext& ctx, const dp::Snapshot& snap, JobState& job,
                    uint32_t key, uint32_t length,
                    pipeline::EdgeBatches<pipeline::FeatureEdge>& out);
// A frame of `len` bytes (Ethernet header first) in fresh mbufs from ctx.pool, chained when
// larger than one; nullptr (counted no_mbuf) when the pool is empty.
rte_mbuf* frame_of(pipeline::LcoreContext& ctx, const uint8_t* bytes, size_t len, uint16_t port);
// Whether IPv4 `dst` (host order) is one of the switch's own addresses.
bool for_switch(const dp::Snapshot& snap, uint32_t dst);
// The same for IPv6 `dst6` (16 bytes, network order).
bool for_switch6(const dp::Snapshot& snap, const uint8_t* dst6);
// Hands `m` to lcore `home` (the job's) when this is not it: true when m left this lcore's
// path (enqueued on the hand-off ring, or dropped when it is full; counted either way).
bool away_from_home(pipeline::LcoreContext& ctx, rte_mbuf* m, uint16_t home,
                    pipeline::EdgeBatches<pipeline::FeatureEdge>& out);

// The stage as registered (src/app): 100 us ticks.
pipeline::FeatureStage stage();

}  // namespace ina::features::roce
