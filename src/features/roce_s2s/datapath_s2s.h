// SPDX-License-Identifier: Apache-2.0
// The RoCEv2 server-to-server stage (docs/rdma.md "Server-to-server mode"): the switch sits on
// the path of a job's worker -> root RC connections and splits each one (reference/rocev2.md
// §3.3): toward the worker it is the root's responder (absorbs the WRITE_ONLY_WITH_IMM
// contributions, ACKs / NAKs them as the root would: IP source = the root, the worker's QPN,
// the worker-side PSN and MSN), toward the root it is the carrier connection's requester (ONE
// aggregated WRITE per chunk, with the root-side PSN, kept until the root ACKs it, go-back-N).
// Per-lcore state: one JobState per job, holding all its connections, on the job's home lcore,
// allocated by control_s2s and attached through the command ring. Nothing here allocates per
// packet; emitted frames come from ctx.pool.
//
// Invariant (tested): a contribution is ACKed only once it is in an aggregation slot that the
// switch will deliver to the root: the slot is released only when the root's ACK covers the
// aggregate that carries it, and until then the aggregate is retransmitted on NAK or timeout.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <vector>

#include "agg/ack_table.h"
#include "features/roce_s2s/view_s2s.h"
#include "pipeline/feature_stages.h"
#include "roce/cm.h"
#include "roce/cnp.h"
#include "roce/encode.h"
#include "roce/rc_requester.h"
#include "wire/bitstring.h"

