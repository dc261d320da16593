// SPDX-License-Identifier: Apache-2.0
// inaswitch._native: the C++ INA worker client (src/worker/client.h) for Python. Thin on
// purpose: inaswitch/__init__.py maps tensors (torch, __array_interface__) to an address and a
// length and native errors to exception classes; this module owns the socket and the GIL rules.
//
// Invariants: allreduce never holds the GIL while it waits on the network (so the workers of a
// job can be threads of one process, and a training loop's other threads keep running); a
// buffer given through the buffer protocol stays exported (numpy cannot resize it) until the
// call returns; one AllReduce at a time per client (the mutex), since a client is one socket
// and one sequence space.
#include <pybind11/pybind11.h>
#include <unistd.h>

#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <string_view>

#include "buffer_format.h"
#include "reduce/reduce.h"
#include "wire/bitstring.h"
#include "worker/client.h"

namespace py = pybind11;
using ina::python::elem_type_named;
using ina::python::elem_type_of_format;
using ina::python::op_named;
using ina::reduce::ElemType;
using ina::reduce::Op;
using ina::worker::ErrorKind;

namespace {

// inaswitch._native.NativeError(kind, message): __init__.py turns it into inaswitch.*Error.
PyObject* g_native_error = nullptr;

std::string_view kind_name(ErrorKind k) {
    switch (k) {
    case ErrorKind::timeout: return "timeout";
    case ErrorKind::root_unreachable: return "root_unreachable";
    case ErrorKind::socket: return "socket";
    case ErrorKind::invalid: return "invalid";
    }
    return "invalid";
}

[[noreturn]] void raise_native(std::string_view kind, const std::string& message) {
    PyErr_SetObject(g_native_error,
                    py::make_tuple(py::str(kind.data(), kind.size()), message).ptr());
    throw py::error_already_set();
}

py::dict stats_dict(const ina::worker::Stats& s) {
    py::dict d;
    d["chunks"] = s.chunks;
    d["packets_sent"] = s.packets_sent;
    d["retransmits"] = s.retransmits;
    d["fast_retransmits"] = s.fast_retransmits;
    d["gso_datagrams"] = s.gso_datagrams;
    d["results"] = s.results;
    d["duplicate_results"] = s.duplicate_results;
    d["ignored"] = s.ignored;
    d["bad_results"] = s.bad_results;
    d["unreachable"] = s.unreachable;
    d["seconds"] = s.seconds;
    d["gbit_per_s"] = s.goodput_gbit_per_s;
    return d;
}

// One worker of one job. The C++ client is fixed to an element type and an op (a data packet
// carries both and the switch checks them against the job); a call with another pair replaces
// it by a client that continues the sequence space, on the same port.
class NativeClient {
public:
    NativeClient(uint32_t job, uint16_t bfr_id, const std::string& abm, const std::string& root,
                 const std::string& bind, uint16_t port, uint32_t chunk, uint32_t window,
                 uint16_t bsl, uint32_t timeout_ms, double rto_ms, uint32_t first_seq,
                 uint32_t steer_ports, uint32_t steer_base_port) {
        opt_.job_id = job;
        opt_.bfr_id = bfr_id;
        opt_.bsl_bits = bsl;
        const auto pos = ina::wire::bfr_id_to_si_bp(bfr_id, bsl);
        const auto bits = pos ? ina::wire::BitString::parse_bfr_ids(bsl, pos->si, abm)
                              : std::nullopt;
        if (!bits || bits->is_zero()) {
            raise_native("invalid", "bad abm '" + abm + "' for BFR-id " + std::to_string(bfr_id) +
                                        " and BSL " + std::to_string(bsl) +
                                        " (BFR-ids like \"1-4\" or \"1,3\", all in this "
                                        "worker's set)");
        }
        if (rto_ms <= 0) {
            raise_native("invalid", "rto_ms must be > 0");
        }
        opt_.abm = *bits;
        opt_.root = root;
        opt_.bind = bind;
        opt_.port = port;
        opt_.chunk_elems = chunk;
        opt_.window = window;
        opt_.first_seq = first_seq;
        opt_.steer_ports = steer_ports;
        opt_.steer_base_port = steer_base_port;
        opt_.overall_timeout = std::chrono::milliseconds(timeout_ms);
        opt_.retransmit_timeout = std::chrono::microseconds(static_cast<int64_t>(rto_ms * 1000));
        // Bind now, so a bad address or a taken port fails here, not at the first AllReduce.
        try {
            replace(opt_.elem_type, opt_.op);
        } catch (const ina::worker::Error& e) {
            raise_native(kind_name(e.kind()), e.what());
        }
    }

    py::dict allreduce_address(uintptr_t address, size_t nbytes, const std::string& type_name,
                               const std::string& op_name, bool progress) {
        const auto type = elem_type_named(type_name);
        if (!type) {
            raise_native("invalid", "unknown element type '" + type_name + "'");
        }
        if (address == 0 && nbytes != 0) {
            raise_native("invalid", "null buffer");
        }
        auto* p = reinterpret_cast<std::byte*>(address);
        return run(std::span<std::byte>(p, nbytes), *type, op_name, progress);
    }

