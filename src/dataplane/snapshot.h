// SPDX-License-Identifier: Apache-2.0
// The forwarding state that worker lcores read. The control plane builds a complete Snapshot
// for a config change, publishes it with one pointer store, and frees the previous one only
// after an RCU (QSBR) grace period, so a worker never sees a half-built table and never takes a
// lock. Learned state is not rebuilt: neighbours and the FDB live in the control plane's
// ForwardingTables (lock-free rte_hash, QSBR-reclaimed), which every snapshot points at, and a
// gateway's resolution is one word in its next hop, stored in place (NextHop::station). API
// route changes are in place too: the published snapshot's LPM and next-hop table take them
// (add_route, remove_route; tbl8 groups reclaimed through QSBR); a reload builds a new table.
#pragma once

#include <rte_ether.h>

#include <array>
#include <atomic>
#include <bit>
#include <cstddef>
#include <cstring>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "dataplane/counters.h"
#include "dataplane/events.h"
#include "dataplane/forwarding_tables.h"
#include "net/addr.h"
#include "wire/bitstring.h"

struct rte_lpm;
struct rte_lpm6;
struct rte_rcu_qsbr;
struct rte_hash;

namespace ina::compile {
class SnapshotBuilder;  // src/compile/: makes snapshots from the config
}

namespace ina::dp {

inline constexpr uint8_t kMaxAddrsPerPort = 8;
inline constexpr int16_t kNoGroup = -1;

struct PortView {
    bool present = false;
    bool promiscuous = true;
    rte_ether_addr mac{};
    uint16_t mtu = 1500;
    int16_t l2_group = kNoGroup;
    uint8_t n_addrs = 0;
    std::array<net::Ipv4Prefix, kMaxAddrsPerPort> addrs{};

    // The MAC (bits 0..47, in wire order on a little-endian host) and the MTU (bits 48..63) in
    // one load: the routing fast path needs both for every packet (mtu_of, and
    // store_station_and_port_macs for the MAC).
    uint64_t mac_and_mtu() const {
        if constexpr (std::endian::native == std::endian::little) {
            uint64_t w;
            std::memcpy(&w, &mac, sizeof w);  // mac, then mtu: the static_assert below
            return w;
        } else {
            uint64_t w = uint64_t{mtu} << 48;
            for (int i = 0; i < RTE_ETHER_ADDR_LEN; ++i) {
                w |= uint64_t{mac.addr_bytes[i]} << (8 * i);
            }
            return w;
        }
    }
    static constexpr uint16_t mtu_of(uint64_t mac_and_mtu) {
        return static_cast<uint16_t>(mac_and_mtu >> 48);
    }

    // The interface address on this port whose subnet contains `ip` (host order), or nullptr.
    const net::Ipv4Prefix* subnet_of(uint32_t ip) const {
        for (uint8_t i = 0; i < n_addrs; ++i) {
            if (addrs[i].contains(net::Ipv4Addr{ip})) {
                return &addrs[i];
            }
        }
        return nullptr;
    }
    bool owns(uint32_t ip) const {
        for (uint8_t i = 0; i < n_addrs; ++i) {
            if (addrs[i].addr.value == ip) {
                return true;
            }
        }
        return false;
    }

