// `poseidon train --save/--resume` and `poseidon evaluate` (the app's files, compiled in): a run
// interrupted half way and resumed writes byte-identical checkpoint files to an uninterrupted
// one; resuming another model's or a damaged checkpoint fails naming the file; evaluate prints
// the accuracy train printed at the end. On a cut of Fashion-MNIST (Debian's package), small
// batches and few iterations, so that it runs in seconds; no assertion reads a clock.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "apps/poseidon/evaluate_command.h"
#include "apps/poseidon/train_command.h"
#include "config/yaml_reader.h"
#include "kernels/data/idx.h"

namespace poseidon::app {
namespace {

namespace fs = std::filesystem;

std::string Slurp(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
}

// The first `n` examples of a Fashion-MNIST file pair, written (plain IDX) under the names
// FashionMnistTrain/Test read.
void Cut(const std::string& from_images, const std::string& from_labels, int64_t n,
         const fs::path& to_images, const fs::path& to_labels) {
  kernels::IdxArray images = kernels::ReadIdx(from_images);
  kernels::IdxArray labels = kernels::ReadIdx(from_labels);
  const int64_t pixels = images.dims[1] * images.dims[2];
  images.dims[0] = n;
  images.data.resize(static_cast<size_t>(n * pixels));
  labels.dims[0] = n;
  labels.data.resize(static_cast<size_t>(n));
  kernels::WriteIdx(to_images.string(), images, /*gzip=*/false);
  kernels::WriteIdx(to_labels.string(), labels, /*gzip=*/false);
}

class TrainCheckpointTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    root_ = fs::temp_directory_path() / ("poseidon_train_ckpt_" + std::to_string(::getpid()));
    fs::remove_all(root_);
    const std::string src = kernels::DefaultFashionMnistDir();
    if (!fs::exists(src + "/t10k-images-idx3-ubyte.gz")) return;
    fs::create_directories(root_ / "data");
    Cut(src + "/train-images-idx3-ubyte.gz", src + "/train-labels-idx1-ubyte.gz", 600,
        root_ / "data/train-images-idx3-ubyte.gz", root_ / "data/train-labels-idx1-ubyte.gz");
    Cut(src + "/t10k-images-idx3-ubyte.gz", src + "/t10k-labels-idx1-ubyte.gz", 250,
        root_ / "data/t10k-images-idx3-ubyte.gz", root_ / "data/t10k-labels-idx1-ubyte.gz");
  }
  static void TearDownTestSuite() { fs::remove_all(root_); }
  void SetUp() override {
    if (!fs::exists(root_ / "data")) {
      GTEST_SKIP() << "Fashion-MNIST is not in " << kernels::DefaultFashionMnistDir()
                   << " (Debian's dataset-fashion-mnist)";
    }
  }

  // 24 iterations of fmnist_mlp, batch 8, a poly schedule (so the rate depends on the
  // iteration) and momentum; 600 examples, so the stream reshuffles (an epoch is 75 batches:
  // not within 24, but the state saved includes the generator either way).
  static TrainOptions Options(const std::string& backend) {
    TrainOptions o;
    o.model = "fmnist_mlp";
    o.models_dir = std::string(POSEIDON_SOURCE_DIR) + "/scenarios/models";
    o.data_dir = (root_ / "data").string();
    o.iterations = 24;
    o.batch = 8;
    o.backend = backend;
    o.lr_policy = "poly";
    o.lr = 0.05;
    o.print_interval = 4;
    o.test_interval = 8;
    return o;
  }
  static std::string Train(const TrainOptions& o) {
    std::ostringstream out;
    EXPECT_EQ(RunTrain(o, out), 0);
    return out.str();
  }
  // The progress lines after iteration `after`, without their images/s (a clock reading).
  static std::vector<std::string> LinesAfter(const std::string& out, int64_t after) {
    std::vector<std::string> lines;
    std::istringstream in(out);
    const std::regex iter("^iter +([0-9]+)  (.*)$"), rate(" *[0-9]+ images/s");
    std::smatch m;
    for (std::string line; std::getline(in, line);) {
      if (!std::regex_match(line, m, iter) || std::stoll(m[1]) <= after) continue;
      if (line.find("checkpoint written") != std::string::npos) continue;
      lines.push_back(std::regex_replace(line, rate, ""));
    }
    return lines;
  }
  static std::string Match(const std::string& text, const std::string& re) {
    std::smatch m;
    EXPECT_TRUE(std::regex_search(text, m, std::regex(re))) << re << " in:\n" << text;
    return m.size() > 1 ? m[1].str() : "";
  }

