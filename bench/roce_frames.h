// SPDX-License-Identifier: Apache-2.0
// Frames ina_bench --roce feeds the pipeline: what a worker's RDMA NIC puts on the wire for the
// RoCEv2 server-to-switch mode (docs/rdma.md), built with the switch's own encoders
// (src/roce/encode.h: IPv4 checksum and ICRC computed), Ethernet to the switch port's MAC.
//   contribution  WRITE_ONLY_WITH_IMM of one chunk into the switch's area at slot s % window,
//                 immediate s << 8 | 1 (session sequence, one contribution);
//   ack           the worker's ACK of the switch's result WRITEs up to a PSN.
#pragma once

#include <cstdint>
#include <cstring>

#include "features/roce/datapath_roce.h"
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
inline size_t roce_contribution(uint8_t* out, size_t capacity, const RoceWorker& w, uint32_t s,
                                const features::roce::JobParams& job, uint64_t area_addr,
                                uint32_t area_rkey, const uint8_t* payload) {
    namespace rc = ina::roce;
    const size_t l2 = rc::write_ethernet(out, capacity, w.switch_mac, w.worker_mac);
    rc::Transmit tx;
    tx.opcode = rc::op::kWriteOnlyImm;
    tx.psn = (w.first_psn + s) & 0xFFFFFF;
    tx.ack_req = true;
    tx.has_reth = true;
    tx.length = job.chunk_bytes;
    tx.reth = {area_addr + uint64_t{s % job.window} * job.chunk_bytes, area_rkey, tx.length};
    tx.has_imm = true;
    tx.imm = (s & 0xFFFFFF) << 8 | 1;
    const size_t l3 = l2 == 0 ? 0
                              : rc::encode_write(out + l2, capacity - l2, w.path, 1, tx, payload);
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

}  // namespace ina::bench
