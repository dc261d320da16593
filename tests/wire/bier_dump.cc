// SPDX-License-Identifier: Apache-2.0
// bier_dump: prints, as lowercase hex on one line, the RFC 8296 header (fixed part + BitString)
// that wire/bier_header.h writes for the fields given on the command line. scapy_crosscheck.py
// compares it with what scapy builds. Unset fields keep BierHeader's defaults (S 1, nibble 0101,
// everything else 0) and BSL 3 (256 bits).
//
//   bier_dump --bift-id 0x30000 --ttl 64 --bsl 3 --entropy 0x12345 --proto 4 --bfir-id 7
//             --si 0 --bfr-ids 1,3,256          (one command line)
//
// Numbers are decimal or 0x-prefixed hex. --bfr-ids uses the configuration syntax ("1,2,5-8")
// and must lie in set --si. Exit status 2 on bad arguments.
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "wire/bier_header.h"

namespace {

using ina::wire::BierHeader;
using ina::wire::BitString;

std::optional<uint32_t> parse_number(const char* text, uint32_t max) {
    if (text == nullptr || *text == '\0' || *text == '-' || *text == '+') {
        return std::nullopt;
    }
    errno = 0;
    char* end = nullptr;
    const unsigned long value = std::strtoul(text, &end, 0);
    if (errno != 0 || *end != '\0' || value > max) {
        return std::nullopt;
    }
    return static_cast<uint32_t>(value);
}

int usage(const std::string& problem) {
    std::fprintf(stderr,
                 "bier_dump: %s\n"
                 "usage: bier_dump [--bift-id N] [--tc N] [--s N] [--ttl N] [--nibble N] [--ver N]\n"
                 "                 [--bsl CODE] [--entropy N] [--oam N] [--rsv N] [--dscp N]\n"
                 "                 [--proto N] [--bfir-id N] [--si N] [--bfr-ids LIST]\n",
                 problem.c_str());
    return 2;
}

}  // namespace

int main(int argc, char** argv) {
    BierHeader h;
    h.bsl = 3;
    uint32_t si = 0;
    std::string bfr_ids;

    // Each option: its name, the largest value it takes, and where the value goes.
    struct NumericOption {
        std::string_view name;
        uint32_t max;
        void (*store)(BierHeader&, uint32_t);
    };
    static constexpr NumericOption kOptions[] = {
        {"--bift-id", 0xFFFFFFFF, [](BierHeader& hh, uint32_t v) { hh.bift_id = v; }},
        {"--tc", 0xFF, [](BierHeader& hh, uint32_t v) { hh.tc = static_cast<uint8_t>(v); }},
        {"--s", 0xFF, [](BierHeader& hh, uint32_t v) { hh.s = static_cast<uint8_t>(v); }},
        {"--ttl", 0xFF, [](BierHeader& hh, uint32_t v) { hh.ttl = static_cast<uint8_t>(v); }},
        {"--nibble", 0xFF, [](BierHeader& hh, uint32_t v) { hh.nibble = static_cast<uint8_t>(v); }},
        {"--ver", 0xFF, [](BierHeader& hh, uint32_t v) { hh.version = static_cast<uint8_t>(v); }},
        {"--bsl", 0xFF, [](BierHeader& hh, uint32_t v) { hh.bsl = static_cast<uint8_t>(v); }},
        {"--entropy", 0xFFFFFFFF, [](BierHeader& hh, uint32_t v) { hh.entropy = v; }},
        {"--oam", 0xFF, [](BierHeader& hh, uint32_t v) { hh.oam = static_cast<uint8_t>(v); }},
        {"--rsv", 0xFF, [](BierHeader& hh, uint32_t v) { hh.rsv = static_cast<uint8_t>(v); }},
        {"--dscp", 0xFF, [](BierHeader& hh, uint32_t v) { hh.dscp = static_cast<uint8_t>(v); }},
        {"--proto", 0xFF, [](BierHeader& hh, uint32_t v) { hh.proto = static_cast<uint8_t>(v); }},
        {"--bfir-id", 0xFFFF, [](BierHeader& hh, uint32_t v) { hh.bfir_id = static_cast<uint16_t>(v); }},
    };

    const std::vector<std::string_view> args(argv + 1, argv + argc);
    for (size_t i = 0; i < args.size(); i += 2) {
        const std::string_view name = args[i];
        if (i + 1 >= args.size()) {
            return usage("missing value for " + std::string(name));
        }
        const char* value = argv[i + 2];
        if (name == "--bfr-ids") {
            bfr_ids = value;
            continue;
        }
        if (name == "--si") {
            const auto v = parse_number(value, 0xFFFF);
            if (!v) {
                return usage("bad value for --si");
            }
            si = *v;
            continue;
        }
        bool known = false;
        for (const NumericOption& option : kOptions) {
            if (option.name == name) {
                const auto v = parse_number(value, option.max);
                if (!v) {
                    return usage("bad value for " + std::string(name));
                }
                option.store(h, *v);
                known = true;
            }
        }
        if (!known) {
            return usage("unknown option " + std::string(name));
        }
    }

    const auto bsl_bits = ina::wire::bsl_bits_from_code(h.bsl);
    if (!bsl_bits) {
        return usage("--bsl must be an RFC 8296 code point, 1..7");
    }
    const auto bitstring = BitString::parse_bfr_ids(*bsl_bits, static_cast<uint16_t>(si), bfr_ids);
    if (!bitstring) {
        return usage("--bfr-ids is malformed or not within set --si");
    }
    std::vector<uint8_t> buf(ina::wire::kBierFixedBytes + bitstring->size_bytes());
    if (!ina::wire::write_bier_header(buf.data(), buf.size(), h, *bitstring)) {
        return usage("a field does not fit its width");
    }
    for (const uint8_t byte : buf) {
        std::printf("%02x", byte);
    }
    std::printf("\n");
    return 0;
}
