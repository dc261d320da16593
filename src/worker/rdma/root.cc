// SPDX-License-Identifier: Apache-2.0
#include "worker/rdma/root.h"

#include <arpa/inet.h>

#include <algorithm>
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

// wr_id: receives carry the rank index; result WRITEs the top bit, the rank index (bits 32..47)
// and the chunk (bits 0..31).
constexpr uint64_t kResultWrite = uint64_t{1} << 63;

uint64_t result_wr_id(uint32_t index, uint32_t chunk) {
    return kResultWrite | uint64_t{index} << 32 | chunk;
}

// Per (rank, chunk) result: not posted on the rank's current connection, posted on it, or
// acknowledged on one of the rank's connections (then never written again).
enum ResultState : uint8_t { kOwed = 0, kPosted = 1, kDelivered = 2 };

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
        uint32_t generation = 0;  // the rank's connections in this round before this one
        bool established = false;
        bool disconnected = false;
        uint32_t sends = 0;      // result WRITEs posted and not completed (<= send_depth())
        bool owes = false;       // results left owed for want of send queue room
        uint32_t owed_scan = 0;  // the lowest chunk that may still be owed (with owes)
    };

    void on_cm_event(CmEvent ev);
    // Returns the reason to refuse, or nothing once accepted.
    std::optional<RejectReason> on_connect_request(const CmEvent& ev, std::string* why);
    void setup_job(const ConnectRequest& q, ibv_context* ctx);
    void on_completion(const ibv_wc& wc);
    // Every completion the CQ holds now, handled (before a resuming rank's answer).
    void take_completions();
    void send_ready_results();
    // Writes result `chunk` to rank `index`'s current connection if its send queue has room;
    // else the result stays owed (Conn::owes).
    void post_result(uint32_t index, uint32_t chunk);
    // Every staged result the rank lacks, on its current connection, as far as its send queue
    // has room (a resumed connection once established, or its first WRITE came; any
    // connection that was full).
    void post_owed_results(uint32_t index);
    uint32_t send_depth() const { return 2 * job_->window + 2; }
    // once: the carrier (rank 1) alone (the switch replicates onto every connection it
    // learned, and onto a rank's resumed connection too).
    bool writes_results(uint32_t index) const {
        return opt_.results == ResultMode::per_worker || index == 0;
    }
    // A resumed connection is established (rdma_cm's ESTABLISHED, or its first WRITE): the
    // results it is owed go, on it, or with --results once for a non-carrier rank on the
    // carrier (the switch copies them onto the new connection from then on).
    void resumed_established(uint32_t index);
    uint8_t& result_state(uint32_t index, uint32_t chunk) {
        return result_state_[size_t{index} * st_.chunks + chunk];
    }
    // Every chunk reduced and every result acknowledged: the workers have the result.
    bool work_done() const;
    bool finished() const;
    RoundStats finish_stats();
    // Ends the connections whose worker has not disconnected (its DREQ lost, or still to come).
    void disconnect_stragglers();
    std::string progress() const;
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
    std::vector<std::byte> result_mem_;  // the whole reduced tensor
    std::unique_ptr<MemoryRegion> contrib_mr_;
    std::unique_ptr<MemoryRegion> result_mr_;
    std::unique_ptr<ChunkReducer> reducer_;
    std::deque<uint32_t> ready_;            // complete chunks not staged yet
    std::vector<bool> staged_;              // per chunk: its result is in result_mem_
    std::vector<uint8_t> result_state_;     // per (rank index, chunk): ResultState
    std::vector<uint32_t> delivered_;       // per rank index: results acknowledged
    // Per rank index: the prefixes a resuming rank WRITEs again past (ConnectReply::
    // resume_chunk): its own WRITEs received, its earlier resumes in this round.
    std::optional<ResumePoints> resume_points_;
    // Every QP of the round (current and replaced) -> rank index.
    std::unordered_map<uint32_t, uint32_t> qpn_index_;
    std::vector<std::unique_ptr<Conn>> conns_;    // by rank - 1: the current connection
    std::vector<std::unique_ptr<Conn>> retired_;  // replaced by a resuming request
};

