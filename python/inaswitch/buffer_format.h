// SPDX-License-Identifier: Apache-2.0
// What the inaswitch extension modules (_native: the UDP client, _rdma: the RDMA
// server-to-switch client) share: reduction names and buffer-protocol formats mapped to the
// wire's element types and ops.
#pragma once

#include <pybind11/pybind11.h>

#include <cstddef>
#include <optional>
#include <string_view>

#include "reduce/reduce.h"

namespace ina::python {

// "fp32" -> reduce::ElemType::fp32, "sum" -> Op::sum: the names reduce::to_string gives.
template <typename Enum, size_t kCount>
std::optional<Enum> named(std::string_view name) {
    for (size_t v = 0; v < kCount; ++v) {
        const auto e = static_cast<Enum>(v);
        if (reduce::to_string(e) == name) {
            return e;
        }
    }
    return std::nullopt;
}
inline constexpr auto elem_type_named = named<reduce::ElemType, reduce::kNumElemTypes>;
inline constexpr auto op_named = named<reduce::Op, reduce::kNumOps>;

// A buffer-protocol format with its item size -> the wire element type. Native byte order only
// ('=', '<', '@' or none): the wire is little-endian and so is every host this builds on.
inline std::optional<reduce::ElemType> elem_type_of_format(std::string_view format,
                                                           pybind11::ssize_t itemsize) {
    if (!format.empty() && (format[0] == '<' || format[0] == '=' || format[0] == '@')) {
        format.remove_prefix(1);
    }
    if (format.size() != 1) {
        return std::nullopt;
    }
    switch (format[0]) {
    case 'f': return itemsize == 4 ? std::optional(reduce::ElemType::fp32) : std::nullopt;
    case 'd': return itemsize == 8 ? std::optional(reduce::ElemType::fp64) : std::nullopt;
    case 'e': return itemsize == 2 ? std::optional(reduce::ElemType::fp16) : std::nullopt;
    case 'i':
    case 'l':
    case 'q':
        if (itemsize == 4) return reduce::ElemType::int32;
        if (itemsize == 8) return reduce::ElemType::int64;
        return std::nullopt;
    default: return std::nullopt;
    }
}

// C-contiguous: each stride is the product of the later extents times the item size.
inline bool c_contiguous(const pybind11::buffer_info& info) {
    pybind11::ssize_t expect = info.itemsize;
    for (pybind11::ssize_t d = info.ndim - 1; d >= 0; --d) {
        const auto i = static_cast<size_t>(d);
        if (info.shape[i] > 1 && info.strides[i] != expect) {
            return false;
        }
        expect *= info.shape[i];
    }
    return true;
}

}  // namespace ina::python
