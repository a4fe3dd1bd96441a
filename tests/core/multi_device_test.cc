// Machines with several devices (ProtocolConfig::devices_per_machine, core/worker.h): the
// machine's client runs every device's passes, reduces a layer once its backward pass has ended
// on every device, syncs it as one worker (one push per chunk per machine), and broadcasts the
// fresh values to the devices before they may use them.
#include <map>
#include <set>
#include <tuple>

#include <gtest/gtest.h>

#include "core/decision_log.h"
#include "tests/core/fake_cluster.h"
#include "tests/core/test_models.h"

namespace poseidon {
namespace {

using core::MsgType;
using core::TaskKind;
using testing::FakeCluster;

core::ProtocolConfig Config(int devices, core::Scheme scheme, const core::Model& model) {
  core::ProtocolConfig cfg;
  cfg.devices_per_machine = devices;
  cfg.batch = 4 * devices;  // 4 per device: a machine's factors carry every device's rows
  cfg.chunk_bytes = 256;
  cfg.iterations = 3;
  cfg.scheme_of_layer.assign(model.layers().size(), core::Scheme::kPs);
  for (int l : model.param_layers()) {
    if (scheme != core::Scheme::kSfb || model.layers()[l].kind == core::LayerKind::kFc) {
      cfg.scheme_of_layer[static_cast<size_t>(l)] = scheme;
    }
  }
  return cfg;
}

// What every schedule of a multi-device job must show, whatever the scheme.
class MultiDeviceTest
    : public ::testing::TestWithParam<std::tuple<core::Scheme, int, bool, uint64_t>> {};

TEST_P(MultiDeviceTest, EachDeviceComputesEveryClockAndTheMachineSyncsOnce) {
  auto [scheme, devices, dwbp, seed] = GetParam();
  const core::Model model = core::Model::Build(testing::SmallNetSpec());
  core::ProtocolConfig cfg = Config(devices, scheme, model);
  cfg.dwbp = dwbp;
  const int machines = 3;
  FakeCluster c(model, core::JobLayout::Colocated(machines, 2), cfg, seed);
  const int n = static_cast<int>(model.layers().size());

  // Per (machine, device): the passes it ran, in order. Per (machine, layer, clock): how many
  // devices ended that backward pass when its local reduction was issued.
  std::map<std::pair<core::ActorId, int>, std::vector<std::pair<int, int64_t>>> passes;
  std::map<std::tuple<core::ActorId, int, int64_t>, int> backward_ended;
  std::map<std::tuple<core::ActorId, int, int64_t>, int> reduced_when;
  std::map<std::pair<core::ActorId, int64_t>, int> reduces_of_clock_ended;
  // Per (machine, layer): the version its devices hold (broadcast ones).
  std::map<std::pair<core::ActorId, int>, int64_t> device_version;
  int pushes = 0, factors = 0;
  c.on_task_done = [&](core::TimeNs, core::ActorId a, const core::ComputeTask& t) {
    if (t.kind == TaskKind::kForward || t.kind == TaskKind::kBackward) {
      ASSERT_GE(t.device, 0);
      ASSERT_LT(t.device, devices);
      passes[{a, t.device}].push_back({t.kind == TaskKind::kForward ? t.layer : -1 - t.layer,
                                       t.clock});
    }
    if (t.kind == TaskKind::kBackward) ++backward_ended[{a, t.layer, t.clock}];
    if (t.kind == TaskKind::kLocalReduce) ++reduces_of_clock_ended[{a, t.clock}];
    if (t.kind == TaskKind::kForward && t.layer == 0 && t.clock > 0) {
      // A device begins clock c once every local reduction of clock c-1 has ended...
      EXPECT_EQ((reduces_of_clock_ended[{a, t.clock - 1}]),
                devices > 1 ? static_cast<int>(model.param_layers().size()) : 0)
          << "machine " << a << " device " << t.device << " began clock " << t.clock;
      // ... and (BSP) with every layer's values of clock c-1 broadcast to its devices.
      for (int l : model.param_layers()) {
        EXPECT_EQ((device_version[{a, l}]), t.clock) << "layer " << l;
      }
    }
  };
  c.on_trace = [&](const core::TraceEvent& e) {
    if (e.kind == core::TraceKind::kLayerSynced) device_version[{e.actor, e.layer}] = e.clock + 1;
  };
  c.on_deliver = [&](core::TimeNs, const core::Message& m) {
    if (m.type == MsgType::kPushGrad) ++pushes;
    if (m.type == MsgType::kFactors) {
      ++factors;
      const core::Layer& L = model.layers()[static_cast<size_t>(m.layer)];
      EXPECT_EQ(m.payload_bytes, 4 * 4 * devices * (L.fc_in + L.fc_out));
    }
  };
  // Record, when each local reduction is issued, how many devices had ended that backward pass.
  size_t seen = 0;
  auto scan_issued = [&]() {
    for (; seen < c.issued.size(); ++seen) {
      const auto& act = c.issued[seen];
      if (!act.is_message && act.task.kind == TaskKind::kLocalReduce) {
        reduced_when[{act.actor, act.task.layer, act.task.clock}] =
            backward_ended[{act.actor, act.task.layer, act.task.clock}];
      }
    }
  };
  auto done = c.on_task_done;
  c.on_task_done = [&](core::TimeNs t, core::ActorId a, const core::ComputeTask& task) {
    done(t, a, task);
    scan_issued();
  };
  c.Run();
  ASSERT_TRUE(c.AllFinished());

  // Every device ran every layer forward, then backward, every clock.
  for (int m = 0; m < machines; ++m) {
    for (int d = 0; d < devices; ++d) {
      const auto& p = passes[{c.layout().worker(m), d}];
      ASSERT_EQ(p.size(), static_cast<size_t>(2 * n * cfg.iterations)) << "device " << d;
      for (int64_t clock = 0; clock < cfg.iterations; ++clock) {
        for (int l = 0; l < n; ++l) {
          EXPECT_EQ(p[static_cast<size_t>(2 * n * clock + l)], std::make_pair(l, clock));
          EXPECT_EQ(p[static_cast<size_t>(2 * n * clock + n + l)],
                    std::make_pair(-1 - (n - 1 - l), clock));
        }
      }
    }
  }
  // One local reduction and one broadcast per machine, layer and clock (D > 1), issued once
  // the layer's backward pass had ended on every device; none with one device.
  std::map<TaskKind, int> local;
  for (const auto& act : c.issued) {
    if (!act.is_message && (act.task.kind == TaskKind::kLocalReduce ||
                            act.task.kind == TaskKind::kLocalBroadcast)) {
      ++local[act.task.kind];
      EXPECT_EQ(act.task.bytes, model.layers()[static_cast<size_t>(act.task.layer)].params * 4);
    }
  }
  const int syncs = machines * static_cast<int>(cfg.iterations) *
                    static_cast<int>(model.param_layers().size());
  EXPECT_EQ(local[TaskKind::kLocalReduce], devices > 1 ? syncs : 0);
  EXPECT_EQ(local[TaskKind::kLocalBroadcast], devices > 1 ? syncs : 0);
  for (const auto& [key, ended] : reduced_when) EXPECT_EQ(ended, devices);
  // The network sees machines, not devices: one push per chunk per machine and clock.
  if (scheme == core::Scheme::kPs) {
    EXPECT_EQ(pushes, machines * static_cast<int>(cfg.iterations) *
                          static_cast<int>(c.placement().chunks().size()));
  }
  if (scheme == core::Scheme::kSfb) {
    EXPECT_EQ(factors, machines * (machines - 1) * static_cast<int>(cfg.iterations) * 2);
  }
}

INSTANTIATE_TEST_SUITE_P(
    Schedules, MultiDeviceTest,
    ::testing::Combine(::testing::Values(core::Scheme::kPs, core::Scheme::kSfb,
                                         core::Scheme::kAllreduce),
                       ::testing::Values(1, 2, 4), ::testing::Bool(),
                       ::testing::Values(0u, 3u, 99u)));

// A machine of one device issues exactly what it always did: no local task, device 0 only.
TEST(MultiDevice, OneDeviceIssuesNoLocalTask) {
  const core::Model model = core::Model::Build(testing::SmallNetSpec());
  core::ProtocolConfig cfg = Config(1, core::Scheme::kPs, model);
  FakeCluster c(model, core::JobLayout::Colocated(2, 2), cfg, 0);
  c.Run();
  ASSERT_TRUE(c.AllFinished());
  for (const auto& act : c.issued) {
    if (act.is_message) continue;
    EXPECT_EQ(act.task.device, 0);
    EXPECT_NE(act.task.kind, TaskKind::kLocalReduce);
    EXPECT_NE(act.task.kind, TaskKind::kLocalBroadcast);
  }
}

// SSP clocks are the machine's: no device runs more than s clocks ahead of what its machine
// has synced, and the devices of one machine begin each clock together.
TEST(MultiDevice, SspBoundsEveryDeviceByItsMachinesVersion) {
  const core::Model model = core::Model::Build(testing::SmallNetSpec());
  core::ProtocolConfig cfg = Config(3, core::Scheme::kPs, model);
  cfg.consistency = core::Consistency::kSsp;
  cfg.staleness = 1;
  cfg.iterations = 5;
  for (uint64_t seed : {1u, 2u, 3u, 4u}) {
    FakeCluster c(model, core::JobLayout::Colocated(2, 1), cfg, seed);
    std::map<std::pair<core::ActorId, int>, int64_t> version;
    std::map<std::pair<core::ActorId, int64_t>, int> began;  // (machine, clock) -> devices
    c.on_trace = [&](const core::TraceEvent& e) {
      if (e.kind == core::TraceKind::kLayerSynced) version[{e.actor, e.layer}] = e.clock + 1;
    };
    c.on_task_done = [&](core::TimeNs, core::ActorId a, const core::ComputeTask& t) {
      if (t.kind != TaskKind::kForward || t.layer != 0) return;
      ++began[{a, t.clock}];
      if (t.clock > 0) {
        // Every device of the machine ended clock c-1's backward pass before any began c.
        EXPECT_EQ((began[{a, t.clock - 1}]), 3);
      }
      for (int l : model.param_layers()) {
        EXPECT_GE((version[{a, l}]), t.clock - cfg.staleness) << "seed " << seed;
      }
    };
    c.Run();
    EXPECT_TRUE(c.AllFinished()) << "seed " << seed;
  }
}

// The decision log keeps one key per device for its passes, so that two hosts' logs compare
// device by device.
TEST(MultiDevice, DecisionLogNamesTheDevice) {
  core::DecisionLog log;
  core::ComputeTask fwd{TaskKind::kForward, 2, -1, 0, 5};
  fwd.device = 3;
  log.Compute(1, fwd);
  core::ComputeTask reduce{TaskKind::kLocalReduce, 2, -1, 64, 5};
  log.Compute(1, reduce);
  core::ComputeTask zero{TaskKind::kBackward, 2, -1, 0, 5};
  log.Compute(1, zero);
  EXPECT_EQ(log.Text(),
            "1\tcompute local_reduce layer 2\tc5:64\n"
            "1\tcompute passes\tbackward 2 c5\n"
            "1\tcompute passes device 3\tforward 2 c5\n");
}

}  // namespace
}  // namespace poseidon
