// SPDX-License-Identifier: Apache-2.0
#include "worker/rdma/verbs.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <poll.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>

namespace ina::rdma {

namespace {

void set_nonblocking(int fd, std::string_view what) {
    const int flags = fcntl(fd, F_GETFL);
    if (flags < 0 || fcntl(fd, F_SETFL, flags | O_NONBLOCK) < 0) {
        throw_errno(std::string(what) + ": fcntl(O_NONBLOCK)", errno);
    }
}

// Milliseconds until the deadline, rounded up, for poll(2); 0 once it has passed.
int ms_until(Deadline deadline) {
    const auto left = deadline - Clock::now();
    if (left <= Clock::duration::zero()) {
        return 0;
    }
    const auto ms = std::chrono::ceil<std::chrono::milliseconds>(left).count();
    return static_cast<int>(std::min<int64_t>(ms, 1 << 30));
}

// poll(2) on fds until one is readable or the deadline passes. Returns false on timeout.
bool wait_readable(std::span<pollfd> fds, Deadline deadline) {
    for (;;) {
        const int r = ::poll(fds.data(), fds.size(), ms_until(deadline));
        if (r > 0) {
            return true;
        }
        if (r == 0) {
            return false;
        }
        if (errno != EINTR) {
            throw_errno("poll", errno);
        }
    }
}

// An RC QP with both queues on `cq`, one scatter entry each way, completions as requested.
ibv_qp_init_attr rc_qp_attr(CompletionQueue& cq, uint32_t send_depth, uint32_t recv_depth) {
    ibv_qp_init_attr attr{};
    attr.send_cq = cq.get();
    attr.recv_cq = cq.get();
    attr.qp_type = IBV_QPT_RC;
    attr.cap.max_send_wr = send_depth;
    attr.cap.max_recv_wr = recv_depth;
    attr.cap.max_send_sge = 1;
    attr.cap.max_recv_sge = 1;
    attr.sq_sig_all = 0;
    return attr;
}

CmEvent expect(EventChannel& channel, rdma_cm_event_type want, Deadline deadline,
               std::string_view what) {
    CmEvent ev = channel.next(deadline, what);
    if (ev.type() != want || ev.status() != 0) {
        throw Error(std::string(what) + ": got " + ev.name() + " instead of " +
                    rdma_event_str(want));
    }
    return ev;
}

}  // namespace

void throw_errno(std::string_view what, int err) {
    throw Error(std::string(what) + ": " + std::strerror(err));
}

// --- rdma_cm ---------------------------------------------------------------------------------

CmEvent::~CmEvent() {
    if (e_) {
        rdma_ack_cm_event(e_);
    }
}

std::span<const std::byte> CmEvent::private_data() const {
    const auto& c = e_->param.conn;
    if (!c.private_data) {
        return {};
    }
    return {static_cast<const std::byte*>(c.private_data), c.private_data_len};
}

std::string CmEvent::name() const {
    return std::string(rdma_event_str(e_->event)) + " (status " + std::to_string(e_->status) + ")";
}

EventChannel::EventChannel() {
    ch_ = rdma_create_event_channel();
    if (!ch_) {
        throw_errno("rdma_create_event_channel (is rdma_ucm loaded and /dev/infiniband/rdma_cm "
                    "present?)",
                    errno);
    }
    try {
        set_nonblocking(ch_->fd, "rdma_cm event channel");
    } catch (...) {
        rdma_destroy_event_channel(ch_);
        throw;
    }
}

EventChannel::~EventChannel() { rdma_destroy_event_channel(ch_); }

std::optional<CmEvent> EventChannel::try_next() {
    rdma_cm_event* e = nullptr;
    if (rdma_get_cm_event(ch_, &e) == 0) {
        return CmEvent(e);
    }
    if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) {
        return std::nullopt;
    }
    throw_errno("rdma_get_cm_event", errno);
}

CmEvent EventChannel::next(Deadline deadline, std::string_view what) {
    for (;;) {
        if (auto e = try_next()) {
            return std::move(*e);
        }
        pollfd p{ch_->fd, POLLIN, 0};
        if (!wait_readable(std::span(&p, 1), deadline)) {
            throw Error("timed out waiting for " + std::string(what));
        }
    }
}

CmId::~CmId() {
    if (id_) {
        if (id_->qp) {
            rdma_destroy_qp(id_);
        }
        rdma_destroy_id(id_);
    }
}

