// SPDX-License-Identifier: Apache-2.0
// An INA worker (docs/protocol.md): performs AllReduce of a tensor through a Virtual Aggregation
// Tree over plain Linux UDP sockets (no DPDK). The tensor is cut into chunks of `chunk_elems`
// elements; chunk i travels as a data packet with seq = first_seq + i and P-BM = this worker's
// bit, and comes back as a result packet (P-BM = the job's full A-BM) on the INA port.
//
// Window (the switch's slot-reuse rule, src/ina/chunk_table.h): chunk seq is sent only once the
// results of every chunk <= seq - window are here, i.e. the chunks in flight always lie in
// [base, base + window) where base is the lowest chunk without its result. So `window` must be
// <= the job's window on every switch of the tree.
//
// Reliability: a chunk whose result has not come within `retransmit_timeout` is sent again with
// the retransmit flag, until its result arrives; so is, sooner, a chunk whose result is still
// missing when the results of three later chunks (steered: of its source port) are in and it is
// older than 1.5 smoothed RTTs (fast retransmission: the results overtook it, so something was
// lost); duplicate results are ignored. Everything is
// bounded by `overall_timeout`: allreduce() throws instead of hanging.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include "ina/protocol.h"
#include "reduce/reduce.h"
#include "wire/bitstring.h"
#include "worker/progress.h"

namespace ina::worker {

struct ClientOptions {
    uint32_t job_id = 0;
    wire::BfrId bfr_id = 1;
    uint16_t bsl_bits = 64;
    wire::BitString abm;          // the job's full A-BM: every result must carry exactly it
    reduce::ElemType elem_type = reduce::ElemType::fp32;
    reduce::Op op = reduce::Op::sum;
    std::string root = "";         // IPv4 address data packets go to (the VAT root or first switch)
    uint16_t port = 9470;          // INA UDP port: destination of data, and bound here for results
    std::string bind = "0.0.0.0";  // local address to bind (port `port`)
    uint32_t chunk_elems = 256;    // elements per packet, 1..65535
    uint32_t window = 64;          // chunks in flight, >= 1
    uint32_t first_seq = 0;        // seq of the first chunk of the first allreduce()
    // Every data packet carries this worker's lowest missing result (docs/protocol.md, "Lowest
    // missing result"): a root then releases chunks on exact proofs and keeps this worker within
    // 2 x its window of what it holds, so no window this worker keeps can stall the job. false:
    // the field stays 0, as from a sender before it (the window rules alone).
    bool lowest_missing = true;
    std::chrono::microseconds retransmit_timeout{20000};
    std::chrono::milliseconds overall_timeout{60000};
    int socket_buffer_bytes = 8 << 20;
    // Send runs of full-size packets as UDP GSO datagrams (UDP_SEGMENT); falls back to one
    // datagram per packet when the kernel refuses.
    bool udp_gso = true;
    // Chunk steering (docs/operations.md "Chunk steering"): with steer_ports N > 1, chunk seq
    // leaves from UDP source port steer_base_port | (seq & (N - 1)), one socket bound per port,
    // so a switch whose NIC steers on the source port's low bits puts each chunk on the lcore
    // that owns it (lane = seq mod lanes for lanes a power of two dividing N and the job's
    // window). Results still come back to `port`. N = 1: every datagram leaves from `port`.
    // N a power of two from 1 to proto::kMaxSteerPorts; the base a multiple of N, the range inside
    // 1024..65535 and not holding `port`.
    uint32_t steer_ports = 1;
    uint32_t steer_base_port = proto::kDefaultSteerBasePort;
    // Fault injection for tests (where netem is unavailable): probabilities in [0, 1] that a
    // data packet is not sent, is sent twice, that a received result is dropped, and that a
    // batch of sends is reordered (adjacent pairs swapped). Seeded by fault_seed.
    double fault_tx_loss = 0;
    double fault_tx_duplicate = 0;
    double fault_rx_loss = 0;
    double fault_reorder = 0;
    uint64_t fault_seed = 1;
};

struct Stats {
    uint64_t chunks = 0;            // chunks of the tensor
    uint64_t packets_sent = 0;      // data packets, first sends and retransmissions
    uint64_t retransmits = 0;       // data packets sent with the retransmit flag
    uint64_t fast_retransmits = 0;  // of those, sent because later chunks' results came first
    uint64_t gso_datagrams = 0;      // sends as UDP GSO runs (0: segmentation offload off)
    uint64_t results = 0;           // results stored (one per chunk)
    uint64_t duplicate_results = 0; // results for chunks already done (ignored)
    uint64_t ignored = 0;           // datagrams that are not results of this job's window
    uint64_t bad_results = 0;       // results of this job and window with a wrong P-BM, count,
                                    // op or element type (ignored)
    uint64_t injected_faults = 0;   // packets dropped, duplicated or reordered by fault injection
    uint64_t unreachable = 0;       // ICMP destination-unreachable errors for data sent (nothing
                                    // listens at the root's INA port, or no route to it)
    double seconds = 0;             // first send to last result
    double goodput_gbit_per_s = 0;  // tensor bits / seconds
};

// Why an AllReduce failed, for callers that react differently (the Python binding maps each to
// an exception class).
enum class ErrorKind : uint8_t {
    invalid,           // bad options or buffers
    socket,            // a socket call failed
    timeout,           // overall_timeout passed with chunks still missing their results
    root_unreachable,  // timed out without any result while the root's host answered the data
                       // with ICMP unreachable: no switch on the path aggregates the job (an
                       // unknown job is routed on untouched) and no host root listens there
};

class Error : public std::runtime_error {
public:
    explicit Error(const std::string& what, ErrorKind kind = ErrorKind::invalid)
        : std::runtime_error(what), kind_(kind) {}
    ErrorKind kind() const { return kind_; }

private:
    ErrorKind kind_;
};

class Client {
public:
    // Validates the options and binds the UDP socket. Throws Error.
    explicit Client(const ClientOptions& options);
    ~Client();
    Client(const Client&) = delete;
    Client& operator=(const Client&) = delete;

    // One AllReduce: `input` holds n elements of elem_type (little-endian wire format), the
    // result goes to `output` (same size; may be the same buffer). The next call continues the
    // job's sequence space after this one's chunks. Throws Error on a timeout or socket error.
    // With `progress`, the bar is redrawn every kProgressInterval and at completion.
    Stats allreduce(std::span<const std::byte> input, std::span<std::byte> output,
                    ProgressBar* progress = nullptr);

    static constexpr std::chrono::milliseconds kProgressInterval{100};

    const ClientOptions& options() const { return opt_; }
    // The seq the next allreduce() starts at: a successor client for the same job (e.g. with
    // another op) must start there, since the switch treats a reused seq as a late duplicate.
    uint32_t next_seq() const { return next_seq_; }

    // "" when the steering options are sound, else what is wrong, naming the option
    // (steer_ports / steer_base_port; ina-worker's --steer-ports / --steer-base-port).
    static std::string check_steering(const ClientOptions& options);

private:
    void close_all();

    ClientOptions opt_;
    int fd_ = -1;                // bound to `port`: results arrive here; sends when unsteered
    std::vector<int> send_fds_;  // socket of seq & (steer_ports - 1) ({fd_} when unsteered)
    bool gso_ = true;  // UDP_SEGMENT runs (ClientOptions::udp_gso), until the kernel refuses one
    uint32_t next_seq_ = 0;
    uint32_t root_addr_ = 0;  // network byte order
    wire::BitString own_;     // this worker's bit
    uint16_t set_id_ = 0;
};

}  // namespace ina::worker