namespace ina::features::roce_s2s {

inline constexpr uint16_t kMaxConns = 64;  // = config kMaxConnections
inline constexpr uint32_t kMaxSlots = 256;  // = config kMaxWindow
inline constexpr uint16_t kContributorBsl = 64;
// Leaving jobs one root's packets are matched against (more on one root: not matched).
inline constexpr uint16_t kMaxLeavingPerRoot = 4;
// A rejoin: the CM packets a superseded state keeps for its successor until it is attached
// (every rank's REQ and REP, with room for retransmissions), and the bytes of one (a CM MAD).
inline constexpr uint16_t kMaxCmNotes = 2 * kMaxConns + 16;
inline constexpr uint16_t kCmNoteBytes = 256;

struct ConnParams {
    uint16_t rank = 0;
    uint32_t worker_ip = 0;  // host order
    uint32_t worker_qpn = 0;
    uint32_t root_qpn = 0;
    bool psn_known = false;  // else the first packet seen sets the worker-side ePSN
    uint32_t psn = 0;
    // Result replication: the PSN the root sends from on this connection (the REQ's Starting
    // PSN) and the worker's result buffer (the REQ's INAR private data), config or learned.
    uint32_t root_psn = 0;
    uint64_t result_addr = 0;
    uint32_t result_rkey = 0;
};

struct JobParams {
    uint32_t job_id = 0;
    uint32_t root_ip = 0;  // host order
    reduce::Op op = reduce::Op::sum;
    reduce::ElemType dtype = reduce::ElemType::int32;
    uint32_t chunk_bytes = 0;
    uint32_t window = 0;  // power of two: the aggregation's slots
    uint32_t pmtu = 1024;
    uint8_t timeout = 14;
    uint8_t retry_cnt = 7;
    bool learn = false;    // connections learned from the RDMA CM exchange (rank i + 1 at i)
    bool replicate = false;  // result WRITEs on the carrier are copied to every connection
    // learn: a chunk completes when the contributions' counts (the immediate's k) sum to
    // n_conns, the ranks through this switch, whichever connections delivered them: a
    // downstream switch's aggregate of k ranks arrives on one connection (its branch carrier),
    // its other ranks' connections carry nothing here (docs/rdma.md "Several switches").
    bool count_complete = false;
    uint16_t n_conns = 0;  // connections[0] (the lowest rank) is the carrier
    std::array<ConnParams, kMaxConns> conns{};
};

// The worker -> root leg of one connection, as the root's responder sees it (rocev2.md §3.1),
// for the one request the leg carries: WRITE_ONLY_WITH_IMM contributions.
struct WorkerLeg {
    uint32_t epsn = 0;
    uint32_t msn = 0;
    bool known = false;     // epsn valid (from the config or the first packet)
    bool nak_sent = false;  // the one NAK-sequence of the current gap is out
    bool ack_owed = false;  // a committed packet asked for an ACK (sent once per burst)
};

struct Connection {
    ConnParams params;
    WorkerLeg leg;
    ina::roce::Ipv4Path to_worker;  // frames the switch sends as the root
    ina::roce::CnpLimiter cnp;
    wire::BitString bit;  // the connection's contributor bit (bit rank)
    uint16_t ip_id = 0;
    uint16_t last_port = 0;
    uint32_t first_psn = 0;  // the worker's starting PSN (= the root's first ePSN), once known
    bool live = false;       // static, or learned (its REP seen) and not ended
    bool pending = false;    // learn: the REQ is seen, its REP not yet
    // The pending REQ, applied only at its REP: a REQ the root refuses (REJ) must change
    // nothing of a connection that is live (docs/rdma.md "Connections from the RDMA CM").
    struct PendingReq {
        uint32_t comm_id = 0;  // the REQ's local communication ID (the REP's remote one)
        uint32_t qpn = 0;      // the REQ's local QPN: the worker's
        uint32_t ip = 0;
        uint32_t root_psn = 0;
        uint64_t result_addr = 0;
        uint32_t result_rkey = 0;
        uint32_t branch = 0;  // the neighbouring switch the worker is routed through, 0: none
    } req;
    // Learned: the neighbouring switch (its address) the worker is routed through, 0 when the
    // worker is this switch's own (docs/rdma.md "Several switches"). `behind_switch`: another
    // connection of the same branch (its lowest rank) carries the branch's results and ACKs,
    // so this one gets no copies, holds no floor and gets no CNPs here: the switch it is
    // behind answers for it.
    uint32_t branch = 0;
    bool behind_switch = false;
    // Learn: the session (JobState::session) in which this rank's connection last went live;
    // 0 = never. The REP of a rank already live in the current session starts the next one.
    uint32_t session = 0;
    // After the drain: root-side minus worker-side PSN and MSN (24 bits), fixed.
    uint32_t fwd_psn_delta = 0;
    uint32_t fwd_msn_delta = 0;
    bool touched = false;  // in the burst's list of connections owed an ACK
    // One past the highest chunk index (24 bits) the connection's contributions were absorbed
    // for (a worker writes its chunks in order): everything below is in, to reach the root.
    uint32_t next_chunk = 0;
    bool leave_translated = false;  // forwarded translated since its job was removed (counted)
    // Replication: the root -> worker leg, in its own PSN space (carrier PSN + the fixed delta
    // root_psn - carrier's root_psn: the leg carries nothing but copies).
    uint32_t res_next = 0;       // the first PSN the worker has not acknowledged
    uint32_t res_msn = 0;        // the MSN of its latest ACK
    uint32_t res_nak_round = 0;  // the forwarded NAK it last reported (job.res_nak_round)
    // Its worker takes part in the results of this state (copies, or the root's own WRITEs on
    // the carrier): `live` of the connection, except the carrier's after the result source
    // moved onto its resumed connection (docs/rdma.md "The carrier resuming").
    bool res_live = false;
    // With per-leg deltas (JobState::res_moved): leg PSN minus carrier PSN, leg MSN minus
    // carrier MSN (after a source move, known once the fill below is acknowledged:
    // res_msn_known).
    uint32_t res_psn_delta = 0;
    uint32_t res_msn_delta = 0;
    bool res_msn_known = false;
    // The move's fill: zero-length WRITEs the switch sends from the root's address on PSNs
    // [res_next, res_fill_end) of this leg, so that the worker's ePSN is exactly res_fill_end
    // (= where copies of the new source start) whatever copies of the old one it lost.
    bool res_filling = false;
    uint32_t res_fill_end = 0;
    uint64_t res_fill_ns = 0;  // when the fill was last sent (0: due)
    bool res_fill_any = false;  // a fill was needed at the last move
    // The first PSN of this leg copies go to: the REQ's root PSN, or, for a resumed connection
    // that became a copy target, its REQ's (a copy of a carrier PSN mapping before it is of a
    // result the root sent before the connection existed: not copied).
    uint32_t res_start = 0;
    bool res_old = false;  // departed before the move: no part of the floors any more
};

// A CM packet (its MAD) a superseded state keeps for its successor (docs/rdma.md "A worker that
// reconnects alone").
struct CmNote {
    uint32_t src_ip = 0;
    uint32_t dst_ip = 0;
    uint32_t branch = 0;  // JobState::cm_branch when it was noted
    uint16_t len = 0;
    std::array<uint8_t, kCmNoteBytes> mad{};
};

struct alignas(64) JobState {
    explicit JobState(const JobParams& p);  // throws on bad params (control plane only)
    JobParams params;
    agg::AckTable table;
    std::array<Connection, kMaxConns> conns;
    // The carrier's root-side leg: the switch's requester in the root's PSN space.
    ina::roce::Requester root_leg;
    ina::roce::Ipv4Path to_root;
    uint16_t root_ip_id = 0;
    uint16_t root_port = 0;  // where the carrier's packets last came in
    // Per slot (chunk key mod window): the contribution count k and the carrier's RETH.
    std::array<uint64_t, kMaxSlots> slot_va{};
    std::array<uint32_t, kMaxSlots> slot_rkey{};
    std::array<uint16_t, kMaxSlots> slot_count{};
    std::array<uint32_t, ina::roce::Requester::kMaxMessages> message_key{};
    // Per slot: kRootHas | the key of the chunk whose result the root was seen writing (on a
    // connection of the session) while the slot's aggregate was unacknowledged. The root writes
    // results only of chunks it completed, so it holds that aggregate, its ACK lost or not yet
    // seen. Emptied with the table at a session's start (keys start over).
    static constexpr uint64_t kRootHas = uint64_t{1} << 32;
    std::array<uint64_t, kMaxSlots> root_has{};
    // The aggregate leg's connection ended (its DREQ): the root's QP of it takes nothing more,
    // so nothing is sent on the leg (its outstanding aggregates are released where the root
    // has them, else kept for a resume's answer or the next session); a new leg (go_live of
    // the carrier, a carrier move) clears it.
    bool leg_ended = false;
    uint32_t high_key = 0;  // chunk indices (24 bits) extend around the highest seen
    bool any_key = false;
    // Learn: the current session (one AllReduce's set of connections; chunk indices start over
    // with each). 0 before the first REQ.
    uint32_t session = 0;
    bool touched = false;  // in the burst's list of jobs whose aggregate leg is pumped
    uint32_t root_messages = 0;  // aggregates posted on the carrier (the root's MSN there)
    // The connection whose root side carries the aggregates: 0 (the lowest rank), or, after the
    // carrier reconnected alone, the lowest rank still live in this (superseded) state.
    uint16_t carrier = 0;
    // Per connection and slot (i * window + slot): the RETH of i's contribution to the slot's
    // chunk, for an aggregate on a carrier other than 0. Sized once (n_conns * window).
    std::vector<uint64_t> conn_va;
    std::vector<uint32_t> conn_rkey;
    // Drain (config drain: true): no new chunk is absorbed; once every held one is
    // acknowledged by the root, `forwarding`: packets pass with PSN/MSN translated.
    bool forwarding = false;
    // Replication, in the carrier's root -> worker PSN space: what the root has been told.
    uint32_t res_told = 0;        // the first PSN the root has not heard acknowledged
    uint32_t res_sent = 0;        // the first PSN past every result packet the root sent
    bool res_ack_owed = false;    // a worker ACKed in this burst: evaluate the minimum at its end
    bool res_duplicate = false;   // a worker re-ACKed (the root retransmits): tell it again
    bool res_nak_any = false;     // a NAK went to the root (res_nak_psn valid)
    uint32_t res_nak_psn = 0;     // the PSN of the last NAK sent to the root
    uint32_t res_nak_round = 0;   // advanced per NAK sent to the root
    ina::roce::CnpLimiter root_cnp;  // CNPs forwarded to the root on the carrier
    // Replication: the result carrier's worker -> root path (its aggregated ACKs, CNPs); the
    // aggregate leg's `to_root` until either moves (a carrier that reconnects alone).
    ina::roce::Ipv4Path res_to_root;
    // Per-leg deltas: each leg translated by its own res_psn_delta / res_msn_delta, not by the
    // REQs' root PSNs: since the carrier resumed (its new connection the copies' source) or a
    // resumed connection became a copy target (docs/rdma.md "The carrier resuming with
    // replicate: true").
    bool res_moved = false;
    JobCounters counters;
    // Leaving (the job removed or replaced by a config change; docs/rdma.md "Leaving a job"):
    // the idle timeout in ns, stored once by the control plane when it keeps the state past the
    // job's removal (0: configured). A plain store and load, no read-modify-write.
    std::atomic<uint64_t> leave_timeout_ns{0};
    // Set by the home lcore once the leaving job is over (every connection ended by a DREQ, or
    // nothing for leave_timeout_ns): it takes part in nothing more, and the control plane
    // releases the state at its next change. Read by the control plane.
    std::atomic<bool> left{false};
    bool leave_clock = false;   // leave_last_ns runs
    uint64_t leave_last_ns = 0;  // the last packet the leaving job handled

