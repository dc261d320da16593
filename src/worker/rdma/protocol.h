// SPDX-License-Identifier: Apache-2.0
// The AllReduce protocol that ina-rdma-worker and ina-rdma-root speak over RDMA RC connections
// (docs/rdma.md, "Worker side (libibverbs)"). Pure code: no verbs calls, so it is unit-tested on
// hosts without RDMA and a switch can share the encoding.
//
// Layout. The tensor is cut into chunks of chunk_bytes (the last one shorter). Worker w WRITEs
// chunk c from its input tensor into the root's contribution area at
//     contribution_base(w) + slot(c) * chunk_bytes,   slot(c) = c mod window,
// with immediate data make_imm(c, 1). The root answers with one WRITE per worker of the reduced
// chunk into that worker's result buffer at result_addr + c * chunk_bytes, immediate
// make_imm(c, world). A worker sends chunk c only once the results of every chunk <= c - window
// are in, so a contribution slot is never overwritten before the root has reduced what it held.
//
// Immediate (32 bits, big-endian on the wire): chunk index in the upper 24 bits, the number of
// contributions the WRITE carries in the lower 8. A worker's own WRITE carries 1; a switch that
// absorbs k workers' WRITEs of one chunk and forwards one aggregate on one of their connections
// sets k, and the root completes a chunk when the counts it received for it sum to world,
// whichever connections delivered them.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>

#include "reduce/reduce.h"

namespace ina::rdma {

inline constexpr uint32_t kMagic = 0x494E4152;  // "INAR"
inline constexpr uint8_t kVersion = 1;
inline constexpr uint32_t kMaxChunks = 1u << 24;    // chunk index: 24 bits of the immediate
inline constexpr uint32_t kMaxWorld = 255;          // contribution count: 8 bits
// Server-to-switch: the switch's largest chunk (its rdma jobs' chunk_bytes limit).
inline constexpr uint32_t kMaxSwitchChunkBytes = 65536;
// rdma_cm over InfiniBand/RoCE carries at most 56 bytes of private data in a connect request
// (the CM REQ's 92 minus rdma_cm's own 36-byte header) and 196 in an accept.
inline constexpr size_t kMaxConnectPrivateData = 56;

enum class Mode : uint8_t { server_to_server = 1, server_to_switch = 2 };

// Element type and op by the names reduce::to_string gives them ("int32", "sum", ...).
std::optional<reduce::ElemType> parse_elem_type(std::string_view name);
std::optional<reduce::Op> parse_op(std::string_view name);

// --- immediate data ------------------------------------------------------------------------

struct Imm {
    uint32_t chunk = 0;         // < kMaxChunks
    uint8_t contributions = 0;  // how many workers' data the WRITE carries (1..world)
};

// Host-order value; the caller converts it with htonl for ibv_send_wr::imm_data.
constexpr uint32_t make_imm(uint32_t chunk, uint8_t contributions) {
    return (chunk << 8) | contributions;
}
constexpr Imm parse_imm(uint32_t host_order) {
    return Imm{host_order >> 8, static_cast<uint8_t>(host_order & 0xFF)};
}

// --- chunking ------------------------------------------------------------------------------

// How a tensor of `tensor_bytes` is cut into chunks. chunk_bytes must be a positive multiple of
// the element size; `make` checks everything and says what is wrong.
struct Chunking {
    uint64_t tensor_bytes = 0;
    uint32_t chunk_bytes = 0;
    uint32_t window = 0;  // chunks in flight per worker = contribution slots per worker

    static std::optional<Chunking> make(reduce::ElemType t, uint64_t elements,
                                        uint32_t chunk_bytes, uint32_t window, std::string* why);

