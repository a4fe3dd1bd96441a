// apps/poseidon/evaluate_command.cc: loads a checkpoint into a Net and runs the test set.
#include "apps/poseidon/evaluate_command.h"

#include <algorithm>

#include <fmt/format.h>

#include "config/model_loader.h"
#include "config/yaml_reader.h"
#include "core/model.h"
#include "kernels/checkpoint.h"
#include "kernels/data/idx.h"
#include "kernels/kernel.h"
#include "kernels/memory_estimate.h"
#include "kernels/net.h"
#include "kernels/training.h"

namespace poseidon::app {
using config::ConfigError;

int RunEvaluate(const EvaluateOptions& o, std::ostream& out) {
  if (o.params.empty()) throw ConfigError("error: evaluate needs --params DIR (a checkpoint)");
  if (o.batch < 0) throw ConfigError("error: --batch must be positive");
  kernels::Checkpoint index;
  try {
    index = kernels::ReadCheckpointIndex(o.params);
  } catch (const kernels::CheckpointError& e) {
    throw ConfigError(e.what());
  }
  const std::string model_name = o.model.empty() ? index.model : o.model;
  const core::Model model =
      core::Model::Build(config::LoadModelFile(config::FindModelFile(model_name, o.models_dir)));
  const int loss_layer = kernels::MainLossLayer(model);
  if (loss_layer < 0) {
    throw ConfigError(
        fmt::format("error: model '{}' has no softmax_loss layer to evaluate", model.name()));
  }
  kernels::Checkpoint c;
  try {
    c = kernels::ReadCheckpoint(o.params, model);
  } catch (const kernels::CheckpointError& e) {
    throw ConfigError(e.what());
  }
  const std::string backend_name = o.backend.empty() ? c.training.backend : o.backend;
  kernels::Backend backend;
  if (!kernels::BackendFromName(backend_name, &backend)) {
    throw ConfigError(fmt::format("error: --backend: unknown backend '{}'; known: reference, "
                                  "cpu, cuda",
                                  backend_name));
  }
  const int64_t batch = o.batch > 0 ? o.batch : std::max<int64_t>(1, c.training.batch);

  const kernels::IdxDataset test = kernels::FashionMnistTest(o.data_dir);
  const core::Shape in = model.input_shape();
  if (in.rank != 3 || in.c != 1 || in.h != test.rows || in.w != test.cols) {
    throw ConfigError(fmt::format("error: model '{}' expects {} input but the data in {} is 1x{}x{}",
                                  model.name(), in.ToString(), o.data_dir, test.rows, test.cols));
  }
  const int64_t classes = model.layers()[static_cast<size_t>(loss_layer)].out.count();
  if (test.num_classes > classes) {
    throw ConfigError(fmt::format("error: the data has {} classes but model '{}' outputs {}",
                                  test.num_classes, model.name(), classes));
  }
  try {
    kernels::CheckNetFits(model, batch);
  } catch (const kernels::MemoryError& e) {
    throw ConfigError(e.what());
  }
  kernels::Net net(model, backend, batch, c.training.seed);
  std::copy(c.params.begin(), c.params.end(), net.params());
  out << fmt::format(
      "evaluate {} from {} (iteration {}, written by {}) on {} backend, batch {}: {} test "
      "images\n",
      model.name(), o.params, c.iteration, c.training.written_by, kernels::BackendName(backend),
      batch, test.count);
  const kernels::TestResult r = kernels::TestLossAndAccuracy(net, test);
  out << fmt::format("test accuracy {:.4f}  test loss {:.4f}\n", r.accuracy, r.loss);
  return 0;
}

}  // namespace poseidon::app
