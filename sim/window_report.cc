#include "sim/window_report.h"

#include <cmath>

#include <fmt/format.h>

namespace poseidon::sim {

namespace {
constexpr double kLinuxMssBytes = 1448;
}  // namespace

std::string WindowReport(const std::vector<ConnectionWindows>& windows,
                         const config::NetworkSpec& spec) {
  if (windows.empty()) {
    return "no congestion windows: the network model keeps them only as `model: queue` with "
           "initial_window_bytes > 0\n";
  }
  const double segment_wire_bytes =
      (spec.segment_bytes > 0 ? static_cast<double>(spec.segment_bytes) : kLinuxMssBytes) /
      spec.efficiency;
  const auto segments = [&](double bytes) {
    return std::isfinite(bytes) ? fmt::format("{:.0f}", bytes / segment_wire_bytes)
                                : std::string("-");
  };
  std::string out;
  for (const ConnectionWindows& c : windows) {
    out += fmt::format("{}: {} loss episode{}\n", c.name, c.losses.size(),
                       c.losses.size() == 1 ? "" : "s");
    for (const WindowLoss& l : c.losses) {
      out += fmt::format(
          "  {:9.3f} s loss: window {} (heard {}) -> threshold {}, {} segments lost, window down "
          "to {}\n",
          static_cast<double>(l.at) / 1e9, segments(l.window_bytes), segments(l.heard_bytes),
          segments(l.threshold_bytes), segments(l.lost_bytes), segments(l.window_after_bytes));
    }
    out += fmt::format("  at the end: window {}, threshold {}\n", segments(c.window_bytes),
                       segments(c.threshold_bytes));
  }
  return out;
}

}  // namespace poseidon::sim