    uint32_t chunks() const {
        return static_cast<uint32_t>((tensor_bytes + chunk_bytes - 1) / chunk_bytes);
    }
    uint64_t offset(uint32_t chunk) const { return uint64_t{chunk} * chunk_bytes; }
    uint32_t length(uint32_t chunk) const {
        const uint64_t rest = tensor_bytes - offset(chunk);
        return rest < chunk_bytes ? static_cast<uint32_t>(rest) : chunk_bytes;
    }
    uint32_t slot(uint32_t chunk) const { return chunk % window; }
    // Bytes of contribution area one worker needs at the root.
    uint64_t area_bytes() const { return uint64_t{window} * chunk_bytes; }
};

// --- private data of the rdma_cm exchange --------------------------------------------------
// Fixed big-endian layouts (not C structs on the wire: the peer may be another compiler or a
// switch). A receiver accepts any length >= the encoded size (rdma_cm pads private data with
// zeros) and rejects an unknown magic or version.

// Worker -> root, in rdma_connect's private data.
struct ConnectRequest {
    uint8_t version = kVersion;
    Mode mode = Mode::server_to_server;
    reduce::ElemType elem_type = reduce::ElemType::fp32;
    reduce::Op op = reduce::Op::sum;
    uint32_t job_id = 0;
    uint16_t rank = 0;        // the worker's BFR-id, 1..world
    uint16_t world = 0;       // workers in the job
    uint64_t elements = 0;
    uint32_t chunk_bytes = 0;
    uint32_t window = 0;
    uint64_t result_addr = 0;  // where the root WRITEs results (the worker's output tensor)
    uint32_t result_rkey = 0;
    // A worker that comes back into the AllReduce it left (docs/rdma.md "A worker that
    // reconnects alone"): every chunk below `resume_from` it WROTE and saw acknowledged (its
    // contribution is at the root, or in a switch that ACKed it as the root), none from there
    // on. Absent (false, 0) in a first connection and in an older worker's shorter request.
    bool resuming = false;
    uint32_t resume_from = 0;
    // Resuming: every result below this chunk is in (the worker's lowest chunk without its
    // result). The root writes the rank every result from there it holds, whatever it saw
    // acknowledged: with a replicating switch an ACK on the carrier is the switch's aggregate
    // and, once the rank's old connection ended, no proof the rank has the result. 0 (write
    // every result) in an older worker's request.
    uint32_t results_from = 0;

    // Bytes 44..51: flags (bit 0 resuming), 3 reserved, resume_from; 52..55: results_from (the
    // whole 56 bytes a REQ carries). A decoder accepts the 44-byte base layout (an older worker:
    // not resuming) and the 52-byte one (results_from 0).
    static constexpr size_t kBaseSize = 44;
    static constexpr size_t kResumeSize = 52;
    static constexpr size_t kEncodedSize = 56;
    std::array<std::byte, kEncodedSize> encode() const;
    // nullopt with *why set on a short buffer, bad magic/version or unknown enum values.
    static std::optional<ConnectRequest> decode(std::span<const std::byte> data, std::string* why);
    // The job's parameters (everything but rank and the result buffer) equal.
    bool same_job(const ConnectRequest& o) const;
};

// Why a root refuses a connection (carried in rdma_reject's private data).
enum class RejectReason : uint8_t {
    malformed = 1,     // private data did not decode
    unsupported = 2,   // mode or version this root does not serve
    wrong_job = 3,     // parameters differ from the job the root serves
    bad_rank = 4,      // rank outside 1..world or already connected
    no_resources = 5,  // the root could not register memory or create the QP
};
std::string_view to_string(RejectReason r);

// Root -> worker, in rdma_accept's private data (or rdma_reject's with status != 0).
struct ConnectReply {
    uint8_t version = kVersion;
    uint8_t status = 0;  // 0 = accepted, else a RejectReason
    uint32_t job_id = 0;
    uint64_t contribution_addr = 0;  // this worker's area: window slots of chunk_bytes
    uint32_t contribution_rkey = 0;
    // The answer to a resuming request: the root took the rank back into the running AllReduce
    // (`resumed`), and the worker WRITEs again from chunk `resume_chunk`; the root WRITEs it
    // every result it has not seen acknowledged on one of the rank's connections. A switch on
    // the path reads `resumed` in the CM REP: the connection continues the session it knows.
    bool resumed = false;
    uint32_t resume_chunk = 0;
    // Resumed: which chunks the root has complete, as it answers (the rank's old connection
    // ended first, its completions taken): every chunk below `complete_from`, and chunk
    // complete_from + i where bit i of `complete` is set (byte i / 8, bit i % 8 from the least
    // significant). A switch whose aggregates on a resuming carrier's old connection were not
    // acknowledged reads it to send again exactly the ones the root lacks (docs/rdma.md "A
    // worker that reconnects alone").
    static constexpr uint32_t kCompleteBits = 256;
    bool has_complete = false;  // flags bit 1: complete_from and complete say it
    uint32_t complete_from = 0;
    std::array<uint8_t, kCompleteBits / 8> complete{};
    bool root_has(uint32_t chunk) const {
        const uint32_t i = chunk - complete_from;
        return has_complete && (chunk < complete_from ||
                                (i < kCompleteBits && (complete[i / 8] >> (i % 8) & 1) != 0));
    }

    // Bytes 24..31: flags (bit 0 resumed, bit 1 has_complete), 3 reserved, resume_chunk; 32..35
    // complete_from,
    // 36..67 complete. A decoder accepts the 24-byte base layout (an older root: not resumed)
    // and the 32-byte one (nothing known complete).
    static constexpr size_t kBaseSize = 24;
    static constexpr size_t kResumeSize = 32;
    static constexpr size_t kEncodedSize = 68;
    std::array<std::byte, kEncodedSize> encode() const;
    static std::optional<ConnectReply> decode(std::span<const std::byte> data, std::string* why);
};

}  // namespace ina::rdma
