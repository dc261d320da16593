// SPDX-License-Identifier: Apache-2.0
// inaswitch._rdma: the RDMA server-to-switch client (src/worker/rdma/switch_client.h) for
// Python: one RC connection from this process to the switch's own RDMA endpoint, kept across
// calls. Thin on purpose: inaswitch/rdma.py maps its errors to inaswitch's exception classes.
//
// Invariants: allreduce_ never holds the GIL while the HCA and the switch work (a training
// loop's other threads keep running); the buffer stays exported until the call returns; one
// AllReduce at a time per client (the mutex): a client is one QP and one session sequence.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>  // std::optional (gid_index)

#include <chrono>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>

#include "buffer_format.h"
#include "reduce/reduce.h"
#include "worker/rdma/switch_client.h"

namespace py = pybind11;
using ina::reduce::ElemType;

namespace {

// inaswitch._rdma.RdmaError(message): inaswitch/rdma.py turns it into inaswitch.rdma.RdmaError.
PyObject* g_rdma_error = nullptr;

[[noreturn]] void raise_rdma(const std::string& message) {
    PyErr_SetString(g_rdma_error, message.c_str());
    throw py::error_already_set();
}

py::dict stats_dict(const ina::rdma::ClientStats& s) {
    py::dict d;
    d["chunks"] = s.chunks;
    d["writes"] = s.writes;
    d["results"] = s.results;
    d["seconds"] = s.seconds;
    d["gbit_per_s"] = s.goodput_gbit_per_s;
    return d;
}

class RdmaSwitchClient {
public:
    RdmaSwitchClient(const std::string& switch_api, const std::string& switch_cm, uint16_t cm_port,
                     const std::string& token, uint32_t job, uint16_t rank, uint16_t world,
                     const std::string& dtype, const std::string& op, uint32_t chunk_bytes,
                     uint32_t window, uint32_t pmtu, const std::string& ip,
                     std::optional<uint32_t> gid_index, const std::string& device,
                     uint8_t ack_timeout, uint8_t retry_cnt, uint32_t timeout_ms) {
        const auto type = ina::python::elem_type_named(dtype);
        const auto reduction = ina::python::op_named(op);
        if (!type || !reduction) {
            raise_rdma("unknown dtype '" + dtype + "' or op '" + op +
                       "' (int32, fp32, fp16, bf16, int64, fp64; sum, prod, min, max)");
        }
        if (switch_api.empty() == switch_cm.empty()) {
            raise_rdma("give switch_api (\"http://HOST:PORT\", the switch's control API) or "
                       "switch_cm (its address, for the RDMA CM), not both");
        }
        ina::rdma::SwitchClientOptions o;
        o.switch_api = switch_api;
        o.switch_cm = switch_cm;
        o.cm_port = cm_port;
        o.token = token;
        o.job_id = job;
        o.rank = rank;
        o.world = world;
        o.elem_type = *type;
        o.op = *reduction;
        o.chunk_bytes = chunk_bytes;
        o.window = window;
        o.pmtu = pmtu;
        o.ip = ip;
        o.gid_index = gid_index;
        o.device = device;
        o.ack_timeout = ack_timeout;
        o.retry_cnt = retry_cnt;
        o.timeout = std::chrono::milliseconds(timeout_ms);
        elem_type_ = *type;
        std::optional<std::string> failed;
        {
            py::gil_scoped_release nogil;  // the connect waits on the switch
            try {
                client_ = std::make_unique<ina::rdma::SwitchClient>(o);
            } catch (const std::exception& e) {
                failed = e.what();
            }
        }
        if (failed) {
            raise_rdma(*failed);
        }
    }

