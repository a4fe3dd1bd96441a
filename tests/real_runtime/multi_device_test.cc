// Machines with several devices, live (Poseidon's three-level hybrid; worker_compute.h,
// machine_replica.h): the machine's copy (reduction, broadcast, sufficient factors) against an
// oracle, the refusals, and `poseidon launch` jobs of 2 machines x 2 CPU devices against 4
// one-device workers with the same global batch, with one process per machine and one per device.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <random>
#include <regex>
#include <string>
#include <vector>

#include "config/job_config.h"
#include "config/scenario.h"
#include "cost/compute_model.h"
#include "cost/jitter.h"
#include "kernels/net.h"
#include "real_runtime/compute_streams.h"
#include "real_runtime/live_job.h"
#include "real_runtime/machine_replica.h"
#include "real_runtime/worker_compute.h"
#include "tests/real_runtime/live_helpers.h"

namespace poseidon::rt {
namespace {

namespace fs = std::filesystem;
using namespace live;  // Shell, ReadFile, Losses, kBin, kRoot, ...

const std::string kScenario = kRoot + "/scenarios/live/fmnist_mlp_2x2.yaml";

core::Model MlpModel() { return config::BuildScenarioModel(config::LoadScenarioFile(kScenario)); }

// Two reference-backend devices of the MLP at batch 4, each after a forward and backward pass of
// its own random images.
struct TwoDevices {
  core::Model model = MlpModel();
  kernels::Net a{model, kernels::Backend::kReference, 4, /*seed=*/1};
  kernels::Net b{model, kernels::Backend::kReference, 4, /*seed=*/1};
  TwoDevices() {
    std::mt19937 rng(7);
    std::uniform_real_distribution<float> u(0.f, 1.f);
    for (kernels::Net* n : {&a, &b}) {
      std::vector<float> images(static_cast<size_t>(4 * 784));
      for (float& x : images) x = u(rng);
      const std::vector<int32_t> labels = {static_cast<int32_t>(rng() % 10),
                                           static_cast<int32_t>(rng() % 10),
                                           static_cast<int32_t>(rng() % 10),
                                           static_cast<int32_t>(rng() % 10)};
      n->Forward(images.data(), labels.data(), /*train=*/true);
      n->Backward();
    }
  }
  int FirstFc() const {
    for (const core::Layer& l : model.layers()) {
      if (core::HasSufficientFactors(l)) return l.id;
    }
    return -1;
  }
};

TEST(MachineReplica, ReduceMakesTheDevicesMeanAndBroadcastCopiesTheMachinesValues) {
  TwoDevices d;
  const int fc = d.FirstFc();
  ASSERT_GE(fc, 0);
  MachineReplica m({&d.a, &d.b}, std::vector<bool>(d.model.layers().size(), false));
  ASSERT_EQ(m.num_params(), d.a.num_params());
  m.Reduce(fc);
  const std::vector<kernels::BlobRef> blobs = m.blobs();
  int checked = 0;
  for (size_t i = 0; i < blobs.size(); ++i) {
    const kernels::BlobRef& mine = blobs[i];
    for (int64_t j = 0; j < mine.count; ++j) {
      const float want = mine.layer == fc ? (d.a.blob(static_cast<int>(i)).grad[j] +
                                             d.b.blob(static_cast<int>(i)).grad[j]) * 0.5f
                                          : 0.f;  // only the reduced layer is written
      ASSERT_EQ(mine.grad[j], want) << mine.name << "[" << j << "]";
    }
    checked += mine.layer == fc;
  }
  EXPECT_EQ(checked, 2) << "weight and bias of the fc layer";
  // The machine's values start as the devices' (the job's seed); a layer's go out to the
  // device asked for, and to no other.
  const std::vector<float> initial(d.a.params(), d.a.params() + d.a.num_params());
  EXPECT_TRUE(std::equal(initial.begin(), initial.end(), blobs[0].value));
  for (const kernels::BlobRef& mine : blobs) {
    if (mine.layer != fc) continue;
    for (int64_t j = 0; j < mine.count; ++j) mine.value[j] += 1.f;
  }
  m.CopyValues(fc, 1);
  EXPECT_TRUE(std::equal(initial.begin(), initial.end(), d.a.params())) << "device 0 untouched";
  for (size_t i = 0; i < blobs.size(); ++i) {
    const kernels::BlobRef dev1 = d.b.blob(static_cast<int>(i));
    for (int64_t j = 0; j < blobs[i].count; ++j) {
      ASSERT_EQ(dev1.value[j], blobs[i].value[j]) << blobs[i].name;
    }
  }
}

// A peer rebuilds dW = top_grad^T bottom from the machine's 2 x 4 factor rows: with the output
// gradients scaled by 1/D that is the machine's mean gradient, which the reduction makes.
TEST(MachineReplica, FactorsRebuildTheMachinesMeanGradient) {
  TwoDevices d;
  const int fc = d.FirstFc();
  std::vector<bool> sfb(d.model.layers().size(), false);
  sfb[static_cast<size_t>(fc)] = true;
  MachineReplica m({&d.a, &d.b}, sfb);
  m.SetFactors(fc, 1, d.b.FactorsOf(fc));  // any order
  m.SetFactors(fc, 0, d.a.FactorsOf(fc));
  m.Reduce(fc);
  const core::Layer& L = d.model.layers()[static_cast<size_t>(fc)];
  const int64_t k = core::SfbFactorRows(L, 4 * 2), mm = L.fc_in, n = L.fc_out;
  const core::FloatBuffer f = m.Factors(fc);
  ASSERT_EQ(static_cast<int64_t>(f->size()), core::SfbFactorFloats(L, 8));
  std::vector<float> dw(static_cast<size_t>(n * mm));
  kernels::RebuildFcGradient(f->data(), f->data() + k * n, k, mm, n, dw.data());
  const kernels::BlobRef w = m.blobs()[0];
  ASSERT_EQ(w.layer, fc);
  ASSERT_EQ(w.count, n * mm);
  double worst = 0, largest = 0;
  for (int64_t j = 0; j < w.count; ++j) {
    worst = std::max(worst, static_cast<double>(std::fabs(dw[static_cast<size_t>(j)] - w.grad[j])));
    largest = std::max(largest, static_cast<double>(std::fabs(w.grad[j])));
  }
  EXPECT_GT(largest, 1e-3);
  EXPECT_LT(worst, 1e-5 * largest) << "largest gradient " << largest;
}

TEST(GpuShortfall, SaysWhichGpusAreMissing) {
  EXPECT_EQ(GpuShortfall(2, 0, 2, ""), "");
  EXPECT_EQ(GpuShortfall(1, 3, 4, ""), "");
  const std::string two = GpuShortfall(2, 0, 1, "");
  EXPECT_NE(two.find("this worker's 2 devices need GPUs 0..1 (device d on GPU d), but this "
                     "process sees 1 GPU;"),
            std::string::npos)
      << two;
  const std::string none = GpuShortfall(4, 0, 0, "cudaGetDeviceCount returned 0 devices");
  EXPECT_NE(none.find("sees 0 GPUs (cudaGetDeviceCount returned 0 devices)"), std::string::npos)
      << none;
  EXPECT_NE(none.find("CUDA_VISIBLE_DEVICES"), std::string::npos) << none;
  // client: device, the fourth process of a machine of 4 devices: its one device is GPU 3.
  const std::string fourth = GpuShortfall(1, 3, 2, "");
  EXPECT_NE(fourth.find("1 device needs GPU 3, but this process sees 2 GPUs"), std::string::npos)
      << fourth;
}

// The live replay prices a sufficient-factor rebuild as the simulator does: for the factor rows
// of the layer (batch x tokens for a transformer's linear layer), not for the batch.
TEST(ReplayedCompute, PricesAnSfbRebuildForTheLayersFactorRows) {
  const config::ScenarioSpec s =
      config::LoadScenarioFile(kRoot + "/scenarios/live/fmnist_vit.yaml");
  const core::Model model = config::BuildScenarioModel(s);
  const cost::ComputeModel cm = cost::BuildComputeModel(s, model);
  const int64_t batch = s.batch_per_worker * 2;  // a machine of two devices
  const ReplayedCompute replay(cm, model, batch, /*devices=*/2);
  int checked = 0;
  for (const core::Layer& l : model.layers()) {
    if (!core::HasSufficientFactors(l) || l.fc_rows <= 1) continue;
    core::ComputeTask t;
    t.kind = core::TaskKind::kSfbRebuild;
    t.layer = l.id;
    EXPECT_EQ(replay.TaskNs(t), cm.SfbRebuildNs(l.id, batch * l.fc_rows)) << l.name;
    EXPECT_GT(replay.TaskNs(t), cm.SfbRebuildNs(l.id, batch)) << l.name;
    ++checked;
  }
  EXPECT_GT(checked, 0) << "the ViT has linear layers over tokens";
}

double MaxDiff(const std::vector<float>& a, const std::vector<float>& b) {
  double d = 0;
  for (size_t i = 0; i < a.size() && i < b.size(); ++i) {
    d = std::max(d, static_cast<double>(std::fabs(a[i] - b[i])));
  }
  return d;
}

class LiveDevicesTest : public DataSuite<LiveDevicesTest> {
 public:
  static constexpr char kDirName[] = "poseidon_live_devices";

