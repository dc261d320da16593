// SPDX-License-Identifier: Apache-2.0
// Messages from a worker lcore to the control plane over that lcore's SPSC ring. Fixed size so
// the ring carries them by value (rte_ring_elem); nothing here allocates.
#pragma once

#include <cstdint>

namespace ina::dp {

enum class EventType : uint8_t {
    neighbour_seen = 1,     // ARP from `ip` with `mac` arrived on `port`
    neighbour_refresh = 2,  // like neighbour_seen, but only update an entry that already exists
    resolve_request = 3,    // a packet needed `ip`'s MAC and none was known
    fdb_learn = 4,          // `mac` was seen as a source in L2 group `group` on `port`
};

// Commands from the control plane to one worker lcore (its SPSC command ring). The lcore owns
// its chunk tables' state; the control plane owns their memory and frees a table only after the
// lcore has counted the detach in LcoreContext::detaches_done (detaches complete in ring order,
// so the count says which tables are free). Nothing here can block the worker.
enum class CommandType : uint8_t {
    ina_attach = 1,  // start using `table` for job `job_id`
    ina_detach = 2,  // stop using the table of job `job_id`, then count it in detaches_done
};

struct Command {
    CommandType type;
    uint8_t reserved[3] = {};
    uint32_t job_id = 0;
    void* table = nullptr;
};
static_assert(sizeof(Command) == 16, "ring elements are 16 bytes");

struct Event {
    EventType type;
    uint8_t reserved = 0;
    uint16_t port = 0;
    uint32_t ip = 0;  // host byte order
    uint8_t mac[6] = {};
    uint16_t group = 0;
};
static_assert(sizeof(Event) == 16, "ring elements are 16 bytes");

}  // namespace ina::dp
