// SPDX-License-Identifier: Apache-2.0
#include "stage_util.h"

#include <rte_cycles.h>
#include <rte_eal.h>
#include <rte_ip.h>
#include <rte_errno.h>
#include <netinet/in.h>
#include <rte_mempool.h>
#include <rte_malloc.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstring>

#include "compile/snapshot_build.h"
#include "config/config.h"
#include "ina/protocol.h"
#include "net/addr.h"
#include "pipeline/feature_stages.h"
#include "pipeline/mbuf_chain.h"

namespace ina::test {

// ---------------------------------------------------------------------------------------------
// EAL

void EalEnvironment::SetUp() {
    // A file prefix unique to this process, so test binaries run by meson in parallel never
    // share DPDK runtime state. --in-memory cannot be combined with --no-huge (legacy memory);
    // --no-shconf and --no-telemetry keep the runtime directory empty instead, and TearDown
    // removes it.
    const std::string prefix = "--file-prefix=ina-stage-" + std::to_string(getpid());
    std::vector<std::string> args = {"ina-stage-test", "--no-huge",   "-m",
                                     "256",            "--no-pci",    prefix,
                                     "--no-shconf",    "--no-telemetry", "--log-level=*:error"};
    std::vector<char*> argv;
    for (auto& a : args) {
        argv.push_back(a.data());
    }
    argv.push_back(nullptr);
    const int rc = rte_eal_init(static_cast<int>(args.size()), argv.data());
    ASSERT_GE(rc, 0) << "rte_eal_init: " << rte_strerror(rte_errno);
    ASSERT_TRUE(pipeline::register_mbuf_flags());
}

void EalEnvironment::TearDown() {
    const std::string runtime_dir = rte_eal_get_runtime_dir();
    rte_eal_cleanup();
    if (!runtime_dir.empty()) {
        rmdir(runtime_dir.c_str());  // best effort: only succeeds if EAL left it empty
    }
}

uint64_t unique_id() {
    static std::atomic<uint64_t> next{1};
    return next++;
}

// ---------------------------------------------------------------------------------------------
// Addresses

rte_ether_addr mac(const char* text) {
    auto m = net::MacAddr::parse(text);
    EXPECT_TRUE(m.has_value()) << text;
    rte_ether_addr e{};
    if (m) {
        std::memcpy(e.addr_bytes, m->bytes.data(), 6);
    }
    return e;
}

uint32_t ip4(const char* text) {
    auto a = net::Ipv4Addr::parse(text);
    EXPECT_TRUE(a.has_value()) << text;
    return a ? a->value : 0;
}

bool same_mac(const rte_ether_addr& a, const rte_ether_addr& b) {
    return std::memcmp(a.addr_bytes, b.addr_bytes, 6) == 0;
}

std::string mac_str(const rte_ether_addr& a) {
    char buf[RTE_ETHER_ADDR_FMT_SIZE];
    rte_ether_format_addr(buf, sizeof buf, &a);
    return buf;
}

// ---------------------------------------------------------------------------------------------
// Frames

uint16_t get16(const uint8_t* p) { return static_cast<uint16_t>(p[0] << 8 | p[1]); }
uint32_t get32(const uint8_t* p) {
    return static_cast<uint32_t>(p[0]) << 24 | static_cast<uint32_t>(p[1]) << 16 |
           static_cast<uint32_t>(p[2]) << 8 | p[3];
}
void put16(uint8_t* p, uint16_t v) {
    p[0] = static_cast<uint8_t>(v >> 8);
    p[1] = static_cast<uint8_t>(v);
}
void put32(uint8_t* p, uint32_t v) {
    p[0] = static_cast<uint8_t>(v >> 24);
    p[1] = static_cast<uint8_t>(v >> 16);
    p[2] = static_cast<uint8_t>(v >> 8);
    p[3] = static_cast<uint8_t>(v);
}

namespace {
uint32_t ref_sum(const uint8_t* p, size_t len, uint32_t sum = 0) {
    for (size_t i = 0; i + 1 < len; i += 2) {
        sum += get16(p + i);
    }
    if (len % 2 != 0) {
        sum += static_cast<uint32_t>(p[len - 1]) << 8;
    }
    while (sum >> 16) {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    return sum;
}
}  // namespace

uint16_t ref_checksum(const uint8_t* p, size_t len) {
    return static_cast<uint16_t>(~ref_sum(p, len) & 0xffff);
}

bool ref_checksum_ok(const uint8_t* p, size_t len) { return ref_sum(p, len) == 0xffff; }

Bytes eth_frame(const rte_ether_addr& dst, const rte_ether_addr& src, uint16_t ether_type,
                const Bytes& payload) {
    Bytes f(kEthLen + payload.size());
    std::memcpy(&f[0], dst.addr_bytes, 6);
    std::memcpy(&f[6], src.addr_bytes, 6);
    put16(&f[12], ether_type);
    std::copy(payload.begin(), payload.end(), f.begin() + kEthLen);
    return f;
}

Bytes arp_payload(uint16_t op, const rte_ether_addr& sha, uint32_t sip, const rte_ether_addr& tha,
                  uint32_t tip) {
    Bytes a(kArpLen);
    put16(&a[0], 1);       // Ethernet
    put16(&a[2], 0x0800);  // IPv4
    a[4] = 6;
    a[5] = 4;
    put16(&a[6], op);
    std::memcpy(&a[8], sha.addr_bytes, 6);
    put32(&a[14], sip);
    std::memcpy(&a[18], tha.addr_bytes, 6);
    put32(&a[24], tip);
    return a;
}

Bytes ipv4_packet(uint32_t src, uint32_t dst, uint8_t proto, const Bytes& payload, uint8_t ttl,
                  const Bytes& options) {
    const size_t hlen = kIpLen + options.size();
    Bytes p(hlen + payload.size());
    p[0] = static_cast<uint8_t>(0x40 | (hlen / 4));
    p[1] = 0;
    put16(&p[2], static_cast<uint16_t>(p.size()));
    put16(&p[4], 0x1234);
    put16(&p[6], 0x4000);  // DF
    p[8] = ttl;
    p[9] = proto;
    put32(&p[12], src);
    put32(&p[16], dst);
    std::copy(options.begin(), options.end(), p.begin() + kIpLen);
    put16(&p[10], ref_checksum(p.data(), hlen));
    std::copy(payload.begin(), payload.end(), p.begin() + static_cast<std::ptrdiff_t>(hlen));
    return p;
}

Bytes icmp_echo(uint8_t type, uint16_t id, uint16_t seq, const Bytes& data) {
    Bytes m(8 + data.size());
    m[0] = type;
    m[1] = 0;
    put16(&m[4], id);
    put16(&m[6], seq);
    std::copy(data.begin(), data.end(), m.begin() + 8);
    put16(&m[2], ref_checksum(m.data(), m.size()));
    return m;
}

Bytes udp_datagram(uint32_t src, uint32_t dst, uint16_t sport, uint16_t dport, const Bytes& data) {
    Bytes u(8 + data.size());
    put16(&u[0], sport);
    put16(&u[2], dport);
    put16(&u[4], static_cast<uint16_t>(u.size()));
    std::copy(data.begin(), data.end(), u.begin() + 8);
    Bytes pseudo(12);
    put32(&pseudo[0], src);
    put32(&pseudo[4], dst);
    pseudo[9] = 17;
    put16(&pseudo[10], static_cast<uint16_t>(u.size()));
    uint32_t sum = ref_sum(pseudo.data(), pseudo.size());
    sum = ref_sum(u.data(), u.size(), sum);
    uint16_t ck = static_cast<uint16_t>(~sum & 0xffff);
    put16(&u[6], ck == 0 ? 0xffff : ck);
    return u;
}

Bytes payload_of(size_t len, uint8_t seed) {
    Bytes b(len);
    for (size_t i = 0; i < len; ++i) {
        b[i] = static_cast<uint8_t>(seed + i * 7);
    }
    return b;
}

Bytes ina_data(uint32_t job_id, const std::vector<uint16_t>& bfr_ids, uint32_t seq,
               uint8_t elem_type, const Bytes& elements, uint32_t dst) {
    proto::Header h;
    h.type = proto::PacketType::data;
    h.elem_type = elem_type;
    h.bsl_code = 1;  // 64
    h.job_id = job_id;
    h.seq = seq;
    h.elem_count = static_cast<uint16_t>(elements.size() / proto::elem_bytes(elem_type));
    const auto bs = *wire::BitString::from_bfr_ids(64, 0, bfr_ids);
    Bytes ina(h.total_bytes());
    const size_t at = proto::write_header(ina.data(), h, bs.data());
    std::memcpy(ina.data() + at, elements.data(), elements.size());
    const uint32_t src = ip4("10.0.1.9");
    return eth_frame(port_mac(kR0), kHostA, RTE_ETHER_TYPE_IPV4,
                     ipv4_packet(src, dst, IPPROTO_UDP,
                                 udp_datagram(src, dst, 40001, proto::kDefaultUdpPort, ina)));
}

Bytes ina_contribution(uint32_t job_id, uint16_t bfr_id, uint32_t seq,
                       const std::vector<int32_t>& values, uint32_t dst) {
    Bytes elements(values.size() * 4);
    std::memcpy(elements.data(), values.data(), elements.size());
    return ina_data(job_id, {bfr_id}, seq, 0 /* int32 */, elements, dst);
}

ina::JobParams ina_job_params(uint32_t job_id, const std::vector<uint16_t>& abm, ina::Role role) {
    ina::JobParams p;
    p.job_id = job_id;
    p.abm = *wire::BitString::from_bfr_ids(64, 0, abm);
    p.op = reduce::Op::sum;
    p.elem_type = reduce::ElemType::int32;
    p.max_elems = 16;
    p.window = 8;
    p.role = role;
    p.idle_timeout = ~uint64_t{0} / 4;
    return p;
}

void fix_ipv4_checksum(Bytes& frame) {
    uint8_t* ip = &frame[kEthLen];
    const size_t hlen = (ip[0] & 0x0f) * 4u;
    ip[10] = ip[11] = 0;
    put16(&ip[10], ref_checksum(ip, hlen));
}

std::vector<Bytes> malformed_udp_frames(const Bytes& good) {
    const auto udp_len = static_cast<uint16_t>(good.size() - kEthLen - kIpLen);
    auto with_udp_len = [&](uint16_t len) {
        Bytes f = good;
        put16(&f[kEthLen + kIpLen + 4], len);
        return f;
    };
    Bytes truncated = good;
    put16(&truncated[kEthLen + 2], kIpLen + 4);  // the IPv4 packet ends inside the UDP header
    fix_ipv4_checksum(truncated);
    Bytes bad_ck = good;
    bad_ck[kEthLen + 10] ^= 0x5a;
    return {with_udp_len(4), with_udp_len(static_cast<uint16_t>(udp_len + 8)),
            with_udp_len(static_cast<uint16_t>(udp_len - 20)), truncated, bad_ck};
}

// ---------------------------------------------------------------------------------------------
// Topology

const char* const kStageYaml = R"(version: 1
ports:
  - name: r0
    devargs: net_null0
    ipv4: [10.0.1.1/24]
  - name: r1
    devargs: net_null1
    ipv4: [10.0.2.1/24, 10.0.3.1/24]
    mtu: 1000
    mac: 02:00:00:00:01:99
  - name: g0
    devargs: net_null2
    ipv4: [10.0.10.1/24]
    l2_group: lan
  - name: g1
    devargs: net_null3
    l2_group: lan
  - name: g2
    devargs: net_null4
    l2_group: lan
  - name: h0
    devargs: net_null5
    l2_group: dmz
  - name: h1
    devargs: net_null6
    l2_group: dmz
routes:
  - prefix: 192.168.0.0/16
    via: 10.0.2.2
  - prefix: 192.168.5.0/24
    via: 10.0.1.2
  - prefix: 172.16.0.0/12
    port: r1
  - prefix: 10.99.0.0/16
    via: 10.0.2.50
neighbours:
  - ip: 10.0.2.2
    mac: 02:aa:00:00:02:02
    port: r1
  - ip: 10.0.1.2
    mac: 02:aa:00:00:01:02
    port: r0
arp:
  request_interval_ms: 1000
)";

const std::string kInaAggregatorYaml = std::string(kStageYaml) + R"(ina:
  jobs:
    - job_id: 7
      role: aggregator
      bsl: 64
      abm: "1-2"
      op: sum
      elem_type: int32
      max_elements: 16
      window: 8
      root: 10.0.2.2
)";

