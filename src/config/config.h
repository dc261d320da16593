// SPDX-License-Identifier: Apache-2.0
// The switch's configuration as plain values, and the YAML loader that produces it.
// Pure code: no DPDK state. Every error names file:line:col and what was expected; loading
// either returns a complete, validated Config or errors and nothing else.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "net/addr.h"

namespace YAML {
class Node;
}

namespace ina::config {

// Where a value came from, so later (semantic) errors can point at it.
struct Mark {
    int line = 0;    // 1-based; 0 = unknown (built by API, not from a file)
    int column = 0;  // 1-based
};

// Whether the switch asks the port's device to steer each INA chunk to the RX queue of the lcore
// owning it (rte_flow rules on the UDP source port; docs/operations.md "Chunk steering").
enum class ChunkSteering : uint8_t { automatic, off };
// "auto" | "off": the config's spelling (the status API shows it back).
std::string_view chunk_steering_name(ChunkSteering c);

struct PortConfig {
    std::string name;
    std::string devargs;  // PCI address ("0000:3b:00.0") or vdev string ("net_null0,no-rx=1")
    uint16_t rx_queues = 1;
    uint16_t rx_descriptors = 1024;
    uint16_t tx_descriptors = 1024;
    std::optional<net::MacAddr> mac;  // override the port's own MAC
    uint16_t mtu = 1500;
    bool promiscuous = true;
    std::vector<net::Ipv4Prefix> ipv4;  // interface addresses
    std::vector<net::Ipv6Prefix> ipv6;  // interface addresses (global or unique local)
    std::string l2_group;               // empty: routed port only
    ChunkSteering chunk_steering = ChunkSteering::automatic;
    Mark mark;
};

struct RxQueueRef {
    std::string port;
    uint16_t queue = 0;
    Mark mark;
};

struct LcoreConfig {
    unsigned lcore = 0;
    std::vector<RxQueueRef> rx;
    Mark mark;
};

struct MempoolConfig {
    uint32_t mbufs = 8191;
    uint32_t cache_size = 256;
    uint16_t data_room = 2176;  // RTE_MBUF_DEFAULT_BUF_SIZE
    Mark mark;
};

struct DataplaneConfig {
    uint16_t burst_size = 32;
    uint32_t tx_drain_us = 100;
    // Idle back-off: after idle_loops_before_sleep empty polls, sleep idle_sleep_us per loop.
    // 0 disables it (pure polling, lowest latency).
    uint32_t idle_sleep_us = 0;
    uint32_t idle_loops_before_sleep = 256;
};

struct RouteConfig {
    net::Ipv4Prefix prefix;
    std::optional<net::Ipv4Addr> via;  // gateway; resolved to a port through a connected prefix
    // Alternative gateways, in order of preference, used while `via` is down (its ARP entry
    // expired or it never answered): the route fails over and comes back when `via` answers.
    std::vector<net::Ipv4Addr> backup_via;
    std::string port;                  // device route (no gateway) or explicit egress port
    Mark mark;
};

// A static IPv6 route: to `via` (inside a port's ipv6 prefix) or out of `port` (a device route:
// the destination itself is resolved by ND there).
struct Route6Config {
    net::Ipv6Prefix prefix;
    std::optional<net::Ipv6Addr> via;
    std::string port;
    Mark mark;
};

struct NeighbourConfig {
    net::Ipv4Addr ip;
    net::MacAddr mac;
    std::string port;
    Mark mark;
};

// A `neighbours` entry whose `ip` is IPv6: installed in the IPv6 neighbour table as if Neighbor
// Discovery had learned it, and never replaced by what ND learns.
struct Neighbour6Config {
    net::Ipv6Addr ip;
    net::MacAddr mac;
    std::string port;
    Mark mark;
};

struct L2Config {
    uint32_t mac_ageing_s = 300;
    uint32_t max_fdb_entries = 4096;
};

struct ArpConfig {
    uint32_t neighbour_timeout_s = 1200;  // learned entries are re-resolved before this passes
    uint32_t request_interval_ms = 1000;  // at most one request per unresolved address per interval
    uint32_t max_neighbours = 4096;
};

enum class InaRole : uint8_t { aggregator, root };
enum class RejectAction : uint8_t { forward, drop };
// How a root returns a chunk's result: one unicast copy per worker, or one BIER packet per set
// whose BitString is the root's A-BM (draft-song-ina-00), replicated by the BFRs on the way.
enum class ResultDelivery : uint8_t { unicast, bier };

// Where a root with `results: unicast` sends a worker's results.
struct InaWorkerConfig {
    uint16_t bfr_id = 0;
    net::Ipv4Addr ip;
    Mark mark;
};

// One AllReduce job on this switch: its VAT node (A-BM and role) and its limits.
struct InaJobConfig {
    uint32_t job_id = 0;
    InaRole role = InaRole::aggregator;
    uint16_t bsl_bits = 256;
    uint16_t set_id = 0;
    std::vector<uint16_t> abm;  // BFR-ids this switch aggregates (sorted, in set_id)
    uint8_t op = 0;             // wire value (ina::reduce::Op)
    uint8_t elem_type = 1;      // wire value (ina::reduce::ElemType)
    uint16_t max_elements = 256;
    uint32_t window = 256;        // slot indices per lcore (a power of two)
    uint32_t worker_window = 0;   // the workers' window; 0 = window. Power of two >= window
    uint32_t slot_timeout_ms = 5000;
    // Root only: released results kept per slot index for a worker beyond worker_window that
    // lost one (ina::JobParams::result_cache, 0..2). Unset: 2 at a root, 0 at an aggregator.
    std::optional<uint32_t> result_cache;
    net::Ipv4Addr root;                    // the VAT root's address (data travels toward it)
    std::optional<net::Ipv4Addr> parent;   // next VAT node for partial results (default: root)
    std::optional<net::Ipv4Addr> source;   // source address of emitted packets
    std::vector<InaWorkerConfig> workers;  // root, results: unicast: destinations by BFR-id
    ResultDelivery results = ResultDelivery::unicast;  // root only
    std::vector<std::string> ingress_ports;           // empty: any port
    std::vector<net::Ipv4Prefix> ingress_sources;     // empty: any source
    RejectAction on_reject = RejectAction::forward;   // packets that fail the VAT checks
    // Reproducible float sum (`deterministic: true` or `{fraction_bits: N}`): exact int64 fixed
    // point, src/reduce/README.md. fraction_bits unset: reduce::default_fraction_bits(elem_type).
    bool deterministic = false;
    std::optional<uint8_t> fraction_bits;
    Mark mark;
};

// The fraction bits a deterministic job uses (its own or its type's default); 0 when it is not
// deterministic.
uint8_t ina_fraction_bits(const InaJobConfig& job);

struct InaConfig {
    uint16_t udp_port = 9470;
    // Memory for the chunk tables of all jobs on ONE worker lcore (each lcore has its own).
    uint32_t table_memory_mb = 1024;
    std::vector<InaJobConfig> jobs;
    Mark mark;
};

// Limits the dataplane holds jobs to (checked by validate, so --check-config refuses what a
// reload would refuse).
inline constexpr size_t kMaxInaJobs = 64;
inline constexpr size_t kMaxUnicastWorkers = 32;

// Bytes one lcore's chunk table of `job` takes: 2 entries per slot index, each with two bitmaps
// of the BSL and an accumulator of max_elements (ina::ChunkTable's layout).
uint64_t ina_table_bytes(const InaJobConfig& job);
// The job's result cache depth: as configured, else 2 at a root and 0 at an aggregator.
uint32_t ina_result_cache(const InaJobConfig& job);

// BIER (RFC 8279, RFC 8296 over Ethernet). BFR-ids are global numbers (SI * BSL + BP); every
// list of them here is in the same notation as an INA job's abm ("1-4,7").
struct BierNeighbourConfig {
    net::Ipv4Addr via;               // the neighbour BFR's address on a connected subnet
    std::vector<uint16_t> bfr_ids;   // BFERs reached through it: its F-BM (sorted)
    Mark mark;
};

// One of this BFR's own bits (it is the BFER for it): packets carrying it are decapsulated and
// delivered to `host`, a station on a connected subnet.
struct BierLocalConfig {
    uint16_t bfr_id = 0;
    net::Ipv4Addr host;
    Mark mark;
};

// One BIFT: the forwarding table of one (sub-domain, BSL, set).
struct BiftConfig {
    uint32_t bift_id = 0;  // 20 bits; default: BSL code << 16 | sub-domain << 8 | set_id
    uint16_t bsl_bits = 256;
    uint16_t set_id = 0;
    std::vector<BierNeighbourConfig> neighbours;  // a BFR-id under several = ECMP paths
    std::vector<BierLocalConfig> local;
    Mark mark;
};

// An IPv4 multicast group carried over BIER from this switch (the BFIR) to the BFERs named.
struct BierGroupConfig {
    net::Ipv4Addr group;
    std::vector<uint16_t> bfr_ids;
    uint16_t bsl_bits = 0;  // 0: the BSL of the sub-domain's BIFTs (they must agree)
    Mark mark;
};

struct BierConfig {
    uint8_t sub_domain = 0;
    uint16_t bfr_id = 0;  // BFIR-id of packets this switch encapsulates; 0 = none (transit only)
    uint8_t ttl = 64;     // BIER TTL of packets this switch encapsulates
    std::vector<BiftConfig> bifts;
    std::vector<BierGroupConfig> groups;
    Mark mark;
};

// Who may use the control API (docs/api.md#authentication): a bearer token (read from a file
// when the API starts, or given as its SHA-256) or a verified TLS client certificate's CN.
enum class ApiRole : uint8_t { read, write };

struct ApiClientConfig {
    std::string name;  // in the audit log; never the token
    ApiRole role = ApiRole::read;
    std::string token_file;    // exactly one of these three
    std::string token_sha256;  // 64 hex digits
    std::string cert_cn;       // needs tls.client_ca
    Mark mark;
    bool operator==(const ApiClientConfig& o) const {
        return name == o.name && role == o.role && token_file == o.token_file &&
               token_sha256 == o.token_sha256 && cert_cn == o.cert_cn;
    }
};

struct ApiTlsConfig {
    std::string cert;       // PEM chain; cert and key both or neither
    std::string key;
    std::string client_ca;  // set: every client must present a certificate this CA signed
    bool operator==(const ApiTlsConfig&) const = default;
};

// Every key here is read when the listeners start: a change needs a restart.
struct ControlConfig {
    std::string listen = "127.0.0.1:9464";  // HTTP: /metrics and /api/v1; "" disables it
    std::string metrics_listen;             // GET /metrics only, its own threads; "" = none
    ApiTlsConfig tls;
    std::vector<ApiClientConfig> clients;   // empty: no authentication (loopback only)
    bool allow_unauthenticated = false;     // no clients on a non-loopback listen address
    std::vector<std::string> allowed_origins;  // browser Origins allowed to change things
    std::vector<std::string> allowed_hosts;    // Host names besides IP literals and localhost
    uint64_t max_body_bytes = 1u << 20;  // worst-case YAML costs ~250 bytes of RSS per byte
    uint32_t max_connections = 128;
    uint32_t max_connections_per_client = 16;
    uint32_t threads = 4;
    uint32_t header_timeout_ms = 5000;   // TLS handshake + request line + headers
    uint32_t request_timeout_ms = 30000;  // body + handling + response
    uint32_t idle_timeout_ms = 5000;      // a kept-alive connection with no request
    std::string audit_log;                // "" = the switch's stderr
    Mark mark;
    bool operator==(const ControlConfig& o) const {
        return listen == o.listen && metrics_listen == o.metrics_listen && tls == o.tls &&
               clients == o.clients && allow_unauthenticated == o.allow_unauthenticated &&
               allowed_origins == o.allowed_origins && allowed_hosts == o.allowed_hosts &&
               max_body_bytes == o.max_body_bytes && max_connections == o.max_connections &&
               max_connections_per_client == o.max_connections_per_client &&
               threads == o.threads && header_timeout_ms == o.header_timeout_ms &&
               request_timeout_ms == o.request_timeout_ms &&
               idle_timeout_ms == o.idle_timeout_ms && audit_log == o.audit_log;
    }
};

// "HOST:PORT" (HOST may be "[v6]") split; nullopt if malformed. Empty host is refused.
struct ListenAddress {
    std::string host;
    uint16_t port = 0;
};
std::optional<ListenAddress> parse_listen_address(const std::string& s);
// 127.0.0.0/8, ::1 or "localhost".
bool is_loopback_host(const std::string& host);
// The first line of a token file without trailing blanks; nullopt if it cannot be read.
std::optional<std::string> read_token_file(const std::string& path);

struct Config {
    int version = 1;
    std::string source;  // file name the config was read from, for error messages
    std::vector<std::string> eal_args;
    MempoolConfig mempool;
    std::vector<PortConfig> ports;
    std::vector<LcoreConfig> lcores;
    DataplaneConfig dataplane;
    std::vector<RouteConfig> routes;
    std::vector<Route6Config> ipv6_routes;
    std::vector<NeighbourConfig> neighbours;
    std::vector<Neighbour6Config> neighbours6;  // the IPv6 entries of `neighbours`
    L2Config l2;
    ArpConfig arp;
    InaConfig ina;
    BierConfig bier;
    ControlConfig control;
    // Top-level sections owned by features (src/features/<f>/config*), by key: each an
    // immutable value of the feature's own type, parsed by the section's registered hooks
    // (register_section). Copying a Config shares them; a change replaces the pointer.
    std::map<std::string, std::shared_ptr<const void>, std::less<>> sections;

