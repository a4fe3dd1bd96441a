// The checkpoint folder (kernels/checkpoint.h): exact round trip in the Net's layout, .npy files
// numpy reads (header bytes checked here), located errors for damaged, truncated and foreign
// checkpoints, and a failed write that leaves the previous checkpoint the latest.
#include "kernels/checkpoint.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "config/model_loader.h"
#include "kernels/net.h"

namespace poseidon::kernels {
namespace {

namespace fs = std::filesystem;

core::Model LoadModel(const std::string& name) {
  return core::Model::Build(config::LoadModelFile(
      std::string(POSEIDON_SOURCE_DIR) + "/scenarios/models/" + name + ".yaml"));
}

std::string Slurp(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
}

void Spit(const fs::path& p, const std::string& b) {
  std::ofstream f(p, std::ios::binary | std::ios::trunc);
  f << b;
}

// Distinct values for every parameter, so that a blob read into the wrong place shows.
Checkpoint Sample(const core::Model& m, int64_t iteration, float base) {
  Checkpoint c;
  c.model = m.name();
  c.iteration = iteration;
  c.training.written_by = "poseidon train";
  c.training.backend = "reference";
  c.training.batch = 8;
  c.training.seed = 7;
  c.training.iterations = 100;
  c.training.sgd.base_lr = 0.01;
  c.training.sgd.policy = LrPolicy::kPoly;
  c.training.sgd.max_iter = 100;
  const auto n = static_cast<size_t>(m.total_params());
  c.params.resize(n);
  c.momentum.resize(n);
  for (size_t i = 0; i < n; ++i) {
    c.params[i] = base + static_cast<float>(i) * 1e-3f;
    c.momentum[i] = -static_cast<float>(i) * 1e-4f;
  }
  c.state = std::string("opaque\0state", 12);
  return c;
}

class CheckpointTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("poseidon_ckpt_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  fs::path dir_;
};

// The message of the CheckpointError f() throws ("" when it throws none).
template <typename F>
std::string ErrorOf(F&& f) {
  try {
    f();
  } catch (const CheckpointError& e) {
    return e.what();
  }
  return "";
}

TEST_F(CheckpointTest, RoundTripIsExactInTheNetsLayout) {
  const core::Model m = LoadModel("fmnist_cnn");
  const Checkpoint c = Sample(m, 42, 0.5f);
  WriteCheckpoint(dir_.string(), m, c);
  const Checkpoint r = ReadCheckpoint(dir_.string(), m);
  EXPECT_EQ(r.model, "fmnist_cnn");
  EXPECT_EQ(r.iteration, 42);
  EXPECT_EQ(r.params, c.params);
  EXPECT_EQ(r.momentum, c.momentum);
  EXPECT_EQ(r.state, c.state);
  EXPECT_EQ(r.training.written_by, "poseidon train");
  EXPECT_EQ(r.training.backend, "reference");
  EXPECT_EQ(r.training.batch, 8);
  EXPECT_EQ(r.training.seed, 7u);
  EXPECT_EQ(r.training.sgd.policy, LrPolicy::kPoly);
  EXPECT_EQ(r.training.sgd.base_lr, 0.01);
  EXPECT_EQ(r.training.sgd.max_iter, 100);

  // Each blob file holds the slice of the Net's flat parameter array that Net::blob(i) views.
  Net net(m, Backend::kReference, 1, 1);
  for (int i = 0; i < net.num_blobs(); ++i) {
    const BlobRef b = net.blob(i);
    std::vector<int64_t> shape;
    const std::vector<float> v = DecodeNpy(
        Slurp(dir_ / "iter-00000042" / (b.name + ".npy")), b.name, &shape);
    ASSERT_EQ(static_cast<int64_t>(v.size()), b.count) << b.name;
    const int64_t offset = b.value - net.params();
    EXPECT_EQ(v[0], c.params[static_cast<size_t>(offset)]) << b.name;
    EXPECT_EQ(v.back(), c.params[static_cast<size_t>(offset + b.count - 1)]) << b.name;
  }
}

// The bytes numpy.load expects: magic, version 1.0, a little-endian u16 header length, a header
// dict padded to 64 bytes and ended by '\n', then the data little-endian float32.
TEST_F(CheckpointTest, NpyFilesAreNumpyFormat1) {
  const core::Model m = LoadModel("fmnist_cnn");
  const Checkpoint c = Sample(m, 3, 1.0f);
  WriteCheckpoint(dir_.string(), m, c);
  const std::string b = Slurp(dir_ / "iter-00000003" / "conv1.weight.npy");
  ASSERT_GE(b.size(), 10u);
  EXPECT_EQ(b.substr(0, 6), "\x93NUMPY");
  EXPECT_EQ(b[6], '\x01');
  EXPECT_EQ(b[7], '\x00');
  const size_t len = static_cast<unsigned char>(b[8]) | static_cast<size_t>(static_cast<unsigned char>(b[9])) << 8;
  EXPECT_EQ((10 + len) % 64, 0u);
  const std::string header = b.substr(10, len);
  EXPECT_EQ(header.rfind("{'descr': '<f4', 'fortran_order': False, 'shape': (32, 1, 5, 5), }", 0),
            0u)
      << header;
  EXPECT_EQ(header.back(), '\n');
  ASSERT_EQ(b.size(), 10 + len + 32 * 1 * 5 * 5 * sizeof(float));
  float first = 0;
  std::memcpy(&first, b.data() + 10 + len, sizeof first);
  EXPECT_EQ(first, c.params[0]);  // conv1.weight is the first blob
  // A 1-D blob's shape is a one-element tuple.
  const std::string bias = Slurp(dir_ / "iter-00000003" / "conv1.bias.npy");
  EXPECT_NE(bias.find("'shape': (32,), }"), std::string::npos);
  EXPECT_TRUE(fs::exists(dir_ / "iter-00000003" / "momentum" / "conv1.weight.npy"));
  EXPECT_TRUE(fs::exists(dir_ / "iter-00000003" / "training_state.bin"));
}

TEST_F(CheckpointTest, NpyDecodeRejectsOtherDtypesAndTruncation) {
  const std::vector<float> v = {1, 2, 3, 4, 5, 6};
  const std::string good = EncodeNpy({2, 3}, v.data());
  std::vector<int64_t> shape;
  EXPECT_EQ(DecodeNpy(good, "x.npy", &shape), v);
  EXPECT_EQ(shape, (std::vector<int64_t>{2, 3}));
  EXPECT_NE(ErrorOf([&] { DecodeNpy(good.substr(0, good.size() - 1), "x.npy", &shape); })
                .find("x.npy: error: at byte"),
            std::string::npos);
  std::string f8 = good;
  f8.replace(f8.find("<f4"), 3, "<f8");
  EXPECT_NE(ErrorOf([&] { DecodeNpy(f8, "x.npy", &shape); }).find("'<f8' is not '<f4'"),
            std::string::npos);
  std::string fortran = good;
  fortran.replace(fortran.find("False"), 5, "True ");
  EXPECT_NE(ErrorOf([&] { DecodeNpy(fortran, "x.npy", &shape); }).find("Fortran"),
            std::string::npos);
  EXPECT_NE(ErrorOf([&] { DecodeNpy("not npy", "x.npy", &shape); }).find("no .npy magic"),
            std::string::npos);
}

TEST_F(CheckpointTest, DamagedFilesGiveLocatedErrors) {
  const core::Model m = LoadModel("fmnist_mlp");
  WriteCheckpoint(dir_.string(), m, Sample(m, 5, 0.f));
  const fs::path blob = dir_ / "iter-00000005" / "fc2.weight.npy";
  const std::string bytes = Slurp(blob);

  Spit(blob, bytes.substr(0, bytes.size() / 2));  // truncated
  std::string e = ErrorOf([&] { ReadCheckpoint(dir_.string(), m); });
  EXPECT_NE(e.find(blob.string() + ": error:"), std::string::npos) << e;
  EXPECT_NE(e.find("truncated"), std::string::npos) << e;

  std::string flipped = bytes;
  flipped[flipped.size() - 3] ^= 0x40;  // one bit of the data
  Spit(blob, flipped);
  e = ErrorOf([&] { ReadCheckpoint(dir_.string(), m); });
  EXPECT_NE(e.find(blob.string() + ": error: blob 'fc2.weight' fails its CRC-32"),
            std::string::npos)
      << e;

  fs::remove(blob);
  e = ErrorOf([&] { ReadCheckpoint(dir_.string(), m); });
  EXPECT_NE(e.find(blob.string() + ": error: cannot read blob 'fc2.weight'"), std::string::npos)
      << e;

  Spit(blob, bytes);
  const fs::path index = dir_ / "index.json";
  const std::string text = Slurp(index);
  Spit(index, text.substr(0, text.size() / 2));  // a torn index
  e = ErrorOf([&] { ReadCheckpoint(dir_.string(), m); });
  EXPECT_EQ(e.rfind(index.string() + ":", 0), 0u) << e;
  EXPECT_NE(e.find("error:"), std::string::npos) << e;
  Spit(index, "{\"format\": \"poseidon-checkpoint\",\n \"format_version\": 9}");
  e = ErrorOf([&] { ReadCheckpoint(dir_.string(), m); });
  EXPECT_NE(e.find(index.string() + ":2:"), std::string::npos) << e;
  EXPECT_NE(e.find("use a newer poseidon"), std::string::npos) << e;

  e = ErrorOf([&] { ReadCheckpoint((dir_ / "nothing").string(), m); });
  EXPECT_NE(e.find("index.json: error: no checkpoint index here (no such folder)"),
            std::string::npos)
      << e;
}

TEST_F(CheckpointTest, AnotherModelIsRefusedNamingWhatDiffers) {
  const core::Model mlp = LoadModel("fmnist_mlp");
  WriteCheckpoint(dir_.string(), mlp, Sample(mlp, 5, 0.f));
  const std::string index = (dir_ / "index.json").string();
  std::string e = ErrorOf([&] { ReadCheckpoint(dir_.string(), LoadModel("fmnist_cnn")); });
  EXPECT_NE(e.find(index + ": error: the checkpoint is of model 'fmnist_mlp', not 'fmnist_cnn'"),
            std::string::npos)
      << e;

  // The same name with a wider first layer: the blob and both shapes are named.
  core::ModelSpec spec = config::LoadModelFile(std::string(POSEIDON_SOURCE_DIR) +
                                               "/scenarios/models/fmnist_mlp.yaml");
  spec.layers[0].num_output = 512;
  e = ErrorOf([&] { ReadCheckpoint(dir_.string(), core::Model::Build(spec)); });
  EXPECT_NE(e.find(index + ":"), std::string::npos) << e;
  EXPECT_NE(e.find("'fc1.weight' of shape [1024, 784] but model 'fmnist_mlp' has 'fc1.weight' "
                   "of shape [512, 784]"),
            std::string::npos)
      << e;

  // Sizes that do not fit the model are refused before anything is written.
  Checkpoint wrong = Sample(mlp, 6, 0.f);
  wrong.params.pop_back();
  e = ErrorOf([&] { WriteCheckpoint(dir_.string(), mlp, wrong); });
  EXPECT_NE(e.find("1863689 parameters"), std::string::npos) << e;
  EXPECT_EQ(ReadCheckpoint(dir_.string(), mlp).iteration, 5);
}

// A disk that fills up half way through a checkpoint: the error names the file, the half-written
// folder is gone and the previous checkpoint is still the latest, whole.
TEST_F(CheckpointTest, AFailedWriteLeavesThePreviousCheckpointTheLatest) {
  const core::Model m = LoadModel("fmnist_cnn");
  const Checkpoint first = Sample(m, 10, 0.25f);
  WriteCheckpoint(dir_.string(), m, first);
  int files = 0;
  CheckpointWriteOptions o;
  o.after_file = [&](const std::string& path) {
    if (++files == 3) throw CheckpointError(path + ": error: cannot write: No space left on device");
  };
  const std::string e = ErrorOf([&] { WriteCheckpoint(dir_.string(), m, Sample(m, 20, 9.f), o); });
  EXPECT_NE(e.find("iter-00000020"), std::string::npos) << e;
  EXPECT_FALSE(fs::exists(dir_ / "iter-00000020"));
  EXPECT_FALSE(fs::exists(dir_ / "index.json.tmp"));
  const Checkpoint r = ReadCheckpoint(dir_.string(), m);
  EXPECT_EQ(r.iteration, 10);
  EXPECT_EQ(r.params, first.params);

  // The next checkpoint that succeeds replaces it and removes its folder.
  WriteCheckpoint(dir_.string(), m, Sample(m, 30, 2.f));
  EXPECT_EQ(ReadCheckpoint(dir_.string(), m).iteration, 30);
  EXPECT_FALSE(fs::exists(dir_ / "iter-00000010"));
  // Saving the same iteration again writes a fresh folder, then drops the old one.
  WriteCheckpoint(dir_.string(), m, Sample(m, 30, 3.f));
  EXPECT_EQ(ReadCheckpoint(dir_.string(), m).params[0], 3.f);
  EXPECT_FALSE(fs::exists(dir_ / "iter-00000030"));
  EXPECT_TRUE(fs::exists(dir_ / "iter-00000030-2"));
}

TEST_F(CheckpointTest, AFolderThatCannotBeCreatedIsNamed) {
  fs::create_directories(dir_);
  Spit(dir_ / "file", "x");
  const core::Model m = LoadModel("fmnist_mlp");
  const std::string target = (dir_ / "file" / "ckpt").string();
  const std::string e = ErrorOf([&] { WriteCheckpoint(target, m, Sample(m, 1, 0.f)); });
  EXPECT_EQ(e.rfind(target + ": error: cannot create the checkpoint folder", 0), 0u) << e;
}

TEST_F(CheckpointTest, TrainerStateRoundTripsAndForeignBytesAreRefused) {
  const TrainerState s{std::string("stream\0bytes", 12), 12.5, 3};
  const TrainerState r = DecodeTrainerState(EncodeTrainerState(s), "state");
  EXPECT_EQ(r.stream, s.stream);
  EXPECT_EQ(r.loss_sum, 12.5);
  EXPECT_EQ(r.loss_n, 3);
  const std::string e = ErrorOf([] { DecodeTrainerState("PSWK....", "ckpt/state"); });
  EXPECT_EQ(e.rfind("ckpt/state: error: not a 'poseidon train' training state", 0), 0u) << e;
}

}  // namespace
}  // namespace poseidon::kernels
