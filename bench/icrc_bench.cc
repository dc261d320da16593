// SPDX-License-Identifier: Apache-2.0
// RoCEv2 ICRC cost per packet (src/roce/icrc.h: the const path and the in-place one the packet
// path uses) for 256 B .. 4 KiB payloads, single segment, and the plain CRC-32 over the same
// bytes on each path of src/roce/crc32.h against DPDK's rte_net_crc (its AVX-512 path: the EAL
// is started with --force-max-simd-bitwidth=512) and zlib's crc32, in the same run. Then the
// check folded into an add (crc32_masked_with_add, docs/rdma.md): a packet's masked CRC and
// an fp32 add of its payload into a 64-byte-aligned accumulator, one after the other (the reduce
// library's kernel) and in one pass.
#include <rte_eal.h>
#include <unistd.h>
#include <zlib.h>

#include <chrono>
#include <cstring>
#include <cstdio>
#include <string>
#include <vector>

#include <rte_net_crc.h>

#include "roce/crc32.h"
#include "roce/icrc.h"
#include "roce/wire.h"
#include "reduce/reduce.h"

namespace {

template <typename F>
double ns_per_call(F&& f, int iterations) {
    const auto t0 = std::chrono::steady_clock::now();
    uint32_t sink = 0;
    for (int i = 0; i < iterations; ++i) {
        sink ^= f();
    }
    const auto t1 = std::chrono::steady_clock::now();
    if (sink == 0xdeadbeef) {
        std::puts("");  // keep the result alive
    }
    return std::chrono::duration<double, std::nano>(t1 - t0).count() / iterations;
}

}  // namespace

int main() {
    // As in the switch: EAL init sets the SIMD width DPDK may use, then the ICRC picks its path.
    const std::string prefix = "--file-prefix=icrcbench" + std::to_string(getpid());
    std::vector<const char*> eal = {"icrc_bench", "--no-huge", "-m", "64", "--no-pci",
                                    "--log-level=*:error", prefix.c_str(), "-l", "0",
                                    "--force-max-simd-bitwidth=512"};
    if (rte_eal_init(static_cast<int>(eal.size()), const_cast<char**>(eal.data())) < 0) {
        std::fprintf(stderr, "EAL init failed\n");
        return 1;
    }
    rte_net_crc_set_alg(RTE_NET_CRC_AVX512);
    using ina::roce::CrcIsa;
    std::printf("crc32 path: %s\n", std::string(ina::roce::to_string(ina::roce::crc32_isa())).c_str());
    std::printf("payload_bytes icrc_ns icrc_in_frame_ns zlib_crc32_ns "
                "rte_net_crc_ns crc_table_ns crc_pclmul_ns crc_vpclmul512_ns icrc_in_frame_gbit_s\n");
    for (size_t payload : {256u, 1024u, 4096u}) {
        // IPv4 + UDP + BTH + RETH + payload + ICRC, a WRITE_ONLY as rxe sends it.
        const size_t total = 20 + 8 + ina::roce::kBthBytes + ina::roce::kRethBytes + payload + 4;
        // The packet behind 8 bytes (icrc_in_frame's room, an Ethernet header's tail in a frame).
        std::vector<uint8_t> frame(8 + total, 0x5A);
        uint8_t* p = frame.data() + 8;
        p[0] = 0x45;
        p[2] = static_cast<uint8_t>(total >> 8);
        p[3] = static_cast<uint8_t>(total);
        p[28] = ina::roce::op::kWriteOnly;
        p[29] = 0;
        const int n = 2'000'000 / static_cast<int>(payload / 256);
        const double icrc = ns_per_call([&] { return ina::roce::icrc(p, total); }, n);
        const double in_frame =
            ns_per_call([&] { return ina::roce::icrc_in_frame(p, total); }, n);
        const double zl = ns_per_call(
            [&] { return static_cast<uint32_t>(crc32(0, p, static_cast<uInt>(total))); },
            n);
        const double rte = ns_per_call(
            [&] { return rte_net_crc_calc(p, static_cast<uint32_t>(total), RTE_NET_CRC32_ETH); },
            n);
        double path_ns[3] = {0, 0, 0};  // -1: not on this CPU
        for (CrcIsa isa : {CrcIsa::table, CrcIsa::pclmul, CrcIsa::vpclmul512}) {
            path_ns[static_cast<int>(isa)] =
                ina::roce::crc32_isa_supported(isa)
                    ? ns_per_call([&] { return ina::roce::crc32_update_with(isa, 0, p, total); }, n)
                    : -1;
        }
        std::printf("%zu %.1f %.1f %.1f %.1f %.1f %.1f %.1f %.1f\n", payload, icrc, in_frame, zl,
                    rte, path_ns[0], path_ns[1], path_ns[2],
                    static_cast<double>(total) * 8 / in_frame);
    }
    std::printf("payload_bytes crc_ns add_ns crc_then_add_ns fused_ns\n");
    const auto& f32 = ina::reduce::kernels()[ina::reduce::ElemType::fp32];
    for (size_t payload : {1024u, 4096u}) {
        const size_t total = 20 + 8 + ina::roce::kBthBytes + ina::roce::kRethBytes + 4 + payload + 4;
        std::vector<uint8_t> frame(8 + total);
        for (size_t i = 0; i < frame.size(); ++i) {
            frame[i] = static_cast<uint8_t>(i % 4 == 3 ? 0x3F : i * 7);  // finite floats
        }
        const uint8_t* payload_at = frame.data() + 8 + total - 4 - payload;
        const size_t n = payload / 4;
        std::vector<float> room(n + 16, 1.0f);
        const auto base = reinterpret_cast<uintptr_t>(room.data());
        auto* acc = reinterpret_cast<float*>((base + 63) / 64 * 64);
        uint8_t mask[64] = {};
        std::memset(mask, 0xFF, 8);
        const size_t covered = 8 + total - 4;
        const int iters = 2'000'000 / static_cast<int>(payload / 256);
        const double crc = ns_per_call(
            [&] { return ina::roce::crc32_update_masked(0, frame.data(), covered, mask); }, iters);
        const double add = ns_per_call(
            [&] {
                f32.accumulate(acc, payload_at, n, ina::reduce::Op::sum);
                return 0u;
            },
            iters);
        const double both = ns_per_call(
            [&] {
                const uint32_t c = ina::roce::crc32_update_masked(0, frame.data(), covered, mask);
                f32.accumulate(acc, payload_at, n, ina::reduce::Op::sum);
                return c;
            },
            iters);
        const double fused = ns_per_call(
            [&] {
                uint32_t c = 0;
                if (!ina::roce::crc32_masked_with_add(c, frame.data(), covered, mask,
                                                      ina::roce::FusedAdd::fp32, acc, payload_at,
                                                      n, false)) {
                    return 0u;  // not on this CPU: the column reads the call's cost alone
                }
                return c;
            },
            iters);
        std::printf("%zu %.1f %.1f %.1f %.1f\n", payload, crc, add, both, fused);
    }
    rte_eal_cleanup();
    return 0;
}