  static void ExpectResumeIsByteIdentical(const std::string& backend, const fs::path& root);

  static fs::path root_;
};

fs::path TrainCheckpointTest::root_;

// Straight 24 iterations against 12, killed, then resumed to 24: on the reference backend and on
// oneDNN's (the default), whose kernels are deterministic for a fixed batch and thread count.
void TrainCheckpointTest::ExpectResumeIsByteIdentical(const std::string& backend,
                                                      const fs::path& root) {
  SCOPED_TRACE(backend);
  TrainOptions straight = Options(backend);
  straight.save_dir = (root / "straight").string();
  const std::string out_straight = Train(straight);

  TrainOptions first = Options(backend);
  first.save_dir = (root / "half").string();
  first.save_interval = 4;
  first.stop_after = 12;  // killed right after the checkpoint of iteration 12
  Train(first);
  TrainOptions second = Options(backend);
  second.resume_dir = (root / "half").string();
  second.save_dir = (root / "resumed").string();
  const std::string out_resumed = Train(second);
  EXPECT_NE(out_resumed.find("resumed from " + second.resume_dir + " at iteration 12\n"),
            std::string::npos)
      << out_resumed;

  // Every file of the final checkpoints, index included, byte for byte.
  const fs::path a = root / "straight" / "iter-00000024", b = root / "resumed" / "iter-00000024";
  int files = 0;
  for (const fs::directory_entry& e : fs::recursive_directory_iterator(a)) {
    if (!e.is_regular_file()) continue;
    const fs::path rel = fs::relative(e.path(), a);
    EXPECT_TRUE(Slurp(e.path()) == Slurp(b / rel)) << rel << " differs";  // no byte dump
    ++files;
  }
  EXPECT_EQ(files, 6 + 6 + 1);  // 6 blobs, their momentum, the training state
  EXPECT_EQ(Slurp(root / "straight" / "index.json"), Slurp(root / "resumed" / "index.json"));
  EXPECT_TRUE(fs::exists(root / "half" / "iter-00000012"));  // only the latest is kept
  EXPECT_FALSE(fs::exists(root / "half" / "iter-00000008"));
  // And the same progress and test lines from iteration 13 on (losses, rates, accuracies).
  EXPECT_EQ(LinesAfter(out_straight, 12), LinesAfter(out_resumed, 12));
  EXPECT_EQ(LinesAfter(out_straight, 12).size(), 3u + 2u);  // 16, 20, 24; tests at 16, 24
}

TEST_F(TrainCheckpointTest, ResumedRunIsByteIdenticalToAnUninterruptedOne) {
  ExpectResumeIsByteIdentical("reference", root_ / "ref");
#ifdef POSEIDON_HAVE_DNNL
  ExpectResumeIsByteIdentical("cpu", root_ / "cpu");
#endif
}

TEST_F(TrainCheckpointTest, ResumingAnotherModelOrADamagedCheckpointNamesTheFile) {
  TrainOptions o = Options("reference");
  o.iterations = 4;
  o.save_dir = (root_ / "mlp").string();
  Train(o);

  TrainOptions cnn = Options("reference");
  cnn.model = "fmnist_cnn";
  cnn.resume_dir = o.save_dir;
  std::ostringstream out;
  try {
    RunTrain(cnn, out);
    ADD_FAILURE() << "resuming fmnist_cnn from an fmnist_mlp checkpoint did not fail";
  } catch (const config::ConfigError& e) {
    EXPECT_EQ(std::string(e.what()),
              o.save_dir + "/index.json: error: the checkpoint is of model 'fmnist_mlp', not "
                           "'fmnist_cnn'; pass --model fmnist_mlp or a checkpoint of "
                           "'fmnist_cnn'");
  }

  // A truncated blob file.
  const fs::path blob = root_ / "mlp" / "iter-00000004" / "fc3.weight.npy";
  const std::string bytes = Slurp(blob);
  std::ofstream(blob, std::ios::binary | std::ios::trunc) << bytes.substr(0, 100);
  TrainOptions resume = Options("reference");
  resume.resume_dir = o.save_dir;
  try {
    RunTrain(resume, out);
    ADD_FAILURE() << "resuming a truncated checkpoint did not fail";
  } catch (const config::ConfigError& e) {
    const std::string what = e.what();
    EXPECT_EQ(what.rfind(blob.string() + ": error: at byte", 0), 0u) << what;
    EXPECT_NE(what.find("truncated"), std::string::npos) << what;
  }

  // A checkpoint already at the end of the run.
  std::ofstream(blob, std::ios::binary | std::ios::trunc) << bytes;
  resume.iterations = 4;
  try {
    RunTrain(resume, out);
    ADD_FAILURE() << "resuming at the last iteration did not fail";
  } catch (const config::ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("is at iteration 4, --iterations 4 is not past it"),
              std::string::npos)
        << e.what();
  }
}

