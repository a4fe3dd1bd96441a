// real_runtime/table_agreement.h: the coordinator's check that every worker of a job whose workers
// bring the model (`model: torch`) built the same model, before anything trains.
//
// Each worker sends its layer table (a model file's text: one `module` layer per PyTorch module
// with parameters; kCtlModelTable). Once every worker's is in, each is compared with worker 1's,
// layer by layer; the first difference is the refusal, naming the module, both workers and what
// each has, so that a rank that built another model fails in seconds with the module named rather
// than hanging in its first all-reduce (Horovod's and DDP's most reported failure).
//
//   TableAgreement a(workers, [&](int rank) { return layout.ActorName(rank); });
//   if (auto verdict = a.Add(rank, table)) {   // set once the last table is in
//     if (verdict->empty()) ...agreed...; else ...refuse with *verdict...
//   }
#pragma once

#include <functional>
#include <map>
#include <optional>
#include <string>

namespace poseidon::rt {

class TableAgreement {
 public:
  // `workers`: how many tables a verdict waits for (ranks 1..workers).
  TableAgreement(int workers, std::function<std::string(int rank)> name);

  // Worker `rank`'s table. Returns the verdict when this was the last one missing: empty when
  // every table equals worker 1's, else the refusal; nullopt while tables are missing. A second
  // table from one worker is a refusal at once.
  std::optional<std::string> Add(int rank, const std::string& table);

 private:
  std::string Compare() const;

  const int workers_;
  std::function<std::string(int rank)> name_;
  std::map<int, std::string> tables_;
  bool decided_ = false;
};

}  // namespace poseidon::rt
