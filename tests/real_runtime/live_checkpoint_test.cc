// `poseidon launch --save DIR`: a live job's final parameters as a checkpoint folder
// (kernels/checkpoint.h) that `poseidon evaluate` reads and scores exactly as the job did, and
// that holds the same floats as --save-params' raw file. Real processes over loopback TCP, on a
// Fashion-MNIST subset; no assertion reads a clock.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <regex>
#include <string>
#include <vector>

#include "config/model_loader.h"
#include "kernels/checkpoint.h"
#include "tests/real_runtime/live_helpers.h"

namespace poseidon::rt {
namespace {

namespace fs = std::filesystem;
using namespace live;  // Shell, ReadFile, kBin, kRoot, WriteFashionMnistSubset

std::string Match(const std::string& text, const std::string& re) {
  std::smatch m;
  EXPECT_TRUE(std::regex_search(text, m, std::regex(re))) << re << " in:\n" << text;
  return m.size() > 1 ? m[1].str() : "";
}

TEST(LiveCheckpointTest, EvaluateScoresALiveJobsCheckpointAsTheJobDid) {
  const std::string dir = fs::temp_directory_path() / ("poseidon_live_ckpt_" + std::to_string(getpid()));
  fs::remove_all(dir);
  WriteFashionMnistSubset(dir + "/data");
  const Result job = Shell(kBin + " launch " + kRoot + "/scenarios/live/fmnist_mlp.yaml --data-dir " +
                           dir + "/data --log-dir " + dir + "/logs --workers 2 --servers 1 --set "
                           "iterations=6 --set batch_per_worker=16 --save " + dir +
                           "/ckpt --save-params " + dir + "/w-{rank}.bin");
  ASSERT_EQ(job.rc, 0) << job.out;
  const std::string accuracy = Match(job.out, "test accuracy ([0-9.]+)");

  const Result eval = Shell(kBin + " evaluate --params " + dir + "/ckpt --data-dir " + dir + "/data");
  ASSERT_EQ(eval.rc, 0) << eval.out;
  EXPECT_EQ(Match(eval.out, "test accuracy ([0-9.]+)"), accuracy) << eval.out;
  EXPECT_NE(eval.out.find("(iteration 6, written by poseidon launch)"), std::string::npos)
      << eval.out;

  // The folder holds worker 1's floats, the ones --save-params wrote raw, and no momentum.
  const core::Model m = core::Model::Build(
      config::LoadModelFile(kRoot + "/scenarios/models/fmnist_mlp.yaml"));
  const kernels::Checkpoint c = kernels::ReadCheckpoint(dir + "/ckpt", m);
  EXPECT_TRUE(c.momentum.empty());
  EXPECT_EQ(c.training.workers, 2);
  EXPECT_EQ(c.training.batch, 16);
  const std::string raw = ReadFile(dir + "/w-1.bin");
  ASSERT_EQ(raw.size(), c.params.size() * sizeof(float));
  EXPECT_EQ(std::memcmp(raw.data(), c.params.data(), raw.size()), 0);

  // Training on from it is refused: a live checkpoint has no momentum or data stream.
  const Result resume = Shell(kBin + " train --iterations 8 --batch 16 --data-dir " + dir +
                              "/data --resume " + dir + "/ckpt");
  EXPECT_EQ(resume.rc, 2) << resume.out;
  EXPECT_NE(resume.out.find(dir + "/ckpt/index.json: error: written by 'poseidon launch'"),
            std::string::npos)
      << resume.out;
  fs::remove_all(dir);
}

}  // namespace
}  // namespace poseidon::rt