    // IPv6 interface addresses (routed ports only).
    uint8_t n_addrs6 = 0;
    std::array<net::Ipv6Prefix, kMaxAddrsPerPort> addrs6{};
    // The IPv6 interface address on this port whose prefix contains `ip6`, or nullptr.
    const net::Ipv6Prefix* subnet6_of(const uint8_t* ip6) const {
        net::Ipv6Addr a;
        std::memcpy(a.bytes.data(), ip6, 16);
        for (uint8_t i = 0; i < n_addrs6; ++i) {
            if (addrs6[i].contains(a)) {
                return &addrs6[i];
            }
        }
        return nullptr;
    }
    bool owns6(const uint8_t* ip6) const {
        for (uint8_t i = 0; i < n_addrs6; ++i) {
            if (std::memcmp(addrs6[i].addr.bytes.data(), ip6, 16) == 0) {
                return true;
            }
        }
        return false;
    }
    // True if `ip6` is the solicited-node multicast address (ff02::1:ffXX:XXXX, RFC 4291
    // 2.7.1) of one of this port's addresses.
    bool solicited_node6(const uint8_t* ip6) const {
        static constexpr uint8_t kPrefix[13] = {0xff, 0x02, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0xff};
        if (std::memcmp(ip6, kPrefix, 13) != 0) {
            return false;
        }
        for (uint8_t i = 0; i < n_addrs6; ++i) {
            if (std::memcmp(addrs6[i].addr.bytes.data() + 13, ip6 + 13, 3) == 0) {
                return true;
            }
        }
        return false;
    }
    // True if `mac` is 33:33:ff:XX:XX:XX for one of this port's addresses (RFC 2464 7).
    bool solicited_node_mac6(const rte_ether_addr& dst) const {
        const uint8_t* b = dst.addr_bytes;
        if (b[0] != 0x33 || b[1] != 0x33 || b[2] != 0xff) {
            return false;
        }
        for (uint8_t i = 0; i < n_addrs6; ++i) {
            if (std::memcmp(addrs6[i].addr.bytes.data() + 13, b + 3, 3) == 0) {
                return true;
            }
        }
        return false;
    }
};
static_assert(offsetof(PortView, mtu) == offsetof(PortView, mac) + RTE_ETHER_ADDR_LEN,
              "mac_and_mtu loads both in one word");

enum class NextHopKind : uint8_t {
    connected,  // destination is on a connected subnet: resolve the destination itself
    gateway,    // resolve `gateway`
    local,      // one of the switch's own addresses
    broadcast,  // a connected subnet's broadcast address: never forwarded (RFC 2644)
};

// The LPM's next-hop field is 24 bits wide: no snapshot holds more next hops.
inline constexpr uint32_t kMaxNextHops = 1u << 24;

// One next hop, shared by every route through it (the builder makes one per gateway and port),
// so one ARP answer resolves every route through that gateway with one store.
struct NextHop {
    NextHopKind kind = NextHopKind::connected;
    uint32_t gateway = 0;  // host order, for kind == gateway
    uint16_t port = 0;     // port the next hop is reached through (ARP is sent there)
    // kind == gateway: the gateway's MAC and port (pack_station), 0 while unresolved. The
    // control plane stores it in place when the gateway is learned, changes or expires; readers
    // load it once per packet, so they see one whole station or none.
    alignas(std::atomic_ref<uint64_t>::required_alignment) mutable uint64_t station = 0;

    uint64_t station_word() const {
        return std::atomic_ref<uint64_t>(station).load(std::memory_order_relaxed);
    }
    // Control-plane thread only.
    void set_station(uint64_t w) const {
        std::atomic_ref<uint64_t>(station).store(w, std::memory_order_relaxed);
    }
};

// The next hops of one snapshot: a fixed array allocated once with the route table, so adding
// a next hop in place never moves the ones workers read. A slot is written before any route
// names it (the LPM's entry stores are releases), and is never reused while the snapshot lives:
// a route deleted in place leaves its next hop for later routes through the same gateway.
class NextHopTable {
public:
    static constexpr uint32_t kNone = ~uint32_t{0};

