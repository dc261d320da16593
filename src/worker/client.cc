// SPDX-License-Identifier: Apache-2.0
#include "worker/client.h"

#include <arpa/inet.h>
#include <linux/errqueue.h>
#include <netinet/in.h>
#include <netinet/udp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstring>
#include <vector>

#include "ina/protocol.h"

namespace ina::worker {

namespace {

using Clock = std::chrono::steady_clock;

std::string errno_text(const char* what) { return std::string(what) + ": " + std::strerror(errno); }

Error socket_error(const char* what) { return Error(errno_text(what), ErrorKind::socket); }

// Errors an ICMP message reports on the socket (IP_RECVERR): the datagram left, an answer says
// it went nowhere. They are counted from the error queue, never fatal by themselves.
bool is_icmp_errno(int e) {
    return e == ECONNREFUSED || e == EHOSTUNREACH || e == ENETUNREACH || e == EHOSTDOWN;
}

// Drains the socket's error queue; returns how many entries were ICMP destination-unreachable
// (type 3) other than "fragmentation needed" (code 4, a path MTU report).
uint64_t drain_unreachable(int fd) {
    uint64_t n = 0;
    for (;;) {
        alignas(cmsghdr) char control[256];
        char payload[64];
        iovec iov{payload, sizeof payload};
        msghdr msg{};
        msg.msg_iov = &iov;
        msg.msg_iovlen = 1;
        msg.msg_control = control;
        msg.msg_controllen = sizeof control;
        if (::recvmsg(fd, &msg, MSG_ERRQUEUE | MSG_DONTWAIT) < 0) {
            return n;
        }
        for (cmsghdr* c = CMSG_FIRSTHDR(&msg); c != nullptr; c = CMSG_NXTHDR(&msg, c)) {
            if (c->cmsg_level != IPPROTO_IP || c->cmsg_type != IP_RECVERR) {
                continue;
            }
            sock_extended_err ee{};
            std::memcpy(&ee, CMSG_DATA(c), sizeof ee);
            if (ee.ee_origin == SO_EE_ORIGIN_ICMP && ee.ee_type == 3 && ee.ee_code != 4) {
                ++n;
            }
        }
    }
}

uint32_t parse_ipv4(const std::string& text, const char* what) {
    in_addr a{};
    if (inet_pton(AF_INET, text.c_str(), &a) != 1) {
        throw Error(std::string("bad ") + what + " address '" + text + "'");
    }
    return a.s_addr;
}

// A UDP socket bound to addr:port, with the options every INA socket has. Throws Error.
// `hint` follows a bind error (which option chose the port).
int open_socket(uint32_t addr, uint16_t port, const std::string& addr_text, int buffer_bytes,
                const char* hint = "") {
    const int fd = ::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (fd < 0) {
        throw socket_error("socket");
    }
    const int one = 1;
    ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    int buf = buffer_bytes;
    ::setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &buf, sizeof buf);
    ::setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &buf, sizeof buf);
    // No fragmentation (docs/protocol.md): send with DF.
    int pmtu = IP_PMTUDISC_DO;
    ::setsockopt(fd, IPPROTO_IP, IP_MTU_DISCOVER, &pmtu, sizeof pmtu);
    // ICMP errors for our data (nothing at the root's INA port) are queued for drain_unreachable,
    // so a timeout can say why no result came.
    ::setsockopt(fd, IPPROTO_IP, IP_RECVERR, &one, sizeof one);
    sockaddr_in sa{};
    sa.sin_family = AF_INET;
    sa.sin_port = htons(port);
    sa.sin_addr.s_addr = addr;
    if (::bind(fd, reinterpret_cast<const sockaddr*>(&sa), sizeof sa) != 0) {
        const std::string e = errno_text("bind");
        ::close(fd);
        throw Error(e + " (" + addr_text + ":" + std::to_string(port) + ")" + hint,
                    ErrorKind::socket);
    }
    return fd;
}

constexpr size_t kBatch = 64;

// Fault injection draws (xorshift64*): a uniform double in [0, 1).
struct FaultRng {
    uint64_t s;
    double next() {
        s ^= s >> 12;
        s ^= s << 25;
        s ^= s >> 27;
        return static_cast<double>((s * 0x2545F4914F6CDD1Dull) >> 11) * 0x1.0p-53;
    }
};

}  // namespace

