// SPDX-License-Identifier: Apache-2.0
// A small RAII layer over libibverbs and librdmacm for the INA RDMA tools: rdma_cm connection
// setup (resolve/connect on the active side, listen/accept on the passive side), protection
// domain, one completion queue with a completion channel, memory regions, RC queue pairs, and
// posting RDMA WRITE with immediate and zero-length receives.
//
// Rules every function keeps
//   - Every failing verbs or rdma_cm call throws rdma::Error naming the call and the errno text
//     (or the work completion's status); nothing aborts.
//   - Nothing blocks without a deadline: the event channel and the completion channel are
//     non-blocking and waited on with poll(2) until a Deadline, then Error("timed out ...").
//   - Destruction order is the owner's member order: destroy connections (their QPs) before
//     memory regions, memory regions and the CQ before the protection domain, and every CmEvent
//     before the CmId it refers to (rdma_destroy_id waits for its events to be acknowledged).
#pragma once

#include <infiniband/verbs.h>
#include <rdma/rdma_cma.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "worker/rdma/protocol.h"

namespace ina::rdma {

class Error : public std::runtime_error {
public:
    using std::runtime_error::runtime_error;
};

using Clock = std::chrono::steady_clock;
using Deadline = Clock::time_point;

// "what: strerror(err)".
[[noreturn]] void throw_errno(std::string_view what, int err);

// One rdma_cm event, acknowledged on destruction.
class CmEvent {
public:
    explicit CmEvent(rdma_cm_event* e) : e_(e) {}
    ~CmEvent();
    CmEvent(CmEvent&& o) noexcept : e_(o.e_) { o.e_ = nullptr; }
    CmEvent& operator=(CmEvent&&) = delete;
    CmEvent(const CmEvent&) = delete;

    rdma_cm_event_type type() const { return e_->event; }
    rdma_cm_id* id() const { return e_->id; }
    int status() const { return e_->status; }
    // Connect request / accept / reject private data (rdma_cm may pad it with zeros).
    std::span<const std::byte> private_data() const;
    std::string name() const;  // "RDMA_CM_EVENT_ESTABLISHED (status 0)"

private:
    rdma_cm_event* e_;
};

// An rdma_cm event channel whose fd is non-blocking.
class EventChannel {
public:
    EventChannel();
    ~EventChannel();
    EventChannel(const EventChannel&) = delete;
    EventChannel& operator=(const EventChannel&) = delete;

    rdma_event_channel* get() const { return ch_; }
    int fd() const { return ch_->fd; }
    // The next event if one is queued.
    std::optional<CmEvent> try_next();
    // The next event, waiting until the deadline; throws Error("timed out waiting for <what>").
    CmEvent next(Deadline deadline, std::string_view what);

private:
    rdma_event_channel* ch_ = nullptr;
};

// An rdma_cm id. A QP created on it belongs to a QueuePair, destroyed first; one still there
// when the id goes is destroyed with it.
class CmId {
public:
    CmId() = default;
    explicit CmId(rdma_cm_id* id) : id_(id) {}
    ~CmId();
    CmId(CmId&& o) noexcept : id_(o.id_) { o.id_ = nullptr; }
    CmId& operator=(CmId&& o) noexcept;
    CmId(const CmId&) = delete;

    static CmId create(EventChannel& channel);
    rdma_cm_id* get() const { return id_; }
    rdma_cm_id* operator->() const { return id_; }
    // Gives up ownership (the caller destroys the id).
    rdma_cm_id* release() {
        rdma_cm_id* id = id_;
        id_ = nullptr;
        return id;
    }

private:
    rdma_cm_id* id_ = nullptr;
};

class ProtectionDomain {
public:
    explicit ProtectionDomain(ibv_context* ctx);
    ~ProtectionDomain();
    ProtectionDomain(const ProtectionDomain&) = delete;
    ProtectionDomain& operator=(const ProtectionDomain&) = delete;
    ibv_pd* get() const { return pd_; }
    ibv_context* context() const { return pd_->context; }

private:
    ibv_pd* pd_ = nullptr;
};

// Memory the HCA may access: `access` is IBV_ACCESS_* flags (0: local read only, the source of
// a WRITE).
class MemoryRegion {
public:
    MemoryRegion(ProtectionDomain& pd, std::span<std::byte> memory, int access);
    ~MemoryRegion();
    MemoryRegion(const MemoryRegion&) = delete;
    MemoryRegion& operator=(const MemoryRegion&) = delete;