    // Room for `capacity` next hops (at most kMaxNextHops). False when out of memory.
    bool reserve(uint32_t capacity);
    const NextHop& operator[](uint32_t i) const { return slots_[i]; }
    uint32_t size() const { return size_; }
    uint32_t capacity() const { return capacity_; }
    // Control-plane thread only. The index of the next hop of `nh`'s kind, gateway and port,
    // added (with `nh`'s station) when there is none yet; kNone when the table is full.
    uint32_t intern(const NextHop& nh);
    // Indices of the next hops of kind gateway: whose station a neighbour change stores.
    const std::vector<uint32_t>& gateways() const { return gateways_; }

private:
    std::unique_ptr<NextHop[]> slots_;
    uint32_t size_ = 0;
    uint32_t capacity_ = 0;
    std::map<std::tuple<NextHopKind, uint32_t, uint16_t>, uint32_t> index_;
    std::vector<uint32_t> gateways_;
};

// An IPv6 next hop. Routes are few and change only with the config (a reload builds a new
// table), so each route gets its own entry and a gateway's MAC is looked up in the IPv6
// neighbour table per packet, which ND changes in place.
struct NextHop6 {
    NextHopKind kind = NextHopKind::connected;  // connected, gateway or local
    std::array<uint8_t, 16> gateway{};          // kind == gateway, network order
    uint16_t port = 0;                          // where the next hop is resolved (ND)
};

struct L2Group {
    std::string name;
    uint16_t n_ports = 0;  // one past the highest DPDK port id in use
    std::array<uint16_t, kMaxPorts> ports{};
};

// What the control plane knows beyond the config: learned neighbours and MAC entries.
struct DynamicNeighbour {
    uint32_t ip = 0;
    rte_ether_addr mac{};
    uint16_t port = 0;
};
struct DynamicFdbEntry {
    rte_ether_addr mac{};
    uint16_t group = 0;
    uint16_t port = 0;
    uint32_t index = 0;
};

// The schema's limits (config.h); compile/snapshot_build.cc asserts they agree.
inline constexpr size_t kMaxInaJobs = 64;
inline constexpr size_t kMaxUnicastWorkers = 32;  // unicast root fan-out

// BIER (RFC 8279 / RFC 8296). Limits keep per-lcore counters and per-packet loops bounded.
inline constexpr size_t kMaxBifts = kBierCounterSlots;
inline constexpr size_t kMaxBierNeighbours = kBierNeighbourSlots;
inline constexpr size_t kMaxBierPlanes = 16;  // ECMP: lcm of the path counts of any bit

// Where a BIER copy or a decapsulated delivery goes: an adjacent station resolved to a MAC and
// port at build time, or (not yet resolved) the port an ARP request for it goes out of.
struct BierAdjacency {
    uint32_t ip = 0;  // host order
    bool resolved = false;
    uint16_t port = 0;  // out port when resolved; else where to resolve it
    rte_ether_addr dst_mac{};
};

// One BIFT: (sub-domain, BSL, set) -> per neighbour F-BM, per ECMP plane; and the own bits.
// Byte arrays hold BitStrings of bs_bytes each, in wire order (wire/bitstring.h).
struct BiftView {
    uint32_t bift_id = 0;
    uint16_t bsl_bits = 0;
    uint16_t bs_bytes = 0;
    uint8_t bsl_code = 0;
    uint16_t set_id = 0;
    uint16_t counter_slot = 0;  // index into LcoreCounters::bier (stable across reloads)
    uint16_t n_neighbours = 0;
    std::array<BierAdjacency, kMaxBierNeighbours> neighbours{};
    uint16_t n_planes = 1;  // a packet uses plane entropy % n_planes
    // fbm[(plane * n_neighbours + k) * bs_bytes ...]: the bits neighbour k takes in that plane.
    // Within a plane the F-BMs are disjoint, so one pass over the neighbours is RFC 8279's loop.
    std::vector<uint8_t> fbm;
    std::vector<uint8_t> local_mask;      // own bits (this BFR is their BFER)
    std::vector<uint8_t> reachable_mask;  // own bits and every bit some neighbour takes
    std::vector<uint16_t> local_bp;       // own bits' BPs, ascending
    std::vector<BierAdjacency> local_host;  // parallel to local_bp: where each is delivered

    const uint8_t* fbm_of(uint16_t plane, uint16_t k) const {
        return fbm.data() + (size_t{plane} * n_neighbours + k) * bs_bytes;
    }
};

// What a BFIR sends for one destination set: one packet per BIFT (set) with this BitString.
struct BierTarget {
    uint16_t bift = 0;  // index into Snapshot::bifts
    wire::BitString bits;
};

struct BierGroupView {
    uint32_t group = 0;  // host order
    std::vector<BierTarget> targets;
};

// Features the classifier hands packets to (pipeline/feature_stages.h holds their stages). A packet's
// feature handle is kFeatureNone when no binding claimed it.
inline constexpr uint8_t kFeatureNone = 0;
inline constexpr uint8_t kFeatureIna = 1;
inline constexpr uint8_t kMaxFeatures = 8;
inline constexpr uint8_t kIpProtoUdp = 17;

// Which frames a binding applies to: IPv4 this switch routes (or terminates), and IPv4 it
// bridges inside an L2 group (RDMA between two servers of one group must reach its feature too);
// IPv6 to the switch's MAC (routed or terminated). The address family is part of the scope, so a
// binding takes IPv6 only when it says so: a feature that parses IPv4 headers (INA, the RoCE
// server-to-server mode) never sees IPv6, which goes on untouched. Bridged IPv6 takes no feature.
inline constexpr uint8_t kScopeRouted = 1;
inline constexpr uint8_t kScopeBridged = 2;
inline constexpr uint8_t kScopeRouted6 = 4;

struct FeatureBinding {
    uint8_t proto = 0;    // IP protocol
    uint8_t feature = 0;  // kFeature*, below kMaxFeatures
    uint8_t scopes = 0;   // kScope* bits
    uint16_t port = 0;    // L4 destination port, host order
    // Shares (proto, port) with other sharing bindings (the two RoCEv2 modes on UDP 4791): a
    // packet goes to the first of them bound for its path, and what that feature passes goes to
    // the next one (pipeline::FeatureEdge::next), in binding order. A binding that does not
    // share owns its (proto, port) alone. What a feature passes leaves after what it took in the
    // same run, so a feature with another after it passes whole flows (the RoCE endpoint: all
    // of a destination that is not the switch) and a flow keeps its order.
    bool shared = false;
};

// The registration table: (protocol, destination port) -> feature, filled when the snapshot is
// built. A handful of entries (one per feature and port), so a scan of two cache lines beats a
// hash; `scopes` (every binding's, or-ed) lets a path no binding uses skip the lookup.
struct FeatureTable {
    static constexpr size_t kMaxBindings = 8;
    uint8_t n = 0;
    uint8_t scopes = 0;
    // Per feature, the scopes on which a port it shares has a binding after it: its stage then
    // passes to `next` on that path (the last of a chain passes where the packet was going).
    std::array<uint8_t, kMaxFeatures> followed{};
    std::array<FeatureBinding, kMaxBindings> bindings{};

