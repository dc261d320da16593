// SPDX-License-Identifier: Apache-2.0
// ICMPv6 to the switch: Neighbor Discovery (RFC 4861) and echo. A Neighbor Solicitation for
// one of the ingress port's addresses is answered with an Advertisement (router, solicited,
// override; the target's MAC in the option); NS and NA that pass RFC 4861's checks (hop limit
// 255, checksum, code 0, length, option lengths) report their sender to the control plane,
// which learns it into the IPv6 neighbour table when it lies on one of the port's prefixes. An
// echo request to a switch address is turned into the reply in place.
#pragma once

#include "pipeline/context.h"

namespace ina::pipeline {

enum class Icmp6Edge : uint8_t {
    drop,  // reason counted, or consumed (an NA learned, an NS answered by a new frame)
    count
};

// Input frames passed ipv6_check and are to the switch (ipv6_forward's local edge).
void icmp6_local(LcoreContext& ctx, const dp::Snapshot& snap, rte_mbuf** pkts, uint16_t n,
                 EdgeBatches<Icmp6Edge>& out);

}  // namespace ina::pipeline
