// calibration/provenance.h: where a measurement was taken, for the provenance block of profile and
// network files (STYLE.md habit 10: device, library versions, date, command, commit).
//
//   auto p = calibration::CollectProvenance("poseidon calibrate --model fmnist_mlp");
//   p["date"];  // "2026-11-29T10:41:48Z"
//
// Keys: date (UTC, ISO 8601), command, commit (`git describe --always --dirty` of the source
// tree, "unknown" outside git), host, cpu (model name), cores (logical CPUs), kernel (uname -r),
// onednn (version, when built with oneDNN). Reads /proc/cpuinfo and runs git: calibration code,
// never core/.
#pragma once

#include <map>
#include <string>

namespace poseidon::calibration {

std::map<std::string, std::string> CollectProvenance(const std::string& command);
// "Intel(R) Xeon(R) ..." from /proc/cpuinfo, or "unknown cpu".
std::string CpuModelName();
int LogicalCores();
// oneDNN's "MAJOR.MINOR.PATCH (commit HASH)", or "" without oneDNN.
std::string OneDnnVersion();
// The command line as typed (arguments quoted where the shell would need it).
std::string JoinCommandLine(int argc, const char* const* argv);

}  // namespace poseidon::calibration