    uint64_t addr() const { return reinterpret_cast<uintptr_t>(mr_->addr); }
    size_t length() const { return mr_->length; }
    uint32_t lkey() const { return mr_->lkey; }
    uint32_t rkey() const { return mr_->rkey; }
    std::byte* data() const { return static_cast<std::byte*>(mr_->addr); }

private:
    ibv_mr* mr_ = nullptr;
};

// One CQ with its own completion channel (non-blocking), for every QP of a process.
class CompletionQueue {
public:
    CompletionQueue(ibv_context* ctx, int depth);
    ~CompletionQueue();
    CompletionQueue(const CompletionQueue&) = delete;
    CompletionQueue& operator=(const CompletionQueue&) = delete;

    ibv_cq* get() const { return cq_; }
    int fd() const { return channel_->fd; }
    // Completions already there, without waiting.
    size_t poll(std::span<ibv_wc> out);
    // At least one completion, waiting on the channel until the deadline (0 on timeout). Other
    // fds in `also` wake it too (e.g. the rdma_cm channel); then it may return 0 early.
    size_t wait(std::span<ibv_wc> out, Deadline deadline, std::span<const int> also = {});

private:
    void arm();
    void drain_channel();
    ibv_comp_channel* channel_ = nullptr;
    ibv_cq* cq_ = nullptr;
};

// Throws Error describing a failed work completion: status text, opcode, wr_id, QP number.
[[noreturn]] void throw_completion_error(const ibv_wc& wc, std::string_view context);

// A worker's completions: its own WRITE's send completion, or a result (a receive consumed by
// a WRITE with immediate; its receives carry wr_id `result_wr_id`). Throws Error on a failed
// completion (naming which of the two) or any other opcode.
enum class ClientCompletion { write_done, result };
ClientCompletion classify_client_completion(const ibv_wc& wc, uint64_t result_wr_id);

// A worker's place in its job, as both RDMA clients accept it: world 1..max_world, rank
// 1..world, window 1..4096. Throws Error naming the first field out of range.
void check_rank_and_window(uint32_t world, uint32_t rank, uint32_t window, uint32_t max_world);

// How an AllReduce of `input` into `output` is cut, as both RDMA clients accept it: the same,
// non-zero whole number of elements on both sides, then Chunking::make. Throws Error with why.
Chunking chunk_buffers(reduce::ElemType type, std::span<const std::byte> input,
                       std::span<std::byte> output, uint32_t chunk_bytes, uint32_t window);

// The QP rdma_create_qp made on a CmId, destroyed by this owner (declare it after the CQ and
// the protection domain it uses, so it goes first).
class QueuePair {
public:
    QueuePair() = default;
    explicit QueuePair(rdma_cm_id* id) : id_(id) {}
    ~QueuePair();
    QueuePair(QueuePair&& o) noexcept : id_(o.id_) { o.id_ = nullptr; }
    QueuePair& operator=(QueuePair&& o) noexcept;
    QueuePair(const QueuePair&) = delete;
    ibv_qp* get() const { return id_ ? id_->qp : nullptr; }

private:
    rdma_cm_id* id_ = nullptr;
};

// An RC QP on `id` with both queues on `cq`; receives carry no scatter list (WRITE with
// immediate consumes a receive but places its data by the RETH).
QueuePair create_rc_qp(CmId& id, ProtectionDomain& pd, CompletionQueue& cq, uint32_t send_depth,
                       uint32_t recv_depth);

// A signaled RDMA WRITE with immediate of local [offset, offset + length) of `local` to
// remote_addr/rkey. `imm` is host order (sent big-endian).
void post_write_imm(ibv_qp* qp, uint64_t wr_id, const MemoryRegion& local, uint64_t offset,
                    uint32_t length, uint64_t remote_addr, uint32_t rkey, uint32_t imm);
// A receive without buffers (for WRITE-with-immediate completions).
void post_recv(ibv_qp* qp, uint64_t wr_id);

// Connection parameters: RC retries 7, RNR retries 7 (infinite: a receiver reposts receives as
// it consumes them), no RDMA READ resources, `private_data` (copied by rdma_cm).
rdma_conn_param conn_param(std::span<const std::byte> private_data);

// IPv4 or IPv6 literal + port -> sockaddr_storage; throws Error on a bad address.
struct SockAddr {
    sockaddr_storage storage{};
    sockaddr* get() { return reinterpret_cast<sockaddr*>(&storage); }
};
SockAddr parse_address(const std::string& ip, uint16_t port);

// Active side: a CmId whose address and route to ip:port are resolved (its verbs context set).
CmId resolve(EventChannel& channel, const std::string& ip, uint16_t port, Deadline deadline);

// The peer refused a connection: the status and the reject private data it sent.
class Rejected : public Error {
public:
    Rejected(std::string what, std::vector<std::byte> data)
        : Error(std::move(what)), private_data(std::move(data)) {}
    std::vector<std::byte> private_data;
};

// Active side: rdma_connect with `private_data` and wait for ESTABLISHED; returns the accept's
// private data. Throws Rejected on a reject, Error on anything else.
std::vector<std::byte> connect(EventChannel& channel, CmId& id,
                               std::span<const std::byte> private_data, Deadline deadline);

// Active side with the caller's own RC QP (ibv_create_qp on the device rdma_cm resolved to, in
// INIT, receives posted): rdma_connect carrying its QPN; on the REP
// (RDMA_CM_EVENT_CONNECT_RESPONSE: rdma_cm owns no QP here) the QP goes to RTR and RTS with the
// attributes rdma_cm derived from the REQ/REP exchange (rdma_init_qp_attr: the peer's QPN and
// PSN, ours, the path), then rdma_establish sends the RTU. Returns the REP's private data;
// throws Rejected on a REJ, Error on anything else.
std::vector<std::byte> connect_own_qp(EventChannel& channel, CmId& id, ibv_qp* qp,
                                      std::span<const std::byte> private_data,
                                      Deadline deadline);

// rdma_disconnect and wait for DISCONNECTED (either side may start it). Errors are returned as
// text, not thrown: teardown continues regardless.
std::string disconnect(EventChannel& channel, CmId& id, Deadline deadline);

// Passive side: bind ip:port and listen.
CmId listen(EventChannel& channel, const std::string& ip, uint16_t port, int backlog);

// --- plain verbs connection setup (server-to-switch: no rdma_cm) ------------------------------

// An opened RDMA device: the one named, or the first one when `name` is empty.
class Device {
public:
    explicit Device(const std::string& name);
    ~Device();
    Device(const Device&) = delete;
    Device& operator=(const Device&) = delete;
    ibv_context* get() const { return ctx_; }
    std::string name() const;

private:
    ibv_context* ctx_ = nullptr;
};

// A RoCE v2 GID usable as a worker's source: an IPv4-mapped one (::ffff:a.b.c.d, the IPv4
// address) or a global / unique-local IPv6 one (the IPv6 address itself). Its index, its
// address as text (dotted quad or IPv6) and the family.
struct RoceGid {
    uint32_t index = 0;
    std::string ip;
    bool ipv6 = false;
};
// The address a GID stands for, if a worker may send RoCE v2 from it: the IPv4 address of an
// IPv4-mapped GID, the IPv6 address of any other unicast GID except link-local (fe80::/10, the
// GID every rxe/mlx5 port lists first, which no switch routes), loopback and unspecified.
// Pure (no device): the rule find_roce_gid applies to each entry.
std::optional<RoceGid> gid_address(const ibv_gid& gid);
// Whether `gid` is the GID of `ip` (IPv4: ::ffff:ip; IPv6: ip itself, any spelling).
bool gid_is_address(const ibv_gid& gid, const std::string& ip);
// The RoCE v2 GID at `index` if given (it must be usable as above, and of `ip` if that is not
// empty), else the one of `ip` (whichever family `ip` is), else (ip empty) the first
// IPv4-mapped RoCE v2 GID. Throws Error naming what it looked for when there is none.
RoceGid find_roce_gid(ibv_context* ctx, uint8_t port, const std::string& ip,
                      std::optional<uint32_t> index = std::nullopt);

// IB path MTU enum for 256..4096 bytes (a power of two); throws Error otherwise.
ibv_mtu path_mtu(uint32_t bytes);

// An RC QP made with ibv_create_qp (not rdma_cm), destroyed by this owner.
class VerbsQp {
public:
    VerbsQp(ProtectionDomain& pd, CompletionQueue& cq, uint32_t send_depth, uint32_t recv_depth);
    ~VerbsQp();
    VerbsQp(const VerbsQp&) = delete;
    VerbsQp& operator=(const VerbsQp&) = delete;
    ibv_qp* get() const { return qp_; }
    uint32_t qpn() const { return qp_->qp_num; }

private:
    ibv_qp* qp_ = nullptr;
};

// The peer of an RC QP on RoCE v2 and the attributes of both directions.
struct RcPath {
    uint8_t port = 1;
    uint32_t sgid_index = 0;
    ibv_gid dgid{};          // the peer's GID (::ffff:its IPv4, or its IPv6 address)
    ibv_mtu mtu = IBV_MTU_1024;
    uint32_t dest_qpn = 0;
    uint32_t rq_psn = 0;     // the first PSN expected from the peer
    uint32_t sq_psn = 0;     // our first PSN
    uint8_t timeout = 14;    // local ACK timeout 4.096 us * 2^timeout
    uint8_t retry_cnt = 7;
    uint8_t rnr_retry = 7;   // 7: retry forever (the peer may RNR-NAK as back-pressure)
};
// RESET -> INIT (remote write allowed; receives may be posted from here on).
void qp_to_init(ibv_qp* qp, uint8_t port);
// INIT -> RTR -> RTS; throws Error naming the failing step.
void connect_rc(ibv_qp* qp, const RcPath& path);

}  // namespace ina::rdma
