// python/torch_ext.cc: the `poseidon._torch` extension module, the C++ half of poseidon.torch
// (python/poseidon/torch/, docs/torch.md): one class, Session, over rt::EmbeddedWorker
// (real_runtime/embedded_worker.h), which hosts the core's worker in this Python process over the
// job's authenticated TCP connections.
//
// Built against no libtorch header: tensors cross as objects with the buffer protocol (numpy views
// of CPU tensors, `t.numpy()`, or of pinned staging copies of GPU tensors), so one build serves
// every torch. Each call checks that a buffer is C-contiguous and of the job's value type (float32
// or float64) and takes its address; the Python side keeps the tensor alive for as long as the
// call's contract says. Blocking calls release the GIL and poll for signals every 100 ms, so that
// Ctrl-C interrupts them (KeyboardInterrupt). JobFailed becomes poseidon.torch.JobError (with the
// process's exit code as `code`), config::ConfigError poseidon.ConfigError.
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include "config/scenario.h"
#include "config/yaml_reader.h"
#include "real_runtime/embedded_worker.h"
#include "real_runtime/secret_file.h"
#include "real_runtime/tls_files.h"

namespace py = pybind11;

namespace poseidon::python {
namespace {

using rt::EmbeddedWorker;

// Polls for signals with the GIL: true when one raised (its exception is then pending).
bool SignalPending() {
  py::gil_scoped_acquire gil;
  return PyErr_CheckSignals() != 0;
}

// Runs `f` without the GIL; an interruption re-raises the pending KeyboardInterrupt.
template <typename F>
auto Blocking(F&& f) -> decltype(f()) {
  try {
    py::gil_scoped_release nogil;
    return f();
  } catch (const rt::Interrupted&) {
    throw py::error_already_set();
  }
}

// The words of a C-contiguous buffer of `value_words` words per value.
struct Words {
  const float* data = nullptr;
  int64_t words = 0;
};
Words WordsOf(const py::buffer& b, int value_words, const char* what) {
  const py::buffer_info info = b.request();
  const int64_t want_size = 4 * value_words;
  if (info.itemsize != want_size || (info.format != "f" && info.format != "d")) {
    throw py::value_error(std::string(what) + ": expected " +
                          (value_words == 2 ? "float64" : "float32") + " values, got format '" +
                          info.format + "'");
  }
  int64_t stride = info.itemsize;
  for (int64_t d = info.ndim - 1; d >= 0; --d) {
    if (info.shape[static_cast<size_t>(d)] > 1 && info.strides[static_cast<size_t>(d)] != stride) {
      throw py::value_error(std::string(what) + ": not contiguous");
    }
    stride *= info.shape[static_cast<size_t>(d)];
  }
  return {static_cast<const float*>(info.ptr), info.size * value_words};
}

class Session {
 public:
  Session(const std::string& scenario, const std::vector<std::string>& overrides, int rank,
          const std::string& coordinator_host, int coordinator_port, const std::string& secret_file,
          const std::string& job_id, const std::string& listen_host,
          const std::string& advertise_host, const std::string& trace_file,
          const std::string& decisions_file, const std::string& tls_dir, int rendezvous_timeout_s,
          int progress_timeout_s) {
    rt::NodeOptions o;
    o.scenario = config::LoadScenarioFile(scenario, overrides);
    o.rank = rank;
    o.coordinator_host = coordinator_host;
    o.coordinator_port = static_cast<uint16_t>(coordinator_port);
    o.listen_host = listen_host;
    o.advertise_host = advertise_host;
    try {
      o.transport.secret = rt::LoadSecretFile(secret_file);
    } catch (const std::runtime_error& e) {
      throw config::ConfigError(e.what());
    }
    o.transport.job_id = job_id;
    if (!tls_dir.empty()) {
      const rt::TlsFiles f = rt::JobTlsFiles(tls_dir);
      o.transport.tls = true;
      o.transport.tls_cert = f.cert;
      o.transport.tls_key = f.key;
      o.transport.tls_ca = f.ca;
    }
    o.trace_file = trace_file;
    o.decisions_file = decisions_file;
    o.rendezvous_timeout = std::chrono::seconds(rendezvous_timeout_s);
    o.progress_timeout = std::chrono::seconds(progress_timeout_s);
    o.training.test = false;
    worker_ = std::make_unique<EmbeddedWorker>(o);
  }

