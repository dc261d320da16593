// SPDX-License-Identifier: Apache-2.0
// The host root of server-to-server mode (docs/rdma.md, "Worker side (libibverbs)"): listens
// with rdma_cm, accepts `world` workers of one job, reduces every chunk once its contributions
// sum to world (ChunkReducer), and WRITEs each result with immediate into every worker's result
// buffer -- or, with RootOptions::results == once, only into the carrier's (rank 1), for a
// switch that replicates it onto every worker's connection (docs/rdma.md "Result replication").
//
// Memory: one contribution area of world x window x chunk_bytes (worker rank r owns the r-th
// window x chunk_bytes, announced in ConnectReply) and one result staging area of window x
// chunk_bytes. A completed chunk's result is staged in slot chunk mod window only once that
// slot's previous result WRITEs have all completed; the workers' window rule guarantees the
// contribution slot a WRITE lands in has been reduced already.
//
// Results are staged in a buffer of the whole tensor (a chunk's result stays there for the
// round), so a rank that comes back can be given every result it has not acknowledged.
//
// The first valid connect request fixes the job (mode, job id, world, type, op, elements,
// chunk_bytes, window; `expected_world` if set must match); every later request must agree and
// use a free rank, or is rejected with a RejectReason in the reject's private data and the
// root keeps serving the others. A request that says it is RESUMING (ConnectRequest::resuming)
// takes its rank back mid-round (docs/rdma.md "A worker that reconnects (resume)"): the rank's
// old connection is ended before the answer and its completions taken (its DREQ may come
// before or after), what the root reduced of it stays, the accept says from which chunk the
// worker WRITEs again (the first chunk at or after the worker's prefix -- a switch on the
// path raises a restarted process's --, the rank's own WRITEs the root received and the chunk
// an earlier resume of the rank in this round was told, not complete yet: ResumePoints) and which chunks the root has complete (a switch resends the aggregates of a
// resuming carrier's old connection the root lacks), and every result from the request's
// results_from is written again: on the new connection, or with `once` for a non-carrier rank
// on the carrier (the switch copies it onto the new connection). A
// rank whose connection ends before the results is waited for (until the round's deadline)
// rather than failing the round. Once every chunk's result WRITEs completed the root
// disconnects every worker (each waits for that, so that a result whose ACK was lost is still
// re-ACKed to the root's retransmission); the round ends when every worker is disconnected, or
// when the disconnect grace runs out or the next round's first connect request arrives (a DREQ
// or DREP lost under loss): the root then hands that request to the next round. A worker that
// disconnects before the results, a failed completion or the deadline end it with Error.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "worker/rdma/protocol.h"
#include "worker/rdma/verbs.h"

namespace ina::rdma {

// How each chunk's result leaves the root: one WRITE per worker on its own connection, or one
// WRITE on the carrier connection (the lowest rank) that a `replicate: true` switch copies to
// every worker, aggregating their ACKs into the carrier's.
enum class ResultMode : uint8_t { per_worker, once };

struct RootOptions {
    uint16_t expected_world = 0;  // 0: take it from the first worker
    uint32_t max_memory_mb = 1024;  // cap on contribution + result memory
    uint32_t disconnect_grace_ms = 5000;  // results written: how long to wait for disconnects
    ResultMode results = ResultMode::per_worker;
};

struct RoundStats {
    ConnectRequest job;             // the job served
    uint32_t chunks = 0;
    uint64_t contributions = 0;       // WRITE-with-immediate completions
    uint64_t contribution_count = 0;  // the sum of their immediates' counts (chunks x world)
    // (rank, chunk) results acknowledged, each once: chunks x world, or chunks with once (the
    // carrier's: a replicating switch's aggregated ACK says every worker has them).
    uint64_t results_written = 0;
    uint64_t rejected = 0;            // connect requests refused
    uint64_t resumes = 0;             // ranks taken back mid-round (resuming requests accepted)
    uint64_t resent_discarded = 0;    // a resumed rank's WRITEs to chunks already complete
    double seconds = 0;               // first contribution to last result WRITE completed
};

// Serves one AllReduce on `listener` (whose event channel is `channel`). `carried`: in, a
// connect request the previous round took off the channel for this one; out, one for the next.
RoundStats serve_round(EventChannel& channel, const RootOptions& options, Deadline deadline,
                       std::optional<CmEvent>& carried);

}  // namespace ina::rdma