    // A worker that reconnects alone (docs/rdma.md "A worker that reconnects alone"): the REP
    // of a rank already connected in this session, while other ranks' connections are live.
    // This state's session goes on as a leaving one (held chunks finish without the rank's old
    // connection, the live connections are translated until their DREQs), and the next session
    // starts on a fresh state the control plane makes off the packet path.
    // Home lcore: set at that REP; the state is handled as leaving from then on.
    bool superseded = false;
    // Set by the home lcore at that REP: a fresh state is wanted. The control plane clears it
    // when it attaches one (its `predecessor` set to this state) and moves this one to its
    // leaving states.
    std::atomic<bool> wants_successor{false};
    // Set by the control plane when the job left by a config change before a successor was
    // attached: nobody takes the next session, its packets pass untouched.
    std::atomic<bool> successor_abandoned{false};
    // The fresh state: set by the control plane before its attach; read and cleared by the home
    // lcore, which adopts from it (adopt_predecessor) at the state's first packet or tick.
    JobState* predecessor = nullptr;
    // Home lcore, on the superseded state: its successor, once adopted.
    JobState* successor = nullptr;
    // Superseded, no successor yet: the reconnecting rank's new connection (learned from its REQ
    // and REP), whose requests get RNR NAKs from its starting PSN until the successor takes it.
    Connection held;
    bool held_known = false;
    // Connections the root took back into this session (a resumed REP, docs/rdma.md "A worker
    // that reconnects alone"), by rank index: nobody aggregates on them, their packets pass
    // (also while the successor is awaited). qpn 0: none.
    struct Resumed {
        uint32_t worker_ip = 0;
        uint32_t worker_qpn = 0;
        uint32_t root_qpn = 0;
    };
    std::array<Resumed, kMaxConns> resumed{};
    bool is_resumed(bool toward_root, uint32_t worker_ip, uint32_t dest_qp) const;
    // Set by snoop_cm for the caller: the resuming REQ it just read names a rank whose
    // connection of this session the switch absorbed from, up to `req_resume_from`, more than
    // the request's own resume-from (a restarted process knows nothing of what it sent): the
    // caller writes it into the REQ before it passes (docs/rdma.md "A worker process that
    // restarts"). 0: nothing to write.
    uint32_t req_resume_from = 0;
    // Set by the caller before snoop_cm: the neighbouring switch the CM packet's worker is
    // routed through (0: none), noted with a REQ (docs/rdma.md "Several switches").
    uint32_t cm_branch = 0;
    // The index of `rank` among the job's connections (ranks ascending); n_conns when none.
    uint16_t rank_index(uint32_t rank) const;
    // Recomputes behind_switch over the session's connections: in each branch, every one but
    // the lowest rank's (connection 0, the result source, never).
    void mark_branches();
    // Whether a connection of `branch` (a neighbouring switch, not 0) is still live in the
    // session: the branch carrier's departure (DREQ) is not its branch's while another of its
    // ranks is live (its results reach it through the branch carrier's copies, its ACKs come
    // as the downstream switch's on the branch carrier's ended connection): the departure rule
    // ("Departures") holds per branch.
    bool branch_live(uint32_t branch) const;
    // Superseded, no successor yet: the CM packets since the REP, replayed by the successor.
    std::array<CmNote, kMaxCmNotes> notes{};
    uint16_t n_notes = 0;