  int rank() const { return worker_->rank(); }
  int workers() const { return worker_->workers(); }
  // The scenario's protocol: what DistributedDataParallel uses when not told otherwise.
  py::dict Protocol() const {
    const config::ScenarioSpec& s = worker_->scenario();
    py::dict d;
    d["scheme"] = s.scheme;
    d["layer_schemes"] = s.layer_schemes;
    d["consistency"] = s.consistency;
    d["staleness"] = s.staleness;
    d["gradient_wire"] = s.gradient_wire;
    return d;
  }

  void AgreeTable(const std::string& table) {
    Blocking([&] { worker_->AgreeTable(table, SignalPending); });
  }

  py::bytes ShareValues(uint64_t tag, const py::bytes& mine) {
    const std::string s = mine;
    std::vector<uint8_t> bytes(s.begin(), s.end());
    std::vector<uint8_t> got =
        Blocking([&] { return worker_->ShareValues(tag, std::move(bytes), SignalPending); });
    return py::bytes(reinterpret_cast<const char*>(got.data()), got.size());
  }

  void StartJob(const std::string& model_yaml, const std::string& scheme,
                const std::map<std::string, std::string>& layer_schemes,
                const std::string& consistency, int64_t staleness, int64_t batch,
                const std::vector<double>& fwd_s, const std::vector<double>& bwd_s,
                const std::string& gradient_wire) {
    rt::JobRequest r;
    r.model_yaml = model_yaml;
    r.scheme = scheme;
    r.layer_schemes = layer_schemes;
    r.consistency = consistency;
    r.staleness = staleness;
    r.batch = batch;
    r.fwd_s = fwd_s;
    r.bwd_s = bwd_s;
    r.gradient_wire = gradient_wire;
    Blocking([&] { worker_->StartJob(r, SignalPending); });
  }

  py::dict Job() {
    const config::WorkerJob job = Blocking([&] { return worker_->Job(SignalPending); });
    py::dict d;
    d["schemes"] = job.schemes;
    d["consistency"] = job.consistency;
    d["staleness"] = job.staleness;
    d["batch"] = job.batch;
    d["gradient_wire"] = job.gradient_wire;
    d["model"] = job.model_yaml;
    return d;
  }

  void BeginClock(int64_t clock) { Blocking([&] { worker_->BeginClock(clock, SignalPending); }); }
  void ForwardDone(int index) { worker_->ForwardDone(index); }
  void ForwardEnded() { worker_->ForwardEnded(); }

  // `grads`: one buffer per parameter of the module; `factors`: rows x N output gradients then
  // rows x M inputs as one flat buffer (None for a module not synced by sufficient factors).
  void LayerReady(int index, int64_t clock, const std::vector<py::buffer>& grads,
                  const py::object& factors, int64_t rows, int value_words) {
    std::vector<const float*> ptrs;
    for (const py::buffer& g : grads) ptrs.push_back(WordsOf(g, value_words, "gradient").data);
    std::vector<float> f;
    if (!factors.is_none()) {
      const Words w = WordsOf(factors.cast<py::buffer>(), value_words, "sufficient factors");
      f.assign(w.data, w.data + w.words);
    }
    worker_->LayerReady(index, clock, std::move(ptrs), std::move(f), rows);
  }

