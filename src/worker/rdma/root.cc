// SPDX-License-Identifier: Apache-2.0
#include "worker/rdma/root.h"

#include <arpa/inet.h>

#include <array>
#include <cstdio>
#include <deque>
#include <memory>
#include <optional>
#include <unordered_map>
#include <vector>

#include "worker/rdma/chunk_reducer.h"

namespace ina::rdma {

namespace {

// wr_id: receives carry the worker index, result WRITEs the result slot; the top bit tells them
// apart.
constexpr uint64_t kResultWrite = uint64_t{1} << 63;

class Round {
public:
    Round(EventChannel& channel, const RootOptions& options, std::optional<CmEvent>& carried)
        : channel_(channel), opt_(options), carried_(carried) {}

    RoundStats run(Deadline deadline);

private:
    struct Conn {
        CmId id;
        QueuePair qp;  // after id: destroyed first
        ConnectRequest req;
        bool established = false;
        bool disconnected = false;
    };

    void on_cm_event(CmEvent ev);
    // Returns the reason to refuse, or nothing once accepted.
    std::optional<RejectReason> on_connect_request(const CmEvent& ev, std::string* why);
    void setup_job(const ConnectRequest& q, ibv_context* ctx);
    void on_completion(const ibv_wc& wc);
    void send_ready_results();
    // Every chunk reduced and every result WRITE completed: the workers have the result.
    bool work_done() const;
    bool finished() const;
    RoundStats finish_stats();
    // Ends the connections whose worker has not disconnected (its DREQ lost, or still to come).
    void disconnect_stragglers();
    std::string progress() const;
    uint64_t result_writes_per_chunk() const {
        return opt_.results == ResultMode::once ? 1 : job_->world;
    }

