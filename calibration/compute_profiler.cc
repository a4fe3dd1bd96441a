#include "calibration/compute_profiler.h"

#include <algorithm>
#include <chrono>
#include <memory>
#include <random>
#include <stdexcept>
#include <vector>

#include <fmt/format.h>

#include "calibration/provenance.h"
#include "calibration/stats.h"
#include "kernels/buffers.h"
#include "kernels/net.h"
#include "kernels/sgd.h"

namespace poseidon::calibration {
namespace {

using Clock = std::chrono::steady_clock;

double MsSince(Clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
}

struct Inputs {
  std::vector<float> images;
  std::vector<int32_t> labels;
};

Inputs RandomInputs(const core::Model& model, int64_t batch, uint64_t seed) {
  Inputs in;
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> pixel(0.f, 1.f);
  in.images.resize(static_cast<size_t>(batch * model.input_shape().count()));
  for (float& v : in.images) v = pixel(rng);
  // Token ids [S] (a language model): ids spread over the vocabulary of the embedding that reads
  // the input, so that its gather touches the table as real text does.
  int64_t vocab = 0;
  for (const core::Layer& l : model.layers()) {
    if (l.kind == core::LayerKind::kEmbedding && l.bottoms.empty()) vocab = l.spec.vocab;
  }
  if (model.input_shape().rank == 1 && vocab > 0) {
    std::uniform_int_distribution<int64_t> id(0, vocab - 1);
    for (float& v : in.images) v = static_cast<float>(id(rng));
  }
  int64_t classes = 2;
  for (const core::Layer& l : model.layers()) {
    if (l.kind == core::LayerKind::kSoftmaxLoss) classes = std::max<int64_t>(classes, l.out.count());
  }
  std::uniform_int_distribution<int32_t> label(0, static_cast<int32_t>(classes - 1));
  in.labels.resize(static_cast<size_t>(batch));
  for (int32_t& v : in.labels) v = label(rng);
  return in;
}

void CheckOptions(const ComputeProfileOptions& o) {
  if (o.repetitions < 1) throw std::invalid_argument("repetitions must be >= 1");
  if (o.warmup < 0) throw std::invalid_argument("warm-up iterations must be >= 0");
  if (o.batch < 1) throw std::invalid_argument("batch must be >= 1");
}

}  // namespace

namespace {

// The profile; when `whole` is not null, each profiled iteration is followed by one whole
// iteration (Forward, Backward, Step on the same Net) whose time goes to *whole.
config::ProfileSpec Measure(const core::Model& model, const std::string& model_name,
                            const ComputeProfileOptions& o, const ProgressFn& progress,
                            std::vector<double>* whole) {
  CheckOptions(o);
  auto report = [&](const std::string& phase, int done, int total) {
    if (progress) progress(phase, done, total);
  };
  kernels::Net net(model, o.backend, o.batch, o.seed);
  const Inputs in = RandomInputs(model, o.batch, o.seed + 1);
  const auto& layers = model.layers();
  const int n = static_cast<int>(layers.size());
  std::vector<std::vector<double>> fwd(static_cast<size_t>(n)), bwd(static_cast<size_t>(n));

  // Each timed iteration is a real training iteration: forward, backward, then the optimizer
  // step over every parameter, so that the layers run with the cache state training leaves
  // them (the step streams every weight through memory; timing layers back to back without it
  // measured fc layers ~30% faster than training runs them).
  kernels::SgdOptions so;
  so.base_lr = 0.001;
  so.momentum = 0.9;
  so.weight_decay = 0.0005;
  kernels::Sgd sgd(so, net.num_params());
  std::vector<double> update_ms;
  int64_t step = 0;
  auto iteration = [&](bool record) {
    for (int i = 0; i < n; ++i) {
      auto t0 = Clock::now();
      if (i == 0) net.SetInput(in.images.data(), in.labels.data());
      net.ForwardLayer(layers[static_cast<size_t>(i)].id, /*train=*/true);
      if (record) fwd[static_cast<size_t>(i)].push_back(MsSince(t0));
    }
    for (int i = n - 1; i >= 0; --i) {
      auto t0 = Clock::now();
      if (i == n - 1) net.BeginBackward();
      net.BackwardLayer(layers[static_cast<size_t>(i)].id);
      if (record) bwd[static_cast<size_t>(i)].push_back(MsSince(t0));
    }
    auto t0 = Clock::now();
    if (net.num_params() > 0) sgd.Step(net.params(), net.param_grads(), step++);
    if (record) update_ms.push_back(MsSince(t0));
  };
  for (int w = 0; w < o.warmup; ++w) {
    iteration(false);
    report("warm-up", w + 1, o.warmup);
  }
  for (int r = 0; r < o.repetitions; ++r) {
    iteration(true);
    if (whole != nullptr) {
      auto t0 = Clock::now();
      net.Forward(in.images.data(), in.labels.data(), /*train=*/true);
      net.Backward();
      if (net.num_params() > 0) sgd.Step(net.params(), net.param_grads(), step++);
      whole->push_back(MsSince(t0));
    }
    report(whole != nullptr ? "layers + whole iterations" : "layers", r + 1, o.repetitions);
  }

  // The iterations whose total (all layers + the step) lies between its 25th and 75th
  // percentile; every recorded time is the mean over those iterations (header: why).
  std::vector<double> totals(static_cast<size_t>(o.repetitions), 0.0);
  for (size_t r = 0; r < totals.size(); ++r) {
    for (size_t i = 0; i < static_cast<size_t>(n); ++i) totals[r] += fwd[i][r] + bwd[i][r];
    if (!update_ms.empty()) totals[r] += update_ms[r];
  }
  const std::vector<size_t> typical = InterquartileIndices(totals);
  auto typical_mean = [&](const std::vector<double>& v) {
    double sum = 0;
    for (size_t r : typical) sum += v[r];
    return sum / static_cast<double>(typical.size());
  };

  config::ProfileSpec p;
  p.model = model_name;
  p.batch = o.batch;
  p.backend = kernels::BackendName(o.backend);
  p.device = fmt::format("cpu: {} ({} logical cores)", CpuModelName(), LogicalCores());
  for (int i = 0; i < n; ++i) {
    const core::Layer& l = layers[static_cast<size_t>(i)];
    Summary f = Summarize(fwd[static_cast<size_t>(i)]);
    Summary b = Summarize(bwd[static_cast<size_t>(i)]);
    config::LayerTiming t;
    t.fwd_ms = typical_mean(fwd[static_cast<size_t>(i)]);
    t.bwd_ms = typical_mean(bwd[static_cast<size_t>(i)]);
    t.fwd_p10_ms = f.p10;
    t.fwd_p90_ms = f.p90;
    t.bwd_p10_ms = b.p10;
    t.bwd_p90_ms = b.p90;
    p.layers[l.name] = t;
    p.layer_order.push_back(l.name);
  }

  // Server update: the optimizer step over every parameter (as a shard runs it on its chunks),
  // timed inside the training iterations above.
  const int64_t params = net.num_params();
  if (params > 0) {
    const double mb = 4.0 * static_cast<double>(params) / 1e6;
    p.update_ms_per_mb = typical_mean(update_ms) / mb;
    report("update", 1, 1);
  }

  // SFB rebuild per FC layer (and linear layer with its own weight: K = batch x tokens), from the
  // factors of the last backward.
  std::vector<int> fcs;
  for (const core::Layer& l : layers) {
    if (core::HasSufficientFactors(l)) fcs.push_back(l.id);
  }
  for (size_t j = 0; j < fcs.size(); ++j) {
    kernels::FcFactors f = net.FactorsOf(fcs[j]);
    std::vector<float> dw(static_cast<size_t>(f.m * f.n));
    std::vector<double> samples;
    for (int r = 0; r < o.warmup + o.repetitions; ++r) {
      auto t0 = Clock::now();
      kernels::RebuildFcGradient(f.top_grad, f.bottom, f.k, f.m, f.n, dw.data());
      if (r >= o.warmup) samples.push_back(MsSince(t0));
    }
    p.layers[layers[static_cast<size_t>(fcs[j])].name].sfb_rebuild_ms = Summarize(samples).median;
    report("sfb", static_cast<int>(j + 1), static_cast<int>(fcs.size()));
  }

  p.provenance = CollectProvenance(o.command);
  for (const auto& [key, value] : kernels::BackendProvenance(o.backend)) p.provenance[key] = value;
  if (o.backend == kernels::Backend::kCuda) {
    // A cuda profile names its GPU (the backend's provenance has it), not the host's CPU.
    if (auto gpu = p.provenance.find("device"); gpu != p.provenance.end()) {
      p.device = "cuda: " + gpu->second;
    }
    // Host<->device copy bandwidth, for the record. The layer times above already contain the
    // copies a cuda Net makes (parameters up before a layer's forward, gradients down after its
    // backward), so pcie_gbs stays unset: the simulator would add them a second time.
    std::unique_ptr<kernels::BufferSpace> space = kernels::MakeBufferSpace(o.backend);
    const int64_t count = int64_t{16} << 20;  // 64 MiB
    kernels::SpaceBuffer dev(space.get(), count);
    std::vector<float> host(static_cast<size_t>(count), 1.f);
    std::vector<double> up, down;
    for (int r = 0; r < 2 + 10; ++r) {
      auto t0 = Clock::now();
      space->Upload(dev.data(), host.data(), count);
      if (r >= 2) up.push_back(MsSince(t0));
      t0 = Clock::now();
      space->Download(host.data(), dev.data(), count);
      if (r >= 2) down.push_back(MsSince(t0));
    }
    const double mb = 4.0 * static_cast<double>(count) / 1e6;
    p.provenance["host_device_copy"] = fmt::format(
        "64 MiB pageable: host->device {:.2f} GB/s, device->host {:.2f} GB/s (median of 10); "
        "included in the layer times, not a separate pcie_gbs",
        mb / Summarize(up).median, mb / Summarize(down).median);
  }
  p.provenance["label"] = fmt::format("{} profile", p.backend == "cuda" ? "GPU" : "CPU");
  p.provenance["method"] = fmt::format(
      "fwd_ms, bwd_ms, update: mean over the interquartile iterations (by total time) of {} "
      "timed iterations after {} warm-up; p10, p90 over all; sfb: median; seeded random "
      "inputs{}",
      o.repetitions, o.warmup,
      whole != nullptr ? "; each followed by one whole training iteration timed as one (loop (a), calibrate --check)" : "");
  return p;
}

}  // namespace

config::ProfileSpec MeasureComputeProfile(const core::Model& model, const std::string& model_name,
                                          const ComputeProfileOptions& o,
                                          const ProgressFn& progress) {
  return Measure(model, model_name, o, progress, nullptr);
}

ProfileAndIterations MeasureProfileAndIterations(const core::Model& model,
                                                 const std::string& model_name,
                                                 const ComputeProfileOptions& o,
                                                 const ProgressFn& progress) {
  ProfileAndIterations r;
  r.profile = Measure(model, model_name, o, progress, &r.whole_iteration_ms);
  return r;
}

std::vector<double> MeasureTrainingIterations(const core::Model& model,
                                              const ComputeProfileOptions& o, int iterations) {
  CheckOptions(o);
  if (iterations < 1) throw std::invalid_argument("iterations must be >= 1");
  kernels::Net net(model, o.backend, o.batch, o.seed);
  const Inputs in = RandomInputs(model, o.batch, o.seed + 1);
  kernels::SgdOptions so;
  so.base_lr = 0.001;
  so.momentum = 0.9;
  so.weight_decay = 0.0005;
  kernels::Sgd sgd(so, net.num_params());
  std::vector<double> times;
  for (int i = 0; i < o.warmup + iterations; ++i) {
    auto t0 = Clock::now();
    net.Forward(in.images.data(), in.labels.data(), /*train=*/true);
    net.Backward();
    sgd.Step(net.params(), net.param_grads(), i);
    if (i >= o.warmup) times.push_back(MsSince(t0));
  }
  return times;
}

}  // namespace poseidon::calibration
