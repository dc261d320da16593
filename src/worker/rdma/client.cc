// SPDX-License-Identifier: Apache-2.0
#include "worker/rdma/client.h"

#include <arpa/inet.h>

#include <array>
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

    EventChannel channel;
    CmId id = resolve(channel, opt_.root, opt_.port, deadline);
    ProtectionDomain pd(id->verbs);
    CompletionQueue cq(id->verbs, static_cast<int>(send_depth + window + 1));
    // The HCA only reads the input (access 0); ibv_reg_mr takes a non-const pointer.
    MemoryRegion input_mr(pd,
                          std::span(const_cast<std::byte*>(input.data()), input.size()), 0);
    MemoryRegion output_mr(pd, output, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
    QueuePair qp = create_rc_qp(id, pd, cq, send_depth, window);
    for (uint32_t i = 0; i < window; ++i) {
        post_recv(qp.get(), kResultRecv);
    }

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
    req.result_addr = output_mr.addr();
    req.result_rkey = output_mr.rkey();
    const auto req_bytes = req.encode();
    std::vector<std::byte> reply_bytes;
    try {
        reply_bytes = connect(channel, id, req_bytes, deadline);
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

    ClientStats st;
    st.chunks = chunks;
    st.connect_seconds = since(t_start);
    std::vector<bool> have(chunks, false);
    uint32_t next = 0;  // next chunk to WRITE
    uint32_t base = 0;  // lowest chunk without its result
    uint32_t sends_outstanding = 0;
    bool root_disconnected = false;
    std::array<ibv_wc, 64> wcs;
    const std::array<int, 1> cm_fd{channel.fd()};
    const auto t0 = Clock::now();
    auto t_last = t0;
    while (st.results < chunks || sends_outstanding > 0) {
        while (next < chunks && next < base + window && sends_outstanding < send_depth) {
            post_write_imm(qp.get(), next, input_mr, chunking.offset(next),
                           chunking.length(next),
                           reply->contribution_addr + uint64_t{chunking.slot(next)} *
                                                          opt_.chunk_bytes,
                           reply->contribution_rkey, make_imm(next, 1));
            ++next;
            ++st.writes;
            ++sends_outstanding;
        }
        const size_t n = cq.wait(wcs, deadline, cm_fd);
        // Completions first: the root disconnects once its result WRITEs completed, which can
        // be before this process has polled the last results.
        std::optional<CmEvent> cm_event = channel.try_next();
        if (n == 0 && Clock::now() >= deadline) {
            throw Error("timed out: " + std::to_string(st.results) + " of " +
                        std::to_string(chunks) + " results in, " +
                        std::to_string(sends_outstanding) + " WRITEs unacknowledged");
        }
        for (size_t i = 0; i < n; ++i) {
            const ibv_wc& wc = wcs[i];
            if (classify_client_completion(wc, kResultRecv) == ClientCompletion::write_done) {
                --sends_outstanding;
                continue;
            }
            const Imm imm = parse_imm(ntohl(wc.imm_data));
            if (imm.chunk >= chunks || have[imm.chunk] || imm.contributions != opt_.world ||
                wc.byte_len != chunking.length(imm.chunk)) {
                throw Error("protocol error: result for chunk " + std::to_string(imm.chunk) +
                            " with " + std::to_string(imm.contributions) + " contributions and " +
                            std::to_string(wc.byte_len) + " bytes (tensor of " +
                            std::to_string(chunks) + " chunks, world " +
                            std::to_string(opt_.world) + ")");
            }
            have[imm.chunk] = true;
            ++st.results;
            t_last = Clock::now();
            post_recv(qp.get(), kResultRecv);
            while (base < chunks && have[base]) {
                ++base;
            }
        }
        if (cm_event) {
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
        st.disconnect_error = disconnect(channel, id, Clock::now() + std::chrono::seconds(5));
    }
    return st;
}

}  // namespace ina::rdma
