// SPDX-License-Identifier: Apache-2.0
// What the RoCEv2 server-to-server stage reads from the snapshot (built by compile_s2s, slots
// written by control_s2s before publication), and the feature's counter lists: per job
// (exposed with label job) and per lcore (reasons before a packet's job is known).
//
// A job connection is seen from both sides: worker -> root packets carry (src = worker IP,
// dst = root IP, DestQP = the root's QPN), root -> worker packets (src = root IP, dst = worker
// IP, DestQP = the worker's QPN). The view holds one entry per direction, sorted by that
// triple, so the stage finds a packet's job and connection with one binary search.
#pragma once

#include <algorithm>
#include <cstdint>
#include <tuple>
#include <vector>

#include "dataplane/events.h"

namespace ina::features::roce_s2s {

// The classifier handle of the feature (src/app registers the stage under it).
inline constexpr uint8_t kFeatureS2s = 3;

enum class Direction : uint8_t { to_root, to_worker };

struct ConnKey {
    uint32_t src_ip = 0;  // host order
    uint32_t dst_ip = 0;
    uint32_t dest_qp = 0;
    friend bool operator<(const ConnKey& a, const ConnKey& b) {
        return std::tie(a.src_ip, a.dst_ip, a.dest_qp) < std::tie(b.src_ip, b.dst_ip, b.dest_qp);
    }
    friend bool operator==(const ConnKey&, const ConnKey&) = default;
};

struct ConnView {
    ConnKey key;
    uint32_t job_id = 0;
    uint16_t conn = 0;  // index of the connection in its job (ranks ascending)
    Direction dir = Direction::to_root;
    bool drain = false;  // the job is being left (config drain: true)
    bool replicate = false;  // result WRITEs replicated, their ACKs aggregated
    // The job was removed (or replaced) by a config change and its state is kept by the switch
    // until its connections end (docs/rdma.md "Leaving a job"): handled as draining. Entries of
    // a leaving job sort before a configured one with the same key (the endpoints' PSNs are
    // translated: a new job cannot take the connection over).
    bool leaving = false;
    uint16_t home = 0;                  // worker index of the job's home lcore
    uint16_t slot = dp::kNoStateSlot;   // the job state's slot there (control_s2s fills it)
};

// A job that learns its connections from the RDMA CM exchange: every packet to or from its
// root goes to the job's state, which knows the connections learned so far.
struct LearnView {
    uint32_t root_ip = 0;
    uint32_t job_id = 0;
    bool drain = false;
    bool replicate = false;
    uint16_t home = 0;
    uint16_t slot = dp::kNoStateSlot;
    // A removed job still translating the connections it knew (control_s2s adds it; a static
    // one too, for its CM DREQs). A configured learning job on the root gets the same home
    // lcore, so the home lcore asks the leaving job's state first and gives the configured one
    // every packet of no connection the leaving one holds.
    bool leaving = false;
};

struct S2sView {
    std::vector<ConnView> conns;     // sorted by key
    std::vector<LearnView> learning;  // a handful: scanned
    // Neighbouring switches (rdma_s2s.switches, host order; a handful: scanned): a learned
    // connection whose worker's route goes through one of them is behind that switch.
    std::vector<uint32_t> switches;

    bool is_switch(uint32_t gateway) const {
        return std::find(switches.begin(), switches.end(), gateway) != switches.end();
    }