namespace {
rte_ether_addr device_mac(uint16_t port) {
    return rte_ether_addr{{0x02, 0, 0, 0, 0, static_cast<uint8_t>(port + 1)}};
}
}  // namespace

rte_ether_addr port_mac(uint16_t port) {
    if (port == kR1) {
        return rte_ether_addr{{0x02, 0, 0, 0, 0x01, 0x99}};
    }
    return device_mac(port);
}

std::vector<dp::PortBinding> stage_bindings(bool tx_udp_checksum) {
    std::vector<dp::PortBinding> b;
    for (uint16_t id : {kR0, kR1, kG0, kG1, kG2, kH0, kH1}) {
        b.push_back(dp::PortBinding{id, device_mac(id), tx_udp_checksum});
    }
    return b;
}

bool udp_checksum_holds(const rte_ipv4_hdr* ip) {
    const auto* udp = reinterpret_cast<const uint8_t*>(ip + 1);
    uint32_t sum = uint32_t{rte_raw_cksum(udp, get16(udp + 4))} + rte_ipv4_phdr_cksum(ip, 0);
    sum = (sum & 0xffff) + (sum >> 16);
    sum = (sum & 0xffff) + (sum >> 16);
    return sum == 0xffff;
}

Bytes device_completed_udp_checksum(const rte_mbuf* m) {
    Bytes f(rte_pktmbuf_pkt_len(m));
    const void* at = rte_pktmbuf_read(m, 0, rte_pktmbuf_pkt_len(m), f.data());
    if (at != f.data()) {
        std::memcpy(f.data(), at, f.size());
    }
    const size_t l4 = size_t{m->l2_len} + m->l3_len;
    const size_t udp_len = l4 + 8 <= f.size() ? get16(f.data() + l4 + 4) : 0;
    if (udp_len < 8 || l4 + udp_len > f.size()) {
        ADD_FAILURE() << "no whole UDP datagram at l2_len + l3_len = " << l4;
        return f;
    }
    // DPDK's own sum (rte_raw_cksum), not the switch's: the field's pseudo-header sum included.
    auto field = static_cast<uint16_t>(~rte_raw_cksum(f.data() + l4, udp_len));
    if (field == 0) {
        field = 0xffff;
    }
    std::memcpy(f.data() + l4 + 6, &field, 2);
    return f;
}