void Round::setup_job(const ConnectRequest& q, ibv_context* ctx) {
    std::string why;
    chunking_ = Chunking::make(q.elem_type, q.elements, q.chunk_bytes, q.window, &why);
    if (!chunking_) {
        throw Error(why);
    }
    const uint64_t bytes = chunking_->area_bytes() * q.world + chunking_->tensor_bytes +
                           uint64_t{chunking_->chunks()} * q.world;
    if (bytes > uint64_t{opt_.max_memory_mb} << 20) {
        throw Error("needs " + std::to_string(bytes >> 20) + " MiB, over --max-memory-mb");
    }
    try {
        pd_ = std::make_unique<ProtectionDomain>(ctx);
        // Per connection: a window of receives, up to two windows of result WRITEs (the results
        // a resumed rank is owed plus the new ones); room for connections replaced mid-round.
        const uint32_t per_conn = 3 * q.window + 4;
        cq_ = std::make_unique<CompletionQueue>(ctx,
                                                static_cast<int>(per_conn * 2 * q.world + 16));
        contrib_mem_.assign(chunking_->area_bytes() * q.world, std::byte{0});
        result_mem_.assign(chunking_->tensor_bytes, std::byte{0});
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
    conns_.resize(q.world);
    job_ = q;
    st_.job = q;
    st_.chunks = chunking_->chunks();
    staged_.assign(st_.chunks, false);
    result_state_.assign(size_t{st_.chunks} * q.world, kOwed);
    delivered_.assign(q.world, 0);
    resume_points_.emplace(q.world);
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
        if (q->resuming) {
            *why = "rank " + std::to_string(q->rank) + " resumes a round this root does not serve";
            return RejectReason::bad_rank;
        }
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
    if (q->rank == 0 || q->rank > job_->world) {
        *why = "rank " + std::to_string(q->rank);
        return RejectReason::bad_rank;
    }
    const uint32_t index = q->rank - 1u;
    // A rank already connected (or gone mid-round) comes back only when it says it resumes: a
    // second process claiming a live rank is refused, never swapped in.
    if (conns_[index] && !q->resuming) {
        *why = "rank " + std::to_string(q->rank) + " is already connected";
        return RejectReason::bad_rank;
    }
    if (!conns_[index] && q->resuming) {
        *why = "rank " + std::to_string(q->rank) + " resumes but never connected in this round";
        return RejectReason::bad_rank;
    }
    auto conn = std::make_unique<Conn>();
    conn->id = CmId(ev.id());
    conn->req = *q;
    conn->generation = conns_[index] ? conns_[index]->generation + 1 : 0;
    ConnectReply reply;
    reply.job_id = q->job_id;
    reply.contribution_addr = contrib_mr_->addr() + index * chunking_->area_bytes();
    reply.contribution_rkey = contrib_mr_->rkey();
    if (q->resuming) {
        // The rank's old connection ends before the answer, and what its QP completed is taken
        // first: the answer says exactly what the root holds (a switch resends, from it, the
        // aggregates it sent on a resuming carrier's old connection that the root lacks).
        if (Conn* old = conns_[index].get(); old != nullptr && !old->disconnected) {
            static_cast<void>(rdma_disconnect(old->id.get()));
            old->disconnected = true;
        }
        take_completions();
        reply.resumed = true;
        // Below the worker's acknowledged prefix everything of it is in (at the root, or held
        // by a switch that ACKed it as the root and delivers it in an aggregate); its own
        // WRITEs and its earlier resumes say the same of theirs; a complete chunk holds every
        // rank.
        reply.resume_chunk = resume_points_->resume(index, q->resume_from, *reducer_, st_.chunks);
        reply.has_complete = true;
        while (reply.complete_from < st_.chunks && reducer_->complete(reply.complete_from)) {
            ++reply.complete_from;
        }
        for (uint32_t i = 0; i < ConnectReply::kCompleteBits; ++i) {
            const uint32_t c = reply.complete_from + i;
            if (c < st_.chunks && reducer_->complete(c)) {
                reply.complete[i / 8] = static_cast<uint8_t>(reply.complete[i / 8] | 1u << (i % 8));
            }
        }
    }
    try {
        conn->qp = create_rc_qp(conn->id, *pd_, *cq_, send_depth(), job_->window);
        for (uint32_t i = 0; i < job_->window; ++i) {
            post_recv(conn->qp.get(), index);
        }
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
    qpn_index_[conn->qp.get()->qp_num] = index;
    if (auto& old = conns_[index]) {
        // The rank's old connection is over: ended here if its DREQ has not come (its flushed
        // work requests are ignored); results posted on it and not acknowledged are owed to
        // the new one.
        if (!old->disconnected) {
            static_cast<void>(rdma_disconnect(old->id.get()));
            old->disconnected = true;
        }
        // The worker has every result below results_from, and from there it may lack any: a
        // result acknowledged on one of its connections is no proof (with --results once that
        // ACK was a replicating switch's aggregate, which stops counting a rank once its
        // connection ends, docs/rdma.md "Departures"; a process that restarted has nothing).
        // So every result from there is owed again (one it has is a duplicate, the same bytes).
        // With --results once the carrier's results_from speaks for itself alone: the other
        // ranks had copies, and a copy one of them lost was acknowledged to nobody (the switch's
        // ACK is the least over the ranks) while the switch's fill moves that rank past it. So
        // below it only what the old connection saw acknowledged is delivered.
        const uint32_t have_below = std::min(q->results_from, st_.chunks);
        const bool speaks_for_all = opt_.results == ResultMode::per_worker;
        for (uint32_t c = 0; c < st_.chunks && writes_results(index); ++c) {
            uint8_t& s = result_state(index, c);
            if (c < have_below && (speaks_for_all || s == kDelivered)) {
                if (s != kDelivered && staged_[c]) {
                    s = kDelivered;
                    ++delivered_[index];
                    ++st_.results_written;
                }
            } else if (s != kOwed) {
                if (s == kDelivered) {
                    --delivered_[index];
                    --st_.results_written;
                }
                s = kOwed;
            }
        }
        retired_.push_back(std::move(old));
        ++st_.resumes;
        std::fprintf(stderr, "ina-rdma-root: rank %u resumes from chunk %u (it said %u; %s)\n",
                     unsigned{q->rank}, reply.resume_chunk, q->resume_from,
                     progress().c_str());
    }
    conns_[index] = std::move(conn);
    std::fprintf(stderr, "ina-rdma-root: rank %u connected (job %u, of %u workers)\n",
                 unsigned{q->rank}, q->job_id, unsigned{job_->world});
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
        for (uint32_t index = 0; index < conns_.size(); ++index) {
            Conn* c = conns_[index].get();
            if (c == nullptr || c->id.get() != ev.id()) {
                continue;
            }
            if (ev.type() == RDMA_CM_EVENT_ESTABLISHED) {
                if (!c->established && c->generation > 0) {
                    c->established = true;
                    resumed_established(index);
                }
                c->established = true;
                return;
            }
            c->disconnected = true;
            if (!reducer_->all_complete()) {
                // The worker left mid-round. Its QP here is still ready to send (the kernel
                // moves only its own QPs to error at a DREQ): rdma_disconnect moves it, so
                // what it still had posted flushes at once instead of retrying into a QP
                // that is gone until the retry count runs out. The worker may come back (a
                // resuming request); until the round's deadline.
                static_cast<void>(rdma_disconnect(c->id.get()));
                std::fprintf(stderr, "ina-rdma-root: rank %u disconnected mid-round (%s): "
                             "waiting for it to resume\n", unsigned{c->req.rank},
                             progress().c_str());
            }
            return;
        }
        for (auto& c : retired_) {
            if (c->id.get() == ev.id()) {
                c->disconnected = true;
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
    const auto it = qpn_index_.find(wc.qp_num);
    if (it == qpn_index_.end()) {
        throw Error("completion on unknown QP " + std::to_string(wc.qp_num));
    }
    const uint32_t index = it->second;
    const Conn* cur = conns_[index].get();
    const bool current = cur != nullptr && cur->qp.get()->qp_num == wc.qp_num;
    if (current && (wc.wr_id & kResultWrite) && cur->sends > 0) {
        --conns_[index]->sends;
    }
    if (wc.status != IBV_WC_SUCCESS) {
        if (!current || cur->disconnected) {
            // A connection that ended (or was replaced) flushes what it still had posted: a
            // result not acknowledged is owed to the rank's next connection.
            return;
        }
        throw_completion_error(wc, (wc.wr_id & kResultWrite) ? "writing a result"
                                                             : "receiving a contribution");
    }
    if (wc.opcode == IBV_WC_RDMA_WRITE) {
        const uint32_t to = static_cast<uint32_t>(wc.wr_id >> 32) & 0xFFFF;
        const uint32_t chunk = static_cast<uint32_t>(wc.wr_id);
        if (to < delivered_.size() && chunk < st_.chunks &&
            result_state(to, chunk) != kDelivered) {
            result_state(to, chunk) = kDelivered;
            ++delivered_[to];
            ++st_.results_written;
        }
        t_last_ = Clock::now();
        return;
    }
    if (wc.opcode != IBV_WC_RECV_RDMA_WITH_IMM || !(wc.wc_flags & IBV_WC_WITH_IMM)) {
        throw Error("unexpected completion opcode " + std::to_string(wc.opcode));
    }
    if (!started_) {
        started_ = true;
        t_first_ = Clock::now();
    }
    const Imm imm = parse_imm(ntohl(wc.imm_data));
    ++st_.contributions;
    // The data sits in the slot of the rank that delivered it, whoever's data it is.
    const uint32_t slot = imm.chunk < chunking_->chunks() ? chunking_->slot(imm.chunk) : 0;
    const std::byte* data = contrib_mem_.data() + index * chunking_->area_bytes() +
                            uint64_t{slot} * chunking_->chunk_bytes;
    if (wc.byte_len > chunking_->chunk_bytes) {
        throw Error("protocol error from rank " + std::to_string(index + 1) + ": a WRITE of " +
                    std::to_string(wc.byte_len) + " bytes overran its " +
                    std::to_string(chunking_->chunk_bytes) + "-byte slot");
    }
    const bool resumed_own = current && cur->generation > 0 && imm.contributions == 1;
    if (resumed_own && reducer_->complete(imm.chunk)) {
        // A resumed worker WRITEs on from its resume chunk; a later chunk may have completed
        // with its earlier contribution (delivered by a switch): the same data, not added.
        ++st_.resent_discarded;
    } else {
        std::string why;
        const auto verdict =
            reducer_->add(imm.chunk, imm.contributions, std::span(data, wc.byte_len), &why);
        if (verdict == ChunkReducer::Verdict::refused) {
            throw Error("protocol error from rank " + std::to_string(index + 1) + ": " + why);
        }
        st_.contribution_count += imm.contributions;
        if (imm.contributions == 1) {
            resume_points_->on_own_write(index, imm.chunk);
        }
        if (verdict == ChunkReducer::Verdict::complete) {
            ready_.push_back(imm.chunk);
        }
    }
    if (current && !cur->disconnected) {
        post_recv(cur->qp.get(), index);
        if (!cur->established && cur->generation > 0) {
            // The worker's WRITE proves its QP ready: its RTU may be lost (rdma_cm reports
            // ESTABLISHED only after the CM's retries), the results it is owed go now.
            conns_[index]->established = true;
            resumed_established(index);
        }
    }
}

void Round::resumed_established(uint32_t index) {
    if (writes_results(index)) {
        post_owed_results(index);
        return;
    }
    // Once, a non-carrier rank: what it lacks is written again on the carrier, after the REP
    // (this connection is established, so the switch has seen its REP and copies onto it from
    // there); the carrier's worker takes them as duplicates.
    const uint32_t from = std::min(conns_[index]->req.results_from, st_.chunks);
    for (uint32_t c = from; c < st_.chunks; ++c) {
        uint8_t& s = result_state(0, c);
        if (staged_[c] && s != kOwed) {
            if (s == kDelivered) {
                --delivered_[0];
                --st_.results_written;
            }
            s = kOwed;
        }
    }
    const Conn* carrier = conns_[0].get();
    if (carrier != nullptr && !carrier->disconnected &&
        (carrier->generation == 0 || carrier->established)) {
        post_owed_results(0);
    }
}

void Round::post_result(uint32_t index, uint32_t chunk) {
    Conn& c = *conns_[index];
    if (c.sends >= send_depth()) {
        c.owed_scan = c.owes ? std::min(c.owed_scan, chunk) : chunk;
        c.owes = true;
        return;
    }
    post_write_imm(c.qp.get(), result_wr_id(index, chunk), *result_mr_, chunking_->offset(chunk),
                   chunking_->length(chunk), c.req.result_addr + chunking_->offset(chunk),
                   c.req.result_rkey, make_imm(chunk, static_cast<uint8_t>(job_->world)));
    result_state(index, chunk) = kPosted;
    ++c.sends;
}

void Round::post_owed_results(uint32_t index) {
    Conn& c = *conns_[index];
    uint32_t chunk = c.owes ? c.owed_scan : 0;
    c.owes = false;
    for (; chunk < st_.chunks && !c.owes; ++chunk) {
        if (staged_[chunk] && result_state(index, chunk) == kOwed) {
            post_result(index, chunk);  // sets owes (from this chunk) when the queue is full
        }
    }
}

void Round::take_completions() {
    std::array<ibv_wc, 64> wcs;
    size_t n = 0;
    while ((n = cq_->poll(wcs)) > 0) {
        for (size_t i = 0; i < n; ++i) {
            on_completion(wcs[i]);
        }
    }
}

void Round::send_ready_results() {
    for (const uint32_t chunk : ready_) {
        reducer_->take(chunk, std::span(result_mem_.data() + chunking_->offset(chunk),
                                        chunking_->length(chunk)));
        staged_[chunk] = true;
        for (uint32_t w = 0; w < conns_.size(); ++w) {
            const auto& c = conns_[w];
            if (!c) {  // counts reached world with a rank never connected: a peer lied
                throw Error("chunk " + std::to_string(chunk) + " complete while not every "
                            "rank is connected (contribution counts exceed the senders)");
            }
            // once: the carrier (rank 1) alone (writes_results); the switch replicates the
            // carrier's WRITE to every worker it learned and to a rank's resumed connection. A rank that is away,
            // or whose resumed connection is not established yet, is owed the result
            // (post_owed_results).
            if (writes_results(w) && !c->disconnected &&
                (c->generation == 0 || c->established)) {
                post_result(w, chunk);
            }
        }
    }
    ready_.clear();
    // Results left owed for want of room: as far as the completions made some.
    for (uint32_t w = 0; w < conns_.size(); ++w) {
        const auto& c = conns_[w];
        if (c && c->owes && !c->disconnected && c->sends < send_depth() &&
            (c->generation == 0 || c->established)) {
            post_owed_results(w);
        }
    }
}

bool Round::work_done() const {
    if (!reducer_ || !reducer_->all_complete() || !ready_.empty()) {
        return false;
    }
    for (uint32_t w = 0; w < delivered_.size(); ++w) {
        if (writes_results(w) && delivered_[w] != st_.chunks) {
            return false;
        }
    }
    return true;
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
    uint32_t connected = 0;
    for (const auto& c : conns_) {
        connected += c && !c->disconnected ? 1 : 0;
    }
    return std::to_string(connected) + " of " + std::to_string(job_->world) +
           " workers connected, " + std::to_string(reducer_->chunks_completed()) + " of " +
           std::to_string(st_.chunks) + " chunks reduced, " + std::to_string(st_.results_written) +
           " results acknowledged";
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
