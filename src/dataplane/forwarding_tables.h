// SPDX-License-Identifier: Apache-2.0
// The learned forwarding state workers read while the control plane changes it in place: the
// neighbour tables (IPv4 or IPv6 -> MAC, port) and the FDB ((MAC, L2 group) -> port, last-seen index).
// Both are rte_hash tables with lock-free read/write concurrency: one writer (the control-plane
// thread), any number of readers (worker lcores) that never take a lock. A deleted key's slot is
// handed back to the table only after every reader registered on the dataplane's QSBR variable
// has passed a quiescent state (rte_hash_rcu_qsbr_add), so a lookup in progress never reads a
// slot reused by another key. The tables outlive snapshots: the control plane owns them and every
// snapshot points at the same pair, so learning a host is one insert, not a snapshot rebuild.
//
// Values fit in the hash's 64-bit data word (a MAC and a port, or a port and an index), so an
// update is one atomic store of that word: a reader sees the old entry or the new, never a mix.
#pragma once

#include <rte_ether.h>

#include <atomic>
#include <bit>
#include <cstdint>
#include <cstring>
#include <memory>
#include <optional>
#include <string>

struct rte_hash;
struct rte_rcu_qsbr;

namespace ina::dp {

struct Neighbour {
    rte_ether_addr mac{};
    uint16_t port = 0;
};

struct FdbEntry {
    uint16_t port = 0;
    uint32_t index = 0;  // stable slot in the per-lcore last-seen arrays (fdb_seen)
};

// Key of an FDB lookup: padded to 8 bytes so hashing never reads indeterminate bytes.
struct FdbKey {
    uint8_t mac[6];
    uint16_t group;
};
static_assert(sizeof(FdbKey) == 8);

// A resolved station packed in one word: bit 63 set, port in bits 48..62, MAC in bits 0..47.
// 0 means unresolved. Next hops (snapshot.h) carry the same word, so publishing a resolution
// is one atomic store wherever it lives.
inline constexpr uint64_t kResolvedBit = uint64_t{1} << 63;

constexpr uint64_t pack_station(const rte_ether_addr& mac, uint16_t port) {
    uint64_t w = 0;
    for (int i = 0; i < 6; ++i) {
        w |= uint64_t{mac.addr_bytes[i]} << (8 * i);
    }
    return kResolvedBit | (uint64_t{port} & 0x7fff) << 48 | w;
}
constexpr Neighbour unpack_station(uint64_t w) {
    Neighbour n;
    for (int i = 0; i < 6; ++i) {
        n.mac.addr_bytes[i] = static_cast<uint8_t>(w >> (8 * i));
    }
    n.port = static_cast<uint16_t>(w >> 48 & 0x7fff);
    return n;
}

// The packet path's unpacking, without building a Neighbour: the port, and the MAC stored
// straight into a header (on a little-endian host the word's low 6 bytes are the MAC in order;
// the byte loop above costs ~50 instructions a packet there).
constexpr uint16_t station_port(uint64_t w) { return static_cast<uint16_t>(w >> 48 & 0x7fff); }
inline void store_station_mac(rte_ether_addr& out, uint64_t w) {
    if constexpr (std::endian::native == std::endian::little) {
        std::memcpy(out.addr_bytes, &w, RTE_ETHER_ADDR_LEN);
    } else {
        out = unpack_station(w).mac;
    }
}

// Writes a routed frame's two MACs, 12 bytes from two stores: the destination from a station
// word `w` (pack_station), the source from a port's PortView::mac_and_mtu word.
inline void store_station_and_port_macs(rte_ether_hdr* eth, uint64_t w, uint64_t port_mac_mtu) {
    if constexpr (std::endian::native == std::endian::little) {
        const uint64_t first = (w & 0xffffffffffffULL) | port_mac_mtu << 48;  // dst, src[0..1]
        const auto rest = static_cast<uint32_t>(port_mac_mtu >> 16);           // src[2..5]
        auto* p = reinterpret_cast<uint8_t*>(eth);
        std::memcpy(p, &first, sizeof first);
        std::memcpy(p + sizeof first, &rest, sizeof rest);
    } else {
        eth->dst_addr = unpack_station(w).mac;
        for (int i = 0; i < RTE_ETHER_ADDR_LEN; ++i) {
            eth->src_addr.addr_bytes[i] = static_cast<uint8_t>(port_mac_mtu >> (8 * i));
        }
    }
}

inline FdbKey fdb_key(const rte_ether_addr& mac, uint16_t group) {
    FdbKey key{};
    std::memcpy(key.mac, mac.addr_bytes, 6);
    key.group = group;
    return key;
}

class ForwardingTables {
public:
    // Creates both tables with room for exactly `max_neighbours` and `max_fdb` keys (an
    // extendable bucket table, so a full table means every slot is taken, not an unlucky
    // bucket) and attaches them to `qsbr` for deferred reclamation. `name` makes the DPDK object
    // names unique. Returns nullptr and sets `error` on failure.
    static std::unique_ptr<ForwardingTables> create(const std::string& name,
                                                    uint32_t max_neighbours, uint32_t max_fdb,
                                                    rte_rcu_qsbr* qsbr, std::string& error);
    ~ForwardingTables();
    ForwardingTables(const ForwardingTables&) = delete;
    ForwardingTables& operator=(const ForwardingTables&) = delete;

