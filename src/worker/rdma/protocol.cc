// SPDX-License-Identifier: Apache-2.0
#include "worker/rdma/protocol.h"

namespace ina::rdma {

namespace {

// Big-endian field writer/reader over a fixed buffer; the encoders know their sizes, the reader
// was checked for length before use.
class Writer {
public:
    explicit Writer(std::span<std::byte> out) : out_(out) {}
    void u8(uint8_t v) { out_[pos_++] = std::byte{v}; }
    void u16(uint16_t v) { be(v, 2); }
    void u32(uint32_t v) { be(v, 4); }
    void u64(uint64_t v) { be(v, 8); }

private:
    void be(uint64_t v, int bytes) {
        for (int i = bytes - 1; i >= 0; --i) {
            out_[pos_++] = static_cast<std::byte>(v >> (8 * i));
        }
    }
    std::span<std::byte> out_;
    size_t pos_ = 0;
};

class Reader {
public:
    explicit Reader(std::span<const std::byte> in) : in_(in) {}
    uint8_t u8() { return std::to_integer<uint8_t>(in_[pos_++]); }
    uint16_t u16() { return static_cast<uint16_t>(be(2)); }
    uint32_t u32() { return static_cast<uint32_t>(be(4)); }
    uint64_t u64() { return be(8); }

private:
    uint64_t be(int bytes) {
        uint64_t v = 0;
        for (int i = 0; i < bytes; ++i) {
            v = (v << 8) | std::to_integer<uint8_t>(in_[pos_++]);
        }
        return v;
    }
    std::span<const std::byte> in_;
    size_t pos_ = 0;
};

bool fail(std::string* why, std::string text) {
    if (why) {
        *why = std::move(text);
    }
    return false;
}

// Magic and version, common to both messages.
bool check_header(Reader& r, size_t have, size_t need, std::string* why, uint8_t* version) {
    if (have < need) {
        return fail(why, "private data of " + std::to_string(have) + " bytes, expected at least " +
                             std::to_string(need));
    }
    if (const uint32_t magic = r.u32(); magic != kMagic) {
        return fail(why, "private data without the INAR magic (not an inaswitch RDMA peer)");
    }
    *version = r.u8();
    if (*version != kVersion) {
        return fail(why, "protocol version " + std::to_string(*version) + ", this build speaks " +
                             std::to_string(kVersion));
    }
    return true;
}

}  // namespace

std::optional<reduce::ElemType> parse_elem_type(std::string_view name) {
    for (size_t i = 0; i < reduce::kNumElemTypes; ++i) {
        const auto t = static_cast<reduce::ElemType>(i);
        if (reduce::to_string(t) == name) {
            return t;
        }
    }
    return std::nullopt;
}

std::optional<reduce::Op> parse_op(std::string_view name) {
    for (size_t i = 0; i < reduce::kNumOps; ++i) {
        const auto op = static_cast<reduce::Op>(i);
        if (reduce::to_string(op) == name) {
            return op;
        }
    }
    return std::nullopt;
}

std::optional<Chunking> Chunking::make(reduce::ElemType t, uint64_t elements, uint32_t chunk_bytes,
                                       uint32_t window, std::string* why) {
    const size_t esize = reduce::elem_size(t);
    if (esize == 0) {
        fail(why, "unknown element type");
        return std::nullopt;
    }
    if (elements == 0) {
        fail(why, "the tensor has no elements");
        return std::nullopt;
    }
    if (chunk_bytes == 0 || chunk_bytes % esize != 0) {
        fail(why, "chunk of " + std::to_string(chunk_bytes) +
                      " bytes is not a positive multiple of the " + std::to_string(esize) +
                      "-byte element");
        return std::nullopt;
    }
    if (window == 0) {
        fail(why, "window must be at least 1");
        return std::nullopt;
    }
    if (elements > (uint64_t{1} << 62) / esize) {
        fail(why, "tensor too large");
        return std::nullopt;
    }
    Chunking c{elements * esize, chunk_bytes, window};
    if ((c.tensor_bytes + chunk_bytes - 1) / chunk_bytes > kMaxChunks) {
        fail(why, "tensor of " + std::to_string(c.tensor_bytes) + " bytes needs more than 2^24 "
                  "chunks of " + std::to_string(chunk_bytes) + " bytes (the immediate's chunk "
                  "index): use larger chunks");
        return std::nullopt;
    }
    return c;
}

std::array<std::byte, ConnectRequest::kEncodedSize> ConnectRequest::encode() const {
    std::array<std::byte, kEncodedSize> out{};
    Writer w(out);
    w.u32(kMagic);
    w.u8(version);
    w.u8(static_cast<uint8_t>(mode));
    w.u8(static_cast<uint8_t>(elem_type));
    w.u8(static_cast<uint8_t>(op));
    w.u32(job_id);
    w.u16(rank);
    w.u16(world);
    w.u64(elements);
    w.u32(chunk_bytes);
    w.u32(window);
    w.u64(result_addr);
    w.u32(result_rkey);
    w.u8(resuming ? 1 : 0);
    w.u8(0);
    w.u16(0);
    w.u32(resume_from);
    w.u32(results_from);
    return out;
}

std::optional<ConnectRequest> ConnectRequest::decode(std::span<const std::byte> data,
                                                     std::string* why) {
    Reader r(data);
    ConnectRequest q;
    if (!check_header(r, data.size(), kBaseSize, why, &q.version)) {
        return std::nullopt;
    }
    const uint8_t mode = r.u8();
    const uint8_t elem = r.u8();
    const uint8_t op = r.u8();
    if (mode != static_cast<uint8_t>(Mode::server_to_server) &&
        mode != static_cast<uint8_t>(Mode::server_to_switch)) {
        fail(why, "unknown mode " + std::to_string(mode));
        return std::nullopt;
    }
    const auto t = reduce::elem_type_from_wire(elem);
    const auto o = reduce::op_from_wire(op);
    if (!t || !o) {
        fail(why, "unknown element type " + std::to_string(elem) + " or op " + std::to_string(op));
        return std::nullopt;
    }
    q.mode = static_cast<Mode>(mode);
    q.elem_type = *t;
    q.op = *o;
    q.job_id = r.u32();
    q.rank = r.u16();
    q.world = r.u16();
    q.elements = r.u64();
    q.chunk_bytes = r.u32();
    q.window = r.u32();
    q.result_addr = r.u64();
    q.result_rkey = r.u32();
    if (data.size() >= kResumeSize) {
        q.resuming = (r.u8() & 1) != 0;
        r.u8();
        r.u16();
        q.resume_from = r.u32();
    }
    if (data.size() >= kEncodedSize) {
        q.results_from = r.u32();
    }
    return q;
}

bool ConnectRequest::same_job(const ConnectRequest& o) const {
    return mode == o.mode && elem_type == o.elem_type && op == o.op && job_id == o.job_id &&
           world == o.world && elements == o.elements && chunk_bytes == o.chunk_bytes &&
           window == o.window;
}

std::string_view to_string(RejectReason r) {
    switch (r) {
    case RejectReason::malformed: return "malformed connect request";
    case RejectReason::unsupported: return "unsupported mode or version";
    case RejectReason::wrong_job: return "parameters differ from the root's job";
    case RejectReason::bad_rank: return "rank outside 1..world or already connected";
    case RejectReason::no_resources: return "root out of resources";
    }
    return "unknown reason";
}

std::array<std::byte, ConnectReply::kEncodedSize> ConnectReply::encode() const {
    std::array<std::byte, kEncodedSize> out{};
    Writer w(out);
    w.u32(kMagic);
    w.u8(version);
    w.u8(status);
    w.u16(0);
    w.u32(job_id);
    w.u64(contribution_addr);
    w.u32(contribution_rkey);
    w.u8(static_cast<uint8_t>((resumed ? 1 : 0) | (has_complete ? 2 : 0)));
    w.u8(0);
    w.u16(0);
    w.u32(resume_chunk);
    w.u32(complete_from);
    for (const uint8_t b : complete) {
        w.u8(b);
    }
    return out;
}

std::optional<ConnectReply> ConnectReply::decode(std::span<const std::byte> data,
                                                 std::string* why) {
    Reader r(data);
    ConnectReply p;
    if (!check_header(r, data.size(), kBaseSize, why, &p.version)) {
        return std::nullopt;
    }
    p.status = r.u8();
    r.u16();
    p.job_id = r.u32();
    p.contribution_addr = r.u64();
    p.contribution_rkey = r.u32();
    if (data.size() >= kResumeSize) {
        const uint8_t flags = r.u8();
        p.resumed = (flags & 1) != 0;
        p.has_complete = (flags & 2) != 0;
        r.u8();
        r.u16();
        p.resume_chunk = r.u32();
    }
    if (data.size() >= kEncodedSize) {
        p.complete_from = r.u32();
        for (uint8_t& b : p.complete) {
            b = r.u8();
        }
    }
    return p;
}

}  // namespace ina::rdma
