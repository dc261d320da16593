// SPDX-License-Identifier: Apache-2.0
// The RDMA AllReduce client: the libibverbs counterpart of ina::worker::Client (same shape: one
// allreduce() of an input span into an output span, Stats back, Error on failure).
//
// Server-to-server mode (docs/rdma.md, "Worker side (libibverbs)"): one RC connection to the
// root, set up with rdma_cm (rdma_resolve_addr/route, rdma_connect carrying ConnectRequest; the
// accept carries ConnectReply). The input tensor is registered as it is (no copy) and each chunk
// is WRITTEN with immediate into this worker's contribution slot at the root; the output tensor
// is registered for remote write and the root WRITEs each reduced chunk into it with immediate.
// Chunk c is posted only once the results of every chunk <= c - window are in.
//
// Every wait has the deadline `timeout` (from the start of allreduce()), so a dead root, a lost
// connection or a QP in error ends in Error, never a hang; the wait for completions also
// watches the rdma_cm channel, so a root that disconnects ends it at once.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

#include "reduce/reduce.h"
#include "worker/rdma/protocol.h"
#include "worker/rdma/verbs.h"

namespace ina::rdma {

inline constexpr uint16_t kDefaultPort = 7471;

struct ClientOptions {
    std::string root;              // the root's IP address (an address of its RDMA device)
    uint16_t port = kDefaultPort;  // the root's rdma_cm port
    uint32_t job_id = 0;
    uint16_t rank = 1;   // this worker's BFR-id, 1..world
    uint16_t world = 1;  // workers in the job
    reduce::ElemType elem_type = reduce::ElemType::fp32;
    reduce::Op op = reduce::Op::sum;
    uint32_t chunk_bytes = 1024;  // one RoCE packet at the rxe/1500-byte-MTU path MTU
    uint32_t window = 32;         // chunks in flight
    std::chrono::milliseconds timeout{60000};
    // Every result in: how long to wait for the root to end the connection before ending it
    // here. The root ends it once its result WRITEs completed; an RC responder that leaves
    // first cannot re-ACK a result whose ACK was lost, and the root would retry for ever. More
    // than a few of the root's RC retransmission timeouts (rxe: ~2.3 s observed).
    std::chrono::milliseconds linger{10000};
    // Once this many chunks are WRITTEN and acknowledged, drop the connection and connect
    // again as a resuming worker (docs/rdma.md "A worker that reconnects alone"); 0: never.
    uint32_t reconnect_after = 0;
    // Once this many chunks are written and acknowledged, a second reconnect the same way
    // (after the first; e.g. a carrier that resumes twice in one AllReduce); 0: none.
    uint32_t reconnect_again_after = 0;
    // A reconnect also waits until this many results are in (a test hook: a carrier that
    // leaves only once the root wrote results on its old connection); 0: it does not wait.
    uint32_t reconnect_min_results = 0;
    // A test hook for a worker process that restarts (docs/rdma.md "A worker process that
    // restarts"): once this many chunks are WRITTEN (posted, acknowledged or not), drop
    // everything this process knows -- the connection without a goodbye, the registrations,
    // every result received -- as a crash would, then connect again as a resuming worker
    // that knows nothing (resume from 0, results from 0); the root says where to write from.
    // With reconnect_after too, whichever is due first goes first; at the same chunk the
    // reconnect, then at once the restart (a restart after an earlier rejoin). 0: never.
    uint32_t restart_at = 0;
    // A test hook for a process far behind its NIC: post every WRITE, then take no completion
    // until the root ends the connection (its NIC executed and acknowledged every result
    // meanwhile). The whole tensor must fit in one window.
    bool poll_after_root_ends = false;
};

struct ClientStats {
    uint32_t chunks = 0;
    uint64_t writes = 0;      // WRITEs with immediate posted (one per chunk)
    uint64_t results = 0;     // result WRITEs received (one per chunk)
    double connect_seconds = 0;  // resolve + connect
    double seconds = 0;          // first WRITE posted to last result received
    double goodput_gbit_per_s = 0;
    std::string disconnect_error;  // empty when the teardown was clean
    // reconnect_after: the chunk the root said to WRITE again from. duplicate_results: results
    // written again that this worker already had (after its reconnect, their ACK lost with the
    // old connection; or copies of what the root writes a resumed carrier, through a
    // replicating switch).
    bool reconnected = false;
    uint32_t reconnects = 0;  // reconnect_after and reconnect_again_after done
    bool restarted = false;  // restart_at: this process dropped its state and came back
    uint32_t resume_chunk = 0;
    uint64_t duplicate_results = 0;
    double leave_seconds = 0;     // rdma_disconnect until DISCONNECTED (the old connection)
    double rejoin_seconds = 0;    // resolve + connect of the resuming connection
};

// A connect refused by the peer: throws Error with the refusal and, when the reject carried an
// INAR reply with a reason (a root's or the switch's CM), that reason's text; else rethrows.
[[noreturn]] void throw_refusal(const Rejected& r);

class Client {
public:
    // Validates the options (throws Error).
    explicit Client(ClientOptions options);

    // One AllReduce over a fresh connection: `input` and `output` hold the same number of
    // elements of elem_type (little-endian); output may not alias input.
    ClientStats allreduce(std::span<const std::byte> input, std::span<std::byte> output);

    const ClientOptions& options() const { return opt_; }

private:
    ClientOptions opt_;
};

}  // namespace ina::rdma