    // Readers (any lcore registered on the QSBR variable, or the writer thread).
    std::optional<Neighbour> neighbour(uint32_t ip) const;
    // The packed word of neighbour `ip` (pack_station), 0 when unknown.
    uint64_t neighbour_word(uint32_t ip) const;
    // The packed words of `n` (at most kNeighbourBulkMax) neighbours in one bulk lookup, 0 for
    // each unknown one: the packet path's per-burst form, which overlaps the buckets' cache
    // misses across keys and pays the call and signature compare once per burst.
    static constexpr uint32_t kNeighbourBulkMax = 64;
    void neighbour_words(const uint32_t* ips, uint32_t n, uint64_t* words) const;
    std::optional<FdbEntry> fdb(const rte_ether_addr& mac, uint16_t group) const;
    // IPv6 neighbour of `ip6` (16 octets, network order): learned by ND, same word format.
    std::optional<Neighbour> neighbour6(const uint8_t* ip6) const;

    // Bumped (release) after every change to the neighbour table, by its one writer: per-lcore
    // memos of lookups (neighbour_cache.h) compare it once per burst and start over when it moved.
    uint32_t neighbour_version() const {
        return neighbour_version_.load(std::memory_order_acquire);
    }
    // The same for the FDB: bumped after every set_fdb and remove_fdb (fdb_cache.h).
    uint32_t fdb_version() const { return fdb_version_.load(std::memory_order_acquire); }

    // What an insert does when every free slot belongs to a deleted key still in its grace
    // period: refuse, or wait until every reader has passed a quiescent state (microseconds
    // while workers run; never from a reader) and then take the reclaimed slot.
    enum class Room { refuse, wait_for_readers };

    // Writer (one thread). Insert or replace; false when the table is full (nothing changed).
    bool set_neighbour(uint32_t ip, const rte_ether_addr& mac, uint16_t port,
                       Room room = Room::refuse);
    void remove_neighbour(uint32_t ip);
    bool set_neighbour6(const uint8_t* ip6, const rte_ether_addr& mac, uint16_t port,
                        Room room = Room::refuse);
    void remove_neighbour6(const uint8_t* ip6);
    bool set_fdb(const rte_ether_addr& mac, uint16_t group, const FdbEntry& e,
                 Room room = Room::refuse);
    void remove_fdb(const rte_ether_addr& mac, uint16_t group);

    // The QSBR variable deleted keys wait on: every table workers read reclaims through it.
    rte_rcu_qsbr* qsbr() const { return qsbr_; }
    uint32_t neighbour_capacity() const { return neighbour_capacity_; }
    uint32_t fdb_capacity() const { return fdb_capacity_; }
    // Keys present (deleted keys awaiting their grace period are not counted).
    uint32_t neighbour_count() const { return neighbour_count_; }
    uint32_t fdb_count() const { return fdb_count_; }
    // The IPv6 neighbour table has the IPv4 one's capacity (arp.max_neighbours).
    uint32_t neighbour6_count() const { return neighbour6_count_; }

private:
    ForwardingTables() = default;
    // Adds or replaces `key` in `h`, whose live keys number `count` of `capacity`.
    bool insert(rte_hash* h, const void* key, uint64_t data, uint32_t& count, uint32_t capacity,
                Room room);
    // After the hash shows a neighbour change (neighbour_version).
    void bump_neighbour_version();
    // After the hash shows an FDB change (fdb_version).
    void bump_fdb_version();
    rte_rcu_qsbr* qsbr_ = nullptr;
    rte_hash* neighbours_ = nullptr;  // uint32 ip (host order) -> pack_station word
    rte_hash* fdb_ = nullptr;         // FdbKey -> port << 32 | index
    rte_hash* neighbours6_ = nullptr; // 16-octet IPv6 address -> pack_station word
    uint32_t neighbour6_count_ = 0;
    uint32_t neighbour_capacity_ = 0;
    uint32_t fdb_capacity_ = 0;
    uint32_t neighbour_count_ = 0;
    uint32_t fdb_count_ = 0;
    // Their own line: every worker loads them once per burst, the writer stores one per change.
    alignas(64) std::atomic<uint32_t> neighbour_version_{0};
    std::atomic<uint32_t> fdb_version_{0};
};

}  // namespace ina::dp
