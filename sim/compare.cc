#include "sim/compare.h"

#include <algorithm>
#include <cctype>
#include <optional>
#include <stdexcept>
#include <string_view>

#include <fmt/format.h>

#include "sim/parallel.h"
#include "sim/text_escape.h"

namespace poseidon::sim {

namespace {

using config::ConfigError;
using config::ScenarioSpec;

bool Multi(const ScenarioSpec& s) { return s.devices_per_machine > 1; }
bool IsBaseline(const std::string& id) { return id == "ddp" || id == "horovod"; }

std::string ConsistencyText(const ScenarioSpec& s) {
  if (s.consistency == "ssp") return fmt::format("ssp (staleness {})", s.staleness);
  return s.consistency;
}

// The row's settings in words, from the scenario the row runs.
std::string Detail(const std::string& id, const ScenarioSpec& v) {
  const std::string chunks = fmt::format("{} KiB chunks", v.chunk_bytes / 1024);
  if (id == "poseidon") {
    return fmt::format("DWBP, SACP auto, {} balanced{}", chunks,
                       Multi(v) ? ", one client per machine" : "");
  }
  const std::string per_device = Multi(v) ? ", a process per device" : "";
  const std::string algorithm = v.allreduce_algorithm == "auto"   ? "NCCL's ring or tree"
                                : v.allreduce_algorithm == "tree" ? "NCCL's tree"
                                                                  : "ring";
  if (id == "ddp") {
    return fmt::format("{} all-reduce of buckets of {:g} MiB (first {:g} MiB) in bucket order{}",
                       algorithm, v.ddp_bucket_cap_mib, v.ddp_first_bucket_mib, per_device);
  }
  if (id == "horovod") {
    return fmt::format(
        "{} all-reduce of ready tensors fused up to {:g} MiB, negotiated every "
        "{:g} ms{}",
        algorithm, v.horovod_fusion_threshold_mib, v.horovod_cycle_ms, per_device);
  }
  if (id == "ps_papers") return "whole tensors placed round-robin, pushes after the backward pass";
  return fmt::format("{} balanced, DWBP (a layer's push as soon as its backward ends)", chunks);
}

std::string Fixed(double v, int digits) { return fmt::format("{:.{}f}", v, digits); }

// A word a POSIX shell reads back as itself (quoted only when it needs to be).
std::string ShellWord(const std::string& s) {
  const bool plain = !s.empty() && std::all_of(s.begin(), s.end(), [](char ch) {
    return std::isalnum(static_cast<unsigned char>(ch)) != 0 ||
           std::string_view("-_.,=/+:@%").find(ch) != std::string_view::npos;
  });
  if (plain) return s;
  std::string o = "'";
  for (char ch : s) o += ch == '\'' ? std::string("'\\''") : std::string(1, ch);
  return o + "'";
}

// " --set A --set B" (each word quoted for a shell where needed), or "".
std::string SetFlags(const std::vector<std::string>& v) {
  std::string o;
  for (const auto& x : v) o += " --set " + ShellWord(x);
  return o;
}

}  // namespace

const std::vector<CompareSystem>& CompareSystems() {
  static const std::vector<CompareSystem> kSystems = {
      {"poseidon", "Poseidon (DWBP + SACP auto)"},
      {"ddp", "PyTorch DDP"},
      {"horovod", "Horovod"},
      {"ps_papers", "PS, whole tensors, no overlap"},
      {"ps_overlap", "PS, balanced chunks, overlap"},
  };
  return kSystems;
}

std::vector<std::string> CompareOverrides(const std::string& id, const ScenarioSpec& s) {
  const auto& systems = CompareSystems();
  if (std::none_of(systems.begin(), systems.end(),
                   [&](const CompareSystem& x) { return x.id == id; })) {
    throw std::invalid_argument("unknown compare system '" + id + "'");
  }
  std::vector<std::string> o;
  // Another baseline's keys, which this system would be refused with (config/scenario.cc).
  if (!s.baseline.empty() && s.baseline != id) {
    if (!IsBaseline(id)) o.push_back("protocol.baseline=null");
    o.push_back("protocol." + s.baseline + "=null");
  }
  if (!s.layer_schemes.empty()) o.push_back("protocol.layer_schemes=null");
  if (IsBaseline(id)) {
    o.push_back("protocol.baseline=" + id);
    o.push_back("protocol.scheme=allreduce");
    o.push_back("protocol.dwbp=true");  // both start a collective once its gradients are ready
    // Over NCCL, as users run them: NCCL chooses each collective's algorithm unless the
    // scenario names one (NCCL_ALGO).
    if (!s.allreduce_algorithm_given) o.push_back("protocol.allreduce_algorithm=auto");
    if (Multi(s) && !s.client_per_device) o.push_back("cluster.client=device");
    // Their processes' copies inside a machine cross its interconnect (NVLink, PCIe).
    if (Multi(s) && !s.local_copies_timed) o.push_back("cluster.local_copies=interconnect");
    return o;
  }
  if (s.allreduce_algorithm_given) o.push_back("protocol.allreduce_algorithm=null");
  const bool papers = id == "ps_papers";
  o.push_back(papers ? "protocol.dwbp=false" : "protocol.dwbp=true");
  o.push_back(id == "poseidon" ? "protocol.scheme=auto" : "protocol.scheme=ps");
  o.push_back(papers ? "protocol.placement_policy=round_robin"
                     : "protocol.placement_policy=balanced");
  if (id == "poseidon" && Multi(s) && s.client_per_device) {
    o.push_back("cluster.client=machine");
    if (s.local_copies_timed) o.push_back("cluster.local_copies=free");  // it needs client: device
  }
  return o;
}

std::string CompareUnsupported(const std::string& id, const ScenarioSpec& s) {
  if (!IsBaseline(id)) return "";
  const std::string who = id == "ddp" ? "DDP" : "Horovod";
  if (s.consistency != "bsp") {
    return fmt::format(
        "{} all-reduces every gradient in lockstep: it needs BSP, and the "
        "scenario's consistency is {}",
        who, ConsistencyText(s));
  }
  if (s.model_from_workers) {
    return fmt::format(
        "the workers bring the model (model: torch) and run Poseidon's protocol; "
        "run {} itself to compare (docs/torch.md)",
        who);
  }
  return "";
}

CompareResult RunCompare(const std::string& scenario_file,
                         const std::vector<std::string>& overrides, int threads) {
  // The scenario as the user gave it: its errors are bad input, the command's, not a system's.
  const ScenarioSpec base = config::LoadScenarioFile(scenario_file, overrides);
  CompareResult c;
  c.scenario_file = scenario_file;
  c.overrides = overrides;
  c.name = base.name;
  c.model = base.model.name;
  c.machines = base.workers;
  c.devices_per_machine = base.devices_per_machine;
  c.batch_per_device = base.batch_per_worker;
  c.bandwidth_gbps = base.network.host_bandwidth_Bps * 8 / 1e9;
  c.consistency = ConsistencyText(base);

  // Loaded here, one after another (the YAML readers' located errors use per-thread scopes);
  // only the simulations run in parallel.
  std::vector<std::optional<ScenarioSpec>> specs;
  for (const CompareSystem& sys : CompareSystems()) {
    CompareRow& row = c.rows.emplace_back();
    row.system = sys;
    row.overrides = CompareOverrides(sys.id, base);
    std::optional<ScenarioSpec>& spec = specs.emplace_back();
    row.reason = CompareUnsupported(sys.id, base);
    if (!row.reason.empty()) continue;
    std::vector<std::string> all = overrides;
    all.insert(all.end(), row.overrides.begin(), row.overrides.end());
    try {
      spec = config::LoadScenarioFile(scenario_file, all);
      row.detail = Detail(sys.id, *spec);
    } catch (const std::exception& e) {
      row.reason = e.what();
    }
  }

  ParallelFor(static_cast<int>(c.rows.size()), threads, [&](int i) {
    CompareRow& row = c.rows[static_cast<size_t>(i)];
    if (!specs[static_cast<size_t>(i)]) return;
    try {
      row.result = SimulateScenario(*specs[static_cast<size_t>(i)], {});
      if (row.result.deadlocked) {
        row.reason = "the simulation deadlocked: " + row.result.deadlock_report;
        while (!row.reason.empty() && row.reason.back() == '\n') row.reason.pop_back();
      } else {
        row.ran = true;
      }
    } catch (const std::exception& e) {
      row.reason = e.what();
    }
  });

  const CompareRow* poseidon = nullptr;
  for (const CompareRow& row : c.rows) {
    if (row.system.id == "poseidon" && row.ran) poseidon = &row;
    if (row.ran && c.single_node_iteration_ms == 0) {
      c.single_node_iteration_ms = row.result.single_node_iteration_ms;
    }
  }
  for (CompareRow& row : c.rows) {
    if (poseidon && row.ran && row.result.throughput > 0) {
      row.poseidon_gain = poseidon->result.throughput / row.result.throughput;
    }
  }
  return c;
}

namespace {

std::string CsvText(const CompareResult& c) {
  std::string o =
      "name,model,machines,devices_per_machine,batch_per_device,system,label,iteration_ms,"
      "throughput_img_s,speedup,single_node_iteration_ms,compute_ms,wait_ms,communication_ms,"
      "network_gb_per_iteration,poseidon_gain,set,reason\n";
  for (const CompareRow& row : c.rows) {
    o += fmt::format("{},{},{},{},{},{},{},", CsvField(c.name), CsvField(c.model), c.machines,
                     c.devices_per_machine, c.batch_per_device, row.system.id,
                     CsvField(row.system.label));
    if (row.ran) {
      const ScenarioResult& r = row.result;
      o += fmt::format("{:.6f},{:.3f},{:.4f},{:.6f},{:.6f},{:.6f},{:.6f},{:.6f},", r.iteration_ms,
                       r.throughput, r.speedup, r.single_node_iteration_ms, r.compute_ms, r.wait_ms,
                       r.communication_ms, r.network_gb_per_iteration);
      o += row.poseidon_gain > 0 ? Fixed(row.poseidon_gain, 4) : "";
    } else {
      o += ",,,,,,,,";
    }
    std::string sets;
    for (const auto& x : row.overrides) sets += (sets.empty() ? "" : " ") + x;
    o += "," + CsvField(sets) + "," + CsvField(row.reason) + "\n";
  }
  return o;
}

std::string JsonText(const CompareResult& c) {
  std::string systems;
  for (const CompareRow& row : c.rows) {
    std::string sets;
    for (const auto& s : row.overrides) sets += (sets.empty() ? "" : ",") + JsonQuoted(s);
    std::string figures;
    if (row.ran) {
      const ScenarioResult& r = row.result;
      figures = fmt::format(
          "\"iteration_ms\":{:.6f},\"throughput_img_s\":{:.3f},\"speedup\":{:.4f},"
          "\"breakdown_ms\":{{\"compute\":{:.6f},\"wait\":{:.6f},\"communication\":{:.6f}}},"
          "\"network_gb_per_iteration\":{:.6f},\"poseidon_gain\":{}",
          r.iteration_ms, r.throughput, r.speedup, r.compute_ms, r.wait_ms, r.communication_ms,
          r.network_gb_per_iteration,
          row.poseidon_gain > 0 ? Fixed(row.poseidon_gain, 4) : std::string("null"));
    } else {
      figures = "\"reason\":" + JsonQuoted(row.reason);
    }
    systems += fmt::format(
        "{}{{\"system\":\"{}\",\"label\":{},\"detail\":{},\"set\":[{}],"
        "\"ran\":{},{}}}",
        systems.empty() ? "" : ",", row.system.id, JsonQuoted(row.system.label),
        JsonQuoted(row.detail), sets, row.ran ? "true" : "false", figures);
  }
  std::string user;
  for (const auto& s : c.overrides) user += (user.empty() ? "" : ",") + JsonQuoted(s);
  return fmt::format(
      "{{\"scenario\":{},\"set\":[{}],\"name\":{},\"model\":{},\"machines\":{},"
      "\"devices_per_machine\":{},\"batch_per_device\":{},\"bandwidth_gbps\":{:g},"
      "\"consistency\":{},\"single_node_iteration_ms\":{:.6f},\"systems\":[{}]}}\n",
      JsonQuoted(c.scenario_file), user, JsonQuoted(c.name), JsonQuoted(c.model), c.machines,
      c.devices_per_machine, c.batch_per_device, c.bandwidth_gbps, JsonQuoted(c.consistency),
      c.single_node_iteration_ms, systems);
}

std::string TableText(const CompareResult& c) {
  std::string o;
  const std::string cluster =
      c.devices_per_machine > 1
          ? fmt::format("{} machines x {} devices", c.machines, c.devices_per_machine)
          : fmt::format("{} machines", c.machines);
  o += fmt::format("scenario   {}  ({}, model {}, batch {}/device, {:g} Gbit/s, {})\n", c.name,
                   cluster, c.model, c.batch_per_device, c.bandwidth_gbps, c.consistency);
  if (c.single_node_iteration_ms > 0) {
    o += fmt::format(
        "one device {:.3f} ms/iteration (forward and backward, nothing to "
        "synchronise): speedups are over it\n",
        c.single_node_iteration_ms);
  }
  o += "\n";
  size_t w = 6;
  for (const CompareRow& row : c.rows) w = std::max(w, row.system.label.size());
  o += fmt::format("{:<{}}  {:>10}  {:>10}  {:>7}  {:>10}  {:>10}  {:>10}  {:>10}\n", "system", w,
                   "iteration", "throughput", "speedup", "compute", "wait", "NIC busy", "Poseidon");
  o += fmt::format("{:<{}}  {:>10}  {:>10}  {:>7}  {:>10}  {:>10}  {:>10}  {:>10}\n", "", w, "ms",
                   "images/s", "", "ms", "ms", "ms", "is faster");
  for (const CompareRow& row : c.rows) {
    if (!row.ran) {
      o += fmt::format("{:<{}}  cannot run: {}\n", row.system.label, w, row.reason);
      continue;
    }
    const ScenarioResult& r = row.result;
    const std::string gain = row.system.id == "poseidon" ? "-"
                             : row.poseidon_gain > 0     ? fmt::format("{:.2f}x", row.poseidon_gain)
                                                         : "?";
    o += fmt::format(
        "{:<{}}  {:>10.3f}  {:>10.1f}  {:>6.2f}x  {:>10.3f}  {:>10.3f}  {:>10.3f}  "
        "{:>10}\n",
        row.system.label, w, r.iteration_ms, r.throughput, r.speedup, r.compute_ms, r.wait_ms,
        r.communication_ms, gain);
  }
  o += "\n";
  o += "compute    the compute stream busy per iteration (forward, backward, SFB's products)\n";
  o += "wait       iteration - compute: the stream idles for parameters (communication not "
       "hidden by compute, or slower workers)\n";
  o += "NIC busy   the machine's NIC sending or receiving; it overlaps compute, so it is not "
       "added\n";
  o += "Poseidon   is faster by: Poseidon's throughput over the row's\n";
  o += "\n";
  o += fmt::format("each row is: poseidon simulate {}{} --set ... (the row's keys below)\n",
                   ShellWord(c.scenario_file), SetFlags(c.overrides));
  for (const CompareRow& row : c.rows) {
    o += fmt::format("  {:<{}}  {}\n", row.system.label, w,
                     row.detail.empty() ? std::string("-") : row.detail);
    o += fmt::format("  {:<{}} {}\n", "", w, SetFlags(row.overrides));
  }
  return o;
}

}  // namespace

std::string FormatCompare(const CompareResult& r, OutputFormat format) {
  switch (format) {
    case OutputFormat::kCsv:
      return CsvText(r);
    case OutputFormat::kJson:
      return JsonText(r);
    case OutputFormat::kTable:
      break;
  }
  return TableText(r);
}

}  // namespace poseidon::sim
