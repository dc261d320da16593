// SPDX-License-Identifier: Apache-2.0
// ina::worker::Client's chunk steering (ClientOptions::steer_ports): the options it refuses,
// naming them, and on loopback against a stand-in root (one thread answering every data
// packet with its result) that chunk seq leaves from source port base | (seq & (N - 1)) while
// the results still come back to the INA port, batched (GSO runs per socket) and complete.
#include <gtest/gtest.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <map>
#include <set>
#include <thread>
#include <vector>

#include "ina/protocol.h"
#include "worker/client.h"

namespace {

using ina::worker::Client;
using ina::worker::ClientOptions;

// A loopback /24 of its own per process (127.P.Q.0), so parallel runs never share ports.
std::string loopback(uint8_t host) {
    const unsigned pid = static_cast<unsigned>(::getpid());
    return "127." + std::to_string(1 + pid % 200) + "." + std::to_string((pid / 200) % 250) +
           "." + std::to_string(host);
}

ClientOptions options(uint16_t port) {
    ClientOptions o;
    o.job_id = 3;
    o.bfr_id = 1;
    o.bsl_bits = 64;
    o.abm = *ina::wire::BitString::parse_bfr_ids(64, 0, "1");
    o.elem_type = ina::reduce::ElemType::int32;
    o.root = loopback(2);
    o.bind = loopback(1);
    o.port = port;
    o.chunk_elems = 64;
    o.window = 16;
    o.first_seq = 5;  // seq, not the chunk index, picks the port
    // The stand-in root's port is an ephemeral one (32768 and up), which may fall in the
    // default 40960 .. 41023: steer from a range below them, never holding `port`.
    o.steer_base_port = port / 64 == 2048 / 64 ? 4096 : 2048;
    o.overall_timeout = std::chrono::milliseconds(20000);
    return o;
}

std::string refusal(const ClientOptions& o) {
    try {
        Client c(o);
    } catch (const ina::worker::Error& e) {
        EXPECT_EQ(e.kind(), ina::worker::ErrorKind::invalid);
        return e.what();
    }
    return "";
}

TEST(WorkerSteering, OptionsAreCheckedAndNamed) {
    ClientOptions o = options(9470);
    struct Case {
        uint32_t ports;
        uint32_t base;
        const char* says;
    };
    const Case cases[] = {
        {0, 40960, "steer_ports (--steer-ports) must be a power of two from 1 to 64, got 0"},
        {3, 40960, "steer_ports (--steer-ports) must be a power of two from 1 to 64, got 3"},
        {128, 40960, "got 128"},
        {4, 40962, "steer_base_port (--steer-base-port) 40962 must be a multiple of steer_ports 4"},
        {4, 512, "steer_base_port (--steer-base-port) 512 .. 515 must lie inside 1024..65535"},
        {64, 65536, "65536 .. 65599 must lie inside 1024..65535"},
        {4, 9468, "9468 .. 9471 holds the INA port 9470"},
    };
    for (const auto& c : cases) {
        o.steer_ports = c.ports;
        o.steer_base_port = c.base;
        EXPECT_NE(Client::check_steering(o).find(c.says), std::string::npos)
            << Client::check_steering(o);
        EXPECT_NE(refusal(o).find(c.says), std::string::npos) << refusal(o);
    }
    // Sound: unsteered (the base unused), the default base, the top of the range.
    for (const auto& [ports, base] : {std::pair{1u, 3u}, std::pair{64u, 40960u},
                                      std::pair{64u, 65472u}, std::pair{2u, 1024u}}) {
        o.steer_ports = ports;
        o.steer_base_port = base;
        EXPECT_EQ(Client::check_steering(o), "") << ports << " " << base;
    }
}

// Answers every data packet of the job with its result (a one-worker job: the result is the
// contribution) to the sender's address on the INA port, and records each packet's seq and
// source port.
class StandInRoot {
public:
    StandInRoot() {
        fd_ = ::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
        sockaddr_in sa{};
        sa.sin_family = AF_INET;
        inet_pton(AF_INET, loopback(2).c_str(), &sa.sin_addr);
        EXPECT_EQ(::bind(fd_, reinterpret_cast<sockaddr*>(&sa), sizeof sa), 0) << loopback(2);
        socklen_t len = sizeof sa;
        ::getsockname(fd_, reinterpret_cast<sockaddr*>(&sa), &len);
        port_ = ntohs(sa.sin_port);
        thread_ = std::thread([this] { run(); });
    }
    ~StandInRoot() {
        stop();
        ::close(fd_);
    }
    uint16_t port() const { return port_; }
    // Ends the answering thread (idempotent).
    void stop() {
        stop_ = true;
        if (thread_.joinable()) {
            thread_.join();
        }
    }
    // (seq, source port) of every data packet, in arrival order; only after stop().
    const std::vector<std::pair<uint32_t, uint16_t>>& seen() const { return seen_; }

private:
    void run() {
        std::vector<uint8_t> buf(65536);
        while (!stop_) {
            pollfd p{fd_, POLLIN, 0};
            if (::poll(&p, 1, 20) <= 0) {
                continue;  // re-check stop_
            }
            sockaddr_in from{};
            socklen_t len = sizeof from;
            const ssize_t n = ::recvfrom(fd_, buf.data(), buf.size(), 0,
                                         reinterpret_cast<sockaddr*>(&from), &len);
            if (n <= 0) {
                continue;
            }
            const auto parsed = ina::proto::parse(buf.data(), static_cast<size_t>(n));
            if (!parsed.packet || parsed.packet->header.type != ina::proto::PacketType::data) {
                continue;
            }
            ina::proto::Header h = parsed.packet->header;
            seen_.emplace_back(h.seq, ntohs(from.sin_port));
            std::vector<uint8_t> out(h.total_bytes());
            const std::vector<uint8_t> payload(parsed.packet->payload,
                                               parsed.packet->payload + h.payload_bytes());
            h.type = ina::proto::PacketType::result;
            h.flags = 0;
            h.lowest_missing = 0;
            const size_t hdr = ina::proto::write_header(out.data(), h, parsed.packet->bitstring);
            std::memcpy(out.data() + hdr, payload.data(), payload.size());
            from.sin_port = htons(port_);  // results go to the INA port, whatever the source
            ::sendto(fd_, out.data(), out.size(), 0, reinterpret_cast<sockaddr*>(&from), len);
        }
    }

