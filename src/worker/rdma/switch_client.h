// SPDX-License-Identifier: Apache-2.0
// The server-to-switch AllReduce client (docs/rdma.md "Server-to-switch mode"): one RC
// connection from this worker to the switch itself, kept across allreduce() calls like the UDP
// ina::worker::Client's socket.
//
// Setup (constructor): open the device, find this host's RoCE v2 GID (::ffff:IPv4, or the IPv6
// address itself when `ip` is IPv6: the connection then runs over IPv6), create the
// RC QP. Through the API (plain verbs): POST its QPN, a random initial PSN and the result staging
// ring to the switch's control API, then INIT -> RTR (the switch's QPN and PSN, GRH to its GID)
// -> RTS (rnr_retry 7: the switch RNR-NAKs as back-pressure); the destructor DELETEs the
// connection. Through RDMA CM (switch_cm): rdma_connect with the same QP and the INAR connect
// request (mode 2, the staging ring) in the REQ's private data; rdma_cm's REP moves it to RTR
// and RTS (connect_own_qp); the destructor rdma_disconnects.
//
// Data path: chunk c of a call is session sequence s = base + c (switch_exchange.h). The input is
// registered per call (the HCA reads it, no copy); results land in a registered staging ring of
// `window` chunk slots and are copied out as their completions arrive, so output may be the
// input itself. Invariant that makes the ring safe: s is posted only once the results of every
// s' <= s - window are in (and copied), and the switch cannot produce result s before this
// worker contributed s.
//
// Every call is bounded by options.timeout; a failed call (timeout, failed work completion,
// protocol error) leaves the QP unusable and every later call throws at once.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "reduce/reduce.h"
#include "worker/rdma/client.h"
#include "worker/rdma/switch_api.h"
#include "worker/rdma/switch_exchange.h"
#include "worker/rdma/verbs.h"

namespace ina::rdma {

struct SwitchClientOptions {
    std::string switch_api;  // "http://HOST:PORT" of the switch's control API
    // Or connect by RDMA CM (rdma_connect to the switch's address and CM port, docs/rdma.md "RDMA
    // CM on the switch") when switch_cm (an IPv4 or IPv6 address, of the worker's family) is set.
    std::string switch_cm;
    uint16_t cm_port = 7471;
    std::string token;       // bearer token of the API's write role, if it has one
    uint32_t job_id = 0;     // the switch's rdma job id
    uint16_t rank = 1;       // 1..world
    uint16_t world = 1;
    reduce::ElemType elem_type = reduce::ElemType::fp32;
    reduce::Op op = reduce::Op::sum;
    uint32_t chunk_bytes = 1024;  // <= pmtu: one WRITE ONLY packet; above: a multi-packet WRITE
    uint32_t window = 64;         // the switch job's window
    uint32_t pmtu = 1024;
    std::string device;                  // RDMA device name; empty: the first one
    uint8_t ib_port = 1;
    std::optional<uint32_t> gid_index;   // empty: the RoCE v2 GID of `ip` (or the first IPv4 one)
    std::string ip;                      // this worker's IPv4 or IPv6 address; empty: the GID's
    std::optional<uint32_t> psn;         // initial send PSN; empty: random
    // The local ACK timeout (4.096 us * 2^n) of this QP and, through the API, of the switch's
    // requester for the results: 17 (537 ms) as rdma_cm gives a RoCE path (packet lifetime
    // 16, + 1). After retry_cnt + 1 timeouts without an ACK a QP is in error for good, so this
    // bounds how long either host may stall (a paused VM, a busy core) before the connection
    // dies: ~4.3 s at 17 and 7, ~0.54 s at 14.
    uint8_t ack_timeout = 17;
    uint8_t retry_cnt = 7;
    std::chrono::milliseconds timeout{60000};  // per allreduce() and for the API calls
};

class SwitchClient {
public:
    // Connects (see above); throws Error, with the switch's error text for a refused connect.
    explicit SwitchClient(SwitchClientOptions options);
    // DELETEs the connection (errors are dropped; call close() to see them).
    ~SwitchClient();
    SwitchClient(const SwitchClient&) = delete;
    SwitchClient& operator=(const SwitchClient&) = delete;

    // One AllReduce of `input` (elements of elem_type, little-endian) into `output` (same size;
    // may be the same buffer). The next call continues the session sequence.
    ClientStats allreduce(std::span<const std::byte> input, std::span<std::byte> output);

    // DELETE the connection now: "" or the error text. Later calls throw.
    std::string close();

    const SwitchClientOptions& options() const { return opt_; }
    const SwitchConnectReply& peer() const { return reply_; }
    uint32_t qpn() const { return qp_.qpn(); }
    uint32_t psn() const { return psn_; }
    const std::string& ip() const { return ip_; }
    uint32_t next_seq() const { return seq_.base(); }
    double connect_seconds() const { return connect_seconds_; }

private:
    void connect_by_api(const RoceGid& gid);
    void connect_by_cm();

    SwitchClientOptions opt_;
    std::optional<SwitchApi> api_;  // the API path only
    Device device_;
    ProtectionDomain pd_;
    CompletionQueue cq_;
    std::vector<std::byte> staging_;
    MemoryRegion staging_mr_;
    VerbsQp qp_;  // after the CQ, PD and MR it uses: destroyed first
    SwitchConnectReply reply_;
    SwitchLayout layout_;
    SessionSequence seq_;
    uint32_t psn_ = 0;
    std::string ip_;
    double connect_seconds_ = 0;
    bool connected_ = false;
    bool broken_ = false;
    // The RDMA CM path only (the id before the channel it reports to goes).
    std::unique_ptr<EventChannel> cm_channel_;
    CmId cm_id_;
};

}  // namespace ina::rdma