  void BackwardDone(int64_t clock) {
    Blocking([&] { worker_->BackwardDone(clock, SignalPending); });
  }
  int64_t Complete() const { return worker_->complete(); }
  void WaitComplete(int64_t clock) {
    Blocking([&] { worker_->WaitComplete(clock, SignalPending); });
  }
  // `clock`'s mean gradient, without a copy: one numpy array per parameter (table order, flat,
  // float32 or float64 as the job's values), views of one buffer that the last of them frees.
  py::list TakeMean(int64_t clock) {
    EmbeddedWorker::Mean mean = worker_->ReleaseMean(clock);
    py::capsule owner(mean.words.get(), [](void* p) { delete[] static_cast<float*>(p); });
    float* base = mean.words.release();  // the capsule's now
    py::list out;
    for (const auto& [first, words] : mean.parts) {
      if (mean.value_words == 2) {
        out.append(py::array_t<double>({static_cast<py::ssize_t>(words / 2)},
                                       reinterpret_cast<double*>(base + first), owner));
      } else {
        out.append(py::array_t<float>({static_cast<py::ssize_t>(words)}, base + first, owner));
      }
    }
    return out;
  }
  int Finish(int64_t clocks) {
    return Blocking([&] { return worker_->Finish(clocks, SignalPending); });
  }
  void Abort(int code, const std::string& why) { worker_->Abort(code, why); }
  void Close() {
    py::gil_scoped_release nogil;
    worker_.reset();
  }

 private:
  std::unique_ptr<EmbeddedWorker> worker_;
};

}  // namespace
}  // namespace poseidon::python

PYBIND11_MODULE(_torch, m) {
  namespace pp = poseidon::python;
  m.doc() = "poseidon.torch's C++ half: a worker of a live Poseidon job in this process";
  static py::exception<poseidon::rt::JobFailed> job_error(m, "JobError", PyExc_RuntimeError);
  static py::object config_error = py::module_::import("poseidon._ext").attr("ConfigError");
  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const poseidon::rt::JobFailed& e) {
      py::object err = py::reinterpret_borrow<py::object>(job_error.ptr())(e.what());
      err.attr("code") = e.code();
      PyErr_SetObject(job_error.ptr(), err.ptr());
    } catch (const poseidon::config::ConfigError& e) {
      PyErr_SetString(config_error.ptr(), e.what());
    }
  });
  py::class_<pp::Session>(m, "Session")
      .def(py::init<const std::string&, const std::vector<std::string>&, int, const std::string&,
                    int, const std::string&, const std::string&, const std::string&,
                    const std::string&, const std::string&, const std::string&,
                    const std::string&, int, int>(),
           py::arg("scenario"), py::arg("overrides"), py::arg("rank"),
           py::arg("coordinator_host"), py::arg("coordinator_port"), py::arg("secret_file"),
           py::arg("job_id"), py::arg("listen_host"), py::arg("advertise_host"),
           py::arg("trace_file"), py::arg("decisions_file"), py::arg("tls_dir"),
           py::arg("rendezvous_timeout_s"),
           py::arg("progress_timeout_s"))
      .def_property_readonly("rank", &pp::Session::rank)
      .def_property_readonly("workers", &pp::Session::workers)
      .def_property_readonly("protocol", &pp::Session::Protocol)
      .def("agree_table", &pp::Session::AgreeTable)
      .def("share_values", &pp::Session::ShareValues)
      .def("start_job", &pp::Session::StartJob)
      .def("job", &pp::Session::Job)
      .def("begin_clock", &pp::Session::BeginClock)
      .def("forward_done", &pp::Session::ForwardDone)
      .def("forward_ended", &pp::Session::ForwardEnded)
      .def("layer_ready", &pp::Session::LayerReady)
      .def("backward_done", &pp::Session::BackwardDone)
      .def("complete", &pp::Session::Complete)
      .def("wait_complete", &pp::Session::WaitComplete)
      .def("take_mean", &pp::Session::TakeMean)
      .def("finish", &pp::Session::Finish)
      .def("abort", &pp::Session::Abort)
      .def("close", &pp::Session::Close);
}
