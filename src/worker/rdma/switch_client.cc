// SPDX-License-Identifier: Apache-2.0
#include "worker/rdma/switch_client.h"

#include <arpa/inet.h>

#include <array>
#include <cstring>
#include <random>

#include "worker/rdma/protocol.h"

namespace ina::rdma {

namespace {

// wr_id of the receives (results); a WRITE's wr_id is its chunk index in the call.
constexpr uint64_t kResultRecv = uint64_t{1} << 63;

SwitchClientOptions validated(SwitchClientOptions o) {
    check_rank_and_window(o.world, o.rank, o.window, kMaxWorld);
    path_mtu(o.pmtu);
    // Above the pmtu the NIC cuts each WRITE into FIRST/MIDDLE.../LAST; the switch takes
    // multiples of its pmtu up to 64 KiB (docs/rdma.md) and names what it refuses.
    if (o.chunk_bytes == 0 || o.chunk_bytes > kMaxSwitchChunkBytes) {
        throw Error("chunk_bytes " + std::to_string(o.chunk_bytes) + " must be 1.." +
                    std::to_string(kMaxSwitchChunkBytes));
    }
    if (o.chunk_bytes % reduce::elem_size(o.elem_type) != 0) {
        throw Error("chunk_bytes must be a multiple of the element size");
    }
    if (o.psn && *o.psn > kSeqMask) {
        throw Error("psn must fit 24 bits");
    }
    return o;
}

double since(Clock::time_point t0) {
    return std::chrono::duration<double>(Clock::now() - t0).count();
}

}  // namespace

SwitchClient::SwitchClient(SwitchClientOptions options)
    : opt_(validated(std::move(options))),