CmId& CmId::operator=(CmId&& o) noexcept {
    if (this != &o) {
        CmId old(id_);
        id_ = o.id_;
        o.id_ = nullptr;
    }
    return *this;
}

CmId CmId::create(EventChannel& channel) {
    rdma_cm_id* id = nullptr;
    if (rdma_create_id(channel.get(), &id, nullptr, RDMA_PS_TCP) != 0) {
        throw_errno("rdma_create_id", errno);
    }
    return CmId(id);
}

SockAddr parse_address(const std::string& ip, uint16_t port) {
    SockAddr a;
    auto* v4 = reinterpret_cast<sockaddr_in*>(&a.storage);
    auto* v6 = reinterpret_cast<sockaddr_in6*>(&a.storage);
    if (inet_pton(AF_INET, ip.c_str(), &v4->sin_addr) == 1) {
        v4->sin_family = AF_INET;
        v4->sin_port = htons(port);
    } else if (inet_pton(AF_INET6, ip.c_str(), &v6->sin6_addr) == 1) {
        v6->sin6_family = AF_INET6;
        v6->sin6_port = htons(port);
    } else {
        throw Error("'" + ip + "' is not an IPv4 or IPv6 address");
    }
    return a;
}

CmId resolve(EventChannel& channel, const std::string& ip, uint16_t port, Deadline deadline) {
    SockAddr dst = parse_address(ip, port);
    CmId id = CmId::create(channel);
    const int step_ms = std::max(ms_until(deadline), 1);
    const std::string where = ip + " port " + std::to_string(port);
    if (rdma_resolve_addr(id.get(), nullptr, dst.get(), step_ms) != 0) {
        throw_errno("rdma_resolve_addr " + where + " (no RDMA device on the route to it?)",
                    errno);
    }
    expect(channel, RDMA_CM_EVENT_ADDR_RESOLVED, deadline, "address resolution of " + where);
    if (rdma_resolve_route(id.get(), std::max(ms_until(deadline), 1)) != 0) {
        throw_errno("rdma_resolve_route " + where, errno);
    }
    expect(channel, RDMA_CM_EVENT_ROUTE_RESOLVED, deadline, "route resolution of " + where);
    if (!id->verbs) {
        throw Error("rdma_cm resolved " + where + " but gave no RDMA device");
    }
    return id;
}

rdma_conn_param conn_param(std::span<const std::byte> private_data) {
    rdma_conn_param p{};
    p.private_data = private_data.data();
    p.private_data_len = static_cast<uint8_t>(private_data.size());
    p.responder_resources = 0;
    p.initiator_depth = 0;
    p.retry_count = 7;
    p.rnr_retry_count = 7;
    return p;
}

namespace {
[[noreturn]] void throw_rejected(const CmEvent& ev, std::span<const std::byte> data) {
    // Status 28 is IB_CM_REJ_CONSUMER_DEFINED: the peer's application refused; anything else
    // came from the CM itself, typically no listener on that port.
    throw Rejected(ev.status() == 28 ? "connection refused by the peer"
                                     : "connection rejected by the peer's RDMA CM (" + ev.name() +
                                           "): is anything listening there?",
                   {data.begin(), data.end()});
}
}  // namespace

std::vector<std::byte> connect(EventChannel& channel, CmId& id,
                               std::span<const std::byte> private_data, Deadline deadline) {
    rdma_conn_param p = conn_param(private_data);
    if (rdma_connect(id.get(), &p) != 0) {
        throw_errno("rdma_connect", errno);
    }
    CmEvent ev = channel.next(deadline, "the connection to be established");
    const auto data = ev.private_data();
    switch (ev.type()) {
    case RDMA_CM_EVENT_ESTABLISHED: return {data.begin(), data.end()};
    case RDMA_CM_EVENT_REJECTED: throw_rejected(ev, data);
    default: throw Error("connecting: got " + ev.name() + " instead of RDMA_CM_EVENT_ESTABLISHED");
    }
}

