#include "calibration/provenance.h"

#include <sys/utsname.h>
#include <unistd.h>

#include <array>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <fstream>
#include <thread>

#include <fmt/format.h>

#ifdef POSEIDON_HAVE_DNNL
#include <oneapi/dnnl/dnnl.h>
#endif

#ifndef POSEIDON_SOURCE_ROOT
#define POSEIDON_SOURCE_ROOT "."
#endif

namespace poseidon::calibration {
namespace {

std::string RunAndRead(const std::string& cmd) {
  std::string out;
  FILE* f = popen(cmd.c_str(), "r");
  if (f == nullptr) return out;
  std::array<char, 256> buf{};
  while (fgets(buf.data(), static_cast<int>(buf.size()), f) != nullptr) out += buf.data();
  pclose(f);
  while (!out.empty() && (out.back() == '\n' || out.back() == '\r')) out.pop_back();
  return out;
}

}  // namespace

std::string CpuModelName() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("model name", 0) == 0) {
      auto colon = line.find(':');
      if (colon != std::string::npos) {
        std::string v = line.substr(colon + 1);
        while (!v.empty() && v.front() == ' ') v.erase(v.begin());
        return v;
      }
    }
  }
  return "unknown cpu";
}

int LogicalCores() { return static_cast<int>(std::max(1u, std::thread::hardware_concurrency())); }

std::string OneDnnVersion() {
#ifdef POSEIDON_HAVE_DNNL
  const dnnl_version_t* v = dnnl_version();
  return fmt::format("{}.{}.{} (commit {})", v->major, v->minor, v->patch, v->hash);
#else
  return "";
#endif
}

std::string JoinCommandLine(int argc, const char* const* argv) {
  std::string s;
  for (int i = 0; i < argc; ++i) {
    std::string a = argv[i];
    bool plain = !a.empty() && a.find_first_of(" \t\"'$\\`*?;&|<>(){}") == std::string::npos;
    if (!s.empty()) s += ' ';
    if (plain) {
      s += a;
    } else {
      s += '\'';
      for (char c : a) s += c == '\'' ? std::string("'\\''") : std::string(1, c);
      s += '\'';
    }
  }
  return s;
}

std::map<std::string, std::string> CollectProvenance(const std::string& command) {
  std::map<std::string, std::string> p;
  std::time_t now = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&now, &tm);
  std::array<char, 32> date{};
  std::strftime(date.data(), date.size(), "%Y-%m-%dT%H:%M:%SZ", &tm);
  p["date"] = date.data();
  p["command"] = command;
  std::string commit = RunAndRead(fmt::format(
      "git -C '{}' describe --always --dirty --abbrev=12 2>/dev/null", POSEIDON_SOURCE_ROOT));
  p["commit"] = commit.empty() ? "unknown" : commit;
  std::array<char, 256> host{};
  p["host"] = gethostname(host.data(), host.size() - 1) == 0 ? host.data() : "unknown";
  p["cpu"] = CpuModelName();
  p["cores"] = fmt::format("{}", LogicalCores());
  utsname u{};
  if (uname(&u) == 0) p["kernel"] = fmt::format("{} {}", u.sysname, u.release);
  const std::string dnnl = OneDnnVersion();
  if (!dnnl.empty()) p["onednn"] = dnnl;
  // oneDNN's OpenMP team size: the compute figures depend on it (docs/calibration.md).
  const char* omp = std::getenv("OMP_NUM_THREADS");
  p["omp_num_threads"] = omp != nullptr && *omp != '\0' ? omp : "unset (OpenMP default: all cores)";
  return p;
}

}  // namespace poseidon::calibration
