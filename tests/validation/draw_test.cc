// The held-out draw of `poseidon validate --draw`: reproducible, spread over the space, valid.
#include "validation/draw.h"

#include <gtest/gtest.h>

#include <unistd.h>

#include <filesystem>
#include <set>
#include <string>

#include "config/scenario.h"
#include "config/yaml_reader.h"

namespace poseidon::validation {
namespace {

const std::string kData = std::string(POSEIDON_SOURCE_DIR) + "/scenarios";

TEST(ValidateDraw, TheSameSeedGivesTheSameBytesAndAnotherSeedOthers) {
  const std::string a = DrawConfigurations(48, 7, kData + "/profiles", "base.yaml");
  EXPECT_EQ(a, DrawConfigurations(48, 7, kData + "/profiles", "base.yaml"));
  EXPECT_NE(a, DrawConfigurations(48, 8, kData + "/profiles", "base.yaml"));
}

TEST(ValidateDraw, FortyEightDrawsCoverTheSpaceAndAllLoadAndRunLive) {
  const std::string file = (std::filesystem::temp_directory_path() /
                            ("poseidon-draw-" + std::to_string(::getpid())) / "set.yaml")
                               .string();
  ASSERT_EQ(RunDraw(48, 20261201, file, kData), 0);  // loads every point and checks it live
  const config::SweepSpec sweep = config::LoadSweepFile(file);
  ASSERT_EQ(sweep.points.size(), 48u);
  std::set<std::string> models, schemes, consistencies, placements, gates, networks;
  std::set<int> workers;
  int stragglers = 0, jitter = 0;
  for (const config::SweepPoint& p : sweep.points) {
    const config::ScenarioSpec& s = p.scenario;
    models.insert(s.model.name);
    schemes.insert(s.scheme);
    consistencies.insert(s.consistency);
    placements.insert(s.placement == config::ServerPlacement::kColocated ? "c" : "d");
    gates.insert(s.gate);
    networks.insert(s.network_file);
    workers.insert(s.workers);
    stragglers += !s.stragglers.empty();
    jitter += s.jitter != "none" && !s.jitter.empty();
    EXPECT_GE(s.servers, 1);
    EXPECT_LE(s.servers, s.workers);
    if (s.consistency != "bsp") {
      EXPECT_NE(s.scheme, "allreduce") << p.index;
    }
  }
  EXPECT_EQ(models.size(), 4u);  // the four CPU profiles (MLP, CNN, cifar10, ViT)
  EXPECT_EQ(schemes.size(), 5u);
  EXPECT_EQ(consistencies.size(), 3u);
  EXPECT_EQ(placements.size(), 2u);
  EXPECT_EQ(gates.size(), 2u);
  EXPECT_EQ(networks.size(), 2u);
  EXPECT_GE(workers.size(), 5u);
  EXPECT_GT(stragglers, 0);
  EXPECT_GT(jitter, 0);
  std::filesystem::remove_all(std::filesystem::path(file).parent_path());
}

// --max-processes-per-core: every configuration within the bound, and the file says so; without
// one the draw is as it always was.
TEST(ValidateDraw, ABoundOnProcessesPerCoreKeepsEveryConfigurationWithinIt) {
  DrawBound bound;
  bound.max_processes_per_core = 3;
  bound.cores = 2;  // at most 6 processes: 1 + workers + shards <= 6
  ASSERT_EQ(bound.MaxProcesses(), 6);
  const std::string yaml = DrawConfigurations(48, 7, kData + "/profiles", "base.yaml", bound);
  EXPECT_EQ(yaml, DrawConfigurations(48, 7, kData + "/profiles", "base.yaml", bound));
  EXPECT_NE(yaml.find("--max-processes-per-core 3 --cores 2`"), std::string::npos) << yaml;
  EXPECT_NE(yaml.find("# Bounded to what this host can emulate faithfully: at most 3 processes per "
                      "core on 2 cores,\n# so 1 + workers + shards <= 6"),
            std::string::npos)
      << yaml;
  EXPECT_NE(yaml.find("# A run whose job keeps more than 60% of the host's cores busy is judged "
                      "not faithful all the same\n"),
            std::string::npos)
      << yaml;
  const std::string file = (std::filesystem::temp_directory_path() /
                            ("poseidon-draw-bound-" + std::to_string(::getpid())) / "set.yaml")
                               .string();
  ASSERT_EQ(RunDraw(48, 7, file, kData, bound), 0);
  const config::SweepSpec sweep = config::LoadSweepFile(file);
  ASSERT_EQ(sweep.points.size(), 48u);
  std::set<int> workers;
  for (const config::SweepPoint& p : sweep.points) {
    EXPECT_LE(1 + p.scenario.workers + p.scenario.servers, 6) << p.values.front().second;
    workers.insert(p.scenario.workers);
  }
  EXPECT_EQ(workers, (std::set<int>{2, 3, 4}));
  std::filesystem::remove_all(std::filesystem::path(file).parent_path());
  // Unbounded (0) is the draw as before; a bound below the smallest job is an error.
  EXPECT_EQ(DrawConfigurations(8, 7, kData + "/profiles", "base.yaml", DrawBound{}),
            DrawConfigurations(8, 7, kData + "/profiles", "base.yaml"));
  bound.max_processes_per_core = 1.5;
  try {
    DrawConfigurations(4, 1, kData + "/profiles", "base.yaml", bound);
    FAIL() << "no error";
  } catch (const config::ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("allows 3 processes; the smallest configuration"),
              std::string::npos)
        << e.what();
  }
}

TEST(ValidateDraw, NoProfilesIsOneClearError) {
  try {
    DrawConfigurations(4, 1, "/nonexistent/profiles", "base.yaml");
    FAIL() << "no error";
  } catch (const config::ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("/nonexistent/profiles: error: no CPU profiles"),
              std::string::npos)
        << e.what();
  }
  EXPECT_THROW(RunDraw(0, 1, "/tmp/x.yaml", kData), config::ConfigError);
}

}  // namespace
}  // namespace poseidon::validation