    // AllReduce a writable contiguous buffer of the job's element type, in place.
    py::dict allreduce(const py::buffer& b) {
        py::buffer_info info = b.request(true);
        const ElemType want = elem_type_;  // not client_'s: close() may reset it meanwhile
        const auto type = ina::python::elem_type_of_format(info.format, info.itemsize);
        // Raw bytes ('B', a bytearray) are taken as the job's elements.
        const bool raw = (info.format == "B" || info.format == "b") && info.itemsize == 1;
        if (!raw && type != want) {
            raise_rdma("the buffer's format '" + info.format + "' is not the job's " +
                       std::string(ina::reduce::to_string(want)));
        }
        if (!ina::python::c_contiguous(info)) {
            raise_rdma("the buffer is not contiguous (copy it first)");
        }
        const auto nbytes = static_cast<size_t>(info.size * info.itemsize);
        if (nbytes % ina::reduce::elem_size(want) != 0) {
            raise_rdma("the buffer's " + std::to_string(nbytes) + " bytes are no whole number of " +
                       std::string(ina::reduce::to_string(want)) + " elements");
        }
        std::span<std::byte> data(static_cast<std::byte*>(info.ptr), nbytes);
        ina::rdma::ClientStats stats;
        std::optional<std::string> failed;
        {
            py::gil_scoped_release nogil;
            std::lock_guard lock(mu_);
            try {
                if (!client_) {
                    throw std::runtime_error("the client is closed");
                }
                stats = client_->allreduce(data, data);
            } catch (const std::exception& e) {
                failed = e.what();
            }
        }
        if (failed) {
            raise_rdma(*failed);
        }
        return stats_dict(stats);
    }

    // Tears the connection down: "" or why it was not clean. Later calls raise.
    std::string close() {
        py::gil_scoped_release nogil;
        std::lock_guard lock(mu_);
        std::string why;
        if (client_) {
            why = client_->close();
            client_.reset();
        }
        return why;
    }

    uint32_t next_seq() {
        std::lock_guard lock(mu_);
        return client_ ? client_->next_seq() : 0;
    }
    uint32_t qpn() {
        std::lock_guard lock(mu_);
        return client_ ? client_->qpn() : 0;
    }

private:
    ElemType elem_type_ = ElemType::fp32;  // the job's, fixed at construction
    std::unique_ptr<ina::rdma::SwitchClient> client_;
    std::mutex mu_;
};

}  // namespace

PYBIND11_MODULE(_rdma, m) {
    m.doc() = "inaswitch's RDMA server-to-switch client (use inaswitch.rdma, not this module)";
    static py::exception<std::runtime_error> rdma_error(m, "RdmaError");
    g_rdma_error = rdma_error.ptr();

    py::class_<RdmaSwitchClient>(m, "SwitchClient")
        .def(py::init<const std::string&, const std::string&, uint16_t, const std::string&,
                      uint32_t, uint16_t, uint16_t, const std::string&, const std::string&,
                      uint32_t, uint32_t, uint32_t, const std::string&, std::optional<uint32_t>,
                      const std::string&, uint8_t, uint8_t, uint32_t>(),
             py::kw_only(), py::arg("switch_api") = "", py::arg("switch_cm") = "",
             py::arg("cm_port") = 7471, py::arg("token") = "", py::arg("job"), py::arg("rank"),
             py::arg("world"), py::arg("dtype") = "fp32", py::arg("op") = "sum",
             py::arg("chunk_bytes") = 1024, py::arg("window") = 64, py::arg("pmtu") = 1024,
             py::arg("ip") = "", py::arg("gid_index") = py::none(), py::arg("device") = "",
             py::arg("ack_timeout") = 17, py::arg("retry_cnt") = 7,
             py::arg("timeout_ms") = 60000,
             "Connects rank `rank` of rdma job `job` to the switch (its control API, or by RDMA "
             "CM)")
        .def("allreduce_", &RdmaSwitchClient::allreduce, py::arg("buffer"),
             "AllReduce a writable contiguous buffer of the job's element type in place; "
             "returns the call's counters")
        .def("close", &RdmaSwitchClient::close)
        .def_property_readonly("next_seq", &RdmaSwitchClient::next_seq)
        .def_property_readonly("qpn", &RdmaSwitchClient::qpn);
}
