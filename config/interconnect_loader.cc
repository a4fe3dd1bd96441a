#include "config/interconnect_loader.h"

#include <cmath>

#include <fmt/format.h>

namespace poseidon::config {
namespace {

InterconnectSpec ReadInterconnect(const YamlFile& f) {
  MapReader r(f.root(), f.path(), "interconnect file");
  if (!r.Has("schema_version")) {
    r.Fail(fmt::format("interconnect file has no schema_version; add 'schema_version: {}' at the "
                       "top",
                       kInterconnectSchemaVersion));
  }
  if (r.Int("schema_version") != kInterconnectSchemaVersion) {
    r.FailKey("schema_version", fmt::format("unsupported schema_version; this poseidon reads {}",
                                            kInterconnectSchemaVersion));
  }
  InterconnectSpec spec;
  spec.loc = r.Loc();
  spec.name = r.String("name");
  spec.description = r.String("description", "");
  if (!r.Has("source")) {
    r.Fail("interconnect file has no 'source'; add 'source: \"...\"' naming the datasheet (or "
           "measurement) its figures come from");
  }
  spec.source = r.String("source");
  if (spec.source.empty()) r.FailKey("source", "'source' must not be empty");
  if (!r.Has("kind")) {
    r.Fail("interconnect file has no 'kind'; add 'kind: nvlink', 'kind: pcie' or 'kind: host'");
  }
  ReadInterconnectFigures(r, &spec);
  r.Finish();
  return spec;
}

}  // namespace

void ReadInterconnectFigures(MapReader& r, InterconnectSpec* spec) {
  if (r.Has("kind")) {
    const std::string k = r.Choice("kind", {"nvlink", "pcie", "host"}, "host");
    spec->kind = k == "nvlink" ? InterconnectKind::kNvlink
                 : k == "pcie" ? InterconnectKind::kPcie
                               : InterconnectKind::kHost;
  }
  if (r.Has("link_gbs")) {
    if (spec->kind != InterconnectKind::kNvlink) {
      r.FailKey("link_gbs", fmt::format("'link_gbs' (device-to-device links) applies to kind: "
                                        "nvlink only; a {} machine's devices talk over {}",
                                        InterconnectKindName(spec->kind),
                                        spec->kind == InterconnectKind::kPcie
                                            ? "their PCIe links (pcie_gbs)"
                                            : "host memory (host_memory_gbs)"));
    }
    spec->link_Bps = r.PositiveNumber("link_gbs") * 1e9;
    spec->link_loc = r.Loc("link_gbs");
  }
  if (spec->kind == InterconnectKind::kNvlink && spec->link_Bps <= 0) {
    r.Fail("an nvlink interconnect needs 'link_gbs' (device-to-device, per device, each "
           "direction, 1e9 bytes/s; e.g. 300 for NVLink 3 on NVSwitch)");
  }
  if (r.Has("link_latency_us")) {
    spec->link_latency_ns = std::llround(r.NonNegativeNumber("link_latency_us", 0) * 1e3);
  }
  if (r.Has("pcie_gbs")) {
    if (spec->kind == InterconnectKind::kHost) {
      r.FailKey("pcie_gbs", "'pcie_gbs' applies to GPU machines (kind nvlink or pcie); kind: "
                            "host devices are threads sharing host memory");
    }
    spec->pcie_Bps = r.PositiveNumber("pcie_gbs") * 1e9;
    spec->pcie_loc = r.Loc("pcie_gbs");
  }
  if (r.Has("host_memory_gbs")) spec->host_memory_Bps = r.PositiveNumber("host_memory_gbs") * 1e9;
  if (r.Has("reduce_on")) {
    spec->reduce_on = r.Choice("reduce_on", {"device", "host"}, "device") == "device"
                          ? ReduceOn::kDevice
                          : ReduceOn::kHost;
    if (spec->kind == InterconnectKind::kHost && spec->reduce_on == ReduceOn::kDevice) {
      r.FailKey("reduce_on", "kind: host devices are threads of one process: their gradients "
                             "are summed in host memory; write reduce_on: host or leave it out");
    }
  }
  if (spec->kind == InterconnectKind::kHost) spec->reduce_on = ReduceOn::kHost;
  if (r.Has("cpu_vendor")) {
    const std::string v = r.Choice("cpu_vendor", {"intel", "amd", "other"}, "intel");
    spec->cpu_vendor = v == "amd" ? CpuVendor::kAmd : v == "other" ? CpuVendor::kOther
                                                                    : CpuVendor::kIntel;
  }
}

InterconnectSpec LoadInterconnectFile(const std::string& path) {
  return ReadInterconnect(YamlFile::Load(path));
}

InterconnectSpec ParseInterconnectYaml(const std::string& text, const std::string& name) {
  return ReadInterconnect(YamlFile::Parse(text, name));
}

}  // namespace poseidon::config