std::vector<std::byte> connect_own_qp(EventChannel& channel, CmId& id, ibv_qp* qp,
                                      std::span<const std::byte> private_data,
                                      Deadline deadline) {
    rdma_conn_param p = conn_param(private_data);
    p.qp_num = qp->qp_num;
    if (rdma_connect(id.get(), &p) != 0) {
        throw_errno("rdma_connect", errno);
    }
    std::vector<std::byte> reply;
    {
        CmEvent ev = channel.next(deadline, "the answer to the connect");
        const auto data = ev.private_data();
        if (ev.type() == RDMA_CM_EVENT_REJECTED) {
            throw_rejected(ev, data);
        }
        if (ev.type() != RDMA_CM_EVENT_CONNECT_RESPONSE) {
            throw Error("connecting: got " + ev.name() +
                        " instead of RDMA_CM_EVENT_CONNECT_RESPONSE");
        }
        reply.assign(data.begin(), data.end());
    }
    for (const ibv_qp_state state : {IBV_QPS_RTR, IBV_QPS_RTS}) {
        ibv_qp_attr attr{};
        int mask = 0;
        attr.qp_state = state;
        if (rdma_init_qp_attr(id.get(), &attr, &mask) != 0) {
            throw_errno(state == IBV_QPS_RTR ? "rdma_init_qp_attr RTR" : "rdma_init_qp_attr RTS",
                        errno);
        }
        if (const int err = ibv_modify_qp(qp, &attr, mask); err != 0) {
            throw_errno(state == IBV_QPS_RTR ? "ibv_modify_qp to RTR" : "ibv_modify_qp to RTS",
                        err);
        }
    }
    if (rdma_establish(id.get()) != 0) {
        throw_errno("rdma_establish", errno);
    }
    return reply;
}

std::string disconnect(EventChannel& channel, CmId& id, Deadline deadline) {
    if (rdma_disconnect(id.get()) != 0) {
        return std::string("rdma_disconnect: ") + std::strerror(errno);
    }
    try {
        // connect_own_qp's rdma_establish may still report the connection first: not an answer.
        for (int events = 0; events < 2; ++events) {
            CmEvent ev = channel.next(deadline, "the disconnection");
            if (ev.type() == RDMA_CM_EVENT_DISCONNECTED) {
                return {};
            }
            if (ev.type() != RDMA_CM_EVENT_ESTABLISHED || events == 1) {
                return "disconnecting: got " + ev.name();
            }
        }
    } catch (const Error& e) {
        return e.what();
    }
    return {};
}

CmId listen(EventChannel& channel, const std::string& ip, uint16_t port, int backlog) {
    SockAddr a = parse_address(ip, port);
    CmId id = CmId::create(channel);
    if (rdma_bind_addr(id.get(), a.get()) != 0) {
        throw_errno("rdma_bind_addr " + ip + " port " + std::to_string(port) +
                        " (an address of an RDMA device?)",
                    errno);
    }
    if (rdma_listen(id.get(), backlog) != 0) {
        throw_errno("rdma_listen", errno);
    }
    return id;
}

// --- verbs -----------------------------------------------------------------------------------

ProtectionDomain::ProtectionDomain(ibv_context* ctx) {
    pd_ = ibv_alloc_pd(ctx);
    if (!pd_) {
        throw_errno("ibv_alloc_pd", errno);
    }
}

ProtectionDomain::~ProtectionDomain() { ibv_dealloc_pd(pd_); }

MemoryRegion::MemoryRegion(ProtectionDomain& pd, std::span<std::byte> memory, int access) {
    mr_ = ibv_reg_mr(pd.get(), memory.data(), memory.size(), access);
    if (!mr_) {
        throw_errno("ibv_reg_mr of " + std::to_string(memory.size()) +
                        " bytes (RLIMIT_MEMLOCK too low?)",
                    errno);
    }
}

MemoryRegion::~MemoryRegion() { ibv_dereg_mr(mr_); }

CompletionQueue::CompletionQueue(ibv_context* ctx, int depth) {
    channel_ = ibv_create_comp_channel(ctx);
    if (!channel_) {
        throw_errno("ibv_create_comp_channel", errno);
    }
    try {
        set_nonblocking(channel_->fd, "completion channel");
        cq_ = ibv_create_cq(ctx, depth, nullptr, channel_, 0);
        if (!cq_) {
            throw_errno("ibv_create_cq of depth " + std::to_string(depth), errno);
        }
    } catch (...) {
        ibv_destroy_comp_channel(channel_);
        throw;
    }
}

CompletionQueue::~CompletionQueue() {
    drain_channel();
    ibv_destroy_cq(cq_);
    ibv_destroy_comp_channel(channel_);
}

size_t CompletionQueue::poll(std::span<ibv_wc> out) {
    const int n = ibv_poll_cq(cq_, static_cast<int>(out.size()), out.data());
    if (n < 0) {
        throw Error("ibv_poll_cq failed (" + std::to_string(n) + ")");
    }
    return static_cast<size_t>(n);
}

