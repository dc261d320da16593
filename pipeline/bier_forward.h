// SPDX-License-Identifier: Apache-2.0
// RFC 8279 §6.5 forwarding of one BIER packet through one BIFT, shared by the BFR stage
// (bier_input: a packet received with its header) and the BFIR stage (bier_encap: a packet this
// switch puts on BIER). Not a stage itself: its output goes straight to the TX buffers.
//
// Neighbour copies carry a private header mbuf (Ethernet, the fixed header with the outgoing TTL,
// BitString AND the neighbour's F-BM) chained to a clone of the payload: the payload is shared and
// reference-counted, never copied per neighbour. Own bits (this BFR is their BFER) get a private
// copy of the payload, because delivery rewrites its IPv4 header.
#pragma once

#include "pipeline/context.h"

namespace ina::pipeline {

struct BierSend {
    const dp::BiftView* bift = nullptr;
    const uint8_t* fixed = nullptr;      // the 12 fixed header bytes every copy carries
    const uint8_t* bitstring = nullptr;  // bift->bs_bytes, wire order
    uint32_t entropy = 0;
    uint8_t proto = 0;                   // BIER next protocol of the payload
    bool to_neighbours = true;           // false when the TTL is spent: own bits only
};

// `payload` starts at the BIER payload (the inner packet). The caller keeps ownership of it and
// frees it afterwards: clones hold their own references until their copies are sent.
void bier_forward(LcoreContext& ctx, const dp::Snapshot& snap, const BierSend& p,
                  rte_mbuf* payload);

}  // namespace ina::pipeline
