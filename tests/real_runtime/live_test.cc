// Live training end to end: `poseidon launch` starts real processes that talk over loopback TCP
// and train fmnist_mlp on a subset of Fashion-MNIST. Each test compares what a user would
// compare: loss curves, final weights, accuracy, exit codes, log lines.
#include <sys/stat.h>
#include <sys/wait.h>

#include <asio.hpp>
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <tuple>
#include <vector>

#include "kernels/data/idx.h"
#include "tests/real_runtime/live_helpers.h"
#include "real_runtime/frame.h"
#include "real_runtime/node.h"
#include "real_runtime/transport.h"
#include "validation/trace_reader.h"

namespace poseidon::rt {
namespace {

namespace fs = std::filesystem;

using namespace live;  // Shell, ReadFile, Losses, kBin, kRoot, ...

// 4,096 training and 1,000 test images of the real data set, so that every process loads its
// data in milliseconds (DataSuite).
class LiveTest : public DataSuite<LiveTest> {
 public:
  static constexpr char kDirName[] = "poseidon_live";

 protected:
  // `poseidon launch` of scenarios/live/fmnist_mlp.yaml with these extra arguments.
  static Result Launch(const std::string& name, const std::string& args) {
    return Shell(kBin + " launch " + kRoot + "/scenarios/live/fmnist_mlp.yaml --data-dir " + Dir() +
                 "/data --log-dir " + Dir() + "/" + name + " " + args);
  }
};

// BSP with the same global batch and seed is the same computation as one process, whatever the
// number of workers: the loss of every iteration matches `poseidon train` to float rounding
// (the gradient of a global batch is the mean of the workers' means, summed in worker order).
TEST_F(LiveTest, BspFollowsTheOneProcessLossCurveWith1And2And4Workers) {
  const int iters = 25;
  Result t = Shell(kBin + " train --model fmnist_mlp --iterations 25 --batch 32 --print-interval 1 "
                "--test-interval 0 --data-dir " + Dir() + "/data --csv " + Dir() + "/train.csv");
  ASSERT_EQ(t.rc, 0) << t.out;
  const std::vector<double> want = Losses(Dir() + "/train.csv");
  ASSERT_EQ(want.size(), static_cast<size_t>(iters));
  for (int p : {1, 2, 4}) {
    const std::string csv = Dir() + "/bsp" + std::to_string(p) + ".csv";
    // Co-located shards: at most one per worker machine (config: more go by servers_per_machine).
    Result r = Launch("bsp" + std::to_string(p),
                   "--workers " + std::to_string(p) + " --servers " + std::to_string(std::min(p, 2)) +
                   " --set iterations=25 --set "
                   "batch_per_worker=" + std::to_string(32 / p) +
                   " --set protocol.scheme=ps --print-interval 1 --csv " + csv);
    ASSERT_EQ(r.rc, 0) << r.out;
    const std::vector<double> got = Losses(csv);
    ASSERT_EQ(got.size(), want.size()) << r.out;
    for (int i = 0; i < iters; ++i) {
      EXPECT_NEAR(got[i], want[i], 1e-4 * want[i]) << p << " workers, iteration " << i + 1;
    }
    EXPECT_GT(want.front() - want.back(), 0.5) << "the curve must actually descend";
  }
  // DDP on 4 machines, its buckets all-reduced by `algorithm`: the same curve.
  auto ddp = [&](const std::string& algorithm, const std::string& bucket_cap_mib) {
    const std::string csv = Dir() + "/ddp_" + algorithm + ".csv";
    Result r = Launch("ddp_" + algorithm,
                      "--workers 4 --servers 1 --set iterations=25 --set batch_per_worker=8 --set "
                      "protocol.scheme=allreduce --set protocol.baseline=ddp --set "
                      "protocol.allreduce_algorithm=" + algorithm +
                      " --set protocol.ddp.bucket_cap_mib=" + bucket_cap_mib +
                      " --set protocol.chunk_kib=64 --print-interval 1 --csv " + csv);
    ASSERT_EQ(r.rc, 0) << r.out;
    const std::vector<double> got = Losses(csv);
    ASSERT_EQ(got.size(), want.size()) << r.out;
    for (int i = 0; i < iters; ++i) {
      EXPECT_NEAR(got[i], want[i], 1e-4 * want[i]) << "ddp by " << algorithm << ", iteration "
                                                   << i + 1;
    }
  };
  // NCCL's tree (core/tree.h).
  ddp("tree", "0.05");
  // NCCL's own choice per bucket, every tensor a bucket: the biases by the tree, the weights by
  // the ring (core/nccl_tuning.h at 1 Gbit/s on 4 machines).
  ddp("auto", "0.001");
}

// The small vision transformer (patch embedding, class token, attention, layer norm, GELU; the
// oneDNN transformer kernels) trains live as it does in one process, with every layer through the
// parameter server, with its linear layers' gradients as sufficient factors (K = batch x 17
// tokens), and by ring all-reduce: 4 workers of 8 images against one process of 32, DWBP on.
TEST_F(LiveTest, VitFollowsTheOneProcessCurveWithPsSfbAndAllreduce) {
  const int iters = 20;
  Result t = Shell(kBin + " train --model fmnist_vit --iterations 20 --batch 32 --lr 0.03 "
                "--print-interval 1 --test-interval 0 --data-dir " + Dir() + "/data --csv " +
                Dir() + "/vit_train.csv");
  ASSERT_EQ(t.rc, 0) << t.out;
  const std::vector<double> want = Losses(Dir() + "/vit_train.csv");
  ASSERT_EQ(want.size(), static_cast<size_t>(iters));
  EXPECT_GT(want.front() - *std::min_element(want.begin(), want.end()), 0.3)
      << "the curve must actually descend";
  for (const std::string scheme : {"ps", "sfb", "allreduce"}) {
    const std::string csv = Dir() + "/vit_" + scheme + ".csv";
    Result r = Launch("vit_" + scheme,
                      "--workers 4 --servers 2 --set model=fmnist_vit --set iterations=20 --set "
                      "batch_per_worker=8 --set protocol.dwbp=true --set protocol.scheme=" +
                          scheme + " --lr 0.03 --print-interval 1 --csv " + csv);
    ASSERT_EQ(r.rc, 0) << scheme << "\n" << r.out;
    const std::vector<double> got = Losses(csv);
    ASSERT_EQ(got.size(), want.size()) << r.out;
    for (int i = 0; i < iters; ++i) {
      EXPECT_NEAR(got[i], want[i], 1e-4 * want[i]) << scheme << ", iteration " << i + 1;
    }
  }
}

// Sufficient-factor broadcasting rebuilds every FC weight gradient from its factors on every
// worker and applies the update there; the parameter server averages the pushed gradients. Same
// arithmetic: the final weights agree to float rounding, and SFB replicas agree with each other.
// (Rounding differences can flip a ReLU and then grow, so the bound is 1e-4: a tenth of one
// update step at lr 0.01 for these weights; an SFB sum that missed a peer or forgot to average
// is off by 1e-3 and more.)
TEST_F(LiveTest, PsAndSfbPathsGiveTheSameWeights) {
  for (const std::string scheme : {"ps", "sfb"}) {
    Result r = Launch("w" + scheme, "--workers 2 --servers 2 --set iterations=10 --set "
                   "batch_per_worker=16 --set protocol.scheme=" + scheme +
                   " --no-test --save-params " + Dir() + "/w-" + scheme + "-{rank}.bin");
    ASSERT_EQ(r.rc, 0) << r.out;
  }
  const std::vector<float> ps = ReadFloats(Dir() + "/w-ps-1.bin");
  const std::vector<float> sfb1 = ReadFloats(Dir() + "/w-sfb-1.bin");
  const std::vector<float> sfb2 = ReadFloats(Dir() + "/w-sfb-2.bin");
  const std::vector<float> ps2 = ReadFloats(Dir() + "/w-ps-2.bin");
  ASSERT_EQ(ps.size(), 1863690u);
  ASSERT_EQ(sfb1.size(), ps.size());
  ASSERT_EQ(sfb2.size(), ps.size());
  EXPECT_EQ(ps, ps2) << "PS replicas receive the same values from the shards";
  double ps_sfb = 0, sfb_sfb = 0, max_abs = 0;
  for (size_t i = 0; i < ps.size(); ++i) {
    ps_sfb = std::max(ps_sfb, static_cast<double>(std::fabs(ps[i] - sfb1[i])));
    sfb_sfb = std::max(sfb_sfb, static_cast<double>(std::fabs(sfb1[i] - sfb2[i])));
    max_abs = std::max(max_abs, static_cast<double>(std::fabs(ps[i])));
  }
  EXPECT_LT(ps_sfb, 1e-4) << "largest weight " << max_abs;
  EXPECT_LT(sfb_sfb, 1e-4) << "largest weight " << max_abs;
  std::printf("max |w_ps - w_sfb| = %.3g, max |w_sfb1 - w_sfb2| = %.3g, max |w| = %.3g\n", ps_sfb,
              sfb_sfb, max_abs);
  EXPECT_GT(max_abs, 0.05);
}

// Ring all-reduce sums every layer's gradient around the ring and each worker applies the mean
// itself, with the optimizer step the shards run. With 2 workers a sum has two terms, so the
// ring's sums are the shards' bit for bit and the weights equal the PS run's exactly; with 3 the
// ring adds in another order per segment (rounding: 7.5e-9 after 10 iterations, for weights up to
// 0.07; the runs are deterministic, so the bound of 1e-6 leaves room without hiding a sum that
// missed a worker or forgot to average, which is off by 1e-3 and more). Replicas are
// bit-identical: every reduced segment is computed once and copied to the others.
TEST_F(LiveTest, AllreduceGivesThePsWeightsAndIdenticalReplicas) {
  for (int p : {2, 3}) {
    const std::string n = std::to_string(p);
    for (const std::string scheme : {"ps", "allreduce"}) {
      Result r = Launch("ar" + scheme + n, "--workers " + n + " --servers 2 --set iterations=10 "
                        "--set batch_per_worker=16 --set protocol.scheme=" + scheme +
                        " --no-test --save-params " + Dir() + "/ar-" + scheme + n + "-{rank}.bin");
      ASSERT_EQ(r.rc, 0) << r.out;
    }
    const std::vector<float> ps = ReadFloats(Dir() + "/ar-ps" + n + "-1.bin");
    ASSERT_EQ(ps.size(), 1863690u);
    double ps_ar = 0, max_abs = 0;
    for (int w = 1; w <= p; ++w) {
      const std::vector<float> ar = ReadFloats(Dir() + "/ar-allreduce" + n + "-" + std::to_string(w) + ".bin");
      ASSERT_EQ(ar.size(), ps.size()) << "worker " << w;
      if (w > 1) {
        EXPECT_TRUE(ar == ReadFloats(Dir() + "/ar-allreduce" + n + "-1.bin"))
            << "replica " << w << " of " << p << " differs from replica 1";
      }
      for (size_t i = 0; i < ps.size(); ++i) {
        ps_ar = std::max(ps_ar, static_cast<double>(std::fabs(ps[i] - ar[i])));
        max_abs = std::max(max_abs, static_cast<double>(std::fabs(ps[i])));
      }
    }
    std::printf("%d workers: max |w_ps - w_allreduce| = %.3g, max |w| = %.3g\n", p, ps_ar, max_abs);
    if (p == 2) {
      EXPECT_EQ(ps_ar, 0.0) << "two-term sums are the same in any order";
    }
    EXPECT_LT(ps_ar, 1e-6) << p << " workers; largest weight " << max_abs;
    EXPECT_GT(max_abs, 0.05);
  }
}

// protocol.gradient_wire: gradients sent as IEEE half or bfloat16 (2 bytes a value; parameters
// stay fp32) train as fp32 does to within the formats' rounding, and every replica still holds
// the same weights, bit for bit: each worker keeps what it sends as its peers decode it (its
// ring segments, its own factors). One run per gradient message kind and format: PS pushes in
// fp16, ring steps in fp16, sufficient factors in bf16. Measured (10 iterations, 2 workers):
// weights within 3e-6 (fp16) and 1e-4 (bf16) of fp32's, losses within 1e-6 and 1e-4 relative.
TEST_F(LiveTest, A16BitGradientWireTrainsCloseToFp32WithIdenticalReplicas) {
  auto run = [&](const std::string& scheme, const std::string& wire) {
    const std::string tag = scheme + "-" + wire;
    Result r = Launch("gw" + tag, "--workers 2 --servers 2 --set iterations=10 --set "
                      "batch_per_worker=16 --set protocol.scheme=" + scheme +
                      " --set protocol.gradient_wire=" + wire +
                      " --no-test --print-interval 1 --csv " + Dir() + "/gw-" + tag +
                      ".csv --save-params " + Dir() + "/gw-" + tag + "-{rank}.bin");
    EXPECT_EQ(r.rc, 0) << tag << "\n" << r.out;
  };
  run("ps", "fp32");
  const std::vector<float> ref = ReadFloats(Dir() + "/gw-ps-fp32-1.bin");
  const std::vector<double> ref_loss = Losses(Dir() + "/gw-ps-fp32.csv");
  ASSERT_EQ(ref.size(), 1863690u);
  ASSERT_EQ(ref_loss.size(), 10u);
  for (const auto& [scheme, wire, bound] :
       {std::tuple<std::string, std::string, double>{"ps", "fp16", 2e-5},
        {"allreduce", "fp16", 2e-5}, {"sfb", "bf16", 5e-4}}) {
    run(scheme, wire);
    const std::string tag = scheme + "-" + wire;
    const std::vector<float> w1 = ReadFloats(Dir() + "/gw-" + tag + "-1.bin");
    const std::vector<float> w2 = ReadFloats(Dir() + "/gw-" + tag + "-2.bin");
    ASSERT_EQ(w1.size(), ref.size()) << tag;
    EXPECT_TRUE(w1 == w2) << tag << ": the replicas differ";
    double diff = 0;
    for (size_t i = 0; i < ref.size(); ++i) {
      diff = std::max(diff, static_cast<double>(std::fabs(w1[i] - ref[i])));
    }
    std::printf("%s: max |w - w_fp32| = %.3g\n", tag.c_str(), diff);
    EXPECT_GT(diff, 0.0) << tag << ": nothing was rounded";
    EXPECT_LT(diff, bound) << tag;
    const std::vector<double> loss = Losses(Dir() + "/gw-" + tag + ".csv");
    ASSERT_EQ(loss.size(), ref_loss.size()) << tag;
    for (size_t i = 0; i < loss.size(); ++i) {
      EXPECT_NEAR(loss[i], ref_loss[i], 10 * bound * ref_loss[i]) << tag << ", iteration " << i + 1;
    }
  }
}

// Bounded staleness and no bound at all still learn (their curves depend on timing, so the
// check is convergence, not equality). ASP runs with a shard per worker, a larger batch and a
// quarter of SSP's step: with no bound, a worker the scheduler starves computes on older weights,
// and a stale gradient harms in proportion to step x staleness. At --lr 0.005 for 80 iterations
// the curve turned up again in one CI run while a Slurm test shared the 2 cores (minimum 1.61 of
// 2.22, accuracy 0.24); at --lr 0.0025 for 120 iterations, four runs with 4 busy-looping
// processes beside the job ended at losses 0.84-0.85 and accuracies 0.69-0.71, and three runs of
// this test with 3 beside it passed. SSP(2) is judged the same way: at --lr 0.01 a CI run on 2
// cores (2026-12-04, Slurm's and Python's tests beside it) went 2.17 -> 0.98 and back up to 1.05
// by iteration 80, test accuracy 0.579, where an earlier bound of 0.6 on the accuracy failed it:
// how far a stale run gets by a fixed iteration is timing, that it learned is not.
TEST_F(LiveTest, SspAndAspConverge) {
  for (const std::string c : {"--servers 2 --set batch_per_worker=16 --set 'protocol.consistency={model: ssp, staleness: 2}' --lr 0.01",
                              "--servers 4 --set batch_per_worker=32 --set 'protocol.consistency={model: asp}' --lr 0.0025"}) {
    const std::string csv = Dir() + "/c.csv";
    const bool asp = c.find("asp") != std::string::npos;
    const int iterations = asp ? 120 : 80;
    Result r = Launch("ssp", "--workers 4 --set iterations=" + std::to_string(iterations) + " " + c +
                      " --print-interval 10 --csv " + csv);
    ASSERT_EQ(r.rc, 0) << r.out;
    const std::vector<double> loss = Losses(csv);
    ASSERT_EQ(loss.size(), static_cast<std::size_t>(iterations / 10));
    std::smatch m;
    ASSERT_TRUE(std::regex_search(r.out, m, std::regex("test accuracy ([0-9.]+)"))) << r.out;
    // How far it gets depends on how the processes interleave, so the check is that it learned:
    // the curve went well down at some point, and the model ends far above chance (ten classes:
    // 0.1).
    EXPECT_LT(*std::min_element(loss.begin(), loss.end()), 0.6 * loss.front()) << c << "\n" << r.out;
    EXPECT_GT(std::stod(m[1]), 0.4) << c << "\n" << r.out;
  }
}

// Connections that are not members of the job (garbage, a huge frame, a wrong secret) are
// closed with a logged reason while the job's own connections go on training.
TEST_F(LiveTest, HostileConnectionsAreRefusedWhileTrainingGoesOn) {
  const std::string log_dir = Dir() + "/hostile";
  const std::string cmd = kBin + " launch " + kRoot + "/scenarios/live/fmnist_mlp.yaml --data-dir " +
                          Dir() + "/data --log-dir " + log_dir +
                          " --job-id live-test-job --workers 2 --servers 1 --set iterations=200 --set batch_per_worker=8 "
                          "--print-interval 100 --no-test 2>&1";
  FILE* p = popen(cmd.c_str(), "r");
  ASSERT_NE(p, nullptr);
  std::string out;
  char buf[4096];
  int port = 0;
  std::smatch m;
  while (port == 0 && fgets(buf, sizeof buf, p)) {
    out += buf;
    const std::string line = buf;
    if (std::regex_search(line, m, std::regex("coordinator on 127\\.0\\.0\\.1:([0-9]+)"))) {
      port = std::stoi(m[1]);
    }
  }
  ASSERT_GT(port, 0) << out;

  asio::io_context io;
  const asio::ip::tcp::endpoint ep(asio::ip::make_address("127.0.0.1"), static_cast<uint16_t>(port));
  auto closed_by_peer = [&](const std::vector<uint8_t>& bytes) {
    asio::ip::tcp::socket s(io);
    s.connect(ep);
    asio::write(s, asio::buffer(bytes));
    uint8_t b[64];
    asio::error_code ec;
    while (!ec) s.read_some(asio::buffer(b), ec);  // until the coordinator closes it
    return ec == asio::error::eof || ec == asio::error::connection_reset;
  };
  // Not a Poseidon peer at all.
  EXPECT_TRUE(closed_by_peer(std::vector<uint8_t>(64, 0x41)));
  // A well-formed frame header (right magic, version, checksum) announcing 2 GiB: refused
  // before any allocation.
  FrameHeader h;
  h.type = kFrameHello;
  h.length = 0x7fffffffu;
  const auto hdr = EncodeFrameHeader(h);
  EXPECT_TRUE(closed_by_peer(std::vector<uint8_t>(hdr.begin(), hdr.end())));
  // A real handshake with the wrong secret.
  {
    TransportOptions o;
    o.job_id = "live-test-job";
    o.secret = "not-the-job-secret";
    o.connect_timeout = std::chrono::milliseconds(5000);
    bool down = false, up = false;
    TransportCallbacks cb;
    cb.on_peer_up = [&](int) { up = true; };
    cb.on_peer_down = [&](int, const std::string&) { down = true; };
    asio::io_context io2;
    Transport t(io2, /*my_rank=*/1, o, cb);
    t.Connect(0, "127.0.0.1", static_cast<uint16_t>(port));
    io2.run_for(std::chrono::seconds(10));
    EXPECT_TRUE(down);
    EXPECT_FALSE(up);
  }
  while (fgets(buf, sizeof buf, p)) out += buf;
  const int st = pclose(p);
  ASSERT_TRUE(WIFEXITED(st));
  EXPECT_EQ(WEXITSTATUS(st), 0) << out;
  EXPECT_NE(out.find("iter    200"), std::string::npos) << out;
  EXPECT_NE(out.find("job done"), std::string::npos) << out;
  const std::string log = ReadFile(log_dir + "/rank-0-coordinator.log");
  EXPECT_NE(log.find("magic"), std::string::npos) << log;
  EXPECT_NE(log.find("2147483647"), std::string::npos) << log;
  EXPECT_NE(log.find("secret"), std::string::npos) << log;
  EXPECT_NE(log.find("127.0.0.1"), std::string::npos) << log;
  EXPECT_EQ(log.find(ReadFile(log_dir + "/job.secret")), std::string::npos)
      << "the secret must never be logged";
}

TEST_F(LiveTest, MissingDataSetStopsTheJobWithOneClearError) {
  Result r = Shell(kBin + " launch " + kRoot + "/scenarios/live/fmnist_mlp.yaml --data-dir " + Dir() +
                "/nowhere --log-dir " + Dir() + "/nodata --workers 2 --servers 1");
  EXPECT_NE(r.rc, 0) << r.out;
  EXPECT_NE(r.out.find("see " + Dir() + "/nodata/rank-"), std::string::npos) << r.out;
  std::string logs;
  for (const auto& e : fs::directory_iterator(Dir() + "/nodata")) logs += ReadFile(e.path());
  EXPECT_NE(logs.find(Dir() + "/nowhere"), std::string::npos) << logs;
}

// A learning rate far too high makes the loss NaN within a few iterations: the worker stops
// with exit code 4 and says why, and the job ends (a NaN loss was once taken for "no loss" and
// the coordinator waited for it forever; `timeout` turns such a hang into a failure here).
// The launcher passes on the failure that says why: the worker's 4, even when the coordinator,
// having lost the worker, exits with 3 first (the launcher waits for the cause, docs/errors.md).
TEST_F(LiveTest, DivergedLossStopsTheJob) {
  Result r = Shell("timeout -s INT 120 " + kBin + " launch " + kRoot +
                   "/scenarios/live/fmnist_mlp.yaml --data-dir " + Dir() + "/data --log-dir " +
                   Dir() + "/diverged --workers 1 --servers 1 --set iterations=30 --lr 1000 "
                   "--no-test --print-interval 1");
  EXPECT_EQ(r.rc, 4) << r.out;
  EXPECT_NE(r.out.find("exited with code 4; stopping the others"), std::string::npos) << r.out;
  const std::string log = ReadFile(Dir() + "/diverged/rank-1-worker.log");
  EXPECT_TRUE(std::regex_search(log, std::regex("the loss diverged \\(-?(nan|inf)\\) at "
                                                "iteration [0-9]+; lower --lr")))
      << log;
}

TEST_F(LiveTest, SecretFileReadableByOthersIsRefused) {
  const std::string f = Dir() + "/open.secret";
  std::ofstream(f) << "0123456789abcdef";
  chmod(f.c_str(), 0644);
  Result r = Shell(kBin + " node " + kRoot + "/scenarios/live/fmnist_mlp.yaml --rank 0 --secret-file " +
                f);
  EXPECT_EQ(r.rc, 2) << r.out;
  EXPECT_NE(r.out.find(f), std::string::npos) << r.out;
}

// A model that cannot fit at the batch asked for is refused before anything is allocated, with
// what it needs and what the machine has (or what POSEIDON_MEMORY_LIMIT_GIB allows), by
// `train` and by a live node alike; exit code 2, within seconds.
TEST_F(LiveTest, AModelTooLargeForMemoryIsRefusedBeforeAllocation) {
  Result t = Shell(kBin + " train --model fmnist_cnn --iterations 1 --batch 100000000 --data-dir " +
                   Dir() + "/data");
  EXPECT_EQ(t.rc, 2) << t.out;
  EXPECT_NE(t.out.find("error: model 'fmnist_cnn' at batch 100000000 needs "), std::string::npos)
      << t.out;
  EXPECT_NE(t.out.find("GiB this machine has available; lower the batch"), std::string::npos)
      << t.out;
  Result n = Shell("POSEIDON_MEMORY_LIMIT_GIB=0.001 " + kBin + " launch " + kRoot +
                   "/scenarios/live/fmnist_mlp.yaml --workers 1 --servers 1 --no-test --data-dir " +
                   Dir() + "/data --log-dir " + Dir() + "/mem --set iterations=2");
  EXPECT_EQ(n.rc, 2) << n.out;
  EXPECT_NE(ReadFile(Dir() + "/mem/rank-1-worker.log")
                .find("the 0.0 GiB POSEIDON_MEMORY_LIMIT_GIB allows; lower the batch"),
            std::string::npos)
      << n.out;
}

// A coordinator whose workers and shards never come (they failed to start, or dial elsewhere)
// does not wait forever: past --rendezvous-timeout it exits 3 and names who is missing.
TEST_F(LiveTest, RendezvousTimesOutNamingWhoIsMissing) {
  const std::string f = Dir() + "/rv.secret";
  std::ofstream(f) << "0123456789abcdef";
  chmod(f.c_str(), 0600);
  Result r = Shell(kBin + " node " + kRoot + "/scenarios/live/fmnist_mlp.yaml --rank 0 --port 0 " +
                   "--secret-file " + f + " --rendezvous-timeout 1");
  EXPECT_EQ(r.rc, 3) << r.out;
  EXPECT_NE(r.out.find("rendezvous not done after 1 s: 0 of"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("missing: worker 0 (rank 1), "), std::string::npos) << r.out;
}

// `launch --tls`: a new TLS identity for the job (LOG_DIR/tls, key owner-only), every connection
// of every process encrypted, and the same training as without TLS, loss for loss. `tls-init`
// makes an identity for `node --tls-dir` and will not overwrite one; a node given a folder without
// one says how to make it.
TEST_F(LiveTest, TlsEncryptsEveryConnectionAndTrainsTheSame) {
  const std::string args = "--workers 2 --servers 2 --set iterations=6 --print-interval 1 --no-test ";
  Result plain = Launch("plain", args + "--csv " + Dir() + "/plain.csv");
  ASSERT_EQ(plain.rc, 0) << plain.out;
  Result tls = Launch("tls", args + "--tls --csv " + Dir() + "/tls.csv");
  ASSERT_EQ(tls.rc, 0) << tls.out;
  EXPECT_EQ(Losses(Dir() + "/tls.csv"), Losses(Dir() + "/plain.csv"));
  struct stat st {};
  ASSERT_EQ(stat((Dir() + "/tls/tls/key.pem").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  // 5 processes, each connected to every other: 10 connections, each logged up at both ends.
  int up = 0, up_tls = 0;
  for (int r = 0; r < 5; ++r) {
    const std::string role = r == 0 ? "coordinator" : r <= 2 ? "worker" : "shard";
    std::istringstream log(ReadFile(Dir() + "/tls/rank-" + std::to_string(r) + "-" + role + ".log"));
    std::string line;
    while (std::getline(log, line)) {
      if (line.find(" is up (") == std::string::npos) continue;
      ++up;
      up_tls += line.find(", TLS)") != std::string::npos;
    }
  }
  EXPECT_EQ(up, 20);
  EXPECT_EQ(up_tls, up);
  EXPECT_EQ(ReadFile(Dir() + "/plain/rank-0-coordinator.log").find(", TLS)"), std::string::npos);

  const std::string id = Dir() + "/identity";
  Result init = Shell(kBin + " tls-init " + id);
  ASSERT_EQ(init.rc, 0) << init.out;
  EXPECT_NE(init.out.find("give each process --tls-dir " + id), std::string::npos) << init.out;
  Result again = Shell(kBin + " tls-init " + id);
  EXPECT_EQ(again.rc, 2) << again.out;
  EXPECT_NE(again.out.find(id + "/cert.pem: exists already"), std::string::npos) << again.out;
  EXPECT_EQ(Shell(kBin + " tls-init " + id + " --force").rc, 0);
  Result both = Launch("both", args + "--tls --tls-dir " + id);
  EXPECT_EQ(both.rc, 2) << both.out;
  EXPECT_NE(both.out.find("give one of them"), std::string::npos) << both.out;
  const std::string secret = Dir() + "/tls/job.secret";
  Result none = Shell(kBin + " node " + kRoot + "/scenarios/live/fmnist_mlp.yaml --rank 0 " +
                      "--secret-file " + secret + " --tls-dir " + Dir());
  EXPECT_EQ(none.rc, 2) << none.out;
  EXPECT_NE(none.out.find(Dir() + "/cert.pem: no such file; create the job's TLS files with "
                          "'poseidon tls-init " + Dir() + "'"),
            std::string::npos)
      << none.out;
}

std::vector<std::string> SortedLines(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  std::string l;
  while (std::getline(in, l)) lines.push_back(l);
  std::sort(lines.begin(), lines.end());
  return lines;
}

// The design's central promise, checked: one scenario run by the simulator and live (processes
// over loopback TCP, compute replayed from the same compute model) makes the same protocol
// decisions, actor by actor: every message each actor sent to each destination for each chunk
// and layer, in order, with its clock and size; every compute task; every clock begun and every
// layer version reached (core/decision_log.h says what is compared and why interleavings across
// keys are not). BSP only: under SSP/ASP which clock a worker computes on is timing. Machines
// with several devices included: each device's passes and the machine's local tasks. And the DDP
// baseline (protocol.baseline: ddp), whose buckets are fixed in advance; Horovod's fusion
// depends on what is ready at each cycle, which is timing, and runs in the simulator only.
TEST_F(LiveTest, SimulatorAndLiveRunMakeTheSameProtocolDecisions) {
  const std::vector<std::string> configs = {
      "--set cluster.workers=2 --set cluster.servers=1 --set protocol.scheme=auto",
      "--set cluster.workers=3 --set cluster.servers=2 --set protocol.scheme=ps "
      "--set protocol.dwbp=false --set protocol.priority_window_kib=256 --set protocol.chunk_kib=256",
      // Ring all-reduce: every layer (uneven pieces and segments), and SACP's mix (sfb for fc1
      // and fc2, allreduce for fc3).
      "--set cluster.workers=3 --set cluster.servers=1 --set protocol.scheme=allreduce "
      "--set protocol.chunk_kib=100",
      "--set cluster.workers=3 --set cluster.servers=1 --set protocol.scheme=auto",
      // Machines of 2 devices (the three-level hybrid: per-device passes, local reductions and
      // broadcasts, the machines' factors with 2 x K rows), and one process per device.
      "--set cluster.workers=2 --set cluster.devices_per_machine=2 --set "
      "cluster.interconnect=dgx1_v100 --set cluster.servers=1 --set protocol.scheme=auto",
      "--set cluster.workers=2 --set cluster.devices_per_machine=2 --set cluster.client=device "
      "--set cluster.servers=2 --set protocol.scheme=auto",
      // PyTorch DDP's buckets (core/collectives.h): one bucket in clock 0, then fc3, and every
      // later tensor a bucket of its own (fc2's and fc1's bias and weight in different buckets),
      // run one at a time, each cut into 100 KiB pieces.
      "--set cluster.workers=3 --set cluster.servers=1 --set protocol.scheme=allreduce "
      "--set protocol.baseline=ddp --set protocol.ddp.first_bucket_mib=0.02 "
      "--set protocol.ddp.bucket_cap_mib=0.001 --set protocol.chunk_kib=100",
      // The same buckets by NCCL's tree (core/tree.h): 4 machines, and 2 machines of 2 processes
      // (the chain inside a machine).
      "--set cluster.workers=4 --set cluster.servers=1 --set protocol.scheme=allreduce "
      "--set protocol.baseline=ddp --set protocol.allreduce_algorithm=tree "
      "--set protocol.ddp.first_bucket_mib=0.02 --set protocol.ddp.bucket_cap_mib=0.001 "
      "--set protocol.chunk_kib=100",
      "--set cluster.workers=2 --set cluster.devices_per_machine=2 --set cluster.client=device "
      "--set cluster.servers=1 --set protocol.scheme=allreduce --set protocol.baseline=ddp "
      "--set protocol.allreduce_algorithm=tree --set protocol.chunk_kib=100",
      // NCCL's own choice per bucket (core/nccl_tuning.h): at 1 Gbit/s on 4 machines the biases
      // (40 and 4,096 B) go by the tree, the weights by the ring, in one clock.
      "--set cluster.workers=4 --set cluster.servers=1 --set protocol.scheme=allreduce "
      "--set protocol.baseline=ddp --set protocol.allreduce_algorithm=auto "
      "--set protocol.ddp.first_bucket_mib=0.02 --set protocol.ddp.bucket_cap_mib=0.001 "
      "--set protocol.chunk_kib=100",
  };
  int n = 0;
  for (const std::string& c : configs) {
    const std::string dir = Dir() + "/decisions" + std::to_string(n++);
    fs::create_directories(dir + "/live");
    const std::string scenario = kRoot + "/scenarios/live/fmnist_mlp.yaml --set iterations=3 " + c;
    Result sim = Shell(kBin + " simulate " + scenario + " --decisions " + dir + "/sim.txt");
    ASSERT_EQ(sim.rc, 0) << sim.out;
    Result live = Shell(kBin + " launch " + scenario + " --compute replay --decisions-dir " + dir +
                        "/live --log-dir " + dir + "/logs");
    ASSERT_EQ(live.rc, 0) << live.out;
    std::string live_text;
    int files = 0;
    for (const auto& e : fs::directory_iterator(dir + "/live")) {
      live_text += ReadFile(e.path());
      ++files;
    }
    const std::vector<std::string> want = SortedLines(ReadFile(dir + "/sim.txt"));
    const std::vector<std::string> got = SortedLines(live_text);
    EXPECT_GE(files, 4) << c;
    EXPECT_GT(want.size(), 20u) << c;
    EXPECT_EQ(got, want) << c;
  }
}

// The simulator and a live run make the same decisions with a 16-bit gradient wire too: the same
// messages, each gradient's size 2 bytes a value (SFB for fc1 and fc2, ring all-reduce for fc3,
// the biases by PS, as SACP plans fmnist_mlp on 3 workers).
TEST_F(LiveTest, SimulatorAndLiveRunMakeTheSameDecisionsWithA16BitGradientWire) {
  const std::string dir = Dir() + "/decisions_fp16";
  fs::create_directories(dir + "/live");
  const std::string scenario = kRoot + "/scenarios/live/fmnist_mlp.yaml --set iterations=3 "
      "--set cluster.workers=3 --set cluster.servers=1 --set protocol.scheme=auto "
      "--set protocol.chunk_kib=100 --set protocol.gradient_wire=fp16";
  Result sim = Shell(kBin + " simulate " + scenario + " --decisions " + dir + "/sim.txt");
  ASSERT_EQ(sim.rc, 0) << sim.out;
  Result live = Shell(kBin + " launch " + scenario + " --compute replay --decisions-dir " + dir +
                      "/live --log-dir " + dir + "/logs");
  ASSERT_EQ(live.rc, 0) << live.out;
  std::string live_text;
  for (const auto& e : fs::directory_iterator(dir + "/live")) live_text += ReadFile(e.path());
  const std::string sim_text = ReadFile(dir + "/sim.txt");
  EXPECT_EQ(SortedLines(live_text), SortedLines(sim_text));
  for (const char* kind : {"send factors", "send ring", "send push"}) {
    EXPECT_NE(sim_text.find(kind), std::string::npos) << kind;
  }
}

// `launch --emulate`: one network namespace per machine behind a bridge, links shaped with tbf;
// the job trains and every namespace is gone afterwards, also when the job fails.
TEST_F(LiveTest, EmulatedClusterTrainsAndLeavesNothingBehind) {
  if (!NamespacesAvailable()) {
    GTEST_SKIP() << "network namespaces need root (CAP_NET_ADMIN); skipped";
  }
  // Other tests may create namespaces meanwhile: look for this job's own (its prefix is printed).
  auto leftovers = [](const std::string& out) {
    std::smatch m;
    if (!std::regex_search(out, m, std::regex("emulated cluster (pn[0-9a-z]+)"))) return std::string("?");
    return Shell("ip netns list | grep '^" + m[1].str() + "-' || true").out;
  };
  Result ok = Launch("emulated", "--emulate --emulate-gbps 1 --workers 2 --servers 1 --set "
                     "iterations=20 --set batch_per_worker=16 --print-interval 10 --no-test");
  EXPECT_EQ(ok.rc, 0) << ok.out;
  EXPECT_NE(ok.out.find("coordinator on 10.77.0.1:"), std::string::npos) << ok.out;
  EXPECT_NE(ok.out.find("job done"), std::string::npos) << ok.out;
  EXPECT_EQ(leftovers(ok.out), "") << ok.out;
  // A failing job (no data) cleans up too.
  Result bad = Shell(kBin + " launch " + kRoot + "/scenarios/live/fmnist_mlp.yaml --emulate "
                     "--data-dir /nonexistent --log-dir " + Dir() + "/emulated-bad --workers 2 "
                     "--servers 1");
  EXPECT_NE(bad.rc, 0) << bad.out;
  EXPECT_EQ(leftovers(bad.out), "") << bad.out;
}

// Ctrl-C on the launcher stops every process of the job and says so in the exit code.
TEST_F(LiveTest, InterruptStopsTheWholeJob) {
  Result r = Shell("timeout --preserve-status -s INT 4 " + kBin + " launch " + kRoot +
                   "/scenarios/live/fmnist_mlp.yaml --job-id live-test-sigint --data-dir " + Dir() +
                   "/data --log-dir " + Dir() + "/sigint --set iterations=100000");
  EXPECT_EQ(r.rc, 130) << r.out;
  EXPECT_EQ(Shell("pgrep -f 'job-id live-test-[s]igint' || true").out, "") << "processes left behind";
}

TEST(RankFromEnvironment, ReadsOpenMpiMpichAndSlurmInThatOrder) {
  int rank = -1, size = -1;
  std::string source;
  for (const char* v : {"OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "PMI_RANK", "PMI_SIZE",
                        "SLURM_PROCID", "SLURM_NTASKS"}) {
    unsetenv(v);
  }
  EXPECT_FALSE(RankFromEnvironment(&rank, &size, &source));
  setenv("SLURM_PROCID", "3", 1);
  setenv("SLURM_NTASKS", "7", 1);
  ASSERT_TRUE(RankFromEnvironment(&rank, &size, &source));
  EXPECT_EQ(rank, 3);
  EXPECT_EQ(size, 7);
  EXPECT_EQ(source, "SLURM_PROCID/SLURM_NTASKS");
  setenv("PMI_RANK", "x", 1);  // malformed: skipped
  setenv("PMI_SIZE", "7", 1);
  setenv("OMPI_COMM_WORLD_RANK", "5", 1);
  setenv("OMPI_COMM_WORLD_SIZE", "7", 1);
  ASSERT_TRUE(RankFromEnvironment(&rank, &size, &source));
  EXPECT_EQ(rank, 5);
  EXPECT_EQ(source, "OMPI_COMM_WORLD_RANK/OMPI_COMM_WORLD_SIZE");
  setenv("OMPI_COMM_WORLD_RANK", "7", 1);  // rank >= size: skipped, falls through to Slurm
  ASSERT_TRUE(RankFromEnvironment(&rank, &size, &source));
  EXPECT_EQ(rank, 3);
  for (const char* v : {"OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "PMI_RANK", "PMI_SIZE",
                        "SLURM_PROCID", "SLURM_NTASKS"}) {
    unsetenv(v);
  }
}

// The names of a trace's events (not its metadata), read by the one trace reader.
// The names of a trace's events but for metadata and the processes' CPU counters (the host's, not
// the protocol's; a simulator books them on emulated hosts only); `cpu` gets the counters' names.
std::set<std::string> EventNames(const std::string& trace, std::set<std::string>* cpu = nullptr) {
  std::set<std::string> names;
  for (const validation::TraceRecord& e : validation::ReadTrace(trace, "trace")) {
    if (e.kind == validation::TraceRecordKind::kProcessCpu) {
      if (cpu) cpu->insert(e.name);
    } else if (e.kind != validation::TraceRecordKind::kMetadata) {
      names.insert(e.name);
    }
  }
  return names;
}

// Every live process writes a Chrome trace on the job's time base; `poseidon trace merge` joins
// them; a simulated run of the same scenario writes the same event names (timelines open side by
// side in Perfetto). Every live process also counts its own CPU.
TEST_F(LiveTest, MergedLiveTraceHasTheSimulatorsEventNames) {
  const std::string dir = Dir() + "/traces";
  const std::string scenario = kRoot + "/scenarios/live/fmnist_mlp.yaml --set iterations=3 "
                               "--set cluster.workers=2 --set cluster.servers=1 "
                               "--set protocol.scheme=auto";
  Result live = Shell(kBin + " launch " + scenario + " --compute replay --trace-dir " + dir +
                      "/live --log-dir " + dir + "/logs");
  ASSERT_EQ(live.rc, 0) << live.out;
  std::string files;
  for (int r = 0; r < 4; ++r) files += " " + dir + "/live/rank-" + std::to_string(r) + ".json";
  Result merge = Shell(kBin + " trace merge" + files + " -o " + dir + "/merged.json");
  ASSERT_EQ(merge.rc, 0) << merge.out;
  Result sim = Shell(kBin + " simulate " + scenario + " --trace " + dir + "/sim.json");
  ASSERT_EQ(sim.rc, 0) << sim.out;
  const std::string merged = ReadFile(dir + "/merged.json");
  std::set<std::string> live_cpu, sim_cpu;
  const std::set<std::string> live_names = EventNames(merged, &live_cpu);
  const std::set<std::string> sim_names = EventNames(ReadFile(dir + "/sim.json"), &sim_cpu);
  EXPECT_GT(sim_names.size(), 30u);
  EXPECT_EQ(live_names, sim_names);
  EXPECT_EQ(live_cpu, (std::set<std::string>{"coordinator cpu", "worker 0 cpu", "worker 1 cpu",
                                             "shard 0 cpu"}));
  EXPECT_TRUE(sim_cpu.empty());  // `simulate --trace` books no host CPU unless validate asks
  // Every process's lanes are named once.
  EXPECT_NE(merged.find("\"name\":\"thread_name\""), std::string::npos);
  Result bad = Shell(kBin + " trace merge " + kRoot + "/README.md -o " + dir + "/x.json");
  EXPECT_EQ(bad.rc, 2);
  EXPECT_NE(bad.out.find("README.md: error: "), std::string::npos) << bad.out;
}

// A Chrome trace with every "ts" and "dur" multiplied by `factor` (a run made that much slower).
std::string StretchTraceTimes(const std::string& text, double factor) {
  std::string out;
  size_t at = 0;
  for (;;) {
    const size_t ts = text.find("\"ts\":", at), dur = text.find("\"dur\":", at);
    const size_t key = std::min(ts, dur);
    if (key == std::string::npos) break;
    const size_t num = key + (key == ts ? 5 : 6);
    size_t end = num;
    while (end < text.size() &&
           (std::isdigit(static_cast<unsigned char>(text[end])) || text[end] == '.')) {
      ++end;
    }
    out += text.substr(at, num - at);
    out += fmt::format("{:.3f}", std::stod(text.substr(num, end - num)) * factor);
    at = end;
  }
  return out + text.substr(at);
}

// The faithfulness rule's lateness clause on a run just made (host_load.h): the live run replays
// ten times the compute it is simulated with (--set cluster.compute_scale=10, --sim-set
// cluster.compute_scale=1), so its tasks end far more than one charged wake-up later than the
// simulated ones (the median task, 0.07 ms simulated, 0.7 ms live): the run is not a faithful
// emulation of what was predicted, and says why. (A host busy enough for the CPU clause to judge
// first is reported by that clause instead; either way the run is not faithful.) On an emulated
// cluster: over loopback the clause does not apply.
TEST_F(LiveTest, ValidateJudgesARunWhoseComputeRanLateNotFaithful) {
  if (!NamespacesAvailable()) {
    GTEST_SKIP() << "network namespaces need root (CAP_NET_ADMIN); skipped";
  }
  const std::string dir = Dir();
  Result r =
      Shell(kBin + " validate " + kRoot + "/scenarios/validation/mlp_1g.yaml " +
            "--set iterations=4 --set warmup_iterations=1 --set cluster.compute_scale=10 " +
            "--sim-set cluster.compute_scale=1 --work-dir " + dir + "/v -o " + dir + "/v.csv");
  ASSERT_EQ(r.rc, 0) << r.out;
  std::istringstream csv(ReadFile(dir + "/v.csv"));
  std::string header, row;
  std::getline(csv, header);
  std::getline(csv, row);
  auto fields = [](const std::string& line) {
    std::vector<std::string> f;
    std::istringstream in(line);
    std::string x;
    while (std::getline(in, x, ',')) f.push_back(x);
    return f;
  };
  const std::vector<std::string> h = fields(header), v = fields(row);
  auto at = [&](const std::string& name) {
    const auto it = std::find(h.begin(), h.end(), name);
    EXPECT_NE(it, h.end()) << name << " in " << header;
    const size_t k = static_cast<size_t>(it - h.begin());
    return k < v.size() ? v[k] : std::string();
  };
  const std::string late = at("compute_late_us");
  ASSERT_FALSE(late.empty()) << row;
  EXPECT_GT(std::stod(late), 115.0) << row;  // the network file's host_wakeup_us, charged
  EXPECT_EQ(at("faithful"), "no") << row;
  // Every process's own CPU over the measured iterations, beside what the simulator booked.
  const std::string cpu = at("cpu_ms"), booked = at("booked_cpu_ms");
  ASSERT_FALSE(cpu.empty()) << row;
  ASSERT_FALSE(booked.empty()) << row;
  EXPECT_GT(std::stod(cpu), 0.0) << row;
  EXPECT_GT(std::stod(booked), 0.0) << row;
  const std::string why = at("not_faithful_why");
  EXPECT_TRUE(why.find("its emulated hosts ran their compute ") == 0 ||
              why.find("other processes used ") == 0)
      << row;
  EXPECT_NE(r.out.find("validate: not faithful: run 1 of config-0 (validate-mlp-1g), error "),
            std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("validate: 1 configurations without a faithful run"), std::string::npos)
      << r.out;
}

// validate --repeat: the simulation once, N live runs per configuration (over loopback here: no
// root; the errors are then meaningless, only the bookkeeping is checked), a `run` column, the
// run's own folder, and a summary per run and over the per-configuration medians.
TEST_F(LiveTest, ValidateRepeatsEveryConfigurationAndSummarisesTheMedians) {
  const std::string dir = Dir();
  Result r = Shell(kBin + " validate " + kRoot + "/scenarios/validation/mlp_1g.yaml --loopback " +
                   "--repeat 2 --set iterations=4 --set warmup_iterations=1 --work-dir " + dir +
                   "/v -o " + dir + "/v.csv --json " + dir + "/v.json");
  ASSERT_EQ(r.rc, 0) << r.out;
  std::istringstream csv(ReadFile(dir + "/v.csv"));
  std::string header, row1, row2, extra;
  std::getline(csv, header);
  std::getline(csv, row1);
  std::getline(csv, row2);
  EXPECT_FALSE(std::getline(csv, extra)) << extra;
  EXPECT_EQ(header.rfind("run,index,name,", 0), 0u) << header;
  EXPECT_EQ(row1.rfind("1,0,", 0), 0u) << row1;
  EXPECT_EQ(row2.rfind("2,0,", 0), 0u) << row2;
  // Same prediction (one simulation), two measurements.
  auto field = [](const std::string& row, int k) {
    std::istringstream in(row);
    std::string f;
    for (int i = 0; i <= k; ++i) std::getline(in, f, ',');
    return f;
  };
  EXPECT_EQ(field(row1, 6), field(row2, 6)) << row1 << "\n" << row2;  // predicted_ms
  EXPECT_GT(std::stod(field(row1, 4)), 0.0) << row1;                   // measured_ms
  EXPECT_GT(std::stod(field(row2, 4)), 0.0) << row2;
  EXPECT_TRUE(fs::exists(dir + "/v/config-0/sim.json"));
  EXPECT_TRUE(fs::exists(dir + "/v/config-0/run-1/live.json"));
  EXPECT_TRUE(fs::exists(dir + "/v/config-0/run-2/live.json"));
  EXPECT_NE(r.out.find("validate: run 2: 1 configurations, median |error|"), std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("1 configurations x 2 runs, per configuration the median of its runs"),
            std::string::npos)
      << r.out;
  EXPECT_NE(ReadFile(dir + "/v.json").find("\"runs\":2,"), std::string::npos);
  // Each run's hand-offs as its traces show them, beside the one charged (the emulated network's).
  EXPECT_NE(ReadFile(dir + "/v.json").find("\"charged_handoff_us\":66.8,"), std::string::npos)
      << ReadFile(dir + "/v.json");
  EXPECT_NE(r.out.find("(charged 66.8)"), std::string::npos) << r.out;
  // --reuse-live: the same two measurements, a new prediction, nothing run live.
  const std::string base = kBin + " validate " + kRoot + "/scenarios/validation/mlp_1g.yaml " +
                           "--loopback --repeat 2 --set iterations=4 --set warmup_iterations=1 ";
  Result again = Shell(base + "--reuse-live --sim-set cluster.network.bandwidth_gbps=0.5 " +
                       "--work-dir " + dir + "/v -o " + dir + "/again.csv");
  ASSERT_EQ(again.rc, 0) << again.out;
  EXPECT_EQ(again.out.find("job done"), std::string::npos) << again.out;
  std::istringstream csv2(ReadFile(dir + "/again.csv"));
  std::string row1b, row2b;
  std::getline(csv2, header);
  std::getline(csv2, row1b);
  std::getline(csv2, row2b);
  EXPECT_EQ(field(row1b, 4), field(row1, 4)) << row1b;  // measured: the recorded runs
  EXPECT_EQ(field(row2b, 4), field(row2, 4)) << row2b;
  EXPECT_GT(std::stod(field(row1b, 6)), std::stod(field(row1, 6))) << row1b;  // a slower network
  // A configuration outside the 8% goal is named in the summary, with its error and folder.
  Result slow = Shell(base + "--reuse-live --sim-set cluster.network.bandwidth_gbps=0.001 " +
                      "--work-dir " + dir + "/v -o " + dir + "/slow.csv");
  ASSERT_EQ(slow.rc, 0) << slow.out;
  EXPECT_TRUE(std::regex_search(slow.out, std::regex("validate: outside 8%: \\+[0-9.]+% "
                                                     "validate-mlp-1g \\(config-0\\)")))
      << slow.out;
  // A recorded run of another configuration, or none, is not compared with anything.
  for (const auto& [args, why] : std::vector<std::pair<std::string, std::string>>{
           {"--set cluster.workers=3 --reuse-live --work-dir " + dir + "/v",
            "config-0/run-1/live-run.txt: the live run recorded here was of another configuration"},
           {"--reuse-live --work-dir " + dir + "/empty",
            "config-0/run-1/live-run.txt: no live run recorded here; run validate without "
            "--reuse-live first"}}) {
    Result refused = Shell(base + args);
    EXPECT_EQ(refused.rc, 1) << refused.out;
    EXPECT_NE(refused.out.find(why), std::string::npos) << refused.out;
  }
  // --run-missing: what --reuse-live finds no run for, or a run of another configuration, is
  // run live, the rest reused. A jittered configuration's live runs each get a seed of their own,
  // recorded with the run.
  const std::string jitter = "--set 'jitter={distribution: lognormal, cv: 0.1}' ";
  const std::string j = " --work-dir " + dir + "/j";
  Result filled = Shell(base + jitter + "--reuse-live --run-missing" + j);
  ASSERT_EQ(filled.rc, 0) << filled.out;
  EXPECT_NE(filled.out.find("no live run recorded here"), std::string::npos) << filled.out;
  EXPECT_NE(filled.out.find("running it live (--run-missing)"), std::string::npos) << filled.out;
  EXPECT_NE(filled.out.find("job done"), std::string::npos) << filled.out;
  EXPECT_NE(ReadFile(dir + "/j/config-0/run-1/live-run.txt").find("set: seed=102\n"),
            std::string::npos);
  EXPECT_NE(ReadFile(dir + "/j/config-0/run-2/live-run.txt").find("set: seed=103\n"),
            std::string::npos);
  Result reused = Shell(base + jitter + "--reuse-live --run-missing" + j);
  ASSERT_EQ(reused.rc, 0) << reused.out;
  EXPECT_EQ(reused.out.find("job done"), std::string::npos) << reused.out;
  Result renewed = Shell(base + "--reuse-live --run-missing" + j);  // no jitter: other runs
  ASSERT_EQ(renewed.rc, 0) << renewed.out;
  EXPECT_NE(renewed.out.find("was of another configuration"), std::string::npos) << renewed.out;
  EXPECT_NE(renewed.out.find("job done"), std::string::npos) << renewed.out;
  EXPECT_EQ(ReadFile(dir + "/j/config-0/run-1/live-run.txt").find("seed="), std::string::npos);
  EXPECT_EQ(Shell(base + "--run-missing" + j).rc, 2) << "--run-missing needs --reuse-live";
  // The testbed keys: the summary says which were charged and where they came from, and what the
  // live runs showed of the wake-up; a testbed keys file replaces the files' CPU keys on the
  // simulator's side (a message 100x dearer: a slower prediction of the same runs).
  EXPECT_NE(r.out.find("Testbed keys (what the simulator charged for the emulated hosts):"),
            std::string::npos) << r.out;
  EXPECT_NE(r.out.find("scenarios/networks/emulated_1gbit.yaml"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("host_message_us 7.40,"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("the live runs: wake-up "), std::string::npos) << r.out;
  EXPECT_NE(ReadFile(dir + "/v.json").find("\"testbed_keys\":[{\"network\":"), std::string::npos);
  WriteFile(dir + "/keys.yaml",
            "schema_version: 1\nhost_message_us: 740\nhost_ns_per_byte: 1.037\n"
            "host_kernel_ns_per_byte: [{bandwidth_gbps: 1, ns_per_byte: 1.043}]\n"
            "provenance: {cpu: \"a test\", cores: \"2\"}\n");
  Result keyed = Shell(base + "--reuse-live --testbed-keys " + dir + "/keys.yaml --work-dir " + dir +
                       "/v -o " + dir + "/keyed.csv");
  ASSERT_EQ(keyed.rc, 0) << keyed.out;
  std::istringstream csv3(ReadFile(dir + "/keyed.csv"));
  std::string row1k;
  std::getline(csv3, header);
  std::getline(csv3, row1k);
  EXPECT_EQ(field(row1k, 4), field(row1, 4)) << row1k;
  EXPECT_GT(std::stod(field(row1k, 6)), std::stod(field(row1, 6))) << row1k;
  EXPECT_NE(keyed.out.find(dir + "/keys.yaml (message and kernel CPU"), std::string::npos) << keyed.out;
  EXPECT_NE(keyed.out.find("host_message_us 740.00,"), std::string::npos) << keyed.out;
  EXPECT_NE(keyed.out.find("measured on a test, 2 cores"), std::string::npos) << keyed.out;
  EXPECT_NE(keyed.out.find("another kind of machine"), std::string::npos) << keyed.out;
  WriteFile(dir + "/bad-keys.yaml", "schema_version: 1\nhost_message_us: 7\nhost_ns_per_byte: 1\n"
                                    "host_kernel_ns_per_byte: [{bandwidth_gbps: 10, ns_per_byte: 1}]\n"
                                    "provenance: {}\n");
  Result wrong_rate = Shell(base + "--reuse-live --testbed-keys " + dir + "/bad-keys.yaml --work-dir " +
                            dir + "/v -o " + dir + "/x.csv");
  EXPECT_EQ(wrong_rate.rc, 2) << wrong_rate.out;
  EXPECT_NE(wrong_rate.out.find("bad-keys.yaml: error: no host_kernel_ns_per_byte for links of 1 "
                                "Gbit/s (the file has 10 Gbit/s)"),
            std::string::npos) << wrong_rate.out;
  Result loopback_measure = Shell(base + "--testbed-keys measure --work-dir " + dir + "/m");
  EXPECT_EQ(loopback_measure.rc, 2) << loopback_measure.out;
  EXPECT_NE(loopback_measure.out.find("--testbed-keys measure needs the emulated cluster"),
            std::string::npos) << loopback_measure.out;
  // --repeat-spread: after the --repeat runs, a configuration whose runs differ by more than 8%
  // gets more, up to the count. In two copies of the runs above, run 2's worker traces are run
  // 1's, as they are in one and stretched 1.5 times in the other, and both host records are made
  // quiet: the rule must add run 3 to the second (run live: --run-missing) and nothing to the
  // first.
  auto copy_runs = [&](const std::string& to, double stretch) {
    fs::copy(dir + "/v", to, fs::copy_options::recursive);
    for (int run = 1; run <= 2; ++run) {
      WriteFile(to + "/config-0/run-" + std::to_string(run) + "/host.txt",
                "samples=5 wall_s=0.5 cores=2 job_pct=50 others_pct=0 steal_pct=0 irq_pct=0 "
                "run_queue_mean=1 run_queue_max=2 job_processes_max=6\n");
    }
    for (int rank = 1; rank <= 2; ++rank) {
      const std::string trace = "/trace/rank-" + std::to_string(rank) + ".json";
      WriteFile(to + "/config-0/run-2" + trace,
                StretchTraceTimes(ReadFile(to + "/config-0/run-1" + trace), stretch));
    }
  };
  copy_runs(dir + "/a", 1.0);
  Result agree = Shell(base + "--reuse-live --repeat-spread 3 --work-dir " + dir + "/a");
  ASSERT_EQ(agree.rc, 0) << agree.out;
  EXPECT_EQ(agree.out.find("(--repeat-spread)"), std::string::npos) << agree.out;
  EXPECT_EQ(agree.out.find("up to 3 runs"), std::string::npos) << agree.out;
  const std::string s_dir = dir + "/s";
  copy_runs(s_dir, 1.5);
  Result spread = Shell(base + "--reuse-live --run-missing --repeat-spread 3 --work-dir " + s_dir +
                        " -o " + dir + "/s.csv");
  ASSERT_EQ(spread.rc, 0) << spread.out;
  EXPECT_NE(spread.out.find("validate: 1 configurations whose live runs differ by more than 8% get "
                            "runs 3 to 3 (--repeat-spread): config-0"),
            std::string::npos)
      << spread.out;
  EXPECT_NE(spread.out.find("validate run 3/3, 1/1"), std::string::npos) << spread.out;
  EXPECT_NE(spread.out.find("x 2 runs (1 of them up to 3 runs: their live runs spread by more than "
                            "8%)"),
            std::string::npos)
      << spread.out;
  EXPECT_TRUE(fs::exists(s_dir + "/config-0/run-3/live.json"));
  std::istringstream csv4(ReadFile(dir + "/s.csv"));
  std::string row1s, row2s, row3s;
  std::getline(csv4, header);
  std::getline(csv4, row1s);
  std::getline(csv4, row2s);
  std::getline(csv4, row3s);
  EXPECT_EQ(row3s.rfind("3,0,", 0), 0u) << row3s;
  EXPECT_NEAR(std::stod(field(row2s, 4)) / std::stod(field(row1s, 4)), 1.5, 0.01)
      << row1s << "\n" << row2s;
  for (const std::string& args :
       {std::string("--repeat-spread 2"), std::string("--repeat 1 --repeat-spread 3")}) {
    Result refused =
        Shell(kBin + " validate " + kRoot + "/scenarios/validation/mlp_1g.yaml --loopback " +
              (args.find("--repeat 1") == std::string::npos ? "--repeat 2 " : "") + args +
              " --work-dir " + dir + "/r");
    EXPECT_EQ(refused.rc, 2) << refused.out;
    EXPECT_NE(
        refused.out.find("needs --repeat 2 or more (a spread needs two runs) and a count above it"),
        std::string::npos)
        << refused.out;
  }
  Result bad = Shell(kBin + " validate x.yaml --repeat 0");
  EXPECT_EQ(bad.rc, 105) << bad.out;
  EXPECT_NE(bad.out.find("--repeat: must be a whole number >= 1, got '0'"), std::string::npos)
      << bad.out;
}

// The validation subset (scenarios/validation/ci_subset.yaml): the MLP with SFB on 2 and 4
// machines of the emulated 100 Mbit/s network (communication is most of an iteration), compute
// replayed from its CPU profile, against the simulator with the calibrated network; then the same
// live runs (--reuse-live, so that their noise does not enter twice) against a simulator whose
// network is 20% too fast and one 20% too slow.
struct ValidationRow {
  double measured = 0, predicted = 0, error = 0;
  double network = 0;  // the network model's error on the live run's own traffic
};
struct ValidationRuns {
  std::vector<ValidationRow> honest, fast, slow;
};

// One row per configuration of `validate ci_subset.yaml EXTRA`, columns found by name.
std::vector<ValidationRow> ValidateSubset(const std::string& dir, const std::string& extra) {
  const std::string csv = dir + "/validate.csv";
  fs::remove(csv);
  Result r = Shell(kBin + " validate " + kRoot + "/scenarios/validation/ci_subset.yaml --work-dir " +
                   dir + "/validate -o " + csv + " " + extra);
  EXPECT_EQ(r.rc, 0) << r.out;
  std::istringstream in(ReadFile(csv));
  // Every field, the empty last one too (a faithful run's not_faithful_why): getline alone drops
  // it.
  auto split = [](const std::string& line) {
    std::vector<std::string> f;
    size_t start = 0;
    for (size_t comma; (comma = line.find(',', start)) != std::string::npos; start = comma + 1) {
      f.push_back(line.substr(start, comma - start));
    }
    f.push_back(line.substr(start));
    return f;
  };
  std::string line;
  std::getline(in, line);
  const std::vector<std::string> header = split(line);
  auto col = [&](const std::string& name) {
    return static_cast<size_t>(std::find(header.begin(), header.end(), name) - header.begin());
  };
  std::vector<ValidationRow> rows;
  while (std::getline(in, line)) {
    const std::vector<std::string> f = split(line);
    if (f.size() != header.size()) {
      ADD_FAILURE() << "a row without an error: " << line << "\n" << r.out;
      continue;
    }
    rows.push_back(ValidationRow{std::stod(f[col("measured_ms")]), std::stod(f[col("predicted_ms")]),
                                 std::stod(f[col("error_pct")]),
                                 std::stod(f[col("network_error_pct")])});
  }
  EXPECT_EQ(rows.size(), 2u) << r.out;
  rows.resize(2);
  return rows;
}

ValidationRuns ValidateSubsetThreeWays(const std::string& dir) {
  ValidationRuns v;
  v.honest = ValidateSubset(dir, "");
  v.fast = ValidateSubset(dir, "--reuse-live --sim-set cluster.network.bandwidth_gbps=0.12");
  v.slow = ValidateSubset(dir, "--reuse-live --sim-set cluster.network.bandwidth_gbps=0.08");
  return v;
}

// What holds however busy the machine is: the wrong simulators reuse the honest run's
// measurements, and their predictions (of the iteration and of the live traffic) move the way
// their networks do. How close the honest one lands is LiveTiming's (label timing).
TEST_F(LiveTest, ValidationSubsetComparesWrongNetworksWithTheSameLiveRuns) {
  if (!NamespacesAvailable()) {
    GTEST_SKIP() << "the emulated cluster needs root (CAP_NET_ADMIN); skipped";
  }
  const ValidationRuns v = ValidateSubsetThreeWays(Dir());
  for (size_t i = 0; i < v.honest.size(); ++i) {
    SCOPED_TRACE(fmt::format("configuration {}: measured {} ms, predicted {} ms", i,
                             v.honest[i].measured, v.honest[i].predicted));
    EXPECT_GT(v.honest[i].measured, 0.0);
    EXPECT_EQ(v.fast[i].measured, v.honest[i].measured);
    EXPECT_EQ(v.slow[i].measured, v.honest[i].measured);
    EXPECT_LT(v.fast[i].predicted, v.honest[i].predicted);
    EXPECT_GT(v.slow[i].predicted, v.honest[i].predicted);
    EXPECT_LT(v.fast[i].error, v.honest[i].error);
    EXPECT_GT(v.slow[i].error, v.honest[i].error);
    EXPECT_LT(v.fast[i].network, v.honest[i].network);
    EXPECT_GT(v.slow[i].network, v.honest[i].network);
  }
  EXPECT_TRUE(fs::exists(Dir() + "/validate/config-0/net-replay.csv"));
}

// Label timing (outside the default suite: its outcome depends on what else the machine runs;
// ctest --test-dir build -L timing on a quiet machine). Each prediction within 8% of the live run
// (the goal; within 2% on a quiet 2-core VM), and the wrong networks caught: their errors
// leave the bound (about -14% to -16% and +23% to +25% there), and so do their replays of the
// live traffic (the messages here are large: the network sets their time).
class LiveTiming : public DataSuite<LiveTiming> {
 public:
  static constexpr char kDirName[] = "poseidon_live_timing";
};

TEST_F(LiveTiming, ValidationSubsetWithinEightPercentAndAWrongNetworkOutside) {
  if (!NamespacesAvailable()) {
    GTEST_SKIP() << "the emulated cluster needs root (CAP_NET_ADMIN); skipped";
  }
  constexpr double kBound = 8.0;
  const ValidationRuns v = ValidateSubsetThreeWays(Dir());
  for (size_t i = 0; i < v.honest.size(); ++i) {
    SCOPED_TRACE(fmt::format("configuration {}: measured {} ms, predicted {} ms", i,
                             v.honest[i].measured, v.honest[i].predicted));
    EXPECT_LT(std::fabs(v.honest[i].error), kBound);
    EXPECT_GT(std::fabs(v.fast[i].error), kBound) << "fast: " << v.fast[i].error << "%";
    EXPECT_GT(std::fabs(v.slow[i].error), kBound) << "slow: " << v.slow[i].error << "%";
    EXPECT_LT(std::fabs(v.honest[i].network), kBound) << "network: " << v.honest[i].network << "%";
    EXPECT_LT(v.fast[i].network, -kBound) << "fast, network: " << v.fast[i].network << "%";
    EXPECT_GT(v.slow[i].network, kBound) << "slow, network: " << v.slow[i].network << "%";
  }
}

}  // namespace
}  // namespace poseidon::rt
