#include "real_runtime/progress_watchdog.h"

namespace poseidon::rt {

ProgressWatchdog::ProgressWatchdog(asio::io_context& io, std::chrono::seconds timeout,
                                   int processes, Callbacks cb)
    : io_(io), timeout_(timeout), processes_(processes), cb_(std::move(cb)) {}

void ProgressWatchdog::Progress() {
  if (timeout_.count() <= 0 || asking_) return;
  if (!progress_timer_) progress_timer_ = std::make_unique<asio::steady_timer>(io_);
  progress_timer_->expires_after(timeout_);
  progress_timer_->async_wait([this](const std::error_code& ec) {
    if (!ec) Ask();
  });
}

void ProgressWatchdog::Ask() {
  if (!cb_.ask()) return;
  asking_ = true;
  answer_timer_ = std::make_unique<asio::steady_timer>(io_, kAnswerWait);
  answer_timer_->async_wait([this](const std::error_code& ec) {
    if (!ec) End();
  });
}

void ProgressWatchdog::Answer(int rank, std::string text) {
  answers_[rank] = std::move(text);
  if (static_cast<int>(answers_.size()) == processes_) End();
}

void ProgressWatchdog::End() {
  if (ended_) return;
  ended_ = true;
  if (answer_timer_) answer_timer_->cancel();
  cb_.stuck(answers_);
}

}  // namespace poseidon::rt