void CompletionQueue::arm() {
    if (const int r = ibv_req_notify_cq(cq_, 0); r != 0) {
        throw_errno("ibv_req_notify_cq", r);
    }
}

void CompletionQueue::drain_channel() {
    ibv_cq* cq = nullptr;
    void* ctx = nullptr;
    while (ibv_get_cq_event(channel_, &cq, &ctx) == 0) {
        ibv_ack_cq_events(cq, 1);
    }
}

size_t CompletionQueue::wait(std::span<ibv_wc> out, Deadline deadline, std::span<const int> also) {
    std::vector<pollfd> fds;
    fds.push_back(pollfd{channel_->fd, POLLIN, 0});
    for (const int fd : also) {
        fds.push_back(pollfd{fd, POLLIN, 0});
    }
    for (;;) {
        if (const size_t n = poll(out)) {
            return n;
        }
        // Arm, then poll again: a completion that arrived between the first poll and the arm
        // raises no event.
        arm();
        if (const size_t n = poll(out)) {
            return n;
        }
        for (auto& p : fds) {
            p.revents = 0;
        }
        if (!wait_readable(fds, deadline)) {
            return 0;
        }
        drain_channel();
        if (std::any_of(fds.begin() + 1, fds.end(), [](const pollfd& p) { return p.revents; })) {
            return poll(out);
        }
    }
}

void throw_completion_error(const ibv_wc& wc, std::string_view context) {
    char vendor[16];
    std::snprintf(vendor, sizeof vendor, "0x%x", wc.vendor_err);
    throw Error(std::string(context) + ": work completion " + ibv_wc_status_str(wc.status) +
                " (status " + std::to_string(wc.status) + ", vendor error " + vendor +
                ", opcode " + std::to_string(wc.opcode) + ", wr_id " + std::to_string(wc.wr_id) +
                ", QP " + std::to_string(wc.qp_num) + ")");
}

ClientCompletion classify_client_completion(const ibv_wc& wc, uint64_t result_wr_id) {
    if (wc.status != IBV_WC_SUCCESS) {
        throw_completion_error(wc, wc.wr_id == result_wr_id ? "receiving a result"
                                                            : "writing a chunk");
    }
    if (wc.opcode == IBV_WC_RDMA_WRITE) {
        return ClientCompletion::write_done;
    }
    if (wc.opcode != IBV_WC_RECV_RDMA_WITH_IMM || !(wc.wc_flags & IBV_WC_WITH_IMM)) {
        throw Error("unexpected completion opcode " + std::to_string(wc.opcode));
    }
    return ClientCompletion::result;
}

QueuePair::~QueuePair() {
    if (id_ && id_->qp) {
        rdma_destroy_qp(id_);
    }
}

QueuePair& QueuePair::operator=(QueuePair&& o) noexcept {
    if (this != &o) {
        QueuePair old(id_);
        id_ = o.id_;
        o.id_ = nullptr;
    }
    return *this;
}

QueuePair create_rc_qp(CmId& id, ProtectionDomain& pd, CompletionQueue& cq, uint32_t send_depth,
                       uint32_t recv_depth) {
    ibv_qp_init_attr attr = rc_qp_attr(cq, send_depth, recv_depth);
    if (rdma_create_qp(id.get(), pd.get(), &attr) != 0) {
        throw_errno("rdma_create_qp (RC, " + std::to_string(send_depth) + " send / " +
                        std::to_string(recv_depth) + " receive WRs)",
                    errno);
    }
    return QueuePair(id.get());
}

void post_write_imm(ibv_qp* qp, uint64_t wr_id, const MemoryRegion& local, uint64_t offset,
                    uint32_t length, uint64_t remote_addr, uint32_t rkey, uint32_t imm) {
    ibv_sge sge{local.addr() + offset, length, local.lkey()};
    ibv_send_wr wr{};
    wr.wr_id = wr_id;
    wr.sg_list = &sge;
    wr.num_sge = 1;
    wr.opcode = IBV_WR_RDMA_WRITE_WITH_IMM;
    wr.send_flags = IBV_SEND_SIGNALED;
    wr.imm_data = htonl(imm);
    wr.wr.rdma.remote_addr = remote_addr;
    wr.wr.rdma.rkey = rkey;
    ibv_send_wr* bad = nullptr;
    if (const int r = ibv_post_send(qp, &wr, &bad); r != 0) {
        throw_errno("ibv_post_send (RDMA WRITE with immediate, QP " + std::to_string(qp->qp_num) +
                        ")",
                    r);
    }
}

