// SPDX-License-Identifier: Apache-2.0
// Features on the packet path (INA today, RoCEv2 next): what the classifier hands a packet to,
// and the per-lcore state they keep. A feature is one FeatureStage registered under its handle
// (dp::kFeature*); the snapshot's registration table (dp::FeatureTable) says which (protocol,
// port) goes to it on which path. pipeline.cc runs any registered stage the same way: it never
// names a feature.
#pragma once

#include "dataplane/events.h"
#include "pipeline/context.h"

namespace ina::pipeline {

enum class FeatureEdge : uint8_t {
    route,   // to routing (ipv4_forward; ipv6_forward for IPv6): routed input passed on, and
             // every packet the feature emits
    bridge,  // to l2_bridge: bridged input passed on unmodified inside its L2 group
    bier,    // to bier_encap_results: an INA root's result to go out over BIER
    next,    // to the next feature bound to the packet's (protocol, port) on its path, else on
             // to where it was going; given as `pass` when bindings share a port
             // (dp::FeatureBinding::shared), never chosen by a stage itself
    drop,    // consumed or dropped; any drop reason already counted
    count
};

// A feature's stage. Takes packets from the front of `pkts` while out.room_for(max_emit) holds
// and returns how many it took (the pipeline drains `out` and calls again with the rest). Every
// packet it takes ends on an edge; one it does not handle goes to `pass`, where it was going
// (FeatureEdge::route for routed input, FeatureEdge::bridge for bridged input; FeatureEdge::next
// when another feature shares the port: the pipeline hands it on, unmodified). Inputs are
// classified (pipeline/packet_meta.h) with a sound IP header and this feature's handle: IPv4,
// or IPv6 (kMetaIpv6) when the feature's binding takes it (dp::kScopeRouted6).
using FeatureInputFn = uint16_t (*)(LcoreContext& ctx, const dp::Snapshot& snap, rte_mbuf** pkts,
                                    uint16_t n, FeatureEdge pass, EdgeBatches<FeatureEdge>& out);
// Periodic work on one attached state (chunk-table expiry, RoCE retransmission), run from the
// lcore's timer wheel every `tick_us` while the state is attached, with the lcore's context and
// the snapshot of the loop (service_timers): a tick may emit packets (route_emitted).
using FeatureTickFn = void (*)(LcoreContext& ctx, const dp::Snapshot& snap, void* state,
                               uint64_t now_tsc);
// Run on the lcore when a state enters (attach) or leaves (detach) its slot, before the
// detach is counted: lets a feature link states that belong together on one lcore (a RoCE QP
// into its job) without the control plane writing what the lcore reads.
using FeatureAttachFn = void (*)(void* state);

struct FeatureStage {
    const char* name = nullptr;
    FeatureInputFn input = nullptr;
    uint16_t max_emit = 1;  // most packets one input puts on the edges, all edges together
    FeatureTickFn tick = nullptr;
    uint32_t tick_us = 0;
    FeatureAttachFn on_attach = nullptr;
    FeatureAttachFn on_detach = nullptr;
    // INA results of a job this feature terminates (dp::Snapshot::ina_job_handlers), handed over
    // by the INA stage: classified INA datagrams (type result), one call per packet, with the
    // INA stage's edges (room for kInaEmitReserve). nullptr: the feature terminates none.
    FeatureInputFn ina_result = nullptr;
    // Optional, for a feature bound on the routed IPv4 path (dp::kScopeRouted): one walk over
    // its frames (issue 10; classify.h). While every routed IPv4 binding of the snapshot is this
    // feature's (UDP, no port shared on that path), process_burst gives this entry the path's
    // frames unclassified, in arrival order, instead of classifying them and calling `input`.
    // The stage classifies each itself — classify_ipv4 and the registration table through a
    // BindingMemo, the classifier's own code and counters, the fields kept in registers — takes
    // those bound to it, and stores the metadata (store_meta) of every frame it does not
    // consume before it leaves on an edge or to another lcore: frames of other ports, or whose
    // headers are unsound, go to FeatureEdge::route classified, where routing takes the verdict.
    FeatureInputFn input_unchecked = nullptr;
    // Optional: frames this feature handed to their owner lcore (the hand-off rings), run on the
    // owner by process_handoff without eth_input or classify: the sender took them from a routed
    // run, checked them, and stored their metadata, which travels in the mbuf. Without it handed
    // frames go through process_burst again.
    FeatureInputFn input_handed = nullptr;
    // Optional: called at the end of a burst (process_burst, process_handoff) in which the stage
    // set its bit in LcoreContext::flush_pending: sends what it gathered over the burst (the
    // hand-offs, one ring enqueue per owner).
    void (*flush)(LcoreContext& ctx) = nullptr;
};

// The stage registered under `feature` (an empty one, input == nullptr, when none is).
const FeatureStage& feature_stage(uint8_t feature);

// The features (a bit per handle) whose stage has input_unchecked.
uint32_t unchecked_features();

// Runs the flush of every stage that asked for one in this burst (LcoreContext::flush_pending).
void flush_stages(LcoreContext& ctx);
inline void end_burst(LcoreContext& ctx) {
    if (ctx.flush_pending != 0) [[unlikely]] {
        flush_stages(ctx);
    }
}

// Registers (or replaces) the stage of `feature`: at start-up, before any worker runs (the
// built-in ones are registered statically in feature_stages.cc; a stage test registers a dummy).
// False when the handle is out of range or max_emit is not within 1..EdgeBatches capacity.
bool register_feature(uint8_t feature, const FeatureStage& stage);

// Applies one control-plane command to this lcore's feature state (the worker's command ring):
// attach puts the state in its slot and arms its tick; detach empties the slot if it still holds
// that (feature, id) and counts the detach in detaches_done, always, so the control plane frees
// states in ring order. False for an attach the lcore cannot take (bad slot or handle, slot in
// use), which the control plane never sends.
bool apply_command(LcoreContext& ctx, const dp::Command& c);

// Sets up the lcore's timer wheel; call before the first attach.
void init_timers(LcoreContext& ctx, uint64_t now_tsc);

// Services the lcore's timer wheel at ctx.now_tsc with `snap`, the snapshot of this loop
// iteration (the worker loop; stage tests call it too).
void service_timers(LcoreContext& ctx, const dp::Snapshot& snap);

// Attaches an INA job's chunk table in `slot` and names the slot in the snapshot's view of the
// job, as the control plane and the worker do together (stage tests and benchmarks, which run
// without a control plane). False when the snapshot has no such job or the slot is taken.
bool attach_ina_table(LcoreContext& ctx, dp::Snapshot& snap, uint32_t job_id, uint16_t slot,
                      void* table);

}  // namespace ina::pipeline