    py::dict allreduce_buffer(const py::buffer& b, const std::string& op_name, bool progress) {
        py::buffer_info info = b.request(true);  // writable: the result goes in place
        const auto type = elem_type_of_format(info.format, info.itemsize);
        if (!type) {
            raise_native("invalid", "unsupported element format '" + info.format + "' (item size " +
                                        std::to_string(info.itemsize) +
                                        "): float32, float16, float64, int32 or int64");
        }
        if (!ina::python::c_contiguous(info)) {
            raise_native("invalid", "the buffer is not contiguous (copy it first, e.g. "
                                    "numpy.ascontiguousarray)");
        }
        const auto nbytes = static_cast<size_t>(info.size * info.itemsize);
        return run(std::span<std::byte>(static_cast<std::byte*>(info.ptr), nbytes), *type, op_name,
                   progress);
    }

    uint32_t next_seq() {
        std::lock_guard lock(mu_);
        return client_ ? client_->next_seq() : opt_.first_seq;
    }

    void close() {
        std::lock_guard lock(mu_);
        closed_ = true;
        client_.reset();
    }

private:
    // `progress`: a bar on stderr (fd 2) while it is a terminal and the tensor is long.
    py::dict run(std::span<std::byte> data, ElemType type, const std::string& op_name,
                 bool progress) {
        const auto op = op_named(op_name);
        if (!op) {
            raise_native("invalid", "unknown op '" + op_name + "' (sum, prod, min, max)");
        }
        ina::worker::Stats stats;
        std::optional<ina::worker::Error> failed;
        {
            py::gil_scoped_release nogil;
            std::lock_guard lock(mu_);
            try {
                if (closed_) {
                    throw ina::worker::Error("the client is closed");
                }
                if (!client_ || type != opt_.elem_type || *op != opt_.op) {
                    replace(type, *op);
                }
                std::optional<ina::worker::ProgressBar> bar;
                if (ina::worker::ProgressBar::wanted(progress, STDERR_FILENO, data.size())) {
                    bar.emplace(STDERR_FILENO,
                                "inaswitch job " + std::to_string(opt_.job_id) + " bfr " +
                                    std::to_string(opt_.bfr_id),
                                data.size());
                }
                stats = client_->allreduce(data, data, bar ? &*bar : nullptr);
            } catch (const ina::worker::Error& e) {
                failed.emplace(e);
            }
        }
        if (failed) {
            raise_native(kind_name(failed->kind()), failed->what());
        }
        return stats_dict(stats);
    }

    // Under mu_ (or in the constructor); throws ina::worker::Error. The old client's socket is
    // closed before the new one binds the same port.
    void replace(ElemType type, Op op) {
        if (client_) {
            opt_.first_seq = client_->next_seq();
            client_.reset();
        }
        opt_.elem_type = type;
        opt_.op = op;
        client_ = std::make_unique<ina::worker::Client>(opt_);
    }

    ina::worker::ClientOptions opt_;
    std::unique_ptr<ina::worker::Client> client_;
    bool closed_ = false;
    std::mutex mu_;
};

}  // namespace

PYBIND11_MODULE(_native, m) {
    m.doc() = "inaswitch's C++ INA worker client (use the inaswitch package, not this module)";
    static py::exception<std::runtime_error> native_error(m, "NativeError");
    g_native_error = native_error.ptr();

    py::class_<NativeClient>(m, "NativeClient")
        .def(py::init<uint32_t, uint16_t, const std::string&, const std::string&,
                      const std::string&, uint16_t, uint32_t, uint32_t, uint16_t, uint32_t,
                      double, uint32_t, uint32_t, uint32_t>(),
             py::arg("job"), py::arg("bfr_id"), py::arg("abm"), py::arg("root"), py::arg("bind"),
             py::arg("port"), py::arg("chunk"), py::arg("window"), py::arg("bsl"),
             py::arg("timeout_ms"), py::arg("rto_ms"), py::arg("first_seq"),
             py::arg("steer_ports") = 1,
             py::arg("steer_base_port") = ina::proto::kDefaultSteerBasePort)
        .def("allreduce_address", &NativeClient::allreduce_address, py::arg("address"),
             py::arg("nbytes"), py::arg("elem_type"), py::arg("op"), py::arg("progress") = false,
             "AllReduce nbytes at address in place (the caller keeps the memory alive)")
        .def("allreduce_buffer", &NativeClient::allreduce_buffer, py::arg("buffer"),
             py::arg("op"), py::arg("progress") = false, "AllReduce a writable contiguous buffer in place")
        .def_property_readonly("next_seq", &NativeClient::next_seq)
        .def("close", &NativeClient::close);
}
