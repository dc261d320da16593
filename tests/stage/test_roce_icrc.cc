// SPDX-License-Identifier: Apache-2.0
// The ICRC over mbufs, single-segment and chained at awkward places (inside the IP header, the
// BTH, the payload, odd lengths): the same value as over the contiguous frame, for every frame
// Linux rdma_rxe sent (tests/data/rxe-rocev2-sample.pcap); the in-place path the packet path
// uses gives it too and leaves every byte as it was.
#include "roce/icrc.h"
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
        EXPECT_EQ(roce::icrc_in_place(f.data() + 14, f.size() - 14), want) << "frame " << i;
        EXPECT_EQ(f, frames[i]) << "frame " << i << " restored";
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
    EXPECT_EQ(roce::icrc_in_place(cut.data() + 14, cut.size() - 14), 0u);
    EXPECT_EQ(roce::icrc_in_frame(cut.data() + 14, cut.size() - 14), 0u);
    rte_pktmbuf_free(m);
}

}  // namespace
}  // namespace ina::test
