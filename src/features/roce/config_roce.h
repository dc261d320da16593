// SPDX-License-Identifier: Apache-2.0
// The `rdma:` configuration section of the RoCEv2 server-to-switch mode (docs/rdma.md,
// docs/configuration.md): jobs, and per job the QPs set up statically (`qps:`) or by the API
// (POST /api/v1/rdma/jobs/{id}/connect adds one to the running config). Parsed and validated
// by the config loader through its section hooks, so every error names file:line:col and a
// refused config changes nothing. Control plane only.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "config/config.h"
#include "reduce/fixed_point.h"
#include "reduce/reduce.h"

namespace ina::features::roce {

inline constexpr const char* kSectionKey = "rdma";
inline constexpr uint16_t kMaxWorld = 64;        // ranks of a job (one contributor bit each)
inline constexpr uint32_t kMaxWindow = 256;      // = roce::Requester::kMaxMessages
// A chunk above the pmtu is a multi-packet WRITE both ways (a multiple of the pmtu; the switch
// stages a rank's message per QP, so this bounds that memory: 64 QPs x 64 KiB).
inline constexpr uint32_t kMaxChunkBytes = 65536;
// A deterministic aggregator's partial segment in int64 fixed point: one INA packet's elements.
inline constexpr uint32_t kMaxFixedSegmentBytes = 4096;
inline constexpr uint32_t kMaxRdmaJobs = 16;
// The switch's contribution area is virtual: every QP is told the same address and key.
inline constexpr uint64_t kAreaAddr = 4096;
inline constexpr uint32_t kAreaRkey = 0x12345678;
inline constexpr uint32_t kFirstSwitchQpn = 0x100;

struct QpConfig {
    uint16_t rank = 0;
    uint32_t ip = 0;            // the worker's IPv4 address, host order (0 when ip6 is set)
    // The worker's IPv6 address when it is an IPv6 one (its RoCEv2 GID): the QP runs over IPv6.
    std::optional<net::Ipv6Addr> ip6;
    // The switch's address for this QP (`source`), of the worker's family. IPv6 workers: one
    // of a port's IPv6 addresses whose prefix holds ip6. IPv4 workers: one of the IPv4
    // addresses of the port whose subnet holds ip (a secondary address, on that subnet or
    // another). Empty: the first address whose prefix or subnet holds the worker. The RDMA CM
    // sets it to the address the worker's REQ was sent to (rxe accepts a connected QP's
    // packets only from the address it connected to).
    std::optional<net::Ipv6Addr> source6;
    std::optional<net::Ipv4Addr> source4;
    config::Mark source_mark;
    uint32_t qpn = 0;           // the worker's QPN
    uint32_t psn = 0;           // the worker's initial send PSN
    uint32_t switch_qpn = 0;
    uint32_t switch_psn = 0;
    uint64_t result_addr = 0;
    uint32_t result_rkey = 0;
    uint64_t result_length = 0;
    uint8_t timeout = 14;       // the switch requester's QP attributes
    uint8_t retry_cnt = 7;
    uint8_t rnr_retry = 7;
    bool from_api = false;      // connected through the API (kept across reloads of the file)
    config::Mark mark;
};

// root: every rank's result is written when all ranks contributed (the job is its own VAT
// root). aggregator: the complete chunk goes up as one INA contribution to `parent` and the
// parent's INA result is what the ranks get (docs/rdma.md "Aggregator role").
enum class Role : uint8_t { root, aggregator };

struct JobConfig {
    uint32_t id = 0;  // also the job's INA job id towards the parent (aggregator)
    uint16_t world = 0;
    reduce::Op op = reduce::Op::sum;
    reduce::ElemType dtype = reduce::ElemType::fp32;
    uint32_t chunk_bytes = 1024;
    uint32_t window = 64;
    uint32_t pmtu = 1024;
    std::vector<QpConfig> qps;
    // Aggregator role only (INA job field names, docs/configuration.md "rdma").
    Role role = Role::root;
    uint32_t parent = 0;              // host order: the INA parent (a switch or the root)
    uint32_t source = 0;              // 0: the egress interface's address
    uint16_t bsl_bits = 256;          // of the P-BM
    uint16_t set_id = 0;
    std::vector<uint16_t> abm;        // BFR-ids, sorted: rank r stands for abm[r - 1]
    uint32_t partial_timeout_ms = 100;  // a partial without result is sent again after this
    // Reproducible float sum (`deterministic`, as an INA job's): the slots accumulate exact
    // int64 fixed point, so a result does not depend on the order the ranks' chunks arrived in
    // (src/reduce/README.md "Deterministic mode"); an aggregator's partials go up as int64 fixed
    // point, for a deterministic INA parent. fraction_bits unset: the dtype's default.
    bool deterministic = false;
    std::optional<uint8_t> fraction_bits;
    config::Mark mark;