TEST_F(TrainCheckpointTest, EvaluatePrintsTheAccuracyTrainPrintedAtTheEnd) {
  // The default backend (cpu where oneDNN is built in), as a user runs it.
#ifdef POSEIDON_HAVE_DNNL
  TrainOptions o = Options("cpu");
#else
  TrainOptions o = Options("reference");
#endif
  o.save_dir = (root_ / "eval").string();
  const std::string trained = Train(o);
  const std::string acc = Match(trained, "iter +24  test accuracy ([0-9.]+)");
  const std::string loss = Match(trained, "iter +24  test accuracy [0-9.]+  test loss ([0-9.]+)");

  EvaluateOptions e;
  e.params = o.save_dir;
  e.models_dir = o.models_dir;
  e.data_dir = o.data_dir;
  std::ostringstream out;
  EXPECT_EQ(RunEvaluate(e, out), 0);
  EXPECT_EQ(Match(out.str(), "test accuracy ([0-9.]+)"), acc) << out.str();
  EXPECT_EQ(Match(out.str(), "test loss ([0-9.]+)"), loss) << out.str();
  EXPECT_NE(out.str().find("evaluate fmnist_mlp from " + o.save_dir + " (iteration 24"),
            std::string::npos)
      << out.str();

  e.model = "fmnist_cnn";  // not the checkpoint's model
  try {
    RunEvaluate(e, out);
    ADD_FAILURE() << "evaluating an fmnist_mlp checkpoint as fmnist_cnn did not fail";
  } catch (const config::ConfigError& err) {
    EXPECT_NE(std::string(err.what()).find(o.save_dir + "/index.json: error: the checkpoint is "
                                                        "of model 'fmnist_mlp'"),
              std::string::npos);
  }
}

// The binary: a missing checkpoint is one "poseidon: ..." line naming the path, exit code 2.
TEST_F(TrainCheckpointTest, TheBinaryReportsAMissingCheckpointInOneLine) {
  const std::string missing = (root_ / "no-such-checkpoint").string();
  const std::string cmd = std::string(POSEIDON_BINARY) + " evaluate --params " + missing + " 2>&1";
  FILE* p = popen(cmd.c_str(), "r");
  ASSERT_NE(p, nullptr);
  std::string out;
  char buf[512];
  while (fgets(buf, sizeof buf, p) != nullptr) out += buf;
  const int status = pclose(p);
  EXPECT_EQ(WEXITSTATUS(status), 2) << out;
  EXPECT_EQ(out, "poseidon: " + missing +
                     "/index.json: error: no checkpoint index here (no such folder); pass the "
                     "folder a 'poseidon train --save' or 'launch --save' wrote\n");
}

// A model whose input is not a 28x28 image is refused naming its real input shape (token ids
// [1024] read "1024", not "1x1x1024"); fmnist_vit, whose activations are token sequences, trains.
TEST_F(TrainCheckpointTest, TokenModelIsRefusedWithItsShapeAndFmnistVitTrains) {
  TrainOptions gpt = Options("reference");
  gpt.model = "gpt2_small";
  std::ostringstream out;
  try {
    RunTrain(gpt, out);
    ADD_FAILURE() << "gpt2_small trained on images";
  } catch (const config::ConfigError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("model 'gpt2_small' expects 1024 input but the data in"),
              std::string::npos)
        << what;
    EXPECT_EQ(what.find("1x1x1024"), std::string::npos) << what;
  }
#ifdef POSEIDON_HAVE_DNNL
  TrainOptions vit = Options("cpu");
  vit.model = "fmnist_vit";
  vit.iterations = 4;
  const std::string log = Train(vit);
  EXPECT_NE(log.find("train fmnist_vit (139018 parameters) on cpu backend"), std::string::npos)
      << log;
  EXPECT_NE(log.find("test accuracy"), std::string::npos) << log;
#endif
}

}  // namespace
}  // namespace poseidon::app