    // False when the table is full, the feature is out of range, or (proto, port) is taken:
    // bound already by a binding that does not share it (or by this one), or this one does not
    // share.
    bool bind(const FeatureBinding& b) {
        if (n >= kMaxBindings || b.feature == kFeatureNone || b.feature >= kMaxFeatures) {
            return false;
        }
        for (size_t i = 0; i < n; ++i) {
            const FeatureBinding& o = bindings[i];
            if (o.proto == b.proto && o.port == b.port &&
                (!o.shared || !b.shared || o.feature == b.feature)) {
                return false;
            }
        }
        for (size_t i = 0; i < n; ++i) {
            const FeatureBinding& o = bindings[i];
            if (o.proto == b.proto && o.port == b.port) {
                followed[o.feature] = static_cast<uint8_t>(followed[o.feature] |
                                                           (o.scopes & b.scopes));
            }
        }
        bindings[n++] = b;
        scopes = static_cast<uint8_t>(scopes | b.scopes);
        return true;
    }
    uint8_t lookup(uint8_t proto, uint16_t port, uint8_t scope) const {
        for (size_t i = 0; i < n && i < kMaxBindings; ++i) {
            const FeatureBinding& b = bindings[i];
            if (b.port == port && b.proto == proto && (b.scopes & scope) != 0) {
                return b.feature;
            }
        }
        return kFeatureNone;
    }
    // The feature bound to (proto, port) for `scope` after `feature` (what `feature` passed
    // goes there), or kFeatureNone.
    uint8_t next_after(uint8_t proto, uint16_t port, uint8_t scope, uint8_t feature) const {
        bool after = false;
        for (size_t i = 0; i < n && i < kMaxBindings; ++i) {
            const FeatureBinding& b = bindings[i];
            if (b.port != port || b.proto != proto || (b.scopes & scope) == 0) {
                continue;
            }
            if (after) {
                return b.feature;
            }
            after = b.feature == feature;
        }
        return kFeatureNone;
    }
};

struct InaJobHandler {
    uint32_t job_id = 0;
    uint8_t feature = kFeatureNone;
};

// One INA job as the packet path sees it (addresses in host order).
struct InaJobView {
    uint32_t job_id = 0;
    // Where this lcore's chunk table of the job sits (LcoreContext::feature_state), set by the
    // control plane when it publishes; kNoStateSlot until then.
    uint16_t state_slot = kNoStateSlot;
    bool is_root = false;
    bool drop_rejected = false;   // on_reject: drop (else forward unmodified)
    wire::BitString abm;
    uint8_t bsl_code = 0;
    uint8_t set_id = 0;
    uint8_t op = 0;
    uint8_t elem_type = 0;
    uint16_t max_elements = 0;
    uint32_t parent = 0;          // where partial results go (aggregator)
    uint32_t source = 0;          // source address of emitted packets (0: egress interface's)
    uint32_t ingress_ports = 0;   // bit per DPDK port id; 0 = any
    std::vector<net::Ipv4Prefix> ingress_sources;  // empty = any
    uint16_t n_workers = 0;
    std::array<uint32_t, kMaxUnicastWorkers> worker_ip{};  // root: result destinations
    bool results_bier = false;            // root: results go out over BIER, not unicast
    // True when `ip` is one of the root's configured (unicast) workers.
    bool is_worker(uint32_t ip) const {
        for (uint16_t w = 0; w < n_workers; ++w) {
            if (worker_ip[w] == ip) {
                return true;
            }
        }
        return false;
    }
    std::vector<BierTarget> bier_targets;  // root with results_bier: one per set of the A-BM