std::vector<dp::DynamicNeighbour> stage_learned() {
    return {dp::DynamicNeighbour{ip4("10.0.2.7"), kNbR1Host, kR1},
            dp::DynamicNeighbour{ip4("10.0.10.20"), kNbLanHost, kG1}};
}

std::vector<dp::DynamicFdbEntry> stage_fdb() {
    return {dp::DynamicFdbEntry{kHostA, kLan, kG1, kFdbIndexA},
            dp::DynamicFdbEntry{kHostB, kLan, kG0, kFdbIndexB},
            dp::DynamicFdbEntry{kHostC, kDmz, kH1, kFdbIndexC}};
}

// ---------------------------------------------------------------------------------------------
// Fixture

void StageTest::SetUp() {
    const std::string id = std::to_string(unique_id());
    pool = rte_pktmbuf_pool_create(("sp" + id).c_str(), 1023, 0, 0, RTE_MBUF_DEFAULT_BUF_SIZE,
                                   SOCKET_ID_ANY);
    ASSERT_NE(pool, nullptr) << rte_strerror(rte_errno);
    ring = rte_ring_create_elem(("ev" + id).c_str(), sizeof(dp::Event), 64, SOCKET_ID_ANY,
                                RING_F_SP_ENQ | RING_F_SC_DEQ);
    ASSERT_NE(ring, nullptr) << rte_strerror(rte_errno);
    ctx = std::make_unique<pipeline::LcoreContext>();
    ctx->burst_size = 32;
    ctx->tsc_hz = rte_get_tsc_hz();
    ASSERT_GT(ctx->tsc_hz, 0u);
    ctx->now_tsc = kStartTsc;
    ctx->event_interval_tsc = ctx->tsc_hz;  // one second
    pipeline::init_timers(*ctx, kStartTsc);
    ctx->events = ring;
    fdb_seen.assign(64, 0);
    ctx->fdb_seen = fdb_seen.data();
    ctx->fdb_seen_len = static_cast<uint32_t>(fdb_seen.size());
    // The forwarding tables reclaim through a QSBR variable; no reader registers on this one,
    // so a grace period ends at once.
    qsbr = static_cast<rte_rcu_qsbr*>(
        rte_zmalloc("stage_qsbr", rte_rcu_qsbr_get_memsize(1), RTE_CACHE_LINE_SIZE));
    ASSERT_NE(qsbr, nullptr);
    ASSERT_EQ(rte_rcu_qsbr_init(qsbr, 1), 0);
    build();
}