    EventChannel& channel_;
    const RootOptions& opt_;
    // A connect request of the next round that arrived once this one's work was done.
    std::optional<CmEvent>& carried_;
    RoundStats st_;
    std::optional<ConnectRequest> job_;
    std::optional<Chunking> chunking_;
    ibv_context* ctx_ = nullptr;
    Clock::time_point t_first_{}, t_last_{};
    bool started_ = false;
    // Destruction runs bottom-up: connections (their QPs) before memory regions, regions and the
    // CQ before the protection domain, memory after its region.
    std::unique_ptr<ProtectionDomain> pd_;
    std::unique_ptr<CompletionQueue> cq_;
    std::vector<std::byte> contrib_mem_;
    std::vector<std::byte> result_mem_;
    std::unique_ptr<MemoryRegion> contrib_mr_;
    std::unique_ptr<MemoryRegion> result_mr_;
    std::unique_ptr<ChunkReducer> reducer_;
    std::deque<uint32_t> ready_;              // complete chunks waiting for their result slot
    std::vector<uint32_t> result_pending_;    // per result slot: WRITEs not yet completed
    std::unordered_map<uint32_t, uint32_t> qpn_index_;
    std::vector<std::unique_ptr<Conn>> conns_;  // by rank - 1
};

void Round::setup_job(const ConnectRequest& q, ibv_context* ctx) {
    std::string why;
    chunking_ = Chunking::make(q.elem_type, q.elements, q.chunk_bytes, q.window, &why);
    if (!chunking_) {
        throw Error(why);
    }
    const uint64_t bytes = chunking_->area_bytes() * (q.world + 1ull);
    if (bytes > uint64_t{opt_.max_memory_mb} << 20) {
        throw Error("needs " + std::to_string(bytes >> 20) + " MiB, over --max-memory-mb");
    }
    try {
        pd_ = std::make_unique<ProtectionDomain>(ctx);
        const uint32_t per_conn = 2 * q.window + 2;
        cq_ = std::make_unique<CompletionQueue>(ctx, static_cast<int>(per_conn * q.world + 16));
        contrib_mem_.assign(chunking_->area_bytes() * q.world, std::byte{0});
        result_mem_.assign(chunking_->area_bytes(), std::byte{0});
        contrib_mr_ = std::make_unique<MemoryRegion>(
            *pd_, contrib_mem_, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
        result_mr_ = std::make_unique<MemoryRegion>(*pd_, result_mem_, IBV_ACCESS_LOCAL_WRITE);
        reducer_ = std::make_unique<ChunkReducer>(*chunking_, q.elem_type, q.op, q.world);
    } catch (...) {
        // Back to "no job", releasing in dependency order, so the next request starts clean.
        reducer_.reset();
        result_mr_.reset();
        contrib_mr_.reset();
        cq_.reset();
        pd_.reset();
        chunking_.reset();
        throw;
    }
    ctx_ = ctx;
    result_pending_.assign(q.window, 0);
    conns_.resize(q.world);
    job_ = q;
    st_.job = q;
    st_.chunks = chunking_->chunks();
}

std::optional<RejectReason> Round::on_connect_request(const CmEvent& ev, std::string* why) {
    const auto q = ConnectRequest::decode(ev.private_data(), why);
    if (!q) {
        return RejectReason::malformed;
    }
    if (q->mode != Mode::server_to_server) {
        *why = "mode server-to-switch is not served by a host root";
        return RejectReason::unsupported;
    }
    if (!job_) {
        if (q->world == 0 || q->world > kMaxWorld ||
            (opt_.expected_world && q->world != opt_.expected_world)) {
            *why = "world " + std::to_string(q->world) + " (expected " +
                   (opt_.expected_world ? std::to_string(opt_.expected_world)
                                        : "1.." + std::to_string(kMaxWorld)) + ")";
            return RejectReason::wrong_job;
        }
        try {
            setup_job(*q, ev.id()->verbs);
        } catch (const std::exception& e) {  // Error, or bad_alloc for the areas
            *why = e.what();
            return RejectReason::no_resources;
        }
    } else if (!q->same_job(*job_)) {
        *why = "job parameters differ from the first worker's";
        return RejectReason::wrong_job;
    } else if (ev.id()->verbs != ctx_) {
        *why = "arrived on another RDMA device than the first worker";
        return RejectReason::no_resources;
    }
    if (q->rank == 0 || q->rank > job_->world || conns_[q->rank - 1]) {
        *why = "rank " + std::to_string(q->rank);
        return RejectReason::bad_rank;
    }
    auto conn = std::make_unique<Conn>();
    conn->id = CmId(ev.id());
    conn->req = *q;
    try {
        conn->qp = create_rc_qp(conn->id, *pd_, *cq_, job_->window + 1, job_->window);
        for (uint32_t i = 0; i < job_->window; ++i) {
            post_recv(conn->qp.get(), q->rank - 1u);
        }
        ConnectReply reply;
        reply.job_id = q->job_id;
        reply.contribution_addr = contrib_mr_->addr() + (q->rank - 1u) * chunking_->area_bytes();
        reply.contribution_rkey = contrib_mr_->rkey();
        const auto bytes = reply.encode();
        rdma_conn_param p = conn_param(bytes);
        if (rdma_accept(ev.id(), &p) != 0) {
            throw_errno("rdma_accept", errno);
        }
    } catch (const Error& e) {
        // The id goes back to the caller to reject and destroy once the event is acknowledged.
        static_cast<void>(conn->id.release());
        *why = e.what();
        return RejectReason::no_resources;
    }
    qpn_index_[conn->qp.get()->qp_num] = q->rank - 1u;
    conns_[q->rank - 1] = std::move(conn);
    std::fprintf(stderr, "ina-rdma-root: rank %u connected (job %u, %u of %u workers)\n",
                 unsigned{q->rank}, q->job_id, static_cast<unsigned>(qpn_index_.size()),
                 unsigned{job_->world});
    return std::nullopt;
}

void Round::on_cm_event(CmEvent ev) {
    switch (ev.type()) {
    case RDMA_CM_EVENT_CONNECT_REQUEST: {
        std::string why;
        const auto reason = on_connect_request(ev, &why);
        if (!reason) {
            return;
        }
        ++st_.rejected;
        std::fprintf(stderr, "ina-rdma-root: refused a worker: %s: %s\n",
                     std::string(to_string(*reason)).c_str(), why.c_str());
        ConnectReply r;
        r.status = static_cast<uint8_t>(*reason);
        const auto bytes = r.encode();
        rdma_cm_id* id = ev.id();
        rdma_reject(id, bytes.data(), static_cast<uint8_t>(bytes.size()));
        // rdma_destroy_id waits for the id's events to be acknowledged: ack this one first.
        { CmEvent done = std::move(ev); }
        rdma_destroy_id(id);
        return;
    }
    case RDMA_CM_EVENT_ESTABLISHED:
    case RDMA_CM_EVENT_DISCONNECTED: {
        for (auto& c : conns_) {
            if (c && c->id.get() == ev.id()) {
                if (ev.type() == RDMA_CM_EVENT_ESTABLISHED) {
                    c->established = true;
                    return;
                }
                c->disconnected = true;
                if (!reducer_->all_complete()) {
                    throw Error("rank " + std::to_string(c->req.rank) +
                                " disconnected before the AllReduce completed (" + progress() +
                                ")");
                }
                return;
            }
        }
        return;
    }
    case RDMA_CM_EVENT_CONNECT_ERROR:
    case RDMA_CM_EVENT_UNREACHABLE:
    case RDMA_CM_EVENT_DEVICE_REMOVAL:
        throw Error("rdma_cm reported " + ev.name() + " (" + progress() + ")");
    default: return;
    }
}

void Round::on_completion(const ibv_wc& wc) {
    if (wc.status != IBV_WC_SUCCESS) {
        throw_completion_error(wc, (wc.wr_id & kResultWrite) ? "writing a result"
                                                             : "receiving a contribution");
    }
    if (wc.opcode == IBV_WC_RDMA_WRITE) {
        --result_pending_[wc.wr_id & ~kResultWrite];
        ++st_.results_written;
        t_last_ = Clock::now();
        return;
    }
    if (wc.opcode != IBV_WC_RECV_RDMA_WITH_IMM || !(wc.wc_flags & IBV_WC_WITH_IMM)) {
        throw Error("unexpected completion opcode " + std::to_string(wc.opcode));
    }
    const auto it = qpn_index_.find(wc.qp_num);
    if (it == qpn_index_.end()) {
        throw Error("completion on unknown QP " + std::to_string(wc.qp_num));
    }
    const uint32_t index = it->second;
    if (!started_) {
        started_ = true;
        t_first_ = Clock::now();
    }
    const Imm imm = parse_imm(ntohl(wc.imm_data));
    ++st_.contributions;
    st_.contribution_count += imm.contributions;
    // The data sits in the slot of the connection that delivered it, whoever's data it is.
    const uint32_t slot = imm.chunk < chunking_->chunks() ? chunking_->slot(imm.chunk) : 0;
    const std::byte* data = contrib_mem_.data() + index * chunking_->area_bytes() +
                            uint64_t{slot} * chunking_->chunk_bytes;
    if (wc.byte_len > chunking_->chunk_bytes) {
        throw Error("protocol error from rank " + std::to_string(index + 1) + ": a WRITE of " +
                    std::to_string(wc.byte_len) + " bytes overran its " +
                    std::to_string(chunking_->chunk_bytes) + "-byte slot");
    }
    std::string why;
    const auto verdict =
        reducer_->add(imm.chunk, imm.contributions, std::span(data, wc.byte_len), &why);
    if (verdict == ChunkReducer::Verdict::refused) {
        throw Error("protocol error from rank " + std::to_string(index + 1) + ": " + why);
    }
    post_recv(conns_[index]->qp.get(), index);
    if (verdict == ChunkReducer::Verdict::complete) {
        ready_.push_back(imm.chunk);
    }
}

void Round::send_ready_results() {
    for (auto it = ready_.begin(); it != ready_.end();) {
        const uint32_t chunk = *it;
        const uint32_t slot = chunking_->slot(chunk);
        if (result_pending_[slot] != 0) {
            ++it;
            continue;
        }
        const uint64_t offset = uint64_t{slot} * chunking_->chunk_bytes;
        const uint32_t length = chunking_->length(chunk);
        reducer_->take(chunk, std::span(result_mem_.data() + offset, length));
        for (const auto& c : conns_) {
            if (!c) {  // counts reached world with a rank never connected: a peer lied
                throw Error("chunk " + std::to_string(chunk) + " complete while not every "
                            "rank is connected (contribution counts exceed the senders)");
            }
        }
        // once: the carrier (rank 1) alone; the switch replicates the WRITE to every worker.
        const size_t writers = opt_.results == ResultMode::once ? 1 : conns_.size();
        for (size_t w = 0; w < writers; ++w) {
            const auto& c = conns_[w];
            post_write_imm(c->qp.get(), kResultWrite | slot, *result_mr_, offset, length,
                           c->req.result_addr + chunking_->offset(chunk), c->req.result_rkey,
                           make_imm(chunk, static_cast<uint8_t>(job_->world)));
            ++result_pending_[slot];
        }
        it = ready_.erase(it);
    }
}

bool Round::work_done() const {
    return reducer_ && reducer_->all_complete() && ready_.empty() &&
           st_.results_written == uint64_t{st_.chunks} * result_writes_per_chunk();
}

bool Round::finished() const {
    if (!work_done()) {
        return false;
    }
    for (const auto& c : conns_) {
        if (!c || !c->disconnected) {
            return false;
        }
    }
    return true;
}

std::string Round::progress() const {
    if (!job_) {
        return "no worker connected";
    }
    return std::to_string(qpn_index_.size()) + " of " + std::to_string(job_->world) +
           " workers connected, " + std::to_string(reducer_->chunks_completed()) + " of " +
           std::to_string(st_.chunks) + " chunks reduced, " + std::to_string(st_.results_written) +
           " result WRITEs completed";
}

void Round::disconnect_stragglers() {
    for (const auto& c : conns_) {
        if (c && !c->disconnected) {
            // Errors do not matter: the id is destroyed with the round either way.
            static_cast<void>(rdma_disconnect(c->id.get()));
        }
    }
}

RoundStats Round::run(Deadline deadline) {
    std::array<ibv_wc, 64> wcs;
    const std::array<int, 1> cm_fd{channel_.fd()};
    if (carried_) {
        CmEvent ev = std::move(*carried_);
        carried_.reset();
        on_cm_event(std::move(ev));
    }
    // Once the work is done the round waits a grace for the workers' disconnects; a DREQ lost
    // under loss is retried by the CM only seconds later, after the workers may have gone on to
    // the next AllReduce, whose connect requests then belong to the next round.
    std::optional<Clock::time_point> grace_end;
    while (!finished()) {
        const auto now = Clock::now();
        if (now >= deadline) {
            throw Error("timed out: " + progress());
        }
        if (work_done() && !grace_end) {
            grace_end = now + std::chrono::milliseconds(opt_.disconnect_grace_ms);
            // Every result WRITE completed: every worker holds its results, and the root ends
            // the connections (a worker waits for that: until then it re-ACKs a result whose
            // ACK was lost); their DISCONNECTED events end the round, or the grace does.
            disconnect_stragglers();
        }
        if (grace_end && now >= *grace_end) {
            disconnect_stragglers();
            break;
        }
        while (auto ev = channel_.try_next()) {
            if (work_done() && ev->type() == RDMA_CM_EVENT_CONNECT_REQUEST) {
                carried_.emplace(std::move(*ev));
                disconnect_stragglers();
                return finish_stats();
            }
            on_cm_event(std::move(*ev));
        }
        if (finished()) {
            break;
        }
        if (!cq_) {
            on_cm_event(channel_.next(deadline, "workers to connect"));
            continue;
        }
        const size_t n = cq_->wait(wcs, grace_end ? std::min(deadline, *grace_end) : deadline,
                                   cm_fd);
        for (size_t i = 0; i < n; ++i) {
            if (grace_end && wcs[i].status == IBV_WC_WR_FLUSH_ERR) {
                continue;  // the receives still posted, flushed by the root's own disconnect
            }
            on_completion(wcs[i]);
        }
        send_ready_results();
    }
    return finish_stats();
}

RoundStats Round::finish_stats() {
    st_.seconds = std::chrono::duration<double>(t_last_ - t_first_).count();
    return st_;
}

}  // namespace

RoundStats serve_round(EventChannel& channel, const RootOptions& options, Deadline deadline,
                       std::optional<CmEvent>& carried) {
    Round round(channel, options, carried);
    return round.run(deadline);
}

}  // namespace ina::rdma
