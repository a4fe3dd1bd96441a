// real_runtime/job_report.h: what the coordinator of a live job tells its user: progress lines
// with the mean loss and throughput, the learning curve as CSV (the columns `poseidon train`
// writes), the test accuracy and the closing line.
//
//   JobReport r(workers, iterations, batch, print_interval, "curve.csv");  // throws on the CSV
//   r.OnLoss(worker_rank, clock, loss, counts);  // prints a line every print_interval rows
//   if (r.all_losses()) r.Finish(shards, seconds);
#pragma once

#include <chrono>
#include <cstdint>
#include <fstream>
#include <functional>
#include <map>
#include <optional>
#include <string>

namespace poseidon::rt {

class JobReport {
 public:
  using Clock = std::chrono::steady_clock;
  // Throws std::runtime_error naming the CSV when it cannot be created (empty: none).
  JobReport(int workers, int64_t iterations, int64_t batch_per_worker, int64_t print_interval,
            const std::string& csv, Clock::time_point start);

  // Whether the worker of that rank still counts (not evicted): rows wait for those that do.
  using Counts = std::function<bool(int worker_rank)>;
  // A worker's loss of `clock`; the first report counts (a rejoined worker reports again).
  void OnLoss(int worker_rank, int64_t clock, double loss, const Counts& counts);
  // A resumed job (node --resume): the first row is the first clock a worker reports, not 0.
  void ResumeAtFirstLoss() { resume_ = true; }
  // The job started (every process registered): the first progress window counts from here,
  // so its images/s leave start-up out. Later calls change nothing.
  void OnJobStarted();
  // Reports the rows that are complete now (after an eviction, say).
  void Flush(const Counts& counts);
  bool all_losses() const { return next_row_ == iterations_; }

  void SetAccuracy(double a) { accuracy_ = a; }
  const std::optional<double>& accuracy() const { return accuracy_; }

  // The last row (with the accuracy) and the closing lines; false when the CSV write failed.
  bool Finish(int shards, double seconds);

 private:
  bool RowComplete(const std::map<int, double>& row, const Counts& counts) const;

  const int workers_;
  const int64_t iterations_, batch_, interval_;
  const Clock::time_point start_;
  std::string csv_path_;
  std::ofstream csv_;
  std::map<int64_t, std::map<int, double>> losses_;  // clock -> worker rank -> loss
  int64_t next_row_ = 0;                              // first clock not yet reported
  double window_loss_ = 0;
  int64_t window_n_ = 0;
  Clock::time_point window_start_;  // the job's start once OnJobStarted ran
  bool job_started_ = false;
  bool resume_ = false;
  std::optional<double> accuracy_;
};

}  // namespace poseidon::rt