void StageTest::TearDown() {
    if (ctx) {
        for (uint16_t p = 0; p < dp::kMaxPorts; ++p) {
            free_mbufs(take_tx(p));
        }
    }
    if (pool != nullptr) {
        // Every test must account for every mbuf it made: a leak here is a stage bug.
        EXPECT_EQ(rte_mempool_in_use_count(pool), 0u) << "mbufs leaked";
        rte_mempool_free(pool);
    }
    rte_ring_free(ring);
    snap.reset();
    tables.reset();
    rte_free(qsbr);
}

void StageTest::build(const std::string& yaml, const std::vector<dp::DynamicNeighbour>& learned,
                      const std::vector<dp::DynamicFdbEntry>& fdb,
                      const std::vector<dp::PortBinding>& bindings) {
    snap.reset();  // its LPM is large; never hold two
    tables.reset();
    auto r = config::load_string(yaml, "stage.yaml");
    ASSERT_TRUE(r.ok()) << r.error_text();
    std::string error;
    // What the control plane does: the neighbour table holds the static and learned
    // neighbours, the FDB its entries, and the snapshot points at both.
    auto built = compile::build_standalone(*r.config, bindings, learned, fdb, qsbr, unique_id(),
                                           error);
    tables = std::move(built.tables);
    snap = std::move(built.snapshot);
    ASSERT_NE(snap, nullptr) << error;
}