void post_recv(ibv_qp* qp, uint64_t wr_id) {
    ibv_recv_wr wr{};
    wr.wr_id = wr_id;
    wr.sg_list = nullptr;
    wr.num_sge = 0;
    ibv_recv_wr* bad = nullptr;
    if (const int r = ibv_post_recv(qp, &wr, &bad); r != 0) {
        throw_errno("ibv_post_recv (QP " + std::to_string(qp->qp_num) + ")", r);
    }
}

}  // namespace ina::rdma

// --- plain verbs connection setup --------------------------------------------------------------

namespace ina::rdma {

Device::Device(const std::string& name) {
    int n = 0;
    ibv_device** list = ibv_get_device_list(&n);
    if (!list) {
        throw_errno("ibv_get_device_list", errno);
    }
    ibv_device* dev = nullptr;
    for (int i = 0; i < n && !dev; ++i) {
        if (name.empty() || name == ibv_get_device_name(list[i])) {
            dev = list[i];
        }
    }
    if (!dev) {
        ibv_free_device_list(list);
        throw Error(name.empty() ? std::string("no RDMA device (is rdma_rxe or a RoCE NIC up?)")
                                 : "no RDMA device named " + name);
    }
    ctx_ = ibv_open_device(dev);
    const int err = errno;
    ibv_free_device_list(list);
    if (!ctx_) {
        throw_errno("ibv_open_device", err);
    }
}

Device::~Device() { ibv_close_device(ctx_); }

std::string Device::name() const { return ibv_get_device_name(ctx_->device); }

std::optional<RoceGid> gid_address(const ibv_gid& gid) {
    const uint8_t* raw = gid.raw;
    static constexpr uint8_t kMapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
    if (std::memcmp(raw, kMapped, sizeof kMapped) == 0) {
        char text[INET_ADDRSTRLEN];
        inet_ntop(AF_INET, raw + 12, text, sizeof text);
        return RoceGid{0, text, false};
    }
    in6_addr a{};
    std::memcpy(a.s6_addr, raw, sizeof a.s6_addr);
    if (IN6_IS_ADDR_LINKLOCAL(&a) || IN6_IS_ADDR_MULTICAST(&a) || IN6_IS_ADDR_LOOPBACK(&a) ||
        IN6_IS_ADDR_UNSPECIFIED(&a) || IN6_IS_ADDR_V4COMPAT(&a)) {
        return std::nullopt;
    }
    char text[INET6_ADDRSTRLEN];
    inet_ntop(AF_INET6, &a, text, sizeof text);
    return RoceGid{0, text, true};
}

bool gid_is_address(const ibv_gid& gid, const std::string& ip) {
    uint8_t want[16] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
    if (inet_pton(AF_INET, ip.c_str(), want + 12) != 1 && inet_pton(AF_INET6, ip.c_str(), want) != 1) {
        return false;
    }
    return std::memcmp(gid.raw, want, sizeof want) == 0;
}

RoceGid find_roce_gid(ibv_context* ctx, uint8_t port, const std::string& ip,
                      std::optional<uint32_t> index) {
    ibv_port_attr pattr{};
    if (const int r = ibv_query_port(ctx, port, &pattr); r != 0) {
        throw_errno("ibv_query_port " + std::to_string(port), r);
    }
    for (int i = 0; i < pattr.gid_tbl_len; ++i) {
        if (index && *index != static_cast<uint32_t>(i)) {
            continue;
        }
        ibv_gid_entry e{};
        if (ibv_query_gid_ex(ctx, port, static_cast<uint32_t>(i), &e, 0) != 0 ||
            e.gid_type != IBV_GID_TYPE_ROCE_V2) {
            continue;
        }
        auto got = gid_address(e.gid);
        // Neither an address nor an index: the first IPv4 GID, as before IPv6 was taken.
        if (!got || (ip.empty() && !index && got->ipv6) ||
            (!ip.empty() && !gid_is_address(e.gid, ip))) {
            continue;
        }
        got->index = static_cast<uint32_t>(i);
        return *got;
    }
    const std::string at = index ? " at index " + std::to_string(*index) : std::string();
    std::string what = "of an IPv4 address";
    if (!ip.empty()) {
        in_addr v4{};
        what = inet_pton(AF_INET, ip.c_str(), &v4) == 1 ? "::ffff:" + ip : ip;
    } else if (index) {
        what = "of an IPv4 or a global IPv6 address";
    }
    throw Error("no RoCE v2 GID" + at + " " + what + " on port " + std::to_string(port) + " of " +
                ibv_get_device_name(ctx->device));
}

ibv_mtu path_mtu(uint32_t bytes) {
    switch (bytes) {
    case 256: return IBV_MTU_256;
    case 512: return IBV_MTU_512;
    case 1024: return IBV_MTU_1024;
    case 2048: return IBV_MTU_2048;
    case 4096: return IBV_MTU_4096;
    default: throw Error("path MTU " + std::to_string(bytes) + " is not 256/512/1024/2048/4096");
    }
}

VerbsQp::VerbsQp(ProtectionDomain& pd, CompletionQueue& cq, uint32_t send_depth,
                 uint32_t recv_depth) {
    ibv_qp_init_attr attr = rc_qp_attr(cq, send_depth, recv_depth);
    qp_ = ibv_create_qp(pd.get(), &attr);
    if (!qp_) {
        throw_errno("ibv_create_qp (RC, " + std::to_string(send_depth) + " send / " +
                        std::to_string(recv_depth) + " receive WRs)",
                    errno);
    }
}

VerbsQp::~VerbsQp() { ibv_destroy_qp(qp_); }

void qp_to_init(ibv_qp* qp, uint8_t port) {
    ibv_qp_attr a{};
    a.qp_state = IBV_QPS_INIT;
    a.pkey_index = 0;
    a.port_num = port;
    a.qp_access_flags = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE;
    if (const int r = ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT |
                                               IBV_QP_ACCESS_FLAGS);
        r != 0) {
        throw_errno("ibv_modify_qp to INIT", r);
    }
}