Client::Client(const ClientOptions& options)
    : opt_(options), gso_(options.udp_gso), next_seq_(options.first_seq) {
    const auto pos = wire::bfr_id_to_si_bp(opt_.bfr_id, opt_.bsl_bits);
    if (!pos) {
        throw Error("bad BFR-id or BSL");
    }
    set_id_ = pos->si;
    auto own = wire::BitString::from_bfr_ids(opt_.bsl_bits, set_id_, {&opt_.bfr_id, 1});
    if (!own) {
        throw Error("cannot build this worker's P-BM");
    }
    own_ = *own;
    if (opt_.abm.bsl_bits() != opt_.bsl_bits || !own_.is_subset_of(opt_.abm)) {
        throw Error("the A-BM must have the BSL and contain this worker's BFR-id");
    }
    if (opt_.chunk_elems == 0 || opt_.chunk_elems > 65535) {
        throw Error("chunk elements must be 1..65535");
    }
    if (opt_.window == 0 || opt_.window > (1u << 20)) {
        throw Error("window must be 1..2^20");
    }
    const size_t max_pkt = proto::kFixedHeaderBytes + opt_.abm.size_bytes() +
                           opt_.chunk_elems * reduce::elem_size(opt_.elem_type);
    if (max_pkt > 65507) {
        throw Error("chunk too large for one UDP datagram");
    }
    if (const std::string why = check_steering(opt_); !why.empty()) {
        throw Error(why);
    }
    root_addr_ = parse_ipv4(opt_.root, "root");
    const uint32_t bind_addr = parse_ipv4(opt_.bind, "bind");

    fd_ = open_socket(bind_addr, opt_.port, opt_.bind, opt_.socket_buffer_bytes);
    send_fds_.push_back(fd_);
    if (opt_.steer_ports > 1) {
        send_fds_.clear();
        try {
            // Socket i sends the chunks whose seq & (steer_ports - 1) == i.
            for (uint32_t i = 0; i < opt_.steer_ports; ++i) {
                const uint16_t p = proto::steer_source_port(opt_.steer_base_port, opt_.steer_ports, i);
                send_fds_.push_back(open_socket(bind_addr, p, opt_.bind, opt_.socket_buffer_bytes,
                                                " (steer_base_port / --steer-base-port)"));
            }
        } catch (const Error&) {
            close_all();
            throw;
        }
    }
}

std::string Client::check_steering(const ClientOptions& o) {
    const uint32_t n = o.steer_ports;
    if (n > proto::kMaxSteerPorts || !std::has_single_bit(n)) {
        return "steer_ports (--steer-ports) must be a power of two from 1 to " +
               std::to_string(proto::kMaxSteerPorts) + ", got " + std::to_string(n);
    }
    if (n == 1) {
        return "";  // no steering: the base is not used
    }
    const uint64_t base = o.steer_base_port;
    const uint64_t last = base + n - 1;
    if (base % n != 0) {
        return "steer_base_port (--steer-base-port) " + std::to_string(base) +
               " must be a multiple of steer_ports " + std::to_string(n) +
               " (its low bits carry the chunk)";
    }
    if (base < 1024 || last > 65535) {
        return "steer_base_port (--steer-base-port) " + std::to_string(base) + " .. " +
               std::to_string(last) + " must lie inside 1024..65535";
    }
    if (o.port >= base && o.port <= last) {
        return "steer_base_port (--steer-base-port) " + std::to_string(base) + " .. " +
               std::to_string(last) + " holds the INA port " + std::to_string(o.port) +
               ", where results arrive";
    }
    return "";
}

void Client::close_all() {
    for (int fd : send_fds_) {
        if (fd >= 0 && fd != fd_) {
            ::close(fd);
        }
    }
    send_fds_.clear();
    if (fd_ >= 0) {
        ::close(fd_);
        fd_ = -1;
    }
}

Client::~Client() { close_all(); }

