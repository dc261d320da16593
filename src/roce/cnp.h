// SPDX-License-Identifier: Apache-2.0
// The switch as DCQCN notification point (reference/rocev2.md §5): a CE-marked packet from a
// worker earns that worker's QP a CNP (encode_cnp), at most one per interval per QP, as NICs
// do (Mellanox MIN_TIME_BETWEEN_CNPS, 4 us by default). Pure and per QP.
#pragma once

#include <cstdint>

namespace ina::roce {

// ECN codepoint CE (11) in the IPv4 TOS / IPv6 traffic class byte.
constexpr bool ce_marked(uint8_t tos) { return (tos & 3) == 3; }

class CnpLimiter {
public:
    static constexpr uint64_t kDefaultIntervalNs = 4000;
    explicit CnpLimiter(uint64_t interval_ns = kDefaultIntervalNs) : interval_ns_(interval_ns) {}

    // A CE-marked packet of this QP arrived at `now`: true if a CNP is to be sent for it.
    bool on_ce(uint64_t now_ns) {
        if (sent_ != 0 && now_ns - last_ns_ < interval_ns_) {
            ++suppressed_;
            return false;
        }
        last_ns_ = now_ns;
        ++sent_;
        return true;
    }
    uint64_t sent() const { return sent_; }
    uint64_t suppressed() const { return suppressed_; }

private:
    uint64_t interval_ns_;
    uint64_t last_ns_ = 0;
    uint64_t sent_ = 0;
    uint64_t suppressed_ = 0;
};

}  // namespace ina::roce
