// real_runtime/progress_watchdog.h: the coordinator's job-level progress watchdog.
//
// A live job that stops making progress (a worker waiting for a push that never comes, a shard
// waiting for a clock nobody will send) must not sit at 0% CPU forever. The coordinator re-arms
// the watchdog whenever a worker finishes an iteration; when none has for `timeout`, it asks
// every process what it waits for (kCtlStatusAsk), gives them kAnswerWait to answer, and ends
// the job with the answers, as the simulator's deadlock report does. Runs on the io_context's
// thread; decides nothing about the protocol.
#pragma once

#include <asio/io_context.hpp>
#include <asio/steady_timer.hpp>
#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <string>

namespace poseidon::rt {

class ProgressWatchdog {
 public:
  static constexpr std::chrono::seconds kAnswerWait{3};

  struct Callbacks {
    // Ask every process what it waits for; false when the job is ending anyway (then nothing
    // more happens).
    std::function<bool()> ask;
    // No progress: end the job with the answers received (rank -> text), once.
    std::function<void(const std::map<int, std::string>& answers)> stuck;
  };

  // `timeout` 0: off. `processes`: how many answers a complete round has.
  ProgressWatchdog(asio::io_context& io, std::chrono::seconds timeout, int processes, Callbacks cb);

  // A worker finished an iteration: the bound starts again (ignored once asking).
  void Progress();
  // Whether it asked (an answer is then expected).
  bool asking() const { return asking_; }
  // A process's answer; the last one ends the wait at once.
  void Answer(int rank, std::string text);

 private:
  void Ask();
  void End();

  asio::io_context& io_;
  std::chrono::seconds timeout_;
  int processes_;
  Callbacks cb_;
  std::unique_ptr<asio::steady_timer> progress_timer_, answer_timer_;
  std::map<int, std::string> answers_;
  bool asking_ = false;
  bool ended_ = false;
};

}  // namespace poseidon::rt
