// SPDX-License-Identifier: Apache-2.0
// The ICRC over mbufs, single-segment and chained at awkward places (inside the IP header, the
// BTH, the payload, odd lengths): the same value as over the contiguous frame, for every frame
// Linux rdma_rxe sent (tests/data/rxe-rocev2-sample.pcap); the in-place path the packet path
// uses gives it too and leaves every byte as it was; and joined from the headers' CRC and the
// payload's (IcrcJoin, one payload CRC for every rank's result WRITE) it is the ICRC the kernel
// put on each frame.
#include "roce/icrc.h"
#include "roce/wire.h"
#include "tests/roce/pcap_frames.h"
#include "stage_util.h"

namespace ina::test {
namespace {

std::vector<Bytes> rxe_frames() {
    return read_pcap_frames(INA_TEST_DATA "/rxe-rocev2-sample.pcap");
}

class RoceIcrcMbuf : public StageTest {};

TEST_F(RoceIcrcMbuf, ChainsGiveTheSameIcrcAsTheFrame) {
    const auto frames = rxe_frames();
    ASSERT_EQ(frames.size(), 48u);
    const std::vector<std::vector<uint16_t>> splits = {
        {}, {14 + 5}, {14 + 20 + 8 + 3, 5}, {21, 1, 1, 33}, {60, 7}, {100, 101, 3}};
    for (size_t i = 0; i < frames.size(); ++i) {
        const Bytes& f = frames[i];
        const uint32_t want = roce::read_icrc(f.data() + f.size());
        EXPECT_EQ(roce::icrc(f.data() + 14, f.size() - 14), want) << "frame " << i;
        for (const auto& s : splits) {
            rte_mbuf* m = s.empty() ? mbuf(f, 0) : chained(f, 0, s);
            ASSERT_NE(m, nullptr);
            EXPECT_EQ(roce::icrc(m, 14), want) << "frame " << i << ", " << m->nb_segs << " segs";
            rte_pktmbuf_free(m);
        }
    }
    for (size_t i = 0; i < frames.size(); ++i) {
        Bytes f = frames[i];
        const uint32_t want = roce::read_icrc(f.data() + f.size());
        EXPECT_EQ(roce::icrc_in_frame(f.data() + 14, f.size() - 14), want) << "frame " << i;
        EXPECT_EQ(f, frames[i]) << "frame " << i << " restored after icrc_in_frame";
        rte_mbuf* m = mbuf(f, 0);
        ASSERT_NE(m, nullptr);
        EXPECT_EQ(roce::icrc_writable(m, 14), want) << "frame " << i;
        EXPECT_EQ(bytes_of(m), f) << "frame " << i << " restored in the mbuf";
        rte_mbuf_refcnt_update(m, 1);  // shared: the const path, the same value
        EXPECT_EQ(roce::icrc_writable(m, 14), want) << "frame " << i << " shared";
        rte_pktmbuf_free(m);
        rte_pktmbuf_free(m);
        m = chained(f, 0, {14 + 20 + 8 + 3, 5});
        EXPECT_EQ(roce::icrc_writable(m, 14), want) << "frame " << i << " chained";
        rte_pktmbuf_free(m);
    }
    // Ethernet padding after the IP packet is not covered; a frame shorter than its IP header
    // says gives 0.
    Bytes padded = frames[0];
    const uint32_t want = roce::read_icrc(padded.data() + padded.size());
    padded.insert(padded.end(), 20, 0);
    rte_mbuf* m = chained(padded, 0, {30});
    EXPECT_EQ(roce::icrc(m, 14), want);
    rte_pktmbuf_free(m);
    Bytes cut(frames[0].begin(), frames[0].end() - 5);
    m = mbuf(cut, 0);
    EXPECT_EQ(roce::icrc(m, 14), 0u);
    EXPECT_EQ(roce::icrc_writable(m, 14), 0u);
    EXPECT_EQ(roce::icrc(cut.data() + 14, cut.size() - 14), 0u);
    EXPECT_EQ(roce::icrc_in_frame(cut.data() + 14, cut.size() - 14), 0u);
    rte_pktmbuf_free(m);
}

// The kernel's ICRCs, rebuilt from two parts: the masked headers' CRC (in place, restored) and
// the payload's, joined by the operator for the payload's length. Every frame of the capture
// (ACKs with no payload too: the operator for 0 bytes is the identity).
TEST_F(RoceIcrcMbuf, JoinedFromHeadersAndPayloadIsTheKernelsIcrc) {
    const auto frames = rxe_frames();
    ASSERT_EQ(frames.size(), 48u);
    size_t with_payload = 0;
    for (size_t i = 0; i < frames.size(); ++i) {
        Bytes f = frames[i];
        uint8_t* l3 = f.data() + 14;
        const size_t ip_len = (l3[0] >> 4) == 6 ? 40 : (l3[0] & 0x0F) * 4u;
        const size_t total = (l3[0] >> 4) == 6 ? 40 + (size_t{l3[4]} << 8 | l3[5])
                                               : size_t{l3[2]} << 8 | l3[3];
        const size_t udp_payload = total - ip_len - 8;
        const auto parsed = roce::parse(l3 + ip_len + 8, udp_payload);
        ASSERT_TRUE(parsed.packet.has_value()) << "frame " << i;
        const size_t headers = ip_len + 8 + parsed.packet->header_bytes;
        const size_t payload = total - headers - roce::kIcrcBytes;  // with its pad
        with_payload += payload != 0;
        const roce::IcrcJoin join(static_cast<uint32_t>(payload));
        EXPECT_EQ(join.payload_bytes(), payload);
        const uint32_t head = roce::icrc_headers_in_frame(l3, headers);
        EXPECT_EQ(f, frames[i]) << "frame " << i << " restored after icrc_headers_in_frame";
        EXPECT_EQ(join.join(head, roce::icrc_payload(l3 + headers, payload)),
                  roce::read_icrc(f.data() + f.size()))
            << "frame " << i << ", " << payload << " payload bytes";
        // Another length's operator gives another value.
        if (payload != 0) {
            const roce::IcrcJoin other(static_cast<uint32_t>(payload + 4));
            EXPECT_NE(other.join(head, roce::icrc_payload(l3 + headers, payload)),
                      roce::read_icrc(f.data() + f.size()))
                << "frame " << i;
        }
    }
    EXPECT_GT(with_payload, 0u);
    // Not RoCEv2 headers (IHL below 5), or headers that leave no room for the ICRC: 0.
    Bytes bad = frames[0];
    bad[14] = 0x44;
    EXPECT_EQ(roce::icrc_headers_in_frame(bad.data() + 14, 20 + 8 + 12), 0u);
    Bytes f = frames[0];
    EXPECT_EQ(roce::icrc_headers_in_frame(f.data() + 14, f.size() - 14), 0u);
}

}  // namespace
}  // namespace ina::test
