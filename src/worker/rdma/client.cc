// SPDX-License-Identifier: Apache-2.0
#include "worker/rdma/client.h"

#include <arpa/inet.h>

#include <algorithm>
#include <array>
#include <memory>
#include <optional>
#include <vector>

namespace ina::rdma {

namespace {

// wr_id of the receives (results); a WRITE's wr_id is its chunk index.
constexpr uint64_t kResultRecv = uint64_t{1} << 63;

double since(Clock::time_point t0) {
    return std::chrono::duration<double>(Clock::now() - t0).count();
}

}  // namespace

void throw_refusal(const Rejected& r) {
    const auto reply = ConnectReply::decode(r.private_data, nullptr);
    if (reply && reply->status != 0) {
        throw Error(std::string(r.what()) + ": " +
                    std::string(to_string(static_cast<RejectReason>(reply->status))));
    }
    throw r;
}

Client::Client(ClientOptions options) : opt_(std::move(options)) {
    check_rank_and_window(opt_.world, opt_.rank, opt_.window, kMaxWorld);
    parse_address(opt_.root, opt_.port);
}

namespace {

// One rdma_cm connection to the root: its id, completion queue and QP (destroyed in that
// order's reverse: QP, CQ, id). The protection domain and memory regions outlive it, so a
// reconnect keeps the tensors registered (the same result rkey).
struct Connection {
    CmId id;
    std::unique_ptr<CompletionQueue> cq;
    QueuePair qp;
    ConnectReply reply;
};

}  // namespace

ClientStats Client::allreduce(std::span<const std::byte> input, std::span<std::byte> output) {
    const auto t_start = Clock::now();
    const Deadline deadline = t_start + opt_.timeout;
    const Chunking chunking =
        chunk_buffers(opt_.elem_type, input, output, opt_.chunk_bytes, opt_.window);
    const uint32_t chunks = chunking.chunks();
    const uint32_t window = opt_.window;
    // A WRITE's send completion can trail the result that proves it arrived, so the send queue
    // holds two windows.
    const uint32_t send_depth = 2 * window;
    if (opt_.poll_after_root_ends && chunks > window) {
        throw Error("--poll-after-root-ends needs the tensor in one window (" +
                    std::to_string(chunks) + " chunks, window " + std::to_string(window) + ")");
    }

    EventChannel channel;
    std::unique_ptr<ProtectionDomain> pd;
    std::unique_ptr<MemoryRegion> input_mr;
    std::unique_ptr<MemoryRegion> output_mr;
    // The connection after the memory it uses: destroyed first.
    std::unique_ptr<Connection> conn;

    ConnectRequest req;
    req.mode = Mode::server_to_server;
    req.elem_type = opt_.elem_type;
    req.op = opt_.op;
    req.job_id = opt_.job_id;
    req.rank = opt_.rank;
    req.world = opt_.world;
    req.elements = input.size() / reduce::elem_size(opt_.elem_type);
    req.chunk_bytes = opt_.chunk_bytes;
    req.window = window;

    // Resolves, creates the QP with its receives posted, and connects with `req`.
    const auto open = [&]() {
        auto c = std::make_unique<Connection>();
        c->id = resolve(channel, opt_.root, opt_.port, deadline);
        if (!pd) {
            pd = std::make_unique<ProtectionDomain>(c->id->verbs);
            // The HCA only reads the input (access 0); ibv_reg_mr takes a non-const pointer.
            input_mr = std::make_unique<MemoryRegion>(
                *pd, std::span(const_cast<std::byte*>(input.data()), input.size()), 0);
            output_mr = std::make_unique<MemoryRegion>(
                *pd, output, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
        } else if (c->id->verbs != pd->context()) {
            throw Error("the reconnection resolved to another RDMA device");
        }
        c->cq = std::make_unique<CompletionQueue>(c->id->verbs,
                                                  static_cast<int>(send_depth + window + 1));
        c->qp = create_rc_qp(c->id, *pd, *c->cq, send_depth, window);
        for (uint32_t i = 0; i < window; ++i) {
            post_recv(c->qp.get(), kResultRecv);
        }
        req.result_addr = output_mr->addr();
        req.result_rkey = output_mr->rkey();
        const auto req_bytes = req.encode();
        std::vector<std::byte> reply_bytes;
        try {
            reply_bytes = connect(channel, c->id, req_bytes, deadline);
        } catch (const Rejected& r) {
            throw_refusal(r);
        }
        std::string why;
        const auto reply = ConnectReply::decode(reply_bytes, &why);
        if (!reply) {
            throw Error("the root's accept: " + why);
        }
        if (reply->status != 0 || reply->job_id != opt_.job_id) {
            throw Error("the root accepted with status " + std::to_string(reply->status) +
                        " for job " + std::to_string(reply->job_id));
        }
        if (req.resuming && !reply->resumed) {
            throw Error("the root accepted the resuming connection as a new one");
        }
        c->reply = *reply;
        return c;
    };
    conn = open();

    ClientStats st;
    st.chunks = chunks;
    st.connect_seconds = since(t_start);
    std::vector<bool> have(chunks, false);
    uint32_t next = 0;  // next chunk to WRITE
    uint32_t base = 0;  // lowest chunk without its result
    uint32_t sends_outstanding = 0;
    bool root_disconnected = false;
    bool lagged = false;  // poll_after_root_ends: waited for the root's end
    std::array<ibv_wc, 64> wcs;
    const std::array<int, 1> cm_fd{channel.fd()};
    const auto t0 = Clock::now();
    auto t_last = t0;
    // The results a completion batch holds (also the old connection's last ones).
    const auto take_results = [&](std::span<const ibv_wc> batch, bool closing) {
        for (const ibv_wc& wc : batch) {
            if (closing && wc.status == IBV_WC_WR_FLUSH_ERR) {
                continue;  // receives flushed by this side's own disconnect
            }
            if (classify_client_completion(wc, kResultRecv) == ClientCompletion::write_done) {
                --sends_outstanding;
                continue;
            }
            const Imm imm = parse_imm(ntohl(wc.imm_data));
            if (imm.chunk >= chunks || imm.contributions != opt_.world ||
                wc.byte_len != chunking.length(imm.chunk)) {
                throw Error("protocol error: result for chunk " + std::to_string(imm.chunk) +
                            " with " + std::to_string(imm.contributions) + " contributions and " +
                            std::to_string(wc.byte_len) + " bytes (tensor of " +
                            std::to_string(chunks) + " chunks, world " +
                            std::to_string(opt_.world) + ")");
            }
            if (!closing) {
                post_recv(conn->qp.get(), kResultRecv);
            }
            if (have[imm.chunk]) {
                // Written again: after this side reconnected (its ACK went with the old
                // connection), or, through a replicating switch, after the carrier resumed (the
                // root writes the carrier what it lacks on its new connection and the switch
                // copies that to every worker). The same bytes: a result is final.
                ++st.duplicate_results;
                continue;
            }
            have[imm.chunk] = true;
            ++st.results;
            t_last = Clock::now();
            while (base < chunks && have[base]) {
                ++base;
            }
        }
    };
    // The chunk count at which the next reconnect is due (0: none left).
    const auto reconnect_point = [&]() -> uint32_t {
        const uint32_t at = st.reconnects == 0   ? opt_.reconnect_after
                            : st.reconnects == 1 ? opt_.reconnect_again_after
                                                 : 0;
        return at < chunks ? at : 0;
    };
    while (st.results < chunks || sends_outstanding > 0) {
        const uint32_t reconnect_at = reconnect_point();
        const bool reconnect_due = reconnect_at != 0 && next >= reconnect_at && st.results < chunks;
        // A reconnect due first goes first: a restart at the same chunk comes right after it,
        // before this process writes anything on the resumed connection.
        if (opt_.restart_at != 0 && !st.restarted && next >= opt_.restart_at &&
            st.results < chunks && !reconnect_due) {
            // As a process that dies and starts again: nothing waited for, nothing kept. The
            // connection goes with its QP (the CM sends the root a DREQ), then the memory
            // registrations and the results received.
            conn.reset();
            output_mr.reset();
            input_mr.reset();
            pd.reset();
            std::fill(output.begin(), output.end(), std::byte{0});
            have.assign(chunks, false);
            base = 0;
            st.results = 0;
            st.duplicate_results = 0;
            sends_outstanding = 0;
            req.resuming = true;
            req.resume_from = 0;
            req.results_from = 0;
            const auto t_rejoin = Clock::now();
            conn = open();
            st.rejoin_seconds = since(t_rejoin);
            st.restarted = st.reconnected = true;
            st.resume_chunk = conn->reply.resume_chunk;
            next = st.resume_chunk;
            continue;
        }
        if (reconnect_due && sends_outstanding == 0 && st.results >= opt_.reconnect_min_results) {
            // Every WRITE so far acknowledged: chunks [0, next) are in (at the root, or held by
            // a switch that ACKed them as the root), none beyond. Leave, and come back saying so.
            const auto t_leave = Clock::now();
            static_cast<void>(rdma_disconnect(conn->id.get()));
            while (true) {
                CmEvent ev = channel.next(deadline, "the disconnect before reconnecting");
                if (ev.type() == RDMA_CM_EVENT_DISCONNECTED) {
                    break;
                }
            }
            // Results the old connection received before it ended.
            size_t n = 0;
            while ((n = conn->cq->poll(wcs)) > 0) {
                take_results(std::span(wcs).first(n), true);
            }
            conn.reset();
            req.resuming = true;
            req.resume_from = next;
            req.results_from = base;
            const auto t_rejoin = Clock::now();
            st.leave_seconds = std::chrono::duration<double>(t_rejoin - t_leave).count();
            conn = open();
            st.rejoin_seconds = since(t_rejoin);
            st.reconnected = true;
            ++st.reconnects;
            st.resume_chunk = conn->reply.resume_chunk;
            if (st.resume_chunk < next) {
                throw Error("the root resumes this rank at chunk " +
                            std::to_string(st.resume_chunk) + ", below the " +
                            std::to_string(next) + " it has acknowledged");
            }
            next = st.resume_chunk;
            continue;
        }
        while (!reconnect_due && next < chunks && next < base + window &&
               sends_outstanding < send_depth) {
            post_write_imm(conn->qp.get(), next, *input_mr, chunking.offset(next),
                           chunking.length(next),
                           conn->reply.contribution_addr +
                               uint64_t{chunking.slot(next)} * opt_.chunk_bytes,
                           conn->reply.contribution_rkey, make_imm(next, 1));
            ++next;
            ++st.writes;
            ++sends_outstanding;
            if ((reconnect_at != 0 && next >= reconnect_at) ||
                (opt_.restart_at != 0 && !st.restarted && next >= opt_.restart_at)) {
                break;
            }
        }
        std::optional<CmEvent> cm_event;
        if (opt_.poll_after_root_ends && next == chunks && !lagged) {
            lagged = true;
            cm_event.emplace(channel.next(deadline, "the root to end the connection"));
        }
        const size_t n = conn->cq->wait(wcs, deadline, cm_fd);
        // Completions first: the root disconnects once its result WRITEs completed, which can
        // be before this process has polled the last results.
        if (auto ev = cm_event ? std::nullopt : channel.try_next()) {
            cm_event.emplace(std::move(*ev));
        }
        if (cm_event && cm_event->id() != conn->id.get()) {
            cm_event.reset();  // a late event of a connection this side already replaced
        }
        if (n == 0 && Clock::now() >= deadline) {
            throw Error("timed out: " + std::to_string(st.results) + " of " +
                        std::to_string(chunks) + " results in, " +
                        std::to_string(sends_outstanding) + " WRITEs unacknowledged");
        }
        take_results(std::span(wcs).first(n), false);
        if (cm_event) {
            // Everything the root saw completed before it ended is in the CQ by now, and may be
            // more than one poll's worth (a process behind its NIC).
            size_t more = 0;
            while ((more = conn->cq->poll(wcs)) > 0) {
                take_results(std::span(wcs).first(more), true);
            }
            if (st.results < chunks) {
                // The root went away (or its CM gave up on us): no result can come any more.
                throw Error("the root ended the connection (" + cm_event->name() + ") with " +
                            std::to_string(st.results) + " of " + std::to_string(chunks) +
                            " results in");
            }
            root_disconnected = cm_event->type() == RDMA_CM_EVENT_DISCONNECTED;
            break;  // every result in; what is still unacknowledged was received by the root
        }
    }
    st.seconds = std::chrono::duration<double>(t_last - t0).count();
    st.goodput_gbit_per_s =
        st.seconds > 0 ? static_cast<double>(input.size()) * 8 / st.seconds / 1e9 : 0;
    if (!root_disconnected) {
        // Every result in and every WRITE acknowledged: the root ends the connection once its
        // result WRITEs completed. Until then this QP still answers a retransmitted result
        // (its ACK lost) with an ACK; leaving at once made the root retry for ever.
        try {
            const Deadline linger_end = std::min(deadline, Clock::now() + opt_.linger);
            while (!root_disconnected) {
                root_disconnected =
                    channel.next(linger_end, "the root's disconnect").type() ==
                    RDMA_CM_EVENT_DISCONNECTED;
            }
        } catch (const Error&) {
            // The root did not end it in time: end it here, as before.
        }
    }
    if (!root_disconnected) {
        st.disconnect_error =
            disconnect(channel, conn->id, Clock::now() + std::chrono::seconds(5));
    }
    return st;
}

}  // namespace ina::rdma
