// calibration/stats.h: summaries of repeated timings (median and spread), as the per-layer
// profiles record them. Percentiles use linear interpolation between order statistics
// (numpy's default), so a summary can be checked against any statistics package.
#pragma once

#include <vector>

namespace poseidon::calibration {

struct Summary {
  int count = 0;
  double mean = 0;
  double median = 0;
  double p10 = 0;
  double p90 = 0;
  double min = 0;
  double max = 0;
};

// q in [0, 1]; samples need not be sorted; empty input -> 0.
double Percentile(std::vector<double> samples, double q);
Summary Summarize(const std::vector<double>& samples);

}  // namespace poseidon::calibration