    // Which ingress rule a contribution from `src` on `port` breaks: 1 the port, 2 the source,
    // 0 none.
    int ingress_violation(uint16_t port, uint32_t src) const {
        if (ingress_ports != 0 && (ingress_ports >> port & 1u) == 0) {
            return 1;
        }
        if (ingress_sources.empty()) {
            return 0;
        }
        for (const auto& p : ingress_sources) {
            if (p.contains(net::Ipv4Addr{src})) {
                return 0;
            }
        }
        return 2;
    }
};

struct PortBinding {
    uint16_t port_id = 0;
    rte_ether_addr mac{};
    // The device computes UDP checksums of IPv4 frames it sends (RTE_ETH_TX_OFFLOAD_UDP_CKSUM,
    // enabled on its queues).
    bool tx_udp_checksum = false;
};

class Snapshot {
public:
    ~Snapshot();
    Snapshot(const Snapshot&) = delete;
    Snapshot& operator=(const Snapshot&) = delete;

    uint64_t generation = 0;
    uint16_t n_ports = 0;  // one past the highest DPDK port id in use
    std::array<PortView, kMaxPorts> ports{};
    NextHopTable nexthops;
    uint32_t routes = 0;      // prefixes in the LPM
    uint32_t max_routes = 0;  // the LPM's rule capacity
    std::vector<L2Group> groups;
    uint32_t max_fdb_entries = 0;
    uint64_t arp_request_interval_ms = 1000;
    uint16_t ina_udp_port = 0;  // network order comparisons are done on host order values
    // Every port computes UDP checksums of the IPv4 frames it sends: a datagram this switch
    // emits as plain IPv4 leaves its checksum to the device (pipeline/ina_encode.h), wherever
    // the route sends it. One port without the offload makes every port's software's.
    bool udp_checksum_offload = false;
    std::vector<InaJobView> ina_jobs;
    // INA jobs another feature terminates here instead of the INA stage: their results, when
    // addressed to this switch, go to that feature's stage (FeatureStage::ina_result) — a RoCE
    // job that is a VAT aggregator turns its parent's results into RDMA WRITEs. A handful;
    // never a job id of ina_jobs (the loader refuses the overlap).
    std::vector<InaJobHandler> ina_job_handlers;
    FeatureTable features;  // what the classifier hands to a feature stage
    // Each feature's own view (src/features/<f>/view*), by handle: built by the feature's
    // compile step (compile::register_extension), read by its stage. Immutable once published.
    std::array<std::shared_ptr<void>, kMaxFeatures> feature_views{};
    template <typename T>
    const T* feature_view(uint8_t feature) const {
        return feature < kMaxFeatures ? static_cast<const T*>(feature_views[feature].get())
                                      : nullptr;
    }

    uint16_t bier_bfr_id = 0;  // BFIR-id of packets this switch encapsulates
    uint8_t bier_ttl = 64;
    std::vector<BiftView> bifts;
    std::vector<BierGroupView> bier_groups;

    // BIFTs are few (one per set in use): a scan beats a hash here.
    const BiftView* bift(uint32_t bift_id) const {
        for (const auto& t : bifts) {
            if (t.bift_id == bift_id) {
                return &t;
            }
        }
        return nullptr;
    }
    const BierGroupView* bier_group(uint32_t group) const {
        for (const auto& g : bier_groups) {
            if (g.group == group) {
                return &g;
            }
        }
        return nullptr;
    }

    // The feature that terminates INA job `job_id` here (ina_job_handlers), or kFeatureNone.
    uint8_t ina_job_handler(uint32_t job_id) const {
        for (const auto& h : ina_job_handlers) {
            if (h.job_id == job_id) {
                return h.feature;
            }
        }
        return kFeatureNone;
    }
    const InaJobView* ina_job(uint32_t job_id) const {
        for (const auto& j : ina_jobs) {
            if (j.job_id == job_id) {
                return &j;
            }
        }
        return nullptr;
    }