      device_(opt_.device),
      pd_(device_.get()),
      // A WRITE's send completion can trail the result that proves it arrived, so the send
      // queue holds two windows; the receive queue one (a result consumes one receive).
      cq_(device_.get(), static_cast<int>(3 * opt_.window + 1)),
      staging_(size_t{opt_.window} * opt_.chunk_bytes),
      staging_mr_(pd_, staging_, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE),
      qp_(pd_, cq_, 2 * opt_.window, opt_.window) {
    const auto t0 = Clock::now();
    const RoceGid gid = find_roce_gid(device_.get(), opt_.ib_port, opt_.ip, opt_.gid_index);
    ip_ = gid.ip;
    psn_ = opt_.psn ? *opt_.psn : std::random_device{}() & kSeqMask;
    qp_to_init(qp_.get(), opt_.ib_port);
    for (uint32_t i = 0; i < opt_.window; ++i) {
        post_recv(qp_.get(), kResultRecv);
    }
    if (opt_.switch_cm.empty()) {
        connect_by_api(gid);
    } else {
        connect_by_cm();
    }
    layout_.area_addr = reply_.area_addr;
    layout_.chunk_bytes = opt_.chunk_bytes;
    layout_.window = opt_.window;
    layout_.result_addr = staging_mr_.addr();
    layout_.result_slots = opt_.window;
    connect_seconds_ = since(t0);
}

void SwitchClient::connect_by_cm() {
    const Deadline deadline = Clock::now() + opt_.timeout;
    cm_channel_ = std::make_unique<EventChannel>();
    cm_id_ = resolve(*cm_channel_, opt_.switch_cm, opt_.cm_port, deadline);
    // The QP was made on device_: rdma_cm must have resolved the route to the same device.
    const std::string resolved = ibv_get_device_name(cm_id_->verbs->device);
    if (resolved != device_.name()) {
        throw Error("rdma_cm reaches " + opt_.switch_cm + " through device " + resolved +
                    ", not " + device_.name() + ": pass --device " + resolved);
    }
    ConnectRequest req;
    req.mode = Mode::server_to_switch;
    req.elem_type = opt_.elem_type;
    req.op = opt_.op;
    req.job_id = opt_.job_id;
    req.rank = opt_.rank;
    req.world = opt_.world;
    req.chunk_bytes = opt_.chunk_bytes;
    req.window = opt_.window;
    req.result_addr = staging_mr_.addr();  // the staging ring, window x chunk_bytes
    req.result_rkey = staging_mr_.rkey();
    const auto req_bytes = req.encode();
    std::vector<std::byte> accept_bytes;
    try {
        accept_bytes = connect_own_qp(*cm_channel_, cm_id_, qp_.get(), req_bytes, deadline);
    } catch (const Rejected& r) {
        throw_refusal(r);
    }
    connected_ = true;
    std::string why;
    const auto accept = ConnectReply::decode(accept_bytes, &why);
    if (!accept || accept->status != 0 || accept->job_id != opt_.job_id) {
        disconnect(*cm_channel_, cm_id_, Clock::now() + opt_.timeout);
        connected_ = false;
        throw Error("the switch's accept: " +
                    (accept ? "status " + std::to_string(accept->status) + " for job " +
                                  std::to_string(accept->job_id)
                            : why));
    }
    // What rdma_cm set up, for the record (peer(), psn()).
    ibv_qp_attr attr{};
    ibv_qp_init_attr init{};
    if (ibv_query_qp(qp_.get(), &attr, IBV_QP_DEST_QPN | IBV_QP_RQ_PSN | IBV_QP_SQ_PSN |
                                           IBV_QP_PATH_MTU, &init) == 0) {
        reply_.qpn = attr.dest_qp_num;
        reply_.psn = attr.rq_psn;
        psn_ = attr.sq_psn;
        reply_.pmtu = 128u << attr.path_mtu;
    }
    reply_.ip = opt_.switch_cm;
    reply_.gid = gid_text(opt_.switch_cm);
    reply_.area_addr = accept->contribution_addr;
    reply_.area_rkey = accept->contribution_rkey;
    reply_.area_length = uint64_t{opt_.window} * opt_.chunk_bytes;
}

void SwitchClient::connect_by_api(const RoceGid& gid) {
    api_.emplace(opt_.switch_api, opt_.token, opt_.timeout);
    SwitchConnectRequest req;
    req.rank = opt_.rank;
    req.qpn = qp_.qpn();
    req.psn = psn_;
    req.ip = ip_;
    req.pmtu = opt_.pmtu;
    req.result_addr = staging_mr_.addr();
    req.result_rkey = staging_mr_.rkey();
    req.result_length = staging_.size();
    req.chunk_bytes = opt_.chunk_bytes;
    req.window = opt_.window;
    req.elem_type = opt_.elem_type;
    req.op = opt_.op;
    req.world = opt_.world;
    req.timeout = opt_.ack_timeout;
    req.retry_cnt = opt_.retry_cnt;
    reply_ = api_->connect(opt_.job_id, req);
    connected_ = true;
    try {
        if (reply_.area_length < uint64_t{opt_.window} * opt_.chunk_bytes) {
            throw Error("the switch's contribution area (" + std::to_string(reply_.area_length) +
                        " bytes) is smaller than window x chunk_bytes");
        }
        RcPath path;
        path.port = opt_.ib_port;
        path.sgid_index = gid.index;
        if (inet_pton(AF_INET6, reply_.gid.c_str(), path.dgid.raw) != 1) {
            throw Error("the switch's gid '" + reply_.gid + "' is not an IPv6 address");
        }
        // Both ends of a RoCE v2 path are of one family (the GRH's, hence the IP header's).
        const auto dest = gid_address(path.dgid);
        if (!dest || dest->ipv6 != gid.ipv6) {
            throw Error("the switch's gid '" + reply_.gid + "' is not of this worker's family (" +
                        ip_ + ")");
        }
        path.mtu = path_mtu(std::min(opt_.pmtu, reply_.pmtu));
        path.dest_qpn = reply_.qpn;
        path.rq_psn = reply_.psn;
        path.sq_psn = psn_;
        path.timeout = opt_.ack_timeout;
        path.retry_cnt = opt_.retry_cnt;
        path.rnr_retry = 7;
        connect_rc(qp_.get(), path);
    } catch (...) {
        api_->disconnect(opt_.job_id, opt_.rank);
        throw;
    }
}

SwitchClient::~SwitchClient() { close(); }

std::string SwitchClient::close() {
    if (!connected_) {
        return {};
    }
    connected_ = false;
    broken_ = true;
    if (cm_channel_) {
        return disconnect(*cm_channel_, cm_id_, Clock::now() + opt_.timeout);
    }
    return api_->disconnect(opt_.job_id, opt_.rank);
}

ClientStats SwitchClient::allreduce(std::span<const std::byte> input, std::span<std::byte> output) {
    if (broken_) {
        throw Error("the connection to the switch is closed or failed in an earlier call");
    }
    const Deadline deadline = Clock::now() + opt_.timeout;
    const Chunking chunking =
        chunk_buffers(opt_.elem_type, input, output, opt_.chunk_bytes, opt_.window);
    // From here on a failure leaves WRITEs or results of this call in flight: the session
    // sequence can no longer be trusted.
    broken_ = true;
    const uint32_t chunks = chunking.chunks();
    const uint32_t window = opt_.window;
    const uint32_t send_depth = 2 * window;
    // The HCA only reads the input (access 0); ibv_reg_mr takes a non-const pointer.
    MemoryRegion input_mr(pd_, std::span(const_cast<std::byte*>(input.data()), input.size()), 0);

    ClientStats st;
    st.chunks = chunks;
    st.connect_seconds = connect_seconds_;
    std::vector<bool> have(chunks, false);
    uint32_t next = 0;    // next chunk to WRITE
    uint32_t lowest = 0;  // lowest chunk without its result
    uint32_t sends_outstanding = 0;
    std::array<ibv_wc, 64> wcs;
    const auto t0 = Clock::now();
    auto t_last = t0;
    while (st.results < chunks || sends_outstanding > 0) {
        while (next < chunks && next < lowest + window && sends_outstanding < send_depth) {
            const uint32_t s = seq_.seq(next);
            post_write_imm(qp_.get(), next, input_mr, chunking.offset(next),
                           chunking.length(next), layout_.contribution_addr(s),
                           reply_.area_rkey, contribution_imm(s));
            ++next;
            ++st.writes;
            ++sends_outstanding;
        }
        const size_t n = cq_.wait(wcs, deadline);
        if (n == 0 && Clock::now() >= deadline) {
            throw Error("timed out: " + std::to_string(st.results) + " of " +
                        std::to_string(chunks) + " results in, " +
                        std::to_string(sends_outstanding) + " WRITEs unacknowledged (session "
                        "sequence " + std::to_string(seq_.base()) + "..)");
        }
        for (size_t i = 0; i < n; ++i) {
            const ibv_wc& wc = wcs[i];
            if (wc.status == IBV_WC_REM_OP_ERR) {
                // The switch NAKs a WRITE so when this connection's result side failed there
                // (docs/rdma.md "A rank that fails"): results it sent went unacknowledged.
                throw Error("the switch put this rank's connection of job " +
                            std::to_string(opt_.job_id) +
                            " in error (remote operational error: its results to this rank "
                            "went unacknowledged or were refused); " +
                            std::to_string(st.results) + " of " + std::to_string(chunks) +
                            " results in");
            }
            if (classify_client_completion(wc, kResultRecv) == ClientCompletion::write_done) {
                --sends_outstanding;
                continue;
            }
            const uint32_t imm = ntohl(wc.imm_data);
            if (is_failure_notice(imm)) {
                throw Error("the switch failed job " + std::to_string(opt_.job_id) +
                            "'s session: " + failure_notice_text(imm) + "; " +
                            std::to_string(st.results) + " of " + std::to_string(chunks) +
                            " results in");
            }
            const auto c = seq_.chunk_of(imm, chunks);
            if (!c || have[*c] || (imm & 0xFF) != opt_.world || *c >= next ||
                wc.byte_len != chunking.length(*c)) {
                throw Error("protocol error: result immediate 0x" + [&] {
                    char b[16];
                    std::snprintf(b, sizeof b, "%08x", imm);
                    return std::string(b);
                }() + " with " + std::to_string(wc.byte_len) + " bytes (calls' sequence " +
                                std::to_string(seq_.base() & kSeqMask) + " + " +
                                std::to_string(chunks) + " chunks, world " +
                                std::to_string(opt_.world) + ")");
            }
            const uint32_t s = seq_.seq(*c);
            std::memcpy(output.data() + chunking.offset(*c),
                        staging_.data() + layout_.result_offset(s), chunking.length(*c));
            have[*c] = true;
            ++st.results;
            t_last = Clock::now();
            post_recv(qp_.get(), kResultRecv);
            while (lowest < chunks && have[lowest]) {
                ++lowest;
            }
        }
    }
    seq_.advance(chunks);
    broken_ = false;
    st.seconds = std::chrono::duration<double>(t_last - t0).count();
    st.goodput_gbit_per_s =
        st.seconds > 0 ? static_cast<double>(input.size()) * 8 / st.seconds / 1e9 : 0;
    return st;
}

}  // namespace ina::rdma
