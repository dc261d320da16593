// SPDX-License-Identifier: Apache-2.0
// What the RoCE server-to-server stage tests share: the feature registered once per test binary
// (the config section, the compile step and the stage, as src/app registers them) and a RoCE
// frame as seen on a TX queue, parsed by the codec with its ICRC checked.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "compile/snapshot_build.h"
#include "config/config.h"
#include "features/roce_s2s/compile_s2s.h"
#include "features/roce_s2s/config_s2s.h"
#include "features/roce_s2s/datapath_s2s.h"
#include "pipeline/feature_stages.h"
#include "roce/icrc.h"
#include "roce/wire.h"
#include "stage_util.h"

namespace ina::test {

inline void register_s2s_once() {
    namespace fs = features::roce_s2s;
    static const bool ok = [] {
        return config::register_section(fs::section_hooks()) &&
               compile::register_extension(fs::compile_s2s) &&
               pipeline::register_feature(fs::kFeatureS2s, fs::stage());
    }();
    ASSERT_TRUE(ok);
}

struct Seen {
    uint32_t src = 0, dst = 0;
    uint8_t ttl = 0;
    ina::roce::Packet p;
    std::vector<uint8_t> payload;
    bool icrc_ok = false;
};

// An Ethernet + IPv4 RoCEv2 frame; false (s untouched but for the addresses) when it does not
// parse as RoCEv2.
inline bool parse_seen(const Bytes& b, Seen& s) {
    const uint8_t* ip = b.data() + 14;
    s.ttl = ip[8];
    s.src = get32(ip + 12);
    s.dst = get32(ip + 16);
    const size_t ip_len = get16(ip + 2);
    const auto parsed = ina::roce::parse(ip + 28, ip_len - 28);
    if (!parsed.packet) {
        return false;
    }
    s.p = *parsed.packet;
    s.payload.assign(ip + 28 + s.p.header_bytes, ip + 28 + s.p.header_bytes + s.p.payload_bytes);
    s.icrc_ok = ina::roce::icrc(ip, ip_len) == s.p.icrc;
    return true;
}

}  // namespace ina::test
