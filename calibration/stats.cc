#include "calibration/stats.h"

#include <algorithm>
#include <cmath>

namespace poseidon::calibration {

double Percentile(std::vector<double> samples, double q) {
  if (samples.empty()) return 0;
  std::sort(samples.begin(), samples.end());
  q = std::clamp(q, 0.0, 1.0);
  const double pos = q * static_cast<double>(samples.size() - 1);
  const size_t lo = static_cast<size_t>(std::floor(pos));
  const size_t hi = std::min(lo + 1, samples.size() - 1);
  const double frac = pos - static_cast<double>(lo);
  return samples[lo] + (samples[hi] - samples[lo]) * frac;
}

Summary Summarize(const std::vector<double>& samples) {
  Summary s;
  s.count = static_cast<int>(samples.size());
  if (samples.empty()) return s;
  double sum = 0;
  for (double v : samples) sum += v;
  s.mean = sum / static_cast<double>(samples.size());
  s.median = Percentile(samples, 0.5);
  s.p10 = Percentile(samples, 0.1);
  s.p90 = Percentile(samples, 0.9);
  s.min = *std::min_element(samples.begin(), samples.end());
  s.max = *std::max_element(samples.begin(), samples.end());
  return s;
}

std::vector<size_t> InterquartileIndices(const std::vector<double>& samples) {
  std::vector<size_t> idx;
  if (samples.empty()) return idx;
  const double lo = Percentile(samples, 0.25), hi = Percentile(samples, 0.75);
  for (size_t i = 0; i < samples.size(); ++i) {
    if (samples[i] >= lo && samples[i] <= hi) idx.push_back(i);
  }
  if (idx.empty()) {  // only when interpolation falls between two samples: take the nearest
    size_t best = 0;
    const double mid = Percentile(samples, 0.5);
    for (size_t i = 1; i < samples.size(); ++i) {
      if (std::abs(samples[i] - mid) < std::abs(samples[best] - mid)) best = i;
    }
    idx.push_back(best);
  }
  return idx;
}

double InterquartileMean(const std::vector<double>& samples) {
  const std::vector<size_t> idx = InterquartileIndices(samples);
  if (idx.empty()) return 0;
  double sum = 0;
  for (size_t i : idx) sum += samples[i];
  return sum / static_cast<double>(idx.size());
}

}  // namespace poseidon::calibration
