#include "sim/simulation.h"

#include <algorithm>
#include <cmath>
#include <optional>

#include <fmt/format.h>

#include "core/pace.h"
#include "core/trace.h"
#include "cost/sacp_timing.h"
#include "sim/text_escape.h"
#include "sim/window_report.h"

namespace poseidon::sim {

namespace {

SimJobConfig JobConfig(const config::ScenarioSpec& s, const core::Model& model,
                       const cost::ComputeModel& compute) {
  SimJobConfig cfg;
  cfg.model = &model;
  cfg.layout = config::BuildLayout(s);
  cfg.protocol = cost::BuildTimedProtocol(s, model, compute.pcie_bandwidth_Bps() > 0, compute);
  cfg.network = s.network;
  cfg.interconnect = s.interconnect;
  if (s.local_copies_timed) cfg.local_copy_devices = s.devices_per_machine;
  const int workers = cfg.layout.num_workers;
  cfg.worker_compute.assign(static_cast<size_t>(workers), compute);
  for (const auto& st : s.stragglers) {
    if (st.worker < workers) {
      cfg.worker_compute[static_cast<size_t>(st.worker)] = compute.ScaledBy(st.slowdown);
    }
  }
  cfg.jitter = cost::ComputeJitter::KindOf(s.jitter);
  cfg.jitter_cv = s.jitter_cv;
  cfg.seed = s.seed;
  cfg.warmup_iterations = s.warmup_iterations;
  if (s.input_samples_per_s > 0) {
    // Two iterations' samples of every device ahead, as data loaders prefetch (PyTorch's
    // DataLoader: prefetch_factor 2 batches per worker).
    cfg.input_samples_per_s = s.input_samples_per_s;
    cfg.input_batch = s.batch_per_worker;
    cfg.input_prefetch_samples =
        2.0 * static_cast<double>(s.batch_per_worker) * static_cast<double>(s.devices_per_machine);
  }
  return cfg;
}

// `run(job)` on a SimJob of cfg; with model auto (config/specs.h) on one with the queue model,
// and, if that job's traffic filled a receiving queue (or, with auto_flow_message_bytes, carried
// a message that long between machines), again on one with the flow model.
template <typename Run>
auto RunWithNetworkModel(SimJobConfig cfg, Run run) {
  if (cfg.network.model != config::NetworkModelKind::kAuto) {
    SimJob job(std::move(cfg));
    return run(job);
  }
  SimJobConfig flow = cfg;
  flow.network.model = config::NetworkModelKind::kFlow;
  SimJob queue_job(std::move(cfg));  // MakeNetworkModel: auto's first pass is the queue model
  auto result = run(queue_job);
  const int64_t long_message = flow.network.auto_flow_message_bytes;
  if (!queue_job.queue_overflowed() &&
      !(long_message > 0 && queue_job.largest_network_message() >= long_message)) {
    return result;
  }
  SimJob flow_job(std::move(flow));
  return run(flow_job);
}

SimRun RunJob(const config::ScenarioSpec& s, const core::Model& model,
              const cost::ComputeModel& compute, bool record_trace, core::JobLayout* layout_out,
              core::ProtocolConfig* protocol_out, std::function<void(double)> progress = {},
              bool record_decisions = false, bool record_windows = false,
              bool record_host_cpu = false) {
  SimJobConfig cfg = JobConfig(s, model, compute);
  cfg.record_trace = record_trace;
  cfg.record_decisions = record_decisions;
  cfg.record_windows = record_windows;
  cfg.record_host_cpu = record_host_cpu;
  cfg.progress = std::move(progress);
  if (layout_out) *layout_out = cfg.layout;
  if (protocol_out) *protocol_out = cfg.protocol;
  return RunWithNetworkModel(std::move(cfg), [](SimJob& job) { return job.Run(); });
}

double Ms(double ns) { return ns / 1e6; }

}  // namespace

std::vector<TimeNs> ReplayNetwork(const config::ScenarioSpec& s,
                                  const std::vector<SimJob::ReplayMessage>& messages) {
  core::Model model = BuildScenarioModel(s);
  cost::ComputeModel compute = cost::BuildComputeModel(s, model);
  return RunWithNetworkModel(JobConfig(s, model, compute),
                             [&](SimJob& job) { return job.ReplayMessages(messages); });
}

ScenarioResult SimulateScenario(const config::ScenarioSpec& s, const SimOptions& options) {
  core::Model model = BuildScenarioModel(s);
  cost::ComputeModel compute = cost::BuildComputeModel(s, model);
  ScenarioResult r;
  r.name = s.name;
  r.model = model.name();
  r.workers = s.workers;
  r.devices_per_machine = s.devices_per_machine;
  r.client_per_device = s.client_per_device;
  r.servers = s.servers;
  r.batch_per_worker = s.batch_per_worker;
  r.compute_source = compute.source();
  r.warnings = model.warnings();  // a model file's doubtful choices (a pool without `round`)
  r.warnings.insert(r.warnings.end(), compute.warnings().begin(), compute.warnings().end());

  core::JobLayout layout;
  core::ProtocolConfig proto;  // the plan the job ran (SACP's choices), for the per-layer rows
  SimRun run = RunJob(s, model, compute, options.record_trace, &layout, &proto, options.progress,
                      options.record_decisions, options.record_windows, options.record_host_cpu);
  if (options.record_decisions) r.decisions = run.decisions.Text();
  if (options.record_windows) r.windows = WindowReport(run.windows, s.network);
  r.events = run.events;
  r.network_messages = run.network_messages;
  r.links = run.links;
  r.deadlocked = run.deadlocked;
  r.deadlock_report = run.deadlock_report;
  if (run.deadlocked) return r;

  // The job's iteration time, as core/pace.h defines it for every host: T(w, 0) is worker w's
  // first iteration's begin, T(w, v) its sync point to clock v under BSP, or its end of
  // iteration v-1 under SSP and ASP (and for a model without parameters).
  const bool own_pace =
      core::PacedByIterationEnds(s.consistency == "bsp", !model.param_layers().empty());
  std::vector<std::vector<std::optional<TimeNs>>> reached;
  double compute_sum = 0, nic_sum = 0;
  for (const WorkerRun& w : run.workers) {
    std::vector<std::optional<TimeNs>>& t = reached.emplace_back();
    t.push_back(w.iteration_begin.front());
    const auto& at = own_pace ? w.iteration_end : w.synced;
    for (int64_t v = 1; v <= s.iterations; ++v) t.push_back(at[static_cast<size_t>(v - 1)]);
    for (int64_t c = s.warmup_iterations; c < s.iterations; ++c) {
      compute_sum += static_cast<double>(w.compute_busy[static_cast<size_t>(c)]);
      nic_sum += static_cast<double>(w.nic_busy[static_cast<size_t>(c)]);
    }
  }
  const core::IterationPace pace = core::JobIterationPace(reached, s.warmup_iterations, s.iterations);
  const double n = static_cast<double>(pace.samples);
  r.measured_iterations = s.iterations - s.warmup_iterations;
  const double mean = pace.mean_ns;
  r.iteration_ms = Ms(mean);
  r.iteration_std_ms = Ms(pace.std_ns);
  r.iteration_min_ms = Ms(pace.min_ns);
  r.iteration_max_ms = Ms(pace.max_ns);
  r.compute_ms = Ms(compute_sum / n);
  r.communication_ms = Ms(nic_sum / n);
  r.wait_ms = r.iteration_ms - r.compute_ms;
  // Every device runs a batch.
  r.throughput = static_cast<double>(int64_t{s.workers} * s.devices_per_machine *
                                     s.batch_per_worker) /
                 (mean / 1e9);
  r.network_gb_per_iteration =
      static_cast<double>(run.network_payload_bytes) / static_cast<double>(s.iterations) / 1e9;
  {
    const double per = static_cast<double>(layout.num_workers) *
                       static_cast<double>(s.iterations - s.warmup_iterations);
    for (int l : model.param_layers()) {
      const LayerRun& lr = run.layers[static_cast<size_t>(l)];
      LayerResult x;
      x.name = model.layers()[static_cast<size_t>(l)].name;
      x.scheme = core::SchemeName(proto.SchemeOf(l));
      x.fwd_ms = Ms(static_cast<double>(lr.fwd) / per);
      x.bwd_ms = Ms(static_cast<double>(lr.bwd) / per);
      x.sync_ms = lr.samples > 0 ? Ms(static_cast<double>(lr.sync) / static_cast<double>(lr.samples)) : 0;
      r.layers.push_back(x);
    }
  }

  if (options.baseline) {
    // One node of single-machine training (the papers' baseline, Caffe on one GPU): forward and
    // backward of every layer, nothing to synchronise. Its optimizer step runs on the device
    // and is left out (for AlexNet on a K20 it is about 1% of an iteration).
    const double one_mean = static_cast<double>(compute.total_fwd_ns() + compute.total_bwd_ns());
    r.single_node_iteration_ms = Ms(one_mean);
    r.speedup = r.throughput / (static_cast<double>(s.batch_per_worker) / (one_mean / 1e9));
  }
  if (options.record_trace) core::AppendChromeTrace(run.trace, layout, model, &r.chrome_trace);
  return r;
}

std::string CsvHeader() {
  return "name,model,workers,servers,batch_per_worker,iteration_ms,iteration_std_ms,"
         "iteration_min_ms,iteration_max_ms,throughput_img_s,speedup,single_node_iteration_ms,"
         "compute_ms,communication_ms,wait_ms,network_gb_per_iteration,max_link_utilisation";
}

namespace {
double MaxLinkUtil(const ScenarioResult& r) {
  double m = 0;
  for (const auto& l : r.links) m = std::max(m, l.utilisation);
  return m;
}
}  // namespace

std::string CsvRow(const ScenarioResult& r) {
  return fmt::format("{},{},{},{},{},{:.6f},{:.6f},{:.6f},{:.6f},{:.3f},{:.4f},{:.6f},{:.6f},"
                     "{:.6f},{:.6f},{:.6f},{:.4f}",
                     r.name, r.model, r.workers, r.servers, r.batch_per_worker, r.iteration_ms,
                     r.iteration_std_ms, r.iteration_min_ms, r.iteration_max_ms, r.throughput,
                     r.speedup, r.single_node_iteration_ms, r.compute_ms, r.communication_ms,
                     r.wait_ms, r.network_gb_per_iteration, MaxLinkUtil(r));
}

namespace {

std::vector<const LinkStats*> BusiestLinks(const ScenarioResult& r, size_t n) {
  std::vector<const LinkStats*> v;
  for (const auto& l : r.links) v.push_back(&l);
  std::stable_sort(v.begin(), v.end(), [](const LinkStats* a, const LinkStats* b) {
    return a->utilisation > b->utilisation;
  });
  if (v.size() > n) v.resize(n);
  return v;
}

}  // namespace

std::string FormatResult(const ScenarioResult& r, OutputFormat format) {
  if (format == OutputFormat::kCsv) return CsvHeader() + "\n" + CsvRow(r) + "\n";
  if (format == OutputFormat::kJson) {
    std::string links;
    for (const auto& l : r.links) {
      links += fmt::format("{}{{\"link\":\"{}\",\"capacity_gbps\":{:.3f},\"gb\":{:.6f},"
                           "\"busy_fraction\":{:.4f},\"utilisation\":{:.4f}}}",
                           links.empty() ? "" : ",", JsonEscaped(l.name),
                           l.capacity_Bps * 8 / 1e9, l.bytes / 1e9, l.busy_fraction,
                           l.utilisation);
    }
    std::string layers;
    for (const auto& l : r.layers) {
      layers += fmt::format("{}{{\"name\":\"{}\",\"scheme\":\"{}\",\"fwd_ms\":{:.6f},"
                            "\"bwd_ms\":{:.6f},\"sync_ms\":{:.6f}}}",
                            layers.empty() ? "" : ",", JsonEscaped(l.name), l.scheme, l.fwd_ms,
                            l.bwd_ms, l.sync_ms);
    }
    std::string warnings;
    for (const auto& w : r.warnings) {
      warnings += fmt::format("{}\"{}\"", warnings.empty() ? "" : ",", JsonEscaped(w));
    }
    const std::string devices =
        r.devices_per_machine > 1
            ? fmt::format("\"devices_per_machine\":{},\"client\":\"{}\",", r.devices_per_machine,
                          r.client_per_device ? "device" : "machine")
            : "";
    return fmt::format(
        "{{\"name\":\"{}\",\"model\":\"{}\",\"workers\":{},{}\"servers\":{},"
        "\"batch_per_worker\":{},\"measured_iterations\":{},\"iteration_ms\":{:.6f},"
        "\"iteration_std_ms\":{:.6f},\"iteration_min_ms\":{:.6f},\"iteration_max_ms\":{:.6f},"
        "\"throughput_img_s\":{:.3f},\"speedup\":{:.4f},\"single_node_iteration_ms\":{:.6f},"
        "\"breakdown_ms\":{{\"compute\":{:.6f},\"communication\":{:.6f},\"wait\":{:.6f}}},"
        "\"network_gb_per_iteration\":{:.6f},\"events\":{},\"network_messages\":{},"
        "\"compute_source\":\"{}\",\"warnings\":[{}],\"layers\":[{}],\"links\":[{}]}}\n",
        JsonEscaped(r.name), JsonEscaped(r.model), r.workers, devices, r.servers, r.batch_per_worker,
        r.measured_iterations, r.iteration_ms, r.iteration_std_ms, r.iteration_min_ms,
        r.iteration_max_ms, r.throughput, r.speedup, r.single_node_iteration_ms, r.compute_ms,
        r.communication_ms, r.wait_ms, r.network_gb_per_iteration, r.events, r.network_messages,
        JsonEscaped(r.compute_source), warnings, layers, links);
  }
  std::string o;
  if (r.devices_per_machine > 1) {
    o += fmt::format("scenario        {}  (model {}, {} machines x {} devices, {}, {} shards, "
                     "batch {}/device)\n",
                     r.name, r.model, r.workers, r.devices_per_machine,
                     r.client_per_device ? "a process per device" : "one client per machine",
                     r.servers, r.batch_per_worker);
  } else {
    o += fmt::format("scenario        {}  (model {}, {} workers, {} shards, batch {}/worker)\n",
                     r.name, r.model, r.workers, r.servers, r.batch_per_worker);
  }
  o += fmt::format("compute         {}\n", r.compute_source);
  for (const auto& w : r.warnings) o += fmt::format("warning         {}\n", w);
  o += fmt::format("iteration       {:.3f} ms  (std {:.3f}, min {:.3f}, max {:.3f}; {} measured)\n",
                   r.iteration_ms, r.iteration_std_ms, r.iteration_min_ms, r.iteration_max_ms,
                   r.measured_iterations);
  o += fmt::format("throughput      {:.1f} images/s\n", r.throughput);
  if (r.speedup > 0) {
    o += fmt::format("speedup         {:.2f}x over one {} ({:.3f} ms/iteration)\n", r.speedup,
                     r.devices_per_machine > 1 ? "device" : "node", r.single_node_iteration_ms);
  }
  o += fmt::format("breakdown       compute {:.3f} ms, communication {:.3f} ms (NIC busy, "
                   "overlaps compute), wait {:.3f} ms\n",
                   r.compute_ms, r.communication_ms, r.wait_ms);
  o += fmt::format("network         {:.4f} GB payload per iteration, {} messages in all\n",
                   r.network_gb_per_iteration, r.network_messages);
  o += "busiest links   ";
  bool first = true;
  for (const LinkStats* l : BusiestLinks(r, 4)) {
    o += fmt::format("{}{} {:.1f}%", first ? "" : ", ", l->name, 100 * l->utilisation);
    first = false;
  }
  o += "\n";
  return o;
}

}  // namespace poseidon::sim
