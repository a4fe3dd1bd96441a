// calibration/stats.h: summaries of repeated timings (median and spread), as the per-layer
// profiles record them. Percentiles use linear interpolation between order statistics
// (numpy's default), so a summary can be checked against any statistics package.
#pragma once

#include <cstddef>
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

// Indices of the samples between the 25th and 75th percentile (inclusive): the "typical" ones;
// never empty for non-empty input. InterquartileMean: their mean (robust to rare spikes, as a
// median is, but additive: the interquartile mean of iteration totals equals the sum of the
// per-part means over the same iterations).
std::vector<std::size_t> InterquartileIndices(const std::vector<double>& samples);
double InterquartileMean(const std::vector<double>& samples);

}  // namespace poseidon::calibration