void connect_rc(ibv_qp* qp, const RcPath& path) {
    ibv_qp_attr a{};
    a.qp_state = IBV_QPS_RTR;
    a.path_mtu = path.mtu;
    a.dest_qp_num = path.dest_qpn;
    a.rq_psn = path.rq_psn;
    a.max_dest_rd_atomic = 1;
    a.min_rnr_timer = 12;  // 0.64 ms: what the peer waits after our (never expected) RNR NAK
    a.ah_attr.is_global = 1;
    a.ah_attr.grh.dgid = path.dgid;
    a.ah_attr.grh.sgid_index = static_cast<uint8_t>(path.sgid_index);
    a.ah_attr.grh.hop_limit = 64;
    a.ah_attr.port_num = path.port;
    if (const int r = ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU |
                                               IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
                                               IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER);
        r != 0) {
        throw_errno("ibv_modify_qp to RTR (dest QPN " + std::to_string(path.dest_qpn) +
                        ", sgid index " + std::to_string(path.sgid_index) + ")",
                    r);
    }
    a = {};
    a.qp_state = IBV_QPS_RTS;
    a.sq_psn = path.sq_psn;
    a.timeout = path.timeout;
    a.retry_cnt = path.retry_cnt;
    a.rnr_retry = path.rnr_retry;
    a.max_rd_atomic = 1;
    if (const int r = ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_SQ_PSN | IBV_QP_TIMEOUT |
                                               IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
                                               IBV_QP_MAX_QP_RD_ATOMIC);
        r != 0) {
        throw_errno("ibv_modify_qp to RTS", r);
    }
}

void check_rank_and_window(uint32_t world, uint32_t rank, uint32_t window, uint32_t max_world) {
    if (world == 0 || world > max_world) {
        throw Error("world must be 1.." + std::to_string(max_world));
    }
    if (rank == 0 || rank > world) {
        throw Error("rank " + std::to_string(rank) + " outside 1..world (" +
                    std::to_string(world) + ")");
    }
    if (window == 0 || window > 4096) {
        throw Error("window must be 1..4096");
    }
}

Chunking chunk_buffers(reduce::ElemType type, std::span<const std::byte> input,
                       std::span<std::byte> output, uint32_t chunk_bytes, uint32_t window) {
    const size_t esize = reduce::elem_size(type);
    if (input.size() != output.size() || input.empty() || input.size() % esize != 0) {
        throw Error("input and output must hold the same, non-zero number of elements");
    }
    std::string why;
    const auto chunking = Chunking::make(type, input.size() / esize, chunk_bytes, window, &why);
    if (!chunking) {
        throw Error(why);
    }
    return *chunking;
}

}  // namespace ina::rdma
