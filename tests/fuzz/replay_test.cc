// tests/fuzz/replay_test.cc: replays every seed and regression input of the fuzz targets
// (fuzz/corpus/NAME_fuzz/, fuzz/regressions/NAME_fuzz/) through the same bodies libFuzzer runs,
// in the normal build, so that every input that once crashed stays fixed without clang.
// A body that crashes, aborts on an invariant or lets an unexpected exception escape fails here.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "fuzz/fuzz_targets.h"

namespace poseidon::fuzz {
namespace {

namespace fs = std::filesystem;
using Body = int (*)(const uint8_t*, size_t);

std::vector<fs::path> Inputs(const std::string& dir) {
  std::vector<fs::path> out;
  const fs::path d = fs::path(POSEIDON_SOURCE_DIR) / "fuzz" / dir;
  if (!fs::is_directory(d)) return out;
  for (const auto& e : fs::directory_iterator(d)) {
    if (e.is_regular_file() && e.path().filename() != "README.md") out.push_back(e.path());
  }
  std::sort(out.begin(), out.end());
  return out;
}

// Returns the number of files replayed.
size_t Replay(const std::string& target, Body body, const std::string& kind) {
  const std::vector<fs::path> files = Inputs(kind + "/" + target);
  for (const auto& p : files) {
    SCOPED_TRACE(p.string());
    std::ifstream in(p, std::ios::binary);
    EXPECT_TRUE(in) << "cannot read " << p;
    const std::vector<uint8_t> bytes((std::istreambuf_iterator<char>(in)),
                                     std::istreambuf_iterator<char>());
    EXPECT_EQ(body(bytes.data(), bytes.size()), 0);
  }
  return files.size();
}

struct Target {
  const char* name;
  Body body;
};

class FuzzReplay : public ::testing::TestWithParam<Target> {};

TEST_P(FuzzReplay, SeedCorpus) {
  // Every target ships a seed corpus; an empty one means the corpus went missing.
  EXPECT_GT(Replay(GetParam().name, GetParam().body, "corpus"), 0u);
}

TEST_P(FuzzReplay, Regressions) { Replay(GetParam().name, GetParam().body, "regressions"); }

TEST_P(FuzzReplay, EmptyAndTinyInputs) {
  const uint8_t bytes[4] = {0xff, 0x00, 0x01, 0x02};
  for (size_t n = 0; n <= sizeof bytes; ++n) EXPECT_EQ(GetParam().body(bytes, n), 0);
}

INSTANTIATE_TEST_SUITE_P(Fuzz, FuzzReplay,
                         ::testing::Values(Target{"frame_fuzz", FuzzFrame},
                                           Target{"handshake_fuzz", FuzzHandshake},
                                           Target{"scenario_fuzz", FuzzScenario},
                                           Target{"model_fuzz", FuzzModel},
                                           Target{"idx_fuzz", FuzzIdx},
                                           Target{"protocol_fuzz", FuzzProtocol},
                                           Target{"collectives_fuzz", FuzzCollectives},
                                           Target{"control_fuzz", FuzzControl}),
                         [](const auto& param_info) { return std::string(param_info.param.name); });

}  // namespace
}  // namespace poseidon::fuzz