    // The fraction bits the job's slots use: 0 when it is not deterministic.
    uint8_t fixed_fraction_bits() const {
        return deterministic ? fraction_bits.value_or(static_cast<uint8_t>(
                                   reduce::default_fraction_bits(dtype)))
                             : 0;
    }

    const QpConfig* qp_of_rank(uint16_t rank) const {
        for (const auto& q : qps) {
            if (q.rank == rank) {
                return &q;
            }
        }
        return nullptr;
    }
};

// The worker's address as text (IPv4 or IPv6), for errors and JSON.
std::string worker_ip_text(const QpConfig& q);

// An IPv6 QP's switch address in config `c`: its `source` when that is one of a port's IPv6
// addresses whose prefix holds the worker, else (no source) the first port address whose
// prefix holds it; nullopt when there is none (or the source is not such an address).
std::optional<net::Ipv6Addr> qp_source6(const config::Config& c, const QpConfig& q);

// An IPv4 QP's switch address in config `c` (host order): its `source` when that is an IPv4
// address of the port whose subnet holds the worker, else (no source) the address whose subnet
// holds it; nullopt when there is none (or the source is not such an address).
std::optional<uint32_t> qp_source4(const config::Config& c, const QpConfig& q);

// The RDMA CM's listener port when the section names none (ina-rdma-root's default).
inline constexpr uint16_t kDefaultCmPort = 7471;

struct RdmaConfig {
    std::vector<JobConfig> jobs;
    // The port a worker's rdma_connect() names (REQ service ID 0x0106 << 16 | port); 0: the
    // switch answers no RDMA CM (QP1 packets counted cm_unsupported).
    uint16_t cm_port = kDefaultCmPort;
    const JobConfig* job(uint32_t id) const {
        for (const auto& j : jobs) {
            if (j.id == id) {
                return &j;
            }
        }
        return nullptr;
    }
};

inline const RdmaConfig* rdma_of(const config::Config& c) {
    return c.section<RdmaConfig>(kSectionKey);
}

// The loader's hooks for the section (registered by src/app).
config::SectionHooks section_hooks();

// Whether two configs of a job need different per-lcore state (everything but its QPs).
bool same_job(const JobConfig& a, const JobConfig& b);
bool same_qp(const QpConfig& a, const QpConfig& b);

// The body of POST /api/v1/rdma/jobs/{id}/connect (docs/api.md).
struct ConnectRequest {
    // The worker's side of the QP (rank, ip, qpn, psn, result buffer, requester attributes);
    // the switch's QPN and PSN are chosen by the connect.
    QpConfig qp;
    // What the worker expects of the job (must equal the job's).
    uint32_t pmtu = 0;
    uint32_t chunk_bytes = 0;
    uint32_t window = 0;
    reduce::ElemType dtype = reduce::ElemType::fp32;
    reduce::Op op = reduce::Op::sum;
    uint16_t world = 0;
};
struct ConnectParse {
    std::optional<ConnectRequest> request;
    std::vector<config::Error> errors;
};
ConnectParse parse_connect(const std::string& text, const std::string& source_name);

}  // namespace ina::features::roce
