// SPDX-License-Identifier: Apache-2.0
// Frames ina_bench --roce and --s2s feed the pipeline: what a worker's RDMA NIC puts on the wire
// for the RoCEv2 modes (docs/rdma.md), built with the switch's own encoders
// (src/roce/encode.h: IPv4 checksum and ICRC computed), Ethernet to the switch port's MAC.
//   contribution  WRITE_ONLY_WITH_IMM of one chunk into the switch's area at slot s % window,
//                 immediate s << 8 | 1 (session sequence, one contribution); a chunk larger
//                 than the PMTU as FIRST, MIDDLE.., LAST_WITH_IMM;
//   ack           the worker's ACK of the switch's result WRITEs up to a PSN (or, server-to-
//                 server, the root's ACK of the switch's aggregates: a path from the root);
//   parent result the INA parent's result of chunk s (role: aggregator), unicast to the switch,
//                 as a root with `results: unicast` sends it (the INA stage's own encoder).
#pragma once

#include <cstdint>
#include <cstring>

#include "features/roce/datapath_roce.h"
#include "ina/protocol.h"
#include "pipeline/ina_encode.h"
#include "roce/encode.h"

namespace ina::bench {

// The worker's side of rank r's QP (from its QpParams) and the port MACs around it.
struct RoceWorker {
    ina::roce::Ipv4Path path;  // worker -> switch
    uint32_t first_psn = 0;    // the worker's initial send PSN
    uint8_t switch_mac[6] = {};
    uint8_t worker_mac[6] = {};
};

inline RoceWorker roce_worker(const features::roce::QpParams& q, const uint8_t switch_mac[6],
                              const uint8_t worker_mac[6]) {
    RoceWorker w;
    w.path.src_ip = q.worker_ip;
    w.path.dst_ip = q.switch_ip;
    w.path.src_port = ina::roce::source_port_for_qp(q.worker_qpn);
    w.path.dest_qp = q.switch_qpn;
    w.first_psn = q.worker_psn;
    std::memcpy(w.switch_mac, switch_mac, 6);
    std::memcpy(w.worker_mac, worker_mac, 6);
    return w;
}

// Bytes of a contribution frame carrying `payload` bytes (Ethernet to ICRC).
constexpr size_t roce_contribution_bytes(uint32_t payload) {
    return ina::roce::kEthernetBytes + ina::roce::kIpv4Bytes + ina::roce::kUdpBytes +
           ina::roce::kBthBytes + ina::roce::kRethBytes + ina::roce::kImmBytes + payload +
           ina::roce::write_request_pad_bytes(payload) + ina::roce::kIcrcBytes;
}

// The contribution of session sequence `s` (PSN first_psn + s) into `out`; its length, 0 when
// `capacity` is too small.
// Chunks of `chunk_bytes` into an area of `window` slots (the server-to-server mode's root
// buffer has the same shape).
inline size_t roce_contribution(uint8_t* out, size_t capacity, const RoceWorker& w, uint32_t s,
                                uint32_t chunk_bytes, uint32_t window, uint64_t area_addr,
                                uint32_t area_rkey, const uint8_t* payload) {
    namespace rc = ina::roce;
    const size_t l2 = rc::write_ethernet(out, capacity, w.switch_mac, w.worker_mac);
    rc::Transmit tx;
    tx.opcode = rc::op::kWriteOnlyImm;
    tx.psn = (w.first_psn + s) & 0xFFFFFF;
    tx.ack_req = true;
    tx.has_reth = true;
    tx.length = chunk_bytes;
    tx.reth = {area_addr + uint64_t{s % window} * chunk_bytes, area_rkey, tx.length};
    tx.has_imm = true;
    tx.imm = (s & 0xFFFFFF) << 8 | 1;
    const size_t l3 = l2 == 0 ? 0
                              : rc::encode_write(out + l2, capacity - l2, w.path, 1, tx, payload);
    return l3 == 0 ? 0 : l2 + l3;
}

inline size_t roce_contribution(uint8_t* out, size_t capacity, const RoceWorker& w, uint32_t s,
                                const features::roce::JobParams& job, uint64_t area_addr,
                                uint32_t area_rkey, const uint8_t* payload) {
    return roce_contribution(out, capacity, w, s, job.chunk_bytes, job.window, area_addr,
                             area_rkey, payload);
}

// Packet `i` of the `n` a chunk larger than the PMTU takes (chunk_bytes = n x pmtu): FIRST (RETH
// for the whole chunk), MIDDLE, LAST_WITH_IMM (AckReq, the immediate), PSN first_psn + s x n + i:
// the multi-packet WRITE a worker's NIC sends for session sequence `s`. n = 1 is the
// WRITE_ONLY_WITH_IMM above. Its length, 0 when `capacity` is too small.
inline size_t roce_contribution_packet(uint8_t* out, size_t capacity, const RoceWorker& w,
                                       uint32_t s, uint32_t i, uint32_t n,
                                       const features::roce::JobParams& job, uint64_t area_addr,
                                       uint32_t area_rkey, const uint8_t* chunk) {
    namespace rc = ina::roce;
    if (n == 1) {
        return roce_contribution(out, capacity, w, s, job, area_addr, area_rkey, chunk);
    }
    const size_t l2 = rc::write_ethernet(out, capacity, w.switch_mac, w.worker_mac);
    const uint32_t segment = job.chunk_bytes / n;
    rc::Transmit tx;
    tx.psn = (w.first_psn + s * n + i) & 0xFFFFFF;
    tx.length = segment;
    if (i == 0) {
        tx.opcode = rc::op::kWriteFirst;
        tx.has_reth = true;
        tx.reth = {area_addr + uint64_t{s % job.window} * job.chunk_bytes, area_rkey,
                   job.chunk_bytes};
    } else if (i + 1 < n) {
        tx.opcode = rc::op::kWriteMiddle;
    } else {
        tx.opcode = rc::op::kWriteLastImm;
        tx.ack_req = true;
        tx.has_imm = true;
        tx.imm = (s & 0xFFFFFF) << 8 | 1;
    }
    const size_t l3 = l2 == 0 ? 0
                              : rc::encode_write(out + l2, capacity - l2, w.path, 1, tx,
                                                 chunk + size_t{i} * segment);
    return l3 == 0 ? 0 : l2 + l3;
}

// The worker's ACK of every result PSN up to and including `psn`; its length (0: no room).
inline size_t roce_ack(uint8_t* out, size_t capacity, const RoceWorker& w, uint32_t psn,
                       uint32_t msn) {
    namespace rc = ina::roce;
    const size_t l2 = rc::write_ethernet(out, capacity, w.switch_mac, w.worker_mac);
    const size_t l3 = l2 == 0 ? 0
                              : rc::encode_ack(out + l2, capacity - l2, w.path, 1,
                                               rc::Reply{rc::aeth::kAckUnlimited, psn, msn});
    return l3 == 0 ? 0 : l2 + l3;
}

// Bytes of the parent's result frame of a chunk of `payload` bytes under a P-BM of `bsl_bits`.
constexpr size_t parent_result_bytes(uint32_t payload, uint16_t bsl_bits) {
    return ina::pipeline::kInaFrameHeadBytes + proto::kFixedHeaderBytes + bsl_bits / 8u + payload;
}

// The INA result of chunk key `key` from `parent_ip` to `switch_ip` (Ethernet to `switch_mac`):
// job `job_id`, sum, `elem_type`, P-BM `pbm` (the aggregator's A-BM), the `payload` bytes as
// elements, UDP checksum sealed. Its length, 0 when `capacity` is too small.
inline size_t parent_result(uint8_t* out, size_t capacity, uint32_t job_id, uint32_t key,
                            uint8_t elem_type, const wire::BitString& pbm, uint32_t parent_ip,
                            uint32_t switch_ip, const uint8_t switch_mac[6],
                            const uint8_t* payload, uint32_t payload_bytes) {
    proto::Header h;
    h.type = proto::PacketType::result;
    h.op = 0;  // sum
    h.elem_type = elem_type;
    h.bsl_code = wire::bsl_code_from_bits(pbm.bsl_bits()).value_or(0);
    h.job_id = job_id;
    h.seq = key;
    h.elem_count = static_cast<uint16_t>(payload_bytes / proto::elem_bytes(elem_type));
    const size_t len = ina::pipeline::kInaFrameHeadBytes + h.total_bytes();
    if (len > capacity) {
        return 0;
    }
    uint8_t* at = ina::pipeline::write_ina_headers(out, h, pbm.data(), parent_ip, switch_ip,
                                                   proto::kDefaultUdpPort);
    std::memcpy(at, payload, payload_bytes);
    ina::pipeline::seal_ina_datagram(out);
    const uint8_t parent_mac[6] = {0x02, 0, 0, 0, 0x02, 0x02};
    std::memcpy(out, switch_mac, 6);
    std::memcpy(out + 6, parent_mac, 6);
    return len;
}

}  // namespace ina::bench
