// SPDX-License-Identifier: Apache-2.0
// The `rdma_s2s:` configuration section of the RoCEv2 server-to-server mode (docs/rdma.md
// "Server-to-server mode", docs/configuration.md): jobs whose worker -> root RC connections
// run through this switch, each connection given statically (rank, worker IP and QPN, the
// root's QPN, optionally the worker's starting PSN). Parsed and validated by the config loader
// through its section hooks, so every error names file:line:col and a refused config changes
// nothing. Control plane only.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "config/config.h"
#include "reduce/reduce.h"

namespace ina::features::roce_s2s {

inline constexpr const char* kSectionKey = "rdma_s2s";
inline constexpr uint16_t kMaxConnections = 64;  // contributor bits of a job
inline constexpr uint32_t kMaxWindow = 256;      // = roce::Requester::kMaxMessages
inline constexpr uint32_t kMaxJobs = 16;
inline constexpr uint32_t kDefaultLeaveTimeoutMs = 10000;

struct ConnectionConfig {
    uint16_t rank = 0;
    uint32_t ip = 0;        // the worker's IPv4 address, host order
    uint32_t qpn = 0;       // the worker's QPN
    uint32_t root_qpn = 0;  // the root's QPN of this connection
    std::optional<uint32_t> psn;  // the worker's starting PSN; absent: the first packet seen
    // replicate: true needs what learning reads from the REQ: the PSN the root sends from on
    // this connection (the REQ's Starting PSN) and the worker's result buffer (INAR private
    // data). Required then, refused otherwise.
    std::optional<uint32_t> root_psn;
    std::optional<uint64_t> result_addr;
    std::optional<uint32_t> result_rkey;
    config::Mark mark;
};

struct JobConfig {
    uint32_t id = 0;
    uint32_t root = 0;  // the root's IPv4 address, host order
    uint16_t world = 0;
    reduce::Op op = reduce::Op::sum;
    reduce::ElemType dtype = reduce::ElemType::int32;
    uint32_t chunk_bytes = 1024;
    uint32_t window = 64;
    uint32_t pmtu = 1024;
    uint8_t timeout = 14;   // the aggregate leg's ACK timeout: 4.096 us x 2^timeout, 0 none
    uint8_t retry_cnt = 7;
    // Learn the connections by snooping the RDMA CM exchange (REQ/REP on QP1) instead of
    // `connections`: every rank 1..world is expected through this switch.
    bool learn = false;
    // learn: the ranks whose connections this switch aggregates, ascending (docs/rdma.md
    // "Several switches"): every rank 1..world (the default) on the switch next to the root;
    // the ranks behind it on a downstream switch. A chunk completes when the contributions'
    // counts sum to how many they are; the lowest is this switch's carrier.
    std::vector<uint16_t> ranks;
    config::Mark ranks_mark;
    // Leave the connections (docs/rdma.md "Leaving a job"): finish the chunks held, absorb
    // nothing new, then forward with each connection's PSN/MSN translation. Keeps the state.
    bool drain = false;
    // Result replication (docs/rdma.md "Result replication"): the root WRITEs each result once
    // on the carrier connection; the switch copies it onto every connection's root -> worker
    // leg and forwards the root one ACK: the minimum every worker acknowledged.
    bool replicate = false;
    std::vector<ConnectionConfig> connections;  // ranks ascending after loading
    config::Mark mark;
};

struct S2sConfig {
    std::vector<JobConfig> jobs;
    // A job removed (or replaced) by a config change keeps translating the connections it knew
    // until each ends by a DREQ, or until none of them carried a packet for this long
    // (docs/rdma.md "Leaving a job").
    uint32_t leave_timeout_ms = kDefaultLeaveTimeoutMs;
    // Neighbouring switches (their addresses on the links to this one, host order): a learned
    // connection whose worker is routed through one of them is behind that switch, which
    // aggregates it and replicates its results; this switch copies results onto one connection
    // per such switch (docs/rdma.md "Several switches").
    std::vector<uint32_t> switches;
    std::vector<config::Mark> switch_marks;
};

inline const S2sConfig* s2s_of(const config::Config& c) {
    return c.section<S2sConfig>(kSectionKey);
}

// The loader's hooks for the section (registered by src/app).
config::SectionHooks section_hooks();

// Whether two configs of a job may keep one per-lcore state (identical but for `drain`).
bool same_job(const JobConfig& a, const JobConfig& b);

}  // namespace ina::features::roce_s2s