Stats Client::allreduce(std::span<const std::byte> input, std::span<std::byte> output,
                        ProgressBar* progress) {
    const size_t esize = reduce::elem_size(opt_.elem_type);
    if (input.size() % esize != 0 || output.size() != input.size()) {
        throw Error("input must be whole elements and output the same size");
    }
    const size_t n_elems = input.size() / esize;
    const uint64_t n_chunks = (n_elems + opt_.chunk_elems - 1) / opt_.chunk_elems;
    if (n_chunks > (1ull << 31)) {
        throw Error("tensor too large for one sequence space");
    }
    const uint32_t first = next_seq_;
    next_seq_ += static_cast<uint32_t>(n_chunks);
    Stats st;
    st.chunks = n_chunks;
    if (n_chunks == 0) {
        return st;
    }
    const uint32_t W = opt_.window;
    const size_t bs_bytes = opt_.abm.size_bytes();
    const size_t hdr_bytes = proto::kFixedHeaderBytes + bs_bytes;
    const size_t max_pkt = hdr_bytes + opt_.chunk_elems * esize;

    auto chunk_count = [&](uint64_t c) -> uint32_t {
        const uint64_t begin = c * opt_.chunk_elems;
        return static_cast<uint32_t>(std::min<uint64_t>(opt_.chunk_elems, n_elems - begin));
    };

    // Per window slot (chunk c lives at c % W): its packet, built on first send.
    std::vector<uint8_t> txbuf(static_cast<size_t>(W) * max_pkt);
    std::vector<Clock::time_point> sent_at(W);
    std::vector<uint8_t> resent(W, 0);  // slot's chunk was sent again (its RTT is ambiguous)
    std::vector<uint8_t> done(n_chunks, 0);
    // Fast retransmission: results come back in about the order chunks went out, so a chunk
    // still missing when the results of kOvertaken later chunks are in was lost (its data or its
    // result). It is sent again once it is older than 1.5 smoothed RTTs, without waiting for the
    // timeout; reordering by fewer than kOvertaken chunks never triggers it. Steered, "later"
    // means later chunks of the same source port (seq mod steer_ports): each port's chunks leave
    // every worker in order, while a batch leaves grouped by port, so across ports a chunk may
    // complete before a lower one whenever some worker's next port group is late (a descheduled
    // worker), which is no loss. Unsteered it is every later chunk.
    constexpr uint64_t kOvertaken = 3;
    // Per source port (seq & steer_mask): 1 + the highest chunk with its result.
    std::vector<uint64_t> highest_done(opt_.steer_ports, 0);
    const uint64_t overtaken_span = kOvertaken * opt_.steer_ports;  // chunks of one port apart
    const uint32_t steer_mask = opt_.steer_ports - 1;
    auto port_of = [&](uint64_t c) { return (first + static_cast<uint32_t>(c)) & steer_mask; };
    Clock::duration srtt{};     // EWMA (1/8) of first-send round trips (Karn: none resent)
    uint64_t base = 0;  // lowest chunk without its result
    uint64_t next = 0;  // next chunk never sent

    sockaddr_in dst{};
    dst.sin_family = AF_INET;
    dst.sin_port = htons(opt_.port);
    dst.sin_addr.s_addr = root_addr_;

    FaultRng rng{opt_.fault_seed * 0x9E3779B97F4A7C15ull + opt_.bfr_id + 1};
    const bool faults = opt_.fault_tx_loss > 0 || opt_.fault_tx_duplicate > 0 ||
                        opt_.fault_rx_loss > 0 || opt_.fault_reorder > 0;

    std::vector<mmsghdr> tx_msgs(kBatch);
    std::vector<iovec> tx_iov(kBatch);
    std::vector<uint8_t> tx_first_send(kBatch);  // retransmissions never go in a GSO run
    // Which of send_fds_ a message leaves by: seq & (steer_ports - 1), 0 when unsteered.
    std::vector<uint8_t> tx_sock(kBatch);
    size_t tx_n = 0;
    // UDP GSO: a run of full-size first sends goes down the stack as ONE datagram with
    // UDP_SEGMENT = max_pkt (cut into the same datagrams by the NIC, or by the kernel just before
    // the device): one socket, routing and qdisc pass per run instead of per packet. The run's
    // packets are its iovecs (the kernel segments their concatenation), so they need not lie
    // back to back: a steered socket's chunks are every steer_ports-th window slot. The kernel
    // caps a GSO datagram at 64 segments and 64 KiB.
    struct GsoControl {
        alignas(cmsghdr) char buf[CMSG_SPACE(sizeof(uint16_t))];
    };
    const size_t gso_max_run = std::min<size_t>(64, 65507 / max_pkt);
    std::vector<mmsghdr> gso_msgs(kBatch);
    std::vector<iovec> gso_iov(kBatch);  // the runs' packets, each run's consecutive
    std::vector<GsoControl> gso_ctl(kBatch);
    std::vector<size_t> gso_first(kBatch + 1);  // gso_msgs[k] starts at tx_msgs[gso_first[k]]
    // tx_msgs[from, to) as runs in gso_msgs; returns their number.
    auto gso_runs = [&](size_t from, size_t to) {
        size_t k = 0;
        size_t v = 0;  // next free gso_iov entry
        for (size_t i = from; i < to; ++k) {
            size_t run = 1;
            // Retransmissions go one datagram each: a path that mangled GSO runs silently still
            // delivers them, and the transfer progresses.
            if (tx_msgs[i].msg_hdr.msg_iov->iov_len == max_pkt && tx_first_send[i] != 0) {
                while (i + run < to && run < gso_max_run &&
                       tx_msgs[i + run].msg_hdr.msg_iov->iov_len == max_pkt &&
                       tx_first_send[i + run] != 0) {
                    ++run;
                }
            }
            gso_first[k] = i;
            for (size_t r = 0; r < run; ++r) {
                gso_iov[v + r] = *tx_msgs[i + r].msg_hdr.msg_iov;
            }
            gso_msgs[k] = mmsghdr{};
            gso_msgs[k].msg_hdr.msg_name = &dst;
            gso_msgs[k].msg_hdr.msg_namelen = sizeof dst;
            gso_msgs[k].msg_hdr.msg_iov = &gso_iov[v];
            gso_msgs[k].msg_hdr.msg_iovlen = run;
            v += run;
            if (run > 1) {
                gso_msgs[k].msg_hdr.msg_control = gso_ctl[k].buf;
                gso_msgs[k].msg_hdr.msg_controllen = sizeof gso_ctl[k].buf;
                cmsghdr* c = CMSG_FIRSTHDR(&gso_msgs[k].msg_hdr);
                c->cmsg_level = SOL_UDP;
                c->cmsg_type = UDP_SEGMENT;
                c->cmsg_len = CMSG_LEN(sizeof(uint16_t));
                const auto seg = static_cast<uint16_t>(max_pkt);
                std::memcpy(CMSG_DATA(c), &seg, sizeof seg);
            }
            i += run;
        }
        gso_first[k] = to;
        return k;
    };
    // Sends tx_msgs[from, to) by socket `fd`, sendmmsg by sendmmsg.
    auto send_range = [&](int fd, size_t from, size_t to) {
        size_t off = from;
        while (off < to) {
            int r;
            if (gso_) {
                const size_t runs = gso_runs(off, to);
                r = ::sendmmsg(fd, gso_msgs.data(), static_cast<unsigned>(runs), 0);
                if (r < 0 && (errno == EIO || errno == EINVAL || errno == ENOPROTOOPT)) {
                    // No segmentation offload on this path (or an old kernel): per packet from
                    // now on.
                    gso_ = false;
                    continue;
                }
                if (r >= 0) {
                    st.gso_datagrams += static_cast<uint64_t>(r);
                    r = static_cast<int>(gso_first[static_cast<size_t>(r)] - off);
                }
            } else {
                r = ::sendmmsg(fd, tx_msgs.data() + off, static_cast<unsigned>(to - off), 0);
            }
            if (r < 0) {
                if (errno == EINTR || errno == ENOBUFS || errno == EAGAIN) {
                    continue;
                }
                // A pending ICMP error is reported once instead of sending and comes with an
                // error-queue entry: send again. The same errno without one is local (no
                // route) and would recur forever.
                if (is_icmp_errno(errno)) {
                    const int err = errno;
                    const uint64_t icmp = drain_unreachable(fd);
                    st.unreachable += icmp;
                    if (icmp > 0) {
                        continue;
                    }
                    errno = err;
                }
                throw socket_error("sendmmsg");
            }
            off += static_cast<size_t>(r);
        }
    };
    // Steered: the batch regrouped by socket (stable, so each socket's chunks keep their order)
    // for one sendmmsg per socket; chunks of different sockets may then leave out of order,
    // which the switch does not mind (each chunk is aggregated on its own).
    std::vector<mmsghdr> by_sock_msgs(kBatch);
    std::vector<uint8_t> by_sock_first(kBatch);
    std::vector<uint8_t> by_sock_sock(kBatch);
    std::vector<size_t> sock_start(proto::kMaxSteerPorts + 1);
    auto group_by_socket = [&]() {
        std::fill(sock_start.begin(), sock_start.end(), 0);
        for (size_t i = 0; i < tx_n; ++i) {
            ++sock_start[tx_sock[i] + 1];
        }
        for (size_t s = 1; s <= proto::kMaxSteerPorts; ++s) {
            sock_start[s] += sock_start[s - 1];
        }
        for (size_t i = 0; i < tx_n; ++i) {
            const size_t j = sock_start[tx_sock[i]]++;
            by_sock_msgs[j] = tx_msgs[i];
            by_sock_first[j] = tx_first_send[i];
            by_sock_sock[j] = tx_sock[i];
        }
        std::copy_n(by_sock_msgs.begin(), tx_n, tx_msgs.begin());
        std::copy_n(by_sock_first.begin(), tx_n, tx_first_send.begin());
        std::copy_n(by_sock_sock.begin(), tx_n, tx_sock.begin());
    };
    auto flush = [&]() {
        if (steer_mask != 0) {
            group_by_socket();
        }
        if (faults && opt_.fault_reorder > 0) {
            for (size_t i = 0; i + 1 < tx_n; ++i) {
                // Within one socket's group only (a pair across groups would split a group).
                if (tx_sock[i] == tx_sock[i + 1] && rng.next() < opt_.fault_reorder) {
                    std::swap(tx_msgs[i], tx_msgs[i + 1]);
                    std::swap(tx_first_send[i], tx_first_send[i + 1]);
                    ++st.injected_faults;
                }
            }
        }
        for (size_t from = 0; from < tx_n;) {
            size_t to = from + 1;
            while (to < tx_n && tx_sock[to] == tx_sock[from]) {
                ++to;
            }
            send_range(send_fds_[tx_sock[from]], from, to);
            from = to;
        }
        tx_n = 0;
    };
    const uint8_t lowest_flag = opt_.lowest_missing ? proto::kFlagLowestMissing : 0;
    auto queue = [&](uint64_t c, bool retransmit) {
        uint8_t* p = txbuf.data() + (c % W) * max_pkt;
        const uint32_t count = chunk_count(c);
        if (!retransmit) {
            proto::Header h;
            h.type = proto::PacketType::data;
            h.flags = lowest_flag;
            h.lowest_missing = first + static_cast<uint32_t>(base);
            h.op = static_cast<uint8_t>(opt_.op);
            h.elem_type = static_cast<uint8_t>(opt_.elem_type);
            h.bsl_code = *wire::bsl_code_from_bits(opt_.bsl_bits);
            h.set_id = static_cast<uint8_t>(set_id_);
            h.job_id = opt_.job_id;
            h.seq = first + static_cast<uint32_t>(c);
            h.elem_count = static_cast<uint16_t>(count);
            proto::write_header(p, h, own_.data());
            std::memcpy(p + hdr_bytes, input.data() + c * opt_.chunk_elems * esize, count * esize);
        } else {
            proto::set_flags(p, proto::kFlagRetransmit | lowest_flag);
            if (lowest_flag != 0) {
                // What this worker holds now, not when the chunk first left.
                proto::set_lowest_missing(p, first + static_cast<uint32_t>(base));
            }
            ++st.retransmits;
        }
        ++st.packets_sent;
        sent_at[c % W] = Clock::now();
        resent[c % W] = retransmit ? 1 : 0;
        int copies = 1;
        if (faults) {
            if (rng.next() < opt_.fault_tx_loss) {
                copies = 0;
            } else if (rng.next() < opt_.fault_tx_duplicate) {
                copies = 2;
            }
            st.injected_faults += copies != 1 ? 1 : 0;
        }
        for (int k = 0; k < copies; ++k) {
            tx_iov[tx_n] = {p, hdr_bytes + count * esize};
            mmsghdr& m = tx_msgs[tx_n];
            m = mmsghdr{};
            m.msg_hdr.msg_name = &dst;
            m.msg_hdr.msg_namelen = sizeof dst;
            m.msg_hdr.msg_iov = &tx_iov[tx_n];
            m.msg_hdr.msg_iovlen = 1;
            tx_first_send[tx_n] = retransmit ? 0 : 1;
            tx_sock[tx_n] = static_cast<uint8_t>(port_of(c));
            if (++tx_n == kBatch) {
                flush();
            }
        }
    };

    const size_t rx_room = 65536;
    std::vector<uint8_t> rxbuf(kBatch * rx_room);
    std::vector<mmsghdr> rx_msgs(kBatch);
    std::vector<iovec> rx_iov(kBatch);
    auto handle = [&](const uint8_t* p, size_t len) {
        if (faults && rng.next() < opt_.fault_rx_loss) {
            ++st.injected_faults;
            return;
        }
        const auto parsed = proto::parse(p, len);
        if (!parsed.packet || parsed.packet->header.type != proto::PacketType::result ||
            parsed.packet->header.job_id != opt_.job_id) {
            ++st.ignored;
            return;
        }
        const proto::Header& h = parsed.packet->header;
        const int64_t c = static_cast<int32_t>(h.seq - first);
        if (c < 0 || static_cast<uint64_t>(c) >= n_chunks || static_cast<uint64_t>(c) >= next) {
            ++st.ignored;  // another tensor's chunk, or one never sent
            return;
        }
        const auto chunk = static_cast<uint64_t>(c);
        if (done[chunk] != 0) {
            ++st.duplicate_results;
            return;
        }
        if (h.op != static_cast<uint8_t>(opt_.op) ||
            h.elem_type != static_cast<uint8_t>(opt_.elem_type) ||
            h.bitstring_bytes() != bs_bytes || h.set_id != set_id_ ||
            h.elem_count != chunk_count(chunk) ||
            !wire::bits_equal(parsed.packet->bitstring, opt_.abm.data(), bs_bytes)) {
            ++st.bad_results;
            return;
        }
        std::memcpy(output.data() + chunk * opt_.chunk_elems * esize, parsed.packet->payload,
                    h.payload_bytes());
        done[chunk] = 1;
        ++st.results;
        auto& highest = highest_done[port_of(chunk)];
        highest = std::max(highest, chunk + 1);
        if (resent[chunk % W] == 0) {
            const auto rtt = Clock::now() - sent_at[chunk % W];
            srtt = srtt == Clock::duration::zero() ? rtt : srtt + (rtt - srtt) / 8;
        }
    };

    const auto start = Clock::now();
    const auto deadline = start + opt_.overall_timeout;
    const auto rto = std::chrono::duration_cast<Clock::duration>(opt_.retransmit_timeout);
    // Never fast-retransmit sooner than this after a send, however small the RTT looks.
    const auto min_fast = std::chrono::duration_cast<Clock::duration>(std::chrono::microseconds(100));
    auto next_draw = start;
    // Results arrive on fd_; a steered send socket only reports errors (ICMP for its data).
    std::vector<pollfd> pfds{{fd_, POLLIN, 0}};
    if (steer_mask != 0) {
        for (int fd : send_fds_) {
            pfds.push_back({fd, 0, 0});
        }
    }
    while (base < n_chunks) {
        auto now = Clock::now();
        if (progress != nullptr && now >= next_draw) {
            progress->update(st.results, n_chunks);
            next_draw = now + kProgressInterval;
        }
        if (now > deadline) {
            const std::string where = " for job " + std::to_string(opt_.job_id) + " at " +
                                      opt_.root + ":" + std::to_string(opt_.port);
            if (st.results == 0 && st.unreachable > 0) {
                throw Error("no INA root answers" + where + ": " + std::to_string(st.unreachable) +
                                " ICMP destination-unreachable for its data (no switch on the "
                                "path aggregates the job, so it was routed on, and nothing "
                                "listens there)",
                            ErrorKind::root_unreachable);
            }
            std::string text = "timed out after " + std::to_string(opt_.overall_timeout.count()) +
                               " ms" + where + ": " + std::to_string(st.results) + " of " +
                               std::to_string(n_chunks) + " results (first missing chunk " +
                               std::to_string(base) + ")";
            if (st.results == 0) {
                text += "; no result at all: is the job configured at the root with element type " +
                        std::string(reduce::to_string(opt_.elem_type)) + ", op " +
                        std::string(reduce::to_string(opt_.op)) + " and BFR-id " +
                        std::to_string(opt_.bfr_id) + " in its A-BM?";
            }
            throw Error(text, ErrorKind::timeout);
        }
        // Retransmit overdue chunks, then fill the window.
        auto wake = deadline;
        for (uint64_t c = base; c < next; ++c) {
            if (done[c] != 0) {
                continue;
            }
            const auto age = now - sent_at[c % W];
            const auto fast_after = std::max(srtt + srtt / 2, min_fast);
            const bool overtaken = highest_done[port_of(c)] >= c + 1 + overtaken_span &&
                                   srtt != Clock::duration::zero();
            if (age >= rto) {
                queue(c, true);
            } else if (overtaken && age >= fast_after) {
                queue(c, true);
                ++st.fast_retransmits;
            } else if (overtaken) {
                wake = std::min(wake, sent_at[c % W] + fast_after);
            }
            wake = std::min(wake, sent_at[c % W] + rto);
        }
        while (next < n_chunks && next < base + W) {
            queue(next, false);
            wake = std::min(wake, sent_at[next % W] + rto);
            ++next;
        }
        flush();

        now = Clock::now();
        const auto wait = std::max(Clock::duration::zero(), wake - now);
        const auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(wait).count();
        timespec ts{static_cast<time_t>(ns / 1000000000), static_cast<long>(ns % 1000000000)};
        for (auto& p : pfds) {
            p.revents = 0;
        }
        const int pr = ::ppoll(pfds.data(), pfds.size(), &ts, nullptr);
        if (pr < 0 && errno != EINTR) {
            throw socket_error("ppoll");
        }
        if (pr <= 0) {
            continue;
        }
        for (const auto& p : pfds) {
            if ((p.revents & POLLERR) != 0) {
                st.unreachable += drain_unreachable(p.fd);
            }
        }
        // Drain everything queued.
        for (;;) {
            for (size_t i = 0; i < kBatch; ++i) {
                rx_iov[i] = {rxbuf.data() + i * rx_room, rx_room};
                rx_msgs[i] = mmsghdr{};
                rx_msgs[i].msg_hdr.msg_iov = &rx_iov[i];
                rx_msgs[i].msg_hdr.msg_iovlen = 1;
            }
            const int r = ::recvmmsg(fd_, rx_msgs.data(), kBatch, MSG_DONTWAIT, nullptr);
            if (r < 0) {
                if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) {
                    break;
                }
                if (is_icmp_errno(errno)) {  // reported once (and cleared): poll again
                    st.unreachable += drain_unreachable(fd_);
                    break;
                }
                throw socket_error("recvmmsg");
            }
            for (int i = 0; i < r; ++i) {
                const auto& m = rx_msgs[static_cast<size_t>(i)];
                if ((m.msg_hdr.msg_flags & MSG_TRUNC) != 0) {
                    ++st.ignored;
                    continue;
                }
                handle(rxbuf.data() + static_cast<size_t>(i) * rx_room, m.msg_len);
            }
            if (static_cast<size_t>(r) < kBatch) {
                break;
            }
        }
        while (base < n_chunks && done[base] != 0) {
            ++base;
        }
    }
    if (progress != nullptr) {
        progress->update(n_chunks, n_chunks);
    }
    st.seconds = std::chrono::duration<double>(Clock::now() - start).count();
    if (st.seconds > 0) {
        st.goodput_gbit_per_s = static_cast<double>(input.size()) * 8.0 / st.seconds / 1e9;
    }
    return st;
}

}  // namespace ina::worker
