// core/coordinator.h: gates the start of a job and notices its end.
//
// Every worker and shard registers; when all have, the coordinator tells everyone to start.
// Workers report when they finished their last iteration; when all have, the job is done.
#pragma once

#include <string>

#include "core/host.h"
#include "core/job.h"

namespace poseidon::core {

class Coordinator final : public Actor {
 public:
  Coordinator(const JobLayout& layout, Host* host);

  void OnStart(TimeNs now) override;
  void OnMessage(TimeNs now, const Message& msg) override;
  void OnComputeDone(TimeNs now, const ComputeTask& task) override;
  bool finished() const override { return done_ == layout_.num_workers; }
  std::string WaitingFor() const override;

 private:
  const JobLayout& layout_;
  Host* const host_;
  std::vector<bool> registered_;
  int num_registered_ = 0;
  int done_ = 0;
};

}  // namespace poseidon::core