rte_mbuf* StageTest::mbuf(const Bytes& frame, uint16_t port) {
    rte_mbuf* m = rte_pktmbuf_alloc(pool);
    EXPECT_NE(m, nullptr);
    if (m == nullptr) {
        return nullptr;
    }
    char* data = rte_pktmbuf_append(m, static_cast<uint16_t>(frame.size()));
    EXPECT_NE(data, nullptr);
    if (data != nullptr && !frame.empty()) {
        std::memcpy(data, frame.data(), frame.size());
    }
    m->port = port;
    return m;
}

rte_mbuf* StageTest::chained(const Bytes& frame, uint16_t port,
                             const std::vector<uint16_t>& sizes, rte_mempool* from) {
    rte_mempool* mp = from != nullptr ? from : pool;
    rte_mbuf* head = nullptr;
    size_t done = 0;
    for (size_t i = 0; done < frame.size(); ++i) {
        const size_t want = i < sizes.size() ? sizes[i] : frame.size() - done;
        const auto take = static_cast<uint16_t>(std::min(want, frame.size() - done));
        rte_mbuf* seg = rte_pktmbuf_alloc(mp);
        EXPECT_NE(seg, nullptr);
        char* d = seg != nullptr ? rte_pktmbuf_append(seg, take) : nullptr;
        EXPECT_NE(d, nullptr) << "segment of " << take << " bytes";
        if (d == nullptr) {
            rte_pktmbuf_free(seg);
            rte_pktmbuf_free(head);
            return nullptr;
        }
        std::memcpy(d, frame.data() + done, take);
        done += take;
        if (head == nullptr) {
            head = seg;
        } else {
            EXPECT_EQ(rte_pktmbuf_chain(head, seg), 0);
        }
    }
    if (head != nullptr) {
        head->port = port;
    }
    return head;
}

Bytes StageTest::bytes_of(const rte_mbuf* m) {
    Bytes out;
    for (const rte_mbuf* s = m; s != nullptr; s = s->next) {  // a chain reads as one frame
        const auto* p = rte_pktmbuf_mtod(s, const uint8_t*);
        out.insert(out.end(), p, p + rte_pktmbuf_data_len(s));
    }
    return out;
}

std::vector<rte_mbuf*> StageTest::take_tx(uint16_t port) {
    auto& buf = ctx->tx[port];
    std::vector<rte_mbuf*> out(buf.pkts.begin(), buf.pkts.begin() + buf.count);
    buf.count = 0;
    buf.bytes = 0;
    return out;
}

uint32_t StageTest::total_tx() const {
    uint32_t n = 0;
    for (const auto& b : ctx->tx) {
        n += b.count;
    }
    return n;
}

std::vector<dp::Event> StageTest::events() {
    std::vector<dp::Event> out;
    dp::Event ev{};
    while (rte_ring_sc_dequeue_elem(ring, &ev, sizeof ev) == 0) {
        out.push_back(ev);
    }
    return out;
}

uint64_t StageTest::total_drops() const {
    uint64_t n = 0;
    for (auto d : ctx->counters.drops) {
        n += d;
    }
    return n;
}

unsigned StageTest::in_use() const { return rte_mempool_in_use_count(pool); }

void StageTest::free_mbufs(const std::vector<rte_mbuf*>& v) {
    for (auto* m : v) {
        rte_pktmbuf_free(m);
    }
}

}  // namespace ina::test

int main(int argc, char** argv) {
    ::testing::InitGoogleTest(&argc, argv);
    ::testing::AddGlobalTestEnvironment(new ina::test::EalEnvironment);
    return RUN_ALL_TESTS();
}