    // dst (host order) -> index into nexthops. Lookups from every lcore take no lock; the
    // control plane changes routes in place (add_route, remove_route) while they run: rte_lpm
    // takes one writer against lock-free readers, and its tbl8 groups freed by a delete are
    // reused only after every reader has passed a quiescent state (rte_lpm_rcu_qsbr_add).
    rte_lpm* lpm = nullptr;

    // The builder only: creates the LPM (`max_rules` prefixes, `tbl8s` groups for prefixes
    // longer than /24) attached to `qsbr`, and a next-hop table with one slot per rule. False
    // with `error` when DPDK refuses or memory is short.
    bool make_route_table(const std::string& name, uint32_t max_rules, uint32_t tbl8s,
                          rte_rcu_qsbr* qsbr, std::string& error);
    // What an in-place route change did.
    enum class RouteChange { done, table_full, nexthops_full };
    // Control-plane thread only, on the snapshot it built or published last. Adds (or replaces)
    // the route to `prefix` through the next hop of `nh`'s kind, gateway and port (a new one
    // carries `nh.station`). A default route is its two /1 halves (rte_lpm has no depth 0).
    RouteChange add_route(const net::Ipv4Prefix& prefix, const NextHop& nh);
    // Removes the route to `prefix`; addresses it covered fall to the next shorter prefix.
    // False when the LPM holds no such prefix.
    bool remove_route(const net::Ipv4Prefix& prefix);
    // Learned and static neighbours, and the FDB: owned by the control plane, outliving every
    // snapshot that points at them, changed in place (forwarding_tables.h).
    const ForwardingTables* tables = nullptr;

    const NextHop* route(uint32_t dst) const;

    // IPv6 routes: dst (16 octets) -> index into nexthops6. Built with the snapshot from the
    // config's ipv6_routes, connected prefixes and own addresses; never changed in place.
    rte_lpm6* lpm6 = nullptr;
    std::vector<NextHop6> nexthops6;
    // The builder only: creates the LPM6 with room for `max_rules` prefixes.
    bool make_route6_table(const std::string& name, uint32_t max_rules, std::string& error);
    // The builder only: adds (or replaces) the route to `prefix` via a new next hop.
    bool add_route6(const net::Ipv6Prefix& prefix, const NextHop6& nh);
    // The next hop of `dst6`, or nullptr.
    const NextHop6* route6(const uint8_t* dst6) const;
    // The station a packet to `dst` routed by `nh` goes to (a gateway's, else dst's own
    // neighbour entry), or nothing while it is unresolved.
    std::optional<Neighbour> station_for(const NextHop& nh, uint32_t dst) const {
        if (nh.kind == NextHopKind::gateway) {
            const uint64_t w = nh.station_word();
            return w != 0 ? std::optional<Neighbour>(unpack_station(w)) : std::nullopt;
        }
        return neighbour(dst);
    }

    // The port's segment is the port itself plus, if it is in an L2 group, the group's other
    // members. Returns the first port of the segment for which `pred(port_id)` holds, or -1.
    template <typename Pred>
    int find_in_segment(uint16_t port, Pred&& pred) const {
        if (pred(port)) {
            return port;
        }
        const PortView& pv = ports[port];
        if (pv.l2_group == kNoGroup) {
            return -1;
        }
        const L2Group& g = groups[static_cast<size_t>(pv.l2_group)];
        for (uint16_t k = 0; k < g.n_ports; ++k) {
            if (g.ports[k] != port && pred(g.ports[k])) {
                return g.ports[k];
            }
        }
        return -1;
    }
    // Port in `port`'s segment that owns address `ip`, or -1.
    int segment_owner(uint16_t port, uint32_t ip) const {
        return find_in_segment(port, [&](uint16_t p) { return ports[p].owns(ip); });
    }
    // True if `ip` is inside a subnet configured on `port`'s segment.
    bool segment_has_subnet(uint16_t port, uint32_t ip) const {
        return find_in_segment(port, [&](uint16_t p) { return ports[p].subnet_of(ip) != nullptr; }) >= 0;
    }
    std::optional<Neighbour> neighbour(uint32_t ip) const { return tables->neighbour(ip); }
    std::optional<FdbEntry> fdb(const rte_ether_addr& mac, uint16_t group) const {
        return tables->fdb(mac, group);
    }

private:
    rte_rcu_qsbr* route_qsbr_ = nullptr;  // what the LPM's freed tbl8 groups wait on
    friend class compile::SnapshotBuilder;  // compile::build_snapshot is the only maker
    Snapshot() = default;
};

}  // namespace ina::dp
