#include "real_runtime/job_report.h"

#include <algorithm>
#include <cstdio>
#include <stdexcept>

#include <fmt/format.h>

namespace poseidon::rt {

JobReport::JobReport(int workers, int64_t iterations, int64_t batch_per_worker,
                     int64_t print_interval, const std::string& csv, Clock::time_point start)
    : workers_(workers),
      iterations_(iterations),
      batch_(batch_per_worker),
      interval_(std::max<int64_t>(1, print_interval)),
      start_(start),
      csv_path_(csv),
      window_start_(Clock::now()) {
  if (csv.empty()) return;
  csv_.open(csv, std::ios::binary);
  if (!csv_) {
    throw std::runtime_error(fmt::format(
        "{}: error: cannot write file; check the folder exists and is writable", csv));
  }
  csv_ << "iteration,loss,test_accuracy,seconds\n";
}

void JobReport::OnJobStarted() {
  if (job_started_) return;
  job_started_ = true;
  if (next_row_ == 0) window_start_ = Clock::now();
}

// A row is complete when every worker that still counts reported its loss of that clock.
bool JobReport::RowComplete(const std::map<int, double>& row, const Counts& counts) const {
  for (int w = 1; w <= workers_; ++w) {
    if (!row.count(w) && counts(w)) return false;
  }
  return !row.empty();
}

void JobReport::OnLoss(int worker_rank, int64_t clock, double loss, const Counts& counts) {
  if (resume_ && next_row_ == 0 && losses_.empty()) next_row_ = clock;  // the resumed clock
  if (clock < next_row_) return;  // reported again by a rejoined worker
  losses_[clock].emplace(worker_rank, loss);
  Flush(counts);
}

void JobReport::Flush(const Counts& counts) {
  while (!losses_.empty() && losses_.begin()->first == next_row_ &&
         RowComplete(losses_.begin()->second, counts)) {
    double sum = 0;
    for (const auto& [w, l] : losses_.begin()->second) sum += l;
    window_loss_ += sum / static_cast<double>(losses_.begin()->second.size());
    ++window_n_;
    losses_.erase(losses_.begin());
    const int64_t it = ++next_row_;
    if (it % interval_ != 0 && it != iterations_) continue;
    const Clock::time_point now = Clock::now();
    const double window_s = std::chrono::duration<double>(now - window_start_).count();
    const double images = static_cast<double>(window_n_ * workers_ * batch_);
    const double mean = window_loss_ / static_cast<double>(window_n_);
    fmt::print("iter {:>6}  loss {:.4f}  {:.0f} images/s ({} workers)\n", it, mean,
               window_s > 0 ? images / window_s : 0.0, workers_);
    std::fflush(stdout);
    if (csv_.is_open() && it != iterations_) {
      csv_ << fmt::format("{},{:.6f},,{:.3f}\n", it, mean,
                          std::chrono::duration<double>(now - start_).count());
    }
    if (it == iterations_) {
      // The last row waits for the test accuracy.
      window_loss_ = mean;
      window_n_ = 1;
      return;
    }
    window_loss_ = 0;
    window_n_ = 0;
    window_start_ = now;
  }
}

bool JobReport::Finish(int shards, double seconds) {
  if (accuracy_) fmt::print("iter {:>6}  test accuracy {:.4f}\n", iterations_, *accuracy_);
  if (csv_.is_open()) {
    csv_ << fmt::format("{},{:.6f},{},{:.3f}\n", iterations_, window_loss_,
                        accuracy_ ? fmt::format("{:.6f}", *accuracy_) : "", seconds);
    csv_.flush();
    if (!csv_) return false;
    fmt::print("learning curve written to {}\n", csv_path_);
  }
  fmt::print("job done: {} workers, {} shards, {} iterations in {:.2f} s\n", workers_, shards,
             iterations_, seconds);
  std::fflush(stdout);
  return true;
}

}  // namespace poseidon::rt