    template <typename T>
    const T* section(std::string_view key) const {
        auto it = sections.find(key);
        return it == sections.end() ? nullptr : static_cast<const T*>(it->second.get());
    }

    const PortConfig* find_port(std::string_view name) const;
    int port_index(std::string_view name) const;  // -1 if absent
};

// The port with a connected IPv6 prefix holding `a`, or nullptr.
const PortConfig* connected_port6_of(const Config& c, const net::Ipv6Addr& a);

struct Error {
    std::string file;
    Mark mark;
    std::string message;  // "expected ..." or what is wrong
    std::string str() const;  // "file:line:col: message"
};

struct LoadResult {
    std::optional<Config> config;
    std::vector<Error> errors;  // empty iff config is set
    bool ok() const { return config.has_value(); }
    std::string error_text() const;  // one error per line
};

// Parse and validate. `source_name` is used in error messages.
LoadResult load_file(const std::string& path);
LoadResult load_string(const std::string& yaml, const std::string& source_name);

// Parses one INA job (a YAML or JSON mapping with the keys of an `ina.jobs` entry), e.g. the
// body of POST /api/v1/jobs. Errors name `source_name`.
struct JobParseResult {
    std::optional<InaJobConfig> job;
    std::vector<Error> errors;
};
JobParseResult parse_ina_job(const std::string& text, const std::string& source_name);

// The `bier` mapping alone (PUT /api/v1/bier), and one `bier.groups` entry
// (POST /api/v1/bier/groups). Cross-references are checked when the result is applied.
struct BierParseResult {
    std::optional<BierConfig> bier;
    std::vector<Error> errors;
};
BierParseResult parse_bier(const std::string& text, const std::string& source_name);
struct BierGroupParseResult {
    std::optional<BierGroupConfig> group;
    std::vector<Error> errors;
};
BierGroupParseResult parse_bier_group(const std::string& text, const std::string& source_name);

// Cross-reference checks (names resolve, queues polled once, subnets distinct) for a Config
// assembled in code, e.g. by the control API. Marks in the errors are those the values carry.
std::vector<Error> validate(const Config& cfg);
// The checks validate() makes of one route of `cfg` (its port, its gateways), without the
// duplicate-prefix check: what an in-place route change must pass (control_plane.cc).
std::vector<Error> validate_route(const Config& cfg, const RouteConfig& route);

// Fields a running switch cannot change without a restart (EAL, ports' devargs and queues,
// lcores, mempool). Returns a human-readable reason for each difference; empty if a reload of
// `next` over `running` is allowed.
// The BSL the BIFTs give a BFIR's packets: `wanted` if non-zero, else the one BSL all BIFTs share;
// 0 if there is no BIFT or they disagree.
uint16_t bier_bsl_for(const BierConfig& bier, uint16_t wanted);
// The BSL a root job's results use over BIER: the job's own BSL where a BIFT has it (the A-BM
// then goes out unchanged), else bier_bsl_for(bier, 0).
uint16_t bier_job_bsl(const BierConfig& bier, uint16_t job_bsl);
// The BIFT of (sub-domain, bsl_bits, set_id), or nullptr.
const BiftConfig* find_bift(const BierConfig& bier, uint16_t bsl_bits, uint16_t set_id);

std::vector<std::string> restart_required(const Config& running, const Config& next);

// A feature's top-level section: the loader calls `parse` on the value under `key` (absent
// key: the section is absent from Config::sections) and, once the whole document has read
// cleanly, `validate` for cross-references against the rest of the config. Both report through
// the Reader (config/reader.h), so errors name file:line:col. Registered at start-up, before
// any config is loaded (src/app); never on the packet path.
class Reader;
struct SectionHooks {
    const char* key = nullptr;
    std::shared_ptr<const void> (*parse)(Reader& r, const YAML::Node& value) = nullptr;
    void (*validate)(Reader& r, const Config& cfg, const void* section) = nullptr;  // optional
    // The section as JSON text the loader reads back to the same value (GET /api/v1/config).
    std::string (*to_json)(const void* section) = nullptr;  // optional
};
// (key, JSON text) of every section of `c` whose hooks render it.
std::vector<std::pair<std::string, std::string>> sections_json(const Config& c);
// False if the key is taken (a built-in or registered section) or a hook is missing.
bool register_section(const SectionHooks& hooks);

}  // namespace ina::config
