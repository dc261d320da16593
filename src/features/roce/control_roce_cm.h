// SPDX-License-Identifier: Apache-2.0
// RDMA CM on the switch, the passive side (docs/rdma.md "RDMA CM on the switch"): a worker's
// rdma_connect() to the switch's address and CM port reaches this state machine as CM MADs
// (roce/cm.h), and a REQ connects the rank's QP through the same function as POST
// /api/v1/rdma/jobs/{id}/connect (CmQpControl, implemented by RoceControl::connect_qp).
//
//   REQ  (service ID 0x0106 << 16 | port; private data = rdma_cm's header + the INAR connect
//        request of src/worker/rdma/protocol.h with mode 2) -> QP connected, REP with the
//        switch's QPN and the PSN the worker sends from, private data = the INAR accept layout
//        (contribution area address and rkey); refused -> REJ (consumer reject 28) whose
//        private data is the INAR reply with the reason the worker prints.
//   REQ again (same worker address and communication ID) -> the same REP, no second QP.
//   RTU  -> the connection is established (the QP was ready when the REP went out).
//   DREQ -> the QP goes (as DELETE .../connect/{rank}), DREP; a DREQ for a connection already
//           gone (our DREP was lost) gets a DREP again.
//   REJ from the worker (it gave up waiting, or refused our REP) -> the QP goes.
// Control-plane code: one thread calls it (the caller serialises), allocation allowed.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <utility>

#include "features/roce/config_roce.h"
#include "features/roce/view_roce.h"
#include "roce/cm.h"
#include "worker/rdma/protocol.h"

namespace ina::features::roce {

// Why a connect is refused (the API's HTTP status and the CM's INAR reject reason come from it).
enum class Refusal : uint8_t {
    none,
    malformed,     // 400: the request does not decode or names an impossible value
    no_job,        // 404: no rdma job of that id
    differs,       // 409: the job parameters differ from the job's
    bad_rank,      // 400: rank outside 1..world
    rank_taken,    // 409: the rank is already connected
    no_resources,  // 503: no per-lcore state slot left
};
int http_status(Refusal r);
rdma::RejectReason reject_reason(Refusal r);

// What a connect gives back: the switch's side of the QP, or why not.
struct ConnectOutcome {
    Refusal refusal = Refusal::none;
    std::string error;  // the API's error text when refused
    uint32_t switch_qpn = 0;
    uint32_t switch_psn = 0;
    uint32_t switch_ip = 0;  // host order: the QP's source (an address of the worker's port)
    std::optional<net::Ipv6Addr> switch_ip6;  // instead, for an IPv6 worker: on its prefix
    uint64_t area_length = 0;
    uint32_t pmtu = 0;
    bool ok() const { return refusal == Refusal::none; }
};

// The control plane's QP operations the CM drives (RoceControl in the switch, a fake in tests).
class CmQpControl {
public:
    virtual ~CmQpControl() = default;
    // Connects `r` to job `job_id` exactly as the API does; `switch_psn`, when given, is the PSN
    // the switch's requester starts from (CM: the REQ's Starting PSN).
    virtual ConnectOutcome connect_qp(uint32_t job_id, const ConnectRequest& r,
                                      std::optional<uint32_t> switch_psn) = 0;
    // Tears the rank's QP down as DELETE does; false when it was not connected.
    virtual bool disconnect_qp(uint32_t job_id, uint16_t rank) = 0;
};

// CmCounters (what the passive side has seen) is listed in view_roce.h with the other counters.

class CmPassive {
public:
    CmPassive(CmQpControl& qps, uint16_t port) : qps_(qps), port_(port) {}
    // The listener port of REQs from now on (rdma.cm_port of the running config); connections
    // already made stay.
    void set_port(uint16_t port) { port_ = port; }

    // One MAD that arrived on QP1 from the worker whose address is `worker` as a GID (an IPv6
    // address; IPv4 as ::ffff:a.b.c.d), sent to the switch's address `own` (when given: the
    // QP then takes it as its source, either family). The answer to send back to it (a REP,
    // REJ or DREP), if any.
    std::optional<ina::roce::cm::Message> on_mad(const uint8_t* mad, size_t len,
                                                 const ina::roce::cm::Gid& worker,
                                                 const ina::roce::cm::Gid* own = nullptr);
    // The same from IPv4 `worker_ip` (host order).
    std::optional<ina::roce::cm::Message> on_mad(const uint8_t* mad, size_t len, uint32_t worker_ip) {
        return on_mad(mad, len, ina::roce::cm::ipv4_gid(worker_ip));
    }

    const CmCounters& counters() const { return counters_; }
    size_t connections() const { return connections_.size(); }
    // Whether the connection of (worker address, worker's communication ID) saw its RTU.
    bool established(const ina::roce::cm::Gid& worker, uint32_t worker_comm_id) const;
    bool established(uint32_t worker_ip, uint32_t worker_comm_id) const {
        return established(ina::roce::cm::ipv4_gid(worker_ip), worker_comm_id);
    }

private:
    struct Connection {
        uint32_t job_id = 0;
        uint16_t rank = 0;
        uint32_t local_comm_id = 0;  // ours
        bool established = false;
        ina::roce::cm::Message rep;       // answered again to a retransmitted REQ
    };
    // Worker address (as a GID), worker's communication ID.
    using Key = std::pair<ina::roce::cm::Gid, uint32_t>;

    std::optional<ina::roce::cm::Message> on_req(const ina::roce::cm::Message& m,
                                                 const ina::roce::cm::Gid& worker,
                                                 const ina::roce::cm::Gid* own);
    ina::roce::cm::Message reject(const ina::roce::cm::Message& req, uint16_t cm_reason,
                             std::optional<rdma::RejectReason> reason, uint32_t job_id);
    // The connection whose switch-side communication ID is `local_comm_id`, from `worker`.
    std::map<Key, Connection>::iterator find_local(const ina::roce::cm::Gid& worker,
                                                   uint32_t local_comm_id);

    CmQpControl& qps_;
    uint16_t port_;
    uint32_t next_comm_id_ = 0x1c0a0001;  // any start; Linux draws its IDs at random
    std::map<Key, Connection> connections_;
    CmCounters counters_;
};

}  // namespace ina::features::roce