    const ConnView* find(const ConnKey& k) const {
        auto it = std::lower_bound(conns.begin(), conns.end(), k,
                                   [](const ConnView& c, const ConnKey& x) { return c.key < x; });
        return it != conns.end() && it->key == k ? &*it : nullptr;
    }
    // The configured (not leaving) learning job whose root is `a` or `b`, if any.
    const LearnView* learning_root(uint32_t a, uint32_t b) const {
        for (const auto& l : learning) {
            if (!l.leaving && (l.root_ip == a || l.root_ip == b)) {
                return &l;
            }
        }
        return nullptr;
    }
    // Up to `cap` leaving learning jobs whose root is `a` or `b`, into `out`, the NEWEST first
    // (control_s2s appends them in the order they left); how many. Past `cap` the oldest go
    // unmatched: the root serves one AllReduce at a time, so the states that left last are
    // those of the AllReduce it runs (the oldest first dropped the running one's state:
    // roce-vm-s2s-rejoin round 13 hung).
    uint16_t leaving_roots(uint32_t a, uint32_t b, const LearnView** out, uint16_t cap) const {
        uint16_t n = 0;
        for (auto it = learning.rbegin(); it != learning.rend() && n < cap; ++it) {
            if (it->leaving && (it->root_ip == a || it->root_ip == b)) {
                out[n++] = &*it;
            }
        }
        return n;
    }
};

constexpr uint32_t job_state_id(uint32_t job_id) { return 0x40000000u | job_id; }

// Per-job counters, X(name, help).
#define INA_S2S_JOB_COUNTERS(X)                                                                 \
    X(absorbed, "Worker contributions added to an aggregation slot (and then ACKed)")          \
    X(acks_synthesized, "ACKs the switch sent to workers as the root (coalesced per burst)")   \
    X(naks_sent, "NAK-sequences sent to workers as the root (one per PSN gap)")                \
    X(rnr_naks_sent, "RNR NAKs sent to workers (the chunk's slot still holds an older one)")   \
    X(duplicates, "Worker packets behind the expected PSN (re-ACKed, not added again)")        \
    X(aggregates_sent, "Aggregated WRITEs sent toward the root for the first time")            \
    X(retransmits, "Aggregated WRITE packets sent again (go-back-N on NAK or timeout)")        \
    X(root_acks_consumed, "ACKs from the root on job connections (consumed, not forwarded)")   \
    X(root_naks_consumed, "NAKs from the root on job connections (consumed; go-back-N)")       \
    X(aggregates_acked, "Aggregates the root acknowledged (their slots released)")             \
    X(carrier_ended_unacked, "Aggregates unacknowledged when the carrier's connection ended (DREQ) whose result the root had written: released, not sent again") \
    X(cnps_sent, "CNPs sent to workers for CE-marked contributions")                           \
    X(cnps_fanned_out, "CNPs sent to workers for a CNP the root sent on the carrier")          \
    X(icrc_errors, "Job packets with a bad ICRC (dropped, as the root would)")                 \
    X(not_contribution, "Worker requests at the expected PSN that are no contribution (dropped)") \
    X(bad_contributions, "Contributions of a wrong shape or repeated for a chunk (ACKed, not added)") \
    X(connections_learned, "Connections learned from an RDMA CM REQ/REP (learn: true)")       \
    X(connections_ended, "Learned connections ended by an RDMA CM DREQ")                      \
    X(connections_replaced, "Learned connections replaced by a new REQ of their rank (DREQ unseen)") \
    X(sessions, "Sessions started over used slots: the REP of a REQ while no connection was live, or of a rank already connected in the session (slots emptied)") \
    X(rejoins, "Sessions handed to a fresh state: a rank's REP while it was connected in the session and other ranks' connections were live (this state leaves)") \
    X(rejoin_partial_chunks, "Held chunks the reconnecting rank's old connection had not contributed to: sent with the others' contributions (k < world)") \
    X(rejoin_carrier_moved, "Aggregate legs moved to the lowest live rank's connection: the carrier reconnected alone") \
    X(rejoin_carrier_unacked, "Aggregates sent on a reconnecting carrier's old connection, unacknowledged, that the root has (its resumed REP says so) or may have (no resume): released, not sent again") \
    X(rejoin_carrier_resent, "Aggregates sent on a resuming carrier's old connection, unacknowledged, that the root lacks (its REP says so): sent again on the moved aggregate leg") \
    X(rejoin_held, "Requests toward the root of the next session held back before its state was attached (RNR NAK or dropped unACKed)") \
    X(rejoin_cm_lost, "CM packets of the next session not kept for its state (notes full)") \
    X(rejoin_resume_raised, "Resuming REQs whose resume-from the switch raised past the rank's contributions it absorbed (a restarted worker)") \
    X(rejoin_resumed, "REPs that took a rank back into the running AllReduce (INAR reply resumed): its new connection passes untouched, this state leaves") \
    X(rejoin_joined, "First connections of ranks that joined a session a resume left waiting for them (the resuming rank had started first)") \
    X(drain_refused, "Contributions to new chunks refused while draining (RNR NAK)")          \
    X(forwarded, "Packets forwarded with their PSN/MSN translated after the drain")            \
    X(leave_connections_translated, "Connections of a removed job forwarded translated by the switch after the removal") \
    X(leave_ended_dreq, "Connections of a removed job ended by an RDMA CM DREQ (no longer translated)") \
    X(leave_ended_timeout, "Connections of a removed job still open when its idle timeout ended it (rdma_s2s leave_timeout_ms)") \
    X(leave_passed, "Packets of a removed job forwarded untouched after it ended (state awaiting release)") \
    X(results_replicated, "Result WRITE copies sent to non-carrier workers (replicate: true)")  \
    X(replicate_failed, "Result WRITE copies not built (no mbuf or headers not in segment 1)") \
    X(result_acks_consumed, "Workers' ACKs/NAKs of result WRITEs (consumed, aggregated)")      \
    X(result_acks_forwarded, "ACKs sent to the root: the PSN every worker acknowledged")       \
    X(departure_acks, "ACKs to the root past what a departed (DREQ) worker acknowledged: the departure rule let them go") \
    X(result_naks_forwarded, "Workers' NAKs sent to the root, translated to the carrier")      \
    X(result_naks_merged, "Workers' NAKs of a gap already reported to the root (dropped)")     \
    X(result_cnps_forwarded, "Workers' CNPs sent to the root on the carrier connection")     \
    X(result_source_moved, "Result copies' source moved onto the carrier's resumed connection (replicate: true)") \
    X(result_legs_resumed, "Resumed non-carrier connections made copy targets (replicate: true): the root writes them nothing itself") \
    X(result_fill_sent, "Zero-length WRITEs that align a worker's result leg after the source moved (sent and resent)") \
    X(completed_by_count, "Chunks completed because the contributions' counts summed to the ranks through this switch (a downstream switch's aggregate among them)") \
    X(count_beyond, "Contributions whose count would take a chunk past the ranks through this switch (ACKed, not added)") \
    X(connections_behind_switch, "Learned connections behind a neighbouring switch that another connection carries (no copies, ACKs or CNPs of their own here)")

struct JobCounters {
#define INA_S2S_FIELD(name, help) uint64_t name = 0;
    INA_S2S_JOB_COUNTERS(INA_S2S_FIELD)
#undef INA_S2S_FIELD
};

// Per-lcore reasons, X(name, help).
#define INA_S2S_LCORE_COUNTERS(X)                                                              \
    X(malformed, "UDP 4791 that does not parse as RoCEv2 (forwarded unmodified)")              \
    X(passed, "RoCEv2 packets of no job connection, forwarded untouched")                      \
    X(handed_off, "Packets handed to the job's home lcore")                                    \
    X(handoff_full, "Hand-off ring to the home lcore full (dropped)")                          \
    X(no_mbuf, "Frames not sent for want of an mbuf")                                          \
    X(fallback, "Job packets forwarded untouched because the job's state is not attached")

enum class LcoreCounter : uint8_t {
#define INA_S2S_ENUM(name, help) name,
    INA_S2S_LCORE_COUNTERS(INA_S2S_ENUM)
#undef INA_S2S_ENUM
    count
};

}  // namespace ina::features::roce_s2s
