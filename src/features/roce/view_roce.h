// SPDX-License-Identifier: Apache-2.0
// What the RoCE stage reads from the snapshot (built by compile_roce, slots written by
// control_roce before publication) and the counter lists of the feature: per QP (exposed with
// labels job and rank) and per lcore (drop reasons, before a packet's QP is known).
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>
#include <vector>

#include "dataplane/events.h"

struct rte_ring;

namespace ina::features::roce {

// The classifier handle of the feature (src/app registers the stage under it).
inline constexpr uint8_t kFeatureRoce = 2;
inline constexpr uint32_t kCmQpn = 1;  // QP1: connection manager MADs

// Feature-state ids: a job's state and a QP's state share the feature's id space.
constexpr uint32_t job_state_id(uint32_t job_id) { return 0x80000000u | job_id; }
constexpr uint32_t qp_state_id(uint32_t switch_qpn) { return switch_qpn; }

// One QP the switch terminates, by the switch's QPN (what arrives in BTH.DestQP).
struct QpView {
    uint32_t switch_qpn = 0;
    uint32_t job_id = 0;
    uint16_t rank = 0;
    uint16_t home = 0;                   // worker index of the job's home lcore
    uint16_t slot = dp::kNoStateSlot;    // its state's slot there (control_roce fills it)
};

struct JobView {
    uint32_t job_id = 0;
    uint16_t home = 0;
    uint16_t slot = dp::kNoStateSlot;
};

struct RoceView {
    std::vector<QpView> qps;  // sorted by switch_qpn
    std::vector<JobView> jobs;
    // RDMA CM (control_roce_cm.h): per worker index, the SPSC ring that carries QP1 MADs to the
    // switch to the control thread (control_roce owns the rings; empty: CM off, QP1 counted
    // cm_unsupported).
    std::vector<rte_ring*> cm_rings;

    const QpView* qp(uint32_t switch_qpn) const {
        auto it = std::lower_bound(qps.begin(), qps.end(), switch_qpn,
                                   [](const QpView& q, uint32_t k) { return q.switch_qpn < k; });
        return it != qps.end() && it->switch_qpn == switch_qpn ? &*it : nullptr;
    }
};

// Per-QP counters, X(name, help).
#define INA_ROCE_QP_COUNTERS(X)                                                                \
    X(packets_in, "RoCEv2 packets received on the QP")                                         \
    X(bytes_in, "Bytes of RoCEv2 packets received on the QP (IP header to ICRC)")              \
    X(packets_out, "RoCEv2 packets the switch sent on the QP (ACKs, NAKs, CNPs, results)")     \
    X(bytes_out, "Bytes of RoCEv2 packets sent on the QP")                                     \
    X(acks_sent, "ACKs sent (coalesced, one per burst at most)")                              \
    X(naks_sent, "NAK-sequence and fatal NAKs sent")                                           \
    X(rnr_naks_sent, "RNR NAKs sent (no aggregation slot: back-pressure)")                     \
    X(acks_received, "ACKs received for result WRITEs")                                        \
    X(naks_received, "NAKs received for result WRITEs")                                        \
    X(rnr_naks_received, "RNR NAKs received for result WRITEs")                                \
    X(results_sent, "Result WRITE packets sent for the first time")                            \
    X(retransmissions, "Result WRITE packets sent again (go-back-N)")                          \
    X(duplicates, "Contributions behind the expected PSN (re-ACKed, not added)")               \
    X(icrc_errors, "Packets with a bad ICRC (dropped)")                                        \
    X(cnps_sent, "CNPs sent for CE-marked contributions")                                      \
    X(cnps_received, "CNPs received (the result requester slows down)")                       \
    X(contributions, "Contributions added to the aggregation")                                 \
    X(refused, "Packets the QP's responder refused (bad opcode, key, length, transport)")      \
    X(dropped_in_error, "Requests dropped because the QP is in error (either side: one state per QP)") \
    X(dropped_session_failed, "Requests dropped because another rank's QP failed the job's session") \
    X(failure_notices, "Failure notices sent (the session failed: another rank's QP is in error)") \
    X(probes_sent, "Zero-length WRITEs sent to a worker silent for 1 s while its job holds slots (liveness)") \
    X(out_of_sequence, "Packets behind a PSN gap whose NAK-sequence is out, dropped as RC requires (resent)") \
    X(bad_contributions, "Executed WRITE messages that are no contribution (offset, immediate, size)") \
    X(invalid_requests, "NAKs invalid request sent (opcode sequence, length, unsupported opcode)") \
    X(access_errors, "NAKs remote access error sent (R_Key, VA or length outside the area)")   \
    X(segments, "Packets of multi-packet contributions staged (FIRST, MIDDLE, LAST)")

struct QpCounters {
#define INA_ROCE_FIELD(name, help) uint64_t name = 0;
    INA_ROCE_QP_COUNTERS(INA_ROCE_FIELD)
#undef INA_ROCE_FIELD
};

// Per-lcore reasons, X(name, help): packets that never reached a QP's counters.
#define INA_ROCE_LCORE_COUNTERS(X)                                                             \
    X(malformed, "UDP 4791 to the switch that does not parse as RoCEv2 (dropped)")             \
    X(icrc_error, "Bad ICRC before a QP was found (dropped)")                                   \
    X(unknown_qp, "Destination QP the switch does not have, or not attached yet (dropped)")    \
    X(wrong_address, "To a QP at a switch address other than its source (dropped)")            \
    X(cm_unsupported, "QP1 packets that are no CM MAD (not UD SEND ONLY), or CM off (dropped)") \
    X(cm_received, "CM MADs on QP1 handed to the control plane's RDMA CM")                      \
    X(cm_full, "CM ring to the control plane full (the MAD dropped; the worker retransmits)")   \
    X(handed_off, "Packets handed to the job's home lcore")                                    \
    X(handoff_full, "Hand-off ring to the home lcore full (dropped)")                          \
    X(no_mbuf, "Frames not sent for want of an mbuf")                                          \
    X(passed, "RoCEv2 packets not for the switch, passed on untouched")

// The control plane's RDMA CM (control_roce_cm.h), by event, X(name, help).
#define INA_ROCE_CM_EVENTS(X)                                                                  \
    X(reqs, "REQs received")                                                                   \
    X(reqs_retransmitted, "REQs of a kept connection, answered with the same REP (no new QP)") \
    X(reps_sent, "REPs sent (a QP connected, or the kept REP again)")                          \
    X(rejs_sent, "REJs sent (no such job, bad rank, no QP resources, malformed, other port)")  \
    X(rtus, "RTUs received (connection established)")                                         \
    X(dreqs, "DREQs received")                                                                 \
    X(dreps_sent, "DREPs sent (the QP torn down)")                                             \
    X(rejs_received, "REJs from workers (the QP torn down)")                                   \
    X(malformed, "MADs that are no CM message, truncated, or not method Send")                 \
    X(unsupported, "MRA, LAP, APR, SIDR, or a REP/DREP sent to the switch")                    \
    X(stray, "RTUs and REJs for no connection of the switch's")

struct CmCounters {
#define INA_ROCE_CM_FIELD(name, help) uint64_t name = 0;
    INA_ROCE_CM_EVENTS(INA_ROCE_CM_FIELD)
#undef INA_ROCE_CM_FIELD
};

enum class LcoreCounter : uint8_t {
#define INA_ROCE_ENUM(name, help) name,
    INA_ROCE_LCORE_COUNTERS(INA_ROCE_ENUM)
#undef INA_ROCE_ENUM
    count
};

}  // namespace ina::features::roce