 protected:
  // `poseidon launch` of scenarios/live/fmnist_mlp_2x2.yaml with these extra arguments.
  static Result Launch(const std::string& name, const std::string& args) {
    return Shell(kBin + " launch " + kScenario + " --data-dir " + Dir() + "/data --log-dir " +
                 Dir() + "/" + name + " " + args);
  }
};

class SchemeTest : public LiveDevicesTest, public ::testing::WithParamInterface<std::string> {};

// BSP, same global batch (4 x 8) and seed: 2 machines x 2 devices, each machine one process whose
// devices are worker threads with their own nets, compute what 4 one-device workers compute. The
// machine's gradient is the mean of its devices' (the factors' output gradients scaled by 1/2 for
// SFB; the ring reduces the machines' means), so the update of every clock is the global mean:
// the losses agree to float rounding (the mean of two means of two is summed in another order
// than the mean of four) and so do the final weights (bound 1e-4, a tenth of one update step at
// this learning rate, as PsAndSfbPathsGiveTheSameWeights; a machine that forgot to average is off
// by 1e-3 and more). Replicas: every machine's device 0 holds what the shards (PS) or the ring
// (all-reduce) sent, bit for bit; SFB machines each rebuild the sum and agree to rounding.
TEST_P(SchemeTest, TwoMachinesOfTwoDevicesTrainLikeFourOneDeviceWorkers) {
  const std::string scheme = GetParam();
  const int iters = 10;
  const std::string common = "--servers 2 --set iterations=10 --set batch_per_worker=8 --set "
                             "protocol.scheme=" + scheme + " --print-interval 1 ";
  const std::string tag = "d" + scheme;
  Result two = Launch(tag + "2x2", common + "--machines 2 --devices-per-machine 2 --csv " + Dir() +
                                       "/" + tag + "2x2.csv --save-params " + Dir() + "/" + tag +
                                       "2x2-{rank}.bin");
  ASSERT_EQ(two.rc, 0) << two.out;
  EXPECT_NE(two.out.find("launch: 2 machines x 2 devices (one worker process per machine), 2 "
                         "shards"),
            std::string::npos)
      << two.out;
  EXPECT_NE(ReadFile(Dir() + "/" + tag + "2x2/rank-1-worker.log")
                .find("kernels use 1 OpenMP thread per device (2 devices)"),
            std::string::npos);
  EXPECT_FALSE(fs::exists(Dir() + "/" + tag + "2x2/rank-5-shard.log")) << "1 + 2 + 2 processes";
  Result four = Launch(tag + "4x1", common + "--machines 4 --devices-per-machine 1 --csv " +
                                        Dir() + "/" + tag + "4x1.csv --save-params " + Dir() +
                                        "/" + tag + "4x1-{rank}.bin");
  ASSERT_EQ(four.rc, 0) << four.out;
  const std::vector<double> want = Losses(Dir() + "/" + tag + "4x1.csv");
  const std::vector<double> got = Losses(Dir() + "/" + tag + "2x2.csv");
  ASSERT_EQ(want.size(), static_cast<size_t>(iters)) << four.out;
  ASSERT_EQ(got.size(), want.size()) << two.out;
  for (int i = 0; i < iters; ++i) {
    EXPECT_NEAR(got[i], want[i], 1e-4 * want[i]) << scheme << ", iteration " << i + 1;
  }
  EXPECT_GT(want.front() - want.back(), 0.2) << "the curve must descend";

  const std::vector<float> one = ReadFloats(Dir() + "/" + tag + "4x1-1.bin");
  const std::vector<float> m1 = ReadFloats(Dir() + "/" + tag + "2x2-1.bin");
  const std::vector<float> m2 = ReadFloats(Dir() + "/" + tag + "2x2-2.bin");
  ASSERT_EQ(one.size(), 1863690u);
  ASSERT_EQ(m1.size(), one.size());
  ASSERT_EQ(m2.size(), one.size());
  double largest = 0;
  for (float x : one) largest = std::max(largest, static_cast<double>(std::fabs(x)));
  EXPECT_GT(largest, 0.05);
  EXPECT_LT(MaxDiff(m1, one), 1e-4) << scheme << "; largest weight " << largest;
  if (scheme == "sfb") {
    EXPECT_LT(MaxDiff(m1, m2), 1e-4) << "SFB replicas";
  } else {
    EXPECT_TRUE(m1 == m2) << scheme << ": the machines' replicas must be bit-identical";
  }
  std::printf("%s: max |w_2x2 - w_4x1| = %.3g, max |w_2x2 machine 1 - machine 2| = %.3g\n",
              scheme.c_str(), MaxDiff(m1, one), MaxDiff(m1, m2));
  // Test accuracy is device 0's, of the same weights up to rounding.
  const std::regex acc("test accuracy ([0-9.]+)");
  std::smatch a2, a4;
  ASSERT_TRUE(std::regex_search(two.out, a2, acc)) << two.out;
  ASSERT_TRUE(std::regex_search(four.out, a4, acc)) << four.out;
  EXPECT_NEAR(std::stod(a2[1]), std::stod(a4[1]), 0.005);
}

INSTANTIATE_TEST_SUITE_P(Schemes, SchemeTest, ::testing::Values("ps", "sfb", "allreduce"),
                         [](const ::testing::TestParamInfo<std::string>& p) { return p.param; });

// cluster.client: device: one process per device, each a one-device worker of its own (the
// baseline the three-level hybrid is compared with): 1 + 2 x 2 + 2 processes, and the same
// batches as the machines read, so the same curve.
TEST_F(LiveDevicesTest, OneProcessPerDeviceRunsAndFinishes) {
  const std::string common = "--set iterations=8 --set batch_per_worker=8 --print-interval 1 "
                             "--no-test ";
  Result dev = Launch("perdevice", common + "--set cluster.client=device --csv " + Dir() +
                                       "/perdevice.csv");
  ASSERT_EQ(dev.rc, 0) << dev.out;
  EXPECT_NE(dev.out.find("launch: 2 machines x 2 devices (one worker process per device), 2 "
                         "shards"),
            std::string::npos)
      << dev.out;
  EXPECT_NE(dev.out.find("job done: 4 workers, 2 shards, 8 iterations"), std::string::npos)
      << dev.out;
  for (int r = 1; r <= 4; ++r) {
    EXPECT_TRUE(fs::exists(Dir() + "/perdevice/rank-" + std::to_string(r) + "-worker.log")) << r;
  }
  EXPECT_TRUE(fs::exists(Dir() + "/perdevice/rank-6-shard.log"));
  Result machine = Launch("permachine", common + "--csv " + Dir() + "/permachine.csv");
  ASSERT_EQ(machine.rc, 0) << machine.out;
  const std::vector<double> a = Losses(Dir() + "/perdevice.csv");
  const std::vector<double> b = Losses(Dir() + "/permachine.csv");
  ASSERT_EQ(a.size(), 8u);
  ASSERT_EQ(b.size(), a.size());
  for (size_t i = 0; i < a.size(); ++i) EXPECT_NEAR(a[i], b[i], 1e-4 * b[i]) << i + 1;
}

// --emulate gives every machine one network namespace: with a process per device, the two
// processes of a machine share it (and its address) with the machine's co-located shard.
TEST_F(LiveDevicesTest, EmulatedClusterGivesEachMachineOneNamespace) {
  if (!NamespacesAvailable()) {
    GTEST_SKIP() << "network namespaces need root (CAP_NET_ADMIN); skipped";
  }
  Result r = Launch("emulated", "--emulate --emulate-gbps 1 --set cluster.client=device --set "
                                "iterations=4 --set batch_per_worker=8 --print-interval 2 --no-test");
  ASSERT_EQ(r.rc, 0) << r.out;
  EXPECT_NE(r.out.find(": 2 namespaces, links shaped to 1 Gbit/s"), std::string::npos) << r.out;
  // rank -> the machine's address: workers 0 and 1 on machine 0, 2 and 3 on machine 1; shard j
  // on machine j.
  const std::vector<std::pair<std::string, std::string>> where = {
      {"1-worker", "10.77.0.1"}, {"2-worker", "10.77.0.1"}, {"3-worker", "10.77.0.2"},
      {"4-worker", "10.77.0.2"}, {"5-shard", "10.77.0.1"},  {"6-shard", "10.77.0.2"}};
  for (const auto& [rank, addr] : where) {
    const std::string log = ReadFile(Dir() + "/emulated/rank-" + rank + ".log");
    EXPECT_NE(log.find("listening on " + addr + ":"), std::string::npos) << rank << "\n" << log;
  }
  std::smatch m;
  ASSERT_TRUE(std::regex_search(r.out, m, std::regex("emulated cluster (pn[0-9a-z]+)"))) << r.out;
  EXPECT_EQ(Shell("ip netns list | grep '^" + m[1].str() + "-' || true").out, "");
}

// What a machine with several devices cannot be given: no devices, a GPU per device that is not
// there, fault tolerance (refused up front), two names for the machines.
TEST_F(LiveDevicesTest, BadDeviceCountsAndWhatIsNotSupportedAreRefused) {
  Result zero = Launch("zero", "--devices-per-machine 0");
  EXPECT_NE(zero.rc, 0) << zero.out;
  EXPECT_NE(zero.out.find("--devices-per-machine"), std::string::npos) << zero.out;
  Result set_zero = Launch("setzero", "--set cluster.devices_per_machine=0");
  EXPECT_EQ(set_zero.rc, 2) << set_zero.out;
  EXPECT_NE(set_zero.out.find("devices_per_machine"), std::string::npos) << set_zero.out;
  Result both = Launch("both", "--machines 2 --workers 2");
  EXPECT_EQ(both.rc, 2) << both.out;
  EXPECT_NE(both.out.find("give one of them"), std::string::npos) << both.out;
  // More GPUs than any test machine has: refused in the worker, before a net is built. Both
  // workers refuse; the first to exit is the one launch names (the other may be stopped first).
  Result gpus = Launch("gpus", "--devices-per-machine 16 --backend cuda --no-test");
  EXPECT_EQ(gpus.rc, 2) << gpus.out;
  std::smatch first;
  ASSERT_TRUE(std::regex_search(gpus.out, first,
                                std::regex("exited with code 2; stopping the others; see (\\S+)")))
      << gpus.out;
  const std::string log = ReadFile(first[1].str());
  EXPECT_NE(log.find("error: --backend cuda: this worker's 16 devices need GPUs 0..15"),
            std::string::npos)
      << log;
  // Under a launcher, the size it gives is checked against the processes of the shape.
  const std::string secret = Dir() + "/job.secret";
  std::ofstream(secret) << "0123456789abcdef";
  fs::permissions(secret, fs::perms::owner_read | fs::perms::owner_write);
  Result size = Shell("SLURM_PROCID=1 SLURM_NTASKS=5 " + kBin + " node " + kScenario +
                      " --set cluster.client=device --coordinator 127.0.0.1:1 --secret-file " +
                      secret);
  EXPECT_EQ(size.rc, 2) << size.out;
  EXPECT_NE(size.out.find("says the job has 5 processes but scenario " + kScenario + " needs 7 "
                          "(1 coordinator + 4 workers: 2 machines x 2 devices, one per device + "
                          "2 shards)"),
            std::string::npos)
      << size.out;
  Result ft = Launch("ft", "--set 'protocol.fault_tolerance={heartbeat_ms: 200, timeout_ms: 3000}' "
                           "--restart-on-failure 1");
  EXPECT_EQ(ft.rc, 2) << ft.out;
  EXPECT_NE(ft.out.find("protocol.fault_tolerance with 2 devices per machine (client: machine) "
                        "does not run live"),
            std::string::npos)
      << ft.out;
}

// The live replay sleeps the scenario's jitter as the simulator charges it: each forward,
// backward and SFB rebuild task its modelled time times the worker's next factor (cost/jitter.h),
// and the job gives the workers, and only them, their own stream of factors.
TEST(ReplayedCompute, SleepsTheScenariosJitterAsTheSimulatorDrawsIt) {
  const config::ScenarioSpec s =
      config::LoadScenarioFile(kRoot + "/scenarios/live/fmnist_mlp.yaml",
                               {"jitter={distribution: lognormal, cv: 0.1}", "seed=5",
                                "cluster.workers=2", "cluster.servers=1"});
  const core::Model model = config::BuildScenarioModel(s);
  const cost::ComputeModel cm = cost::BuildComputeModel(s, model);
  ReplayedCompute replay(cm, model, s.batch_per_worker);
  replay.set_jitter(cost::ComputeJitter(cost::ComputeJitter::Kind::kLognormal, 0.1, 5, 1));
  cost::ComputeJitter ref(cost::ComputeJitter::Kind::kLognormal, 0.1, 5, 1);
  // A clock far past every modelled end: Run returns at once, and each task on the stream starts
  // when the one before it ended (within the hand-off's 1 ms).
  const auto late = [] { return core::TimeNs{1} << 60; };
  core::TimeNs end = 0;
  int differ = 0;
  for (const core::Layer& l : model.layers()) {
    for (const core::TaskKind kind : {core::TaskKind::kForward, core::TaskKind::kBackward}) {
      core::ComputeTask t;
      t.kind = kind;
      t.layer = l.id;
      const core::TimeNs start = replay.Run(t, end, late);
      EXPECT_EQ(start, end) << l.name;
      const int64_t want = ref.Apply(replay.TaskNs(t));
      differ += want != replay.TaskNs(t);
      end = start + want;
    }
  }
  // The stream's end is where the last task's jittered time put it.
  core::ComputeTask next;
  next.kind = core::TaskKind::kForward;
  next.layer = 0;
  EXPECT_EQ(replay.Run(next, end, late), end);
  EXPECT_GT(differ, 4) << "cv 0.1 changes the tasks' times";

  // BuildLiveJob: a worker's replay draws, the coordinator's and a shard's do not.
  for (int rank = 0; rank < 4; ++rank) {
    NodeOptions o;
    o.scenario = s;
    o.rank = rank;
    o.compute = "replay";
    const LiveJob job = BuildLiveJob(o);
    ASSERT_TRUE(job.replayed.has_value());
    EXPECT_EQ(job.replayed->jittered(), rank == 1 || rank == 2) << "rank " << rank;
  }
  NodeOptions plain;
  plain.scenario = config::LoadScenarioFile(kRoot + "/scenarios/live/fmnist_mlp.yaml");
  plain.rank = 1;
  plain.compute = "replay";
  EXPECT_FALSE(BuildLiveJob(plain).replayed->jittered()) << "no jitter in the scenario";
}

}  // namespace
}  // namespace poseidon::rt
