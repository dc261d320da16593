-- SPDX-License-Identifier: Apache-2.0
-- Wireshark/tshark dissector for INA v1 (docs/protocol.md), registered on UDP port 9470:
--   tshark -X lua_script:tools/wireshark/ina.lua -r capture.pcap
--   wireshark: copy to ~/.local/lib/wireshark/plugins/ (or Help > About > Folders > Personal Lua Plugins)
-- Every header field is shown; the P-BM is shown as its BFR-ids (RFC 8279: BP 1 is the least
-- significant bit of the last octet, BFR-id = SI * BSL + BP); elements are listed by type.
-- Malformed packets (bad magic, truncation, length mismatch) get expert info, never an error.

local ina = Proto("ina", "In-Network Aggregation v1")

local types = {[1] = "data", [2] = "result"}
local ops = {[0] = "sum", [1] = "prod", [2] = "min", [3] = "max"}
local etypes = {[0] = "int32", [1] = "fp32", [2] = "fp16", [3] = "bf16", [4] = "int64", [5] = "fp64"}
local esize = {[0] = 4, [1] = 4, [2] = 2, [3] = 2, [4] = 8, [5] = 8}
local bsl_bits = {[1] = 64, [2] = 128, [3] = 256, [4] = 512, [5] = 1024, [6] = 2048, [7] = 4096}

local f = ina.fields
f.magic = ProtoField.string("ina.magic", "Magic")
f.version = ProtoField.uint8("ina.version", "Version", base.DEC, nil, 0xF0)
f.type = ProtoField.uint8("ina.type", "Type", base.DEC, types, 0x0F)
f.flags = ProtoField.uint8("ina.flags", "Flags", base.HEX)
f.flag_retransmit = ProtoField.bool("ina.flags.retransmit", "Retransmit", 8, nil, 0x01)
f.flag_ecn_echo = ProtoField.bool("ina.flags.ecn_echo", "ECN echo", 8, nil, 0x02)
f.flag_fallback = ProtoField.bool("ina.flags.fallback", "Fallback", 8, nil, 0x04)
f.flag_lowest = ProtoField.bool("ina.flags.lowest_missing", "Lowest missing result", 8, nil, 0x08)
f.lowest = ProtoField.uint32("ina.lowest_missing", "Lowest missing result")
f.op = ProtoField.uint8("ina.op", "Op", base.DEC, ops, 0xF0)
f.etype = ProtoField.uint8("ina.elem_type", "Element type", base.DEC, etypes, 0x0F)
f.bsl = ProtoField.uint8("ina.bsl", "BSL code", base.DEC, nil, 0xF0)
f.bsl_bits = ProtoField.uint16("ina.bsl_bits", "BitString length (bits)")
f.set_id = ProtoField.uint8("ina.set_id", "Set id (SI)")
f.job = ProtoField.uint32("ina.job_id", "Job id")
f.seq = ProtoField.uint32("ina.seq", "Sequence number")
f.count = ProtoField.uint16("ina.elem_count", "Element count")
f.pbm = ProtoField.bytes("ina.pbm", "P-BM")
f.bfr_ids = ProtoField.string("ina.pbm.bfr_ids", "P-BM BFR-ids")
f.elements = ProtoField.bytes("ina.elements", "Elements")
f.element = ProtoField.string("ina.element", "Element")

local e_malformed = ProtoExpert.new("ina.malformed", "Malformed INA packet",
                                    expert.group.MALFORMED, expert.severity.ERROR)
ina.experts = {e_malformed}

local function bfr_ids(tvb, bytes, si, bits)
    local ids = {}
    for octet = 0, bytes - 1 do
        local v = tvb:range(octet, 1):uint()
        for bit = 0, 7 do
            if bit32.band(v, bit32.lshift(1, bit)) ~= 0 then
                local bp = (bytes - 1 - octet) * 8 + bit + 1
                table.insert(ids, si * bits + bp)
            end
        end
    end
    table.sort(ids)
    local s = {}
    for _, id in ipairs(ids) do table.insert(s, tostring(id)) end
    return table.concat(s, ",")
end

function ina.dissector(tvb, pinfo, tree)
    local len = tvb:len()
    local t = tree:add(ina, tvb(), "INA v1")
    pinfo.cols.protocol = "INA"
    if len < 24 then
        t:add_proto_expert_info(e_malformed, "shorter than the 24-byte header")
        return len
    end
    t:add(f.magic, tvb(0, 2))
    if tvb(0, 1):uint() ~= 0x49 or tvb(1, 1):uint() ~= 0x4E then
        t:add_proto_expert_info(e_malformed, "bad magic (not 'IN')")
        return len
    end
    t:add(f.version, tvb(2, 1))
    t:add(f.type, tvb(2, 1))
    local ft = t:add(f.flags, tvb(3, 1))
    ft:add(f.flag_retransmit, tvb(3, 1))
    ft:add(f.flag_ecn_echo, tvb(3, 1))
    ft:add(f.flag_fallback, tvb(3, 1))
    ft:add(f.flag_lowest, tvb(3, 1))
    t:add(f.op, tvb(4, 1))
    t:add(f.etype, tvb(4, 1))
    t:add(f.bsl, tvb(5, 1))
    local code = bit32.rshift(tvb(5, 1):uint(), 4)
    local bits = bsl_bits[code]
    t:add(f.set_id, tvb(6, 1))
    t:add(f.job, tvb(8, 4))
    t:add(f.seq, tvb(12, 4))
    t:add(f.count, tvb(16, 2))
    if bit32.band(tvb(3, 1):uint(), 0x08) ~= 0 then
        t:add(f.lowest, tvb(20, 4))  -- the sender's lowest missing result (data packets)
    end
    local kind = bit32.band(tvb(2, 1):uint(), 0x0F)
    local etype = bit32.band(tvb(4, 1):uint(), 0x0F)
    local count = tvb(16, 2):uint()
    pinfo.cols.info = string.format("INA %s job %d seq %d", types[kind] or "?",
                                    tvb(8, 4):uint(), tvb(12, 4):uint())
    if bits == nil then
        t:add_proto_expert_info(e_malformed, "reserved BSL code " .. code)
        return len
    end
    t:add(f.bsl_bits, tvb(5, 1), bits)
    local bs_bytes = bits / 8
    local size = esize[etype]
    if size == nil or 24 + bs_bytes + count * size ~= len then
        t:add_proto_expert_info(e_malformed, "length " .. len .. " does not match the header")
        return len
    end
    local pt = t:add(f.pbm, tvb(24, bs_bytes))
    local ids = bfr_ids(tvb(24, bs_bytes):tvb(), bs_bytes, tvb(6, 1):uint(), bits)
    pt:add(f.bfr_ids, tvb(24, bs_bytes), ids)
    pinfo.cols.info:append(" P-BM {" .. ids .. "}")
    if count > 0 then
        local et = t:add(f.elements, tvb(24 + bs_bytes, count * size))
        for i = 0, count - 1 do
            local r = tvb(24 + bs_bytes + i * size, size)
            local v
            if etype == 0 then v = tostring(r:le_int())
            elseif etype == 1 or etype == 5 then v = tostring(r:le_float())
            elseif etype == 4 then v = tostring(r:le_int64())
            else v = string.format("0x%04x", r:le_uint()) end
            et:add(f.element, r, v)
        end
    end
    return len
end

DissectorTable.get("udp.port"):add(9470, ina)