    bool leaving() const { return leave_timeout_ns.load(std::memory_order_relaxed) != 0; }
    // Leaving: the home lcore's timer work (idle timeout, nothing live any more).
    void leave_tick(uint64_t t_ns);

    uint32_t extend(uint32_t chunk);
    // The key chunk index `chunk` (24 bits) has around the highest seen, without moving it.
    uint32_t key_near(uint32_t chunk) const;
    // Whether `p`, a root's WRITE toward a worker, carries an immediate (ONLY or LAST) naming a
    // chunk whose aggregate is posted on the leg and unacknowledged, and whose result the root
    // has not yet been seen writing (its key in `key`): the one kind of root result that
    // teaches the switch anything (root_result_seen).
    bool awaits_root_result(const ina::roce::Packet& p, uint32_t& key) const;
    // The root wrote the result of chunk `key` (awaits_root_result, the packet's ICRC checked):
    // noted, and once the leg has ended the aggregate is released at once.
    void root_result_seen(uint32_t key);
    // The aggregate leg's connection ended (a DREQ of conns[carrier], found live): see
    // leg_ended; the outstanding aggregates whose result the root wrote are released
    // (`carrier_ended_unacked`).
    void end_aggregate_leg();
    // The root holds chunk `key`'s aggregate (its ACK, or evidence of it): the leg's hold on
    // the slot ends. True when that released the slot (the caller counts why).
    bool release_at_root(uint32_t key);
    // Learn: the connection of a packet (worker -> root: src, DestQP = the root's QPN; root ->
    // worker: dst, DestQP = the worker's QPN) among the live ones; n_conns when none.
    uint16_t find_live(bool toward_root, uint32_t worker_ip, uint32_t dest_qp) const;
    // Learn: a CM MAD between a worker and the root (UD to QP1), already ICRC-checked. A
    // leaving job learns nothing: a DREQ ends its connection, the rest is the new job's.
    // `t_ns`: the burst's time (a partial aggregate a rejoin sends is stamped with it).
    void snoop_cm(uint32_t src_ip, uint32_t dst_ip, const uint8_t* mad, uint32_t len,
                  bool leaving_job = false, uint64_t t_ns = 0);
    // Leaving with replicate: true (superseded by a resume): a rank of this session's results
    // that resumes AGAIN (its REQ `resuming`, the root's REP `resumed`) takes its result leg
    // onto the new connection (move_result_source for the carrier, retarget_results for
    // another rank): the root writes its results there while this state's session runs on
    // (docs/rdma.md "The carrier resuming with replicate: true"). The fresh state hears the
    // REP too and takes no part (the rank was not live in its session).
    // Until the root accepts a connection of its next AllReduce (a REP not `resumed`): a state
    // still leaving then (its idle timeout runs) is of an AllReduce over at the root, and a
    // resume seen later is of one it never had (it followed one: roce-vm-s2s-rejoin's
    // replicating carrier round, its copies sent to the last AllReduce's QPs, hung).
    void follow_results(ina::roce::cm::Attr attr, const ina::roce::cm::Message& msg,
                        uint32_t src_ip, uint32_t dst_ip);
    bool results_round_over = false;
    // Superseded by a resume (resumed REP: the root's AllReduce runs on): the session may still
    // hold chunks for ranks that never connected in it (the resuming rank started first). Such
    // a rank's first connection (its REQ, the root's REP not `resumed`) joins this session as a
    // leaving one, not the next session's (join_missing; `rejoin_joined`): otherwise the held
    // chunks wait for good, and the fresh state's for the resumed rank that no state
    // aggregates on. True when it took the CM packet (cm_claimed: the caller passes it to no
    // other state).
    bool join_missing(ina::roce::cm::Attr attr, const ina::roce::cm::Message& msg,
                      uint32_t src_ip, uint32_t dst_ip);
    bool resumed_session = false;
    bool cm_claimed = false;
    // Learn: the root accepted connection i (its REP): starts a new session when nothing is
    // live or the rank already went live in the current one (start_session_if_new). False when
    // another rank's connection is live then: the caller supersedes this state instead.
    bool start_session_if_new(uint16_t i);
    // Learn: rank i reconnected alone (its REP `mad` from the root, while others are live):
    // this state leaves (rank i's old connection ended and taken out of the held chunks, those
    // every other rank contributed to sent now as partial aggregates), a successor is wanted,
    // and the REP is noted for it. `resume`: the root took the rank back into this session
    // (its REP says so): the new connection is nobody's, it passes (not held, not noted);
    // `rep_inar` is then the REP's INAR reply, which says which chunks the root has complete.
    // `t_ns`: the burst's time.
    void supersede(uint16_t i, uint32_t src_ip, uint32_t dst_ip, const uint8_t* mad, uint32_t len,
                   uint32_t rep_root_qpn, uint32_t rep_psn, uint64_t t_ns, bool resume = false,
                   const uint8_t* rep_inar = nullptr);
    // Superseded, no successor yet: a CM packet for the successor (counted when out of room).
    void note(uint32_t src_ip, uint32_t dst_ip, const uint8_t* mad, uint32_t len);
    // On a fresh state attached for a superseded one (`predecessor`): takes over the pending
    // REQs and replays the noted CM packets, so it learns what the old state saw since the REP.
    void adopt_predecessor();
    // A superseded state still waiting for its successor (its next session is held back).
    bool awaiting_successor() const {
        return superseded && successor == nullptr &&
               !successor_abandoned.load(std::memory_order_relaxed);
    }
    // The aggregate of complete chunk `key` (`length` bytes) posted on the carrier's root leg.
    bool post_aggregate(uint32_t key, uint32_t length, uint64_t t_ns);
    // Learn: connection i goes live with what its REQ and REP said.
    void go_live(uint16_t i, uint32_t worker_ip, uint32_t worker_qpn, uint32_t root_qpn,
                 uint32_t worker_psn);
    // Root-side next PSN minus worker-side ePSN of connection i: the PSN translation that
    // plain forwarding of the connection would need after the switch stops absorbing
    // (docs/rdma.md "Leaving a job"). 0 until the leg's first PSN is known.
    int32_t psn_delta(uint16_t i) const;
    // Draining: when nothing is held any more and the root acknowledged every aggregate, fixes
    // each connection's translation and turns to forwarding. True once forwarding.
    bool try_forwarding();
    // Replication: connection i's root -> worker PSN moved into the carrier's space and back.
    uint32_t to_carrier(uint16_t i, uint32_t psn) const;
    uint32_t from_carrier(uint16_t i, uint32_t psn) const;
    // Replication: whether connection i belongs to the results of the current session: live,
    // or (learning) gone live in this session and ended since by a DREQ. A worker disconnects
    // once it holds every result (ina-rdma-worker), its ACKs of them sent before the DREQ: an
    // ended connection acknowledged all it needs and sends nothing more.
    bool in_results(uint16_t i) const;
    // Replication: the root's carrier leg is open: its connection is in the session's results,
    // live or ended (the root's QP still waits for its result WRITEs to be acknowledged).
    bool carrier_open() const { return in_results(0); }
    // Replication: the connection of a result-path packet among those in_results (n_conns when
    // none): an ended carrier still carries the root's WRITEs and the aggregated ACKs.
    uint16_t find_in_results(bool toward_root, uint32_t worker_ip, uint32_t dest_qp) const;
    // Replication: the first carrier PSN some live worker has not acknowledged, and the least
    // MSN they reported; with every worker of the session ended, everything the root sent
    // (res_sent) and the highest MSN. False when the carrier leg is not open.
    bool result_floor(uint32_t& psn, uint32_t& msn) const;
    // Replication: the least carrier PSN a departed worker of the session (ended by a DREQ)
    // had not acknowledged; false when none departed.
    bool departed_floor(uint32_t& psn) const;
    // Replication, learn: the carrier (connection 0) resumed on a new connection (its REQ in
    // conns[0].req, the root's QPN from the REP): the copies' source moves onto it, each other
    // live leg gets its fill and its own translation.
    void move_result_source(uint32_t rep_root_qpn);
    // Replication, learn: a non-carrier rank resumed on a new connection (its REQ in
    // conns[i].req): copies go to it from the next carrier PSN on, at its REQ's root PSN.
    void retarget_results(uint16_t i, uint32_t rep_root_qpn);
    // Connection c's result leg becomes its resumed connection (its REQ in c.req, the root's
    // QPN from the REP), from the root's first PSN on it; its request leg passes (resumed).
    void take_resumed_leg(Connection& c, uint32_t rep_root_qpn);
    // Switches to per-leg deltas (res_moved), each set to what the REQs' root PSNs gave.
    void use_leg_deltas();
    // Replication: the live connection of a result-path worker -> root or root -> worker
    // packet by its result identity (n_conns when none): after a move, the carrier's is its
    // resumed connection.
    uint16_t find_res_live(bool toward_root, uint32_t worker_ip, uint32_t dest_qp) const;
    // The connection whose `alive` flag is set, by a packet's worker address and DestQP.
    uint16_t find_where(bool Connection::*alive, bool toward_root, uint32_t worker_ip,
                        uint32_t dest_qp) const;
    // A connection's end (DREQ, or replaced): neither its requests nor its results any more.
    void end_connection(uint16_t i) {
        conns[i].live = false;
        conns[i].res_live = false;
    }
};

// Frames one input may put on the edges: a CNP and a NAK/re-ACK (ACKs and aggregates are
// emitted at the burst's end, within the room left; a root CNP's fan-out is routed directly).
inline constexpr uint16_t kS2sEmitPerInput = 2;

uint16_t s2s_input(pipeline::LcoreContext& ctx, const dp::Snapshot& snap, rte_mbuf** pkts,
                   uint16_t n, pipeline::FeatureEdge pass,
                   pipeline::EdgeBatches<pipeline::FeatureEdge>& out);

// Timer work on one attached job: the aggregate leg's retransmission timeout, unsent packets.
void s2s_tick(pipeline::LcoreContext& ctx, const dp::Snapshot& snap, void* state,
              uint64_t now_tsc);

// The stage as registered (src/app): 100 us ticks.
pipeline::FeatureStage stage();

}  // namespace ina::features::roce_s2s