    int fd_ = -1;
    uint16_t port_ = 0;
    std::atomic<bool> stop_{false};
    std::vector<std::pair<uint32_t, uint16_t>> seen_;
    std::thread thread_;
};

// `chunks` full-size chunks; `gso`: a batch holds several chunks of one socket (the window
// is over steer_ports), so they must leave as GSO runs.
void allreduce_through(uint32_t steer_ports, uint32_t chunks, bool gso) {
    StandInRoot root;
    ClientOptions o = options(root.port());
    o.steer_ports = steer_ports;
    const size_t elems = size_t{64} * chunks;
    std::vector<int32_t> in(elems);
    for (size_t i = 0; i < elems; ++i) {
        in[i] = static_cast<int32_t>(i * 2654435761u);
    }
    std::vector<int32_t> out(elems, 0);
    ina::worker::Stats st;
    {
        Client c(o);
        st = c.allreduce(std::as_bytes(std::span(in)), std::as_writable_bytes(std::span(out)));
    }
    EXPECT_EQ(out, in);
    EXPECT_EQ(st.results, chunks);
    root.stop();
    const auto& seen = root.seen();
    ASSERT_GE(seen.size(), chunks);
    std::set<uint16_t> ports;
    std::set<uint32_t> seqs;
    for (const auto& [seq, src] : seen) {
        const uint16_t want = steer_ports == 1
                                  ? root.port()
                                  : ina::proto::steer_source_port(o.steer_base_port, steer_ports,
                                                                   seq);
        EXPECT_EQ(src, want) << "seq " << seq;
        ports.insert(src);
        seqs.insert(seq);
    }
    EXPECT_EQ(ports.size(), steer_ports);
    EXPECT_EQ(*seqs.begin(), 5u);
    EXPECT_EQ(*seqs.rbegin(), 5 + chunks - 1);
    EXPECT_GT(st.gso_datagrams, 0u);
    if (gso) {
        // Batched still: full-size first sends of one socket leave as UDP GSO runs of several.
        EXPECT_LT(st.gso_datagrams, st.packets_sent);
    }
}

TEST(WorkerSteering, UnsteeredSendsFromTheInaPort) { allreduce_through(1, 40, true); }

TEST(WorkerSteering, ChunkSeqPicksTheSourcePort) { allreduce_through(4, 40, true); }

// A window of 16 spreads over 16 of the 64 sockets at a time: one datagram per socket.
TEST(WorkerSteering, SixtyFourPorts) { allreduce_through(64, 130, false); }

// Losses are still found by fast retransmission (later chunks of the lost one's source port
// came back), not only by the timeout, and the result is whole.
TEST(WorkerSteering, FastRetransmissionPerSourcePort) {
    StandInRoot root;
    ClientOptions o = options(root.port());
    o.steer_ports = 4;
    o.fault_tx_loss = 0.05;
    o.fault_seed = 7;
    // Long enough that a loaded machine's RTT never lets the timeout come first.
    o.retransmit_timeout = std::chrono::milliseconds(300);
    const size_t elems = size_t{64} * 300;
    std::vector<int32_t> in(elems);
    for (size_t i = 0; i < elems; ++i) {
        in[i] = static_cast<int32_t>(i);
    }
    std::vector<int32_t> out(elems, 0);
    Client c(o);
    const auto st =
        c.allreduce(std::as_bytes(std::span(in)), std::as_writable_bytes(std::span(out)));
    EXPECT_EQ(out, in);
    EXPECT_GT(st.injected_faults, 0u);
    EXPECT_GT(st.fast_retransmits, 0u);
}

TEST(WorkerSteering, TakenSteerPortFailsNamingTheOption) {
    StandInRoot root;
    ClientOptions o = options(root.port());
    o.steer_ports = 4;
    // Something else holds base + 2 on the worker's address (no SO_REUSEADDR, so the client's
    // bind fails whatever it sets).
    const int other = ::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    sockaddr_in sa{};
    sa.sin_family = AF_INET;
    sa.sin_port = htons(static_cast<uint16_t>(o.steer_base_port + 2));
    inet_pton(AF_INET, o.bind.c_str(), &sa.sin_addr);
    ASSERT_EQ(::bind(other, reinterpret_cast<sockaddr*>(&sa), sizeof sa), 0);
    try {
        Client c(o);
        ADD_FAILURE() << "bound a taken port";
    } catch (const ina::worker::Error& e) {
        EXPECT_EQ(e.kind(), ina::worker::ErrorKind::socket);
        EXPECT_NE(std::string(e.what()).find(":" + std::to_string(o.steer_base_port + 2) +
                                             ") (steer_base_port / --steer-base-port)"),
                  std::string::npos)
            << e.what();
    }
    ::close(other);
    // Every socket the failed client opened is closed again: a new one binds them all.
    Client again(o);
    EXPECT_EQ(again.options().steer_ports, 4u);
}

}  // namespace
