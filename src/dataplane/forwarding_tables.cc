// SPDX-License-Identifier: Apache-2.0
#include "dataplane/forwarding_tables.h"

#include <rte_errno.h>
#include <rte_hash.h>
#include <rte_hash_crc.h>
#include <rte_rcu_qsbr.h>

#include <cerrno>
#include <cstring>

namespace ina::dp {

namespace {

static_assert(ForwardingTables::kNeighbourBulkMax <= RTE_HASH_LOOKUP_BULK_MAX);

rte_hash* make_lf_hash(const std::string& name, uint32_t entries, uint32_t key_len,
                       rte_rcu_qsbr* qsbr, std::string& error) {
    rte_hash_parameters params{};
    params.name = name.c_str();
    params.entries = entries;
    params.key_len = key_len;
    // Keys are 4 (IPv4) or 8 (FdbKey) bytes: CRC32 hashes them in one or two instructions
    // where jhash spent ~60 per lookup on the packet path.
    params.hash_func = rte_hash_crc;
    params.hash_func_init_val = 0;
    params.socket_id = SOCKET_ID_ANY;
    // Lock-free readers against one writer; the extendable buckets make the capacity exact.
    params.extra_flag = RTE_HASH_EXTRA_FLAGS_RW_CONCURRENCY_LF | RTE_HASH_EXTRA_FLAGS_EXT_TABLE;
    rte_hash* h = rte_hash_create(&params);
    if (h == nullptr) {
        error = "rte_hash_create(" + name + "): " + rte_strerror(rte_errno);
        return nullptr;
    }
    // Deleted keys go to a defer queue and their slots are reused only after a grace period;
    // the queue is reclaimed as the writer adds and deletes (and when an add finds no slot).
    rte_hash_rcu_config rcu{};
    rcu.v = qsbr;
    rcu.mode = RTE_HASH_QSBR_MODE_DQ;
    if (rte_hash_rcu_qsbr_add(h, &rcu) != 0) {
        error = "rte_hash_rcu_qsbr_add(" + name + "): " + rte_strerror(rte_errno);
        rte_hash_free(h);
        return nullptr;
    }
    return h;
}

void* as_data(uint64_t w) { return reinterpret_cast<void*>(static_cast<uintptr_t>(w)); }
uint64_t of_data(void* d) { return static_cast<uint64_t>(reinterpret_cast<uintptr_t>(d)); }

}  // namespace

std::unique_ptr<ForwardingTables> ForwardingTables::create(const std::string& name,
                                                           uint32_t max_neighbours,
                                                           uint32_t max_fdb, rte_rcu_qsbr* qsbr,
                                                           std::string& error) {
    if (qsbr == nullptr) {
        error = "forwarding tables need the dataplane's QSBR variable";
        return nullptr;
    }
    std::unique_ptr<ForwardingTables> t(new ForwardingTables());
    t->qsbr_ = qsbr;
    t->neighbour_capacity_ = max_neighbours;
    t->fdb_capacity_ = max_fdb;
    t->neighbours_ = make_lf_hash("nb_" + name, max_neighbours, sizeof(uint32_t), qsbr, error);
    if (t->neighbours_ == nullptr) {
        return nullptr;
    }
    t->fdb_ = make_lf_hash("fdb_" + name, max_fdb, sizeof(FdbKey), qsbr, error);
    if (t->fdb_ == nullptr) {
        return nullptr;
    }
    t->neighbours6_ = make_lf_hash("nb6_" + name, max_neighbours, 16, qsbr, error);
    if (t->neighbours6_ == nullptr) {
        return nullptr;
    }
    return t;
}

ForwardingTables::~ForwardingTables() {
    rte_hash_free(neighbours_);
    rte_hash_free(fdb_);
    rte_hash_free(neighbours6_);
}

namespace {
// rte_hash_crc reads the key 8 bytes at a time: an address straight from a packet (offset 22 or
// 38 of the frame) is copied to an aligned key first.
struct alignas(8) Ipv6Key {
    uint8_t bytes[16];
    explicit Ipv6Key(const uint8_t* ip6) { std::memcpy(bytes, ip6, sizeof bytes); }
};
}  // namespace

std::optional<Neighbour> ForwardingTables::neighbour6(const uint8_t* ip6) const {
    void* data = nullptr;
    const Ipv6Key key(ip6);
    if (rte_hash_lookup_data(neighbours6_, key.bytes, &data) < 0) {
        return std::nullopt;
    }
    return unpack_station(of_data(data));
}

bool ForwardingTables::set_neighbour6(const uint8_t* ip6, const rte_ether_addr& mac,
                                      uint16_t port, Room room) {
    const Ipv6Key key(ip6);
    return insert(neighbours6_, key.bytes, pack_station(mac, port), neighbour6_count_,
                  neighbour_capacity_, room);
}

void ForwardingTables::remove_neighbour6(const uint8_t* ip6) {
    const Ipv6Key key(ip6);
    if (rte_hash_del_key(neighbours6_, key.bytes) >= 0) {
        --neighbour6_count_;
    }
}

uint64_t ForwardingTables::neighbour_word(uint32_t ip) const {
    void* data = nullptr;
    if (rte_hash_lookup_data(neighbours_, &ip, &data) < 0) {
        return 0;
    }
    return of_data(data);
}

void ForwardingTables::neighbour_words(const uint32_t* ips, uint32_t n, uint64_t* words) const {
    const void* keys[kNeighbourBulkMax];
    void* data[kNeighbourBulkMax];
    uint64_t hits = 0;
    for (uint32_t i = 0; i < n; ++i) {
        keys[i] = &ips[i];
    }
    if (n == 0 || rte_hash_lookup_bulk_data(neighbours_, keys, n, &hits, data) < 0) {
        hits = 0;
    }
    for (uint32_t i = 0; i < n; ++i) {
        words[i] = (hits >> i & 1) != 0 ? of_data(data[i]) : 0;
    }
}

std::optional<Neighbour> ForwardingTables::neighbour(uint32_t ip) const {
    const uint64_t w = neighbour_word(ip);
    if (w == 0) {
        return std::nullopt;
    }
    return unpack_station(w);
}

std::optional<FdbEntry> ForwardingTables::fdb(const rte_ether_addr& mac, uint16_t group) const {
    const FdbKey key = fdb_key(mac, group);
    void* data = nullptr;
    if (rte_hash_lookup_data(fdb_, &key, &data) < 0) {
        return std::nullopt;
    }
    const uint64_t w = of_data(data);
    return FdbEntry{static_cast<uint16_t>(w >> 32), static_cast<uint32_t>(w)};
}

bool ForwardingTables::insert(rte_hash* h, const void* key, uint64_t data, uint32_t& count,
                              uint32_t capacity, Room room) {
    const bool present = rte_hash_lookup(h, key) >= 0;
    int rc = rte_hash_add_key_data(h, key, as_data(data));
    if (rc == -ENOSPC && !present && count < capacity && room == Room::wait_for_readers) {
        // Every free slot is a deleted key's, awaiting its grace period: wait it out; the
        // retried add reclaims the slots.
        rte_rcu_qsbr_synchronize(qsbr_, RTE_QSBR_THRID_INVALID);
        rc = rte_hash_add_key_data(h, key, as_data(data));
    }
    if (rc != 0) {
        return false;
    }
    count += present ? 0 : 1;
    return true;
}

bool ForwardingTables::set_neighbour(uint32_t ip, const rte_ether_addr& mac, uint16_t port,
                                     Room room) {
    const bool done = insert(neighbours_, &ip, pack_station(mac, port), neighbour_count_,
                             neighbour_capacity_, room);
    bump_neighbour_version();
    return done;
}

void ForwardingTables::remove_neighbour(uint32_t ip) {
    if (rte_hash_del_key(neighbours_, &ip) >= 0) {
        --neighbour_count_;
    }
    bump_neighbour_version();
}

void ForwardingTables::bump_neighbour_version() {
    // One writer: a plain load and a release store, no read-modify-write.
    neighbour_version_.store(neighbour_version_.load(std::memory_order_relaxed) + 1,
                             std::memory_order_release);
}

bool ForwardingTables::set_fdb(const rte_ether_addr& mac, uint16_t group, const FdbEntry& e,
                               Room room) {
    const FdbKey key = fdb_key(mac, group);
    const bool done =
        insert(fdb_, &key, uint64_t{e.port} << 32 | e.index, fdb_count_, fdb_capacity_, room);
    bump_fdb_version();
    return done;
}

void ForwardingTables::remove_fdb(const rte_ether_addr& mac, uint16_t group) {
    const FdbKey key = fdb_key(mac, group);
    if (rte_hash_del_key(fdb_, &key) >= 0) {
        --fdb_count_;
    }
    bump_fdb_version();
}

void ForwardingTables::bump_fdb_version() {
    // One writer: a plain load and a release store, no read-modify-write.
    fdb_version_.store(fdb_version_.load(std::memory_order_relaxed) + 1,
                       std::memory_order_release);
}

}  // namespace ina::dp
