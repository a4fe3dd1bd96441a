#include "kernels/data/idx.h"

#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

#include <gtest/gtest.h>

namespace poseidon::kernels {
namespace {

namespace fs = std::filesystem;

class IdxTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("poseidon_idx_test_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  std::string Path(const std::string& name) const { return (dir_ / name).string(); }

  std::string WriteBytes(const std::string& name, const std::vector<uint8_t>& bytes) const {
    const std::string path = Path(name);
    std::ofstream out(path, std::ios::binary);
    out.write(reinterpret_cast<const char*>(bytes.data()),
              static_cast<std::streamsize>(bytes.size()));
    return path;
  }

  fs::path dir_;
};

// Runs fn, expects a DataError, and checks that its message contains every one of `parts`.
void ExpectDataError(const std::function<void()>& fn, const std::vector<std::string>& parts) {
  try {
    fn();
    ADD_FAILURE() << "no DataError thrown";
  } catch (const DataError& e) {
    const std::string msg = e.what();
    for (const std::string& part : parts) {
      EXPECT_NE(msg.find(part), std::string::npos) << "'" << part << "' not in: " << msg;
    }
  }
}

IdxArray Sample() {
  IdxArray a;
  a.dims = {2, 3, 4};
  for (int i = 0; i < 24; ++i) a.data.push_back(static_cast<uint8_t>(i * 11));
  return a;
}

std::vector<uint8_t> FileBytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

TEST_F(IdxTest, RoundTripsPlainAndGzipped) {
  const IdxArray a = Sample();
  WriteIdx(Path("a.idx"), a, /*gzip=*/false);
  WriteIdx(Path("a.idx.gz"), a, /*gzip=*/true);

  const std::vector<uint8_t> plain = FileBytes(Path("a.idx"));
  ASSERT_EQ(plain.size(), 4u + 3 * 4 + 24);
  EXPECT_EQ(std::vector<uint8_t>(plain.begin(), plain.begin() + 8),
            (std::vector<uint8_t>{0, 0, 0x08, 3, 0, 0, 0, 2}));
  const std::vector<uint8_t> gz = FileBytes(Path("a.idx.gz"));
  ASSERT_GE(gz.size(), 2u);
  EXPECT_EQ(gz[0], 0x1f);
  EXPECT_EQ(gz[1], 0x8b);

  for (const char* name : {"a.idx", "a.idx.gz"}) {
    const IdxArray b = ReadIdx(Path(name));
    EXPECT_EQ(b.dims, a.dims) << name;
    EXPECT_EQ(b.data, a.data) << name;
  }
}

TEST_F(IdxTest, LoadsImagesAndLabels) {
  WriteIdx(Path("img.gz"), Sample(), true);
  WriteIdx(Path("lab"), IdxArray{{2}, {7, 255}}, false);
  const IdxDataset d = LoadIdxDataset(Path("img.gz"), Path("lab"));
  EXPECT_EQ(d.count, 2);
  EXPECT_EQ(d.rows, 3);
  EXPECT_EQ(d.cols, 4);
  ASSERT_EQ(d.images.size(), 24u);
  EXPECT_FLOAT_EQ(d.images[0], 0.f);
  EXPECT_FLOAT_EQ(d.images[5], 55.f / 255.f);
  EXPECT_EQ(d.labels, (std::vector<int32_t>{7, 255}));
  EXPECT_EQ(d.num_classes, 256);
}

TEST_F(IdxTest, MissingFileSaysHowToInstall) {
  const std::string path = Path("nope.gz");
  ExpectDataError([&] { ReadIdx(path); }, {path + ": cannot open: No such file or directory",
                                           "apt-get install dataset-fashion-mnist"});
}

TEST_F(IdxTest, WrongMagic) {
  const std::string path = WriteBytes("text", {'h', 'e', 'l', 'l', 'o', '\n'});
  ExpectDataError([&] { ReadIdx(path); },
                  {path + ": not an IDX file (magic 0x68656c6c at offset 0)"});
}

TEST_F(IdxTest, TruncatedHeader) {
  const std::string empty = WriteBytes("empty", {});
  ExpectDataError([&] { ReadIdx(empty); }, {empty + ": truncated header", "got 0 (offset 0)"});
  const std::string path = WriteBytes("short", {0, 0, 8, 3, 0, 0, 0, 2, 0, 0});
  ExpectDataError(
      [&] { ReadIdx(path); },
      {path + ": truncated header: expected 12 bytes of dimension sizes", "got 6 (offset 10)"});
}

TEST_F(IdxTest, TruncatedBodyPlain) {
  // Header for 2 x 3 x 4, then 10 of the 24 data bytes.
  const std::string path = WriteBytes(
      "body", {0, 0, 8, 3, 0, 0, 0, 2, 0, 0, 0, 3, 0, 0, 0, 4, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1});
  ExpectDataError(
      [&] { ReadIdx(path); },
      {path + ": truncated: expected 24 bytes of data after the header", "got 10 (offset 26)"});
}

TEST_F(IdxTest, TruncatedBodyGzipped) {
  IdxArray big;
  big.dims = {1000};
  for (int i = 0; i < 1000; ++i) big.data.push_back(static_cast<uint8_t>(i * 7919 % 251));
  const std::string path = Path("big.gz");
  WriteIdx(path, big, true);
  fs::resize_file(path, fs::file_size(path) / 2);
  ExpectDataError([&] { ReadIdx(path); },
                  {path + ": truncated: expected 1000 bytes", "of the decompressed data",
                   "the gzip stream is cut short"});
}

TEST_F(IdxTest, TrailingBytes) {
  const std::string path = WriteBytes("trail", {0, 0, 8, 1, 0, 0, 0, 2, 5, 6, 7});
  ExpectDataError([&] { ReadIdx(path); },
                  {path + ": unexpected bytes after the data (offset 10)", "dimensions 2"});
}

TEST_F(IdxTest, WrongTypeByte) {
  const std::string path = WriteBytes("float", {0, 0, 0x0D, 1, 0, 0, 0, 1, 0, 0, 0, 0});
  ExpectDataError([&] { ReadIdx(path); },
                  {path + ": unsupported IDX element type 0x0d (float) at offset 2"});
}

TEST_F(IdxTest, AbsurdDimensionsRefusedBeforeAllocating) {
  const std::string path = WriteBytes(
      "huge", {0, 0, 8, 3, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff});
  ExpectDataError(
      [&] { ReadIdx(path); },
      {path + ": IDX dimensions 4294967295 x 4294967295 x 4294967295", "refusing to allocate"});
  const std::string just_over = WriteBytes("over", {0, 0, 8, 2, 0, 1, 0, 0, 0, 0, 0x80, 0x01});
  ExpectDataError([&] { ReadIdx(just_over); }, {"more than 2^31 elements"});
}

// Found by fuzz/idx_fuzz (fuzz/regressions/idx_fuzz/declared_2gib_no_data): a header within the
// element limit but with no data behind it made ReadIdx allocate (and zero) the whole declared
// size first -- 2 GiB for 8 bytes of file. The buffer now grows only with the data read.
TEST_F(IdxTest, DeclaredSizeWithoutDataIsNotAllocated) {
  const std::string path = WriteBytes("liar", {0, 0, 8, 1, 0x7f, 0xff, 0xff, 0xff, 1, 2, 3});
  rusage before{};
  getrusage(RUSAGE_SELF, &before);
  ExpectDataError([&] { ReadIdx(path); },
                  {path + ": truncated: expected 2147483647 bytes of data", "got 3 (offset 11)"});
  rusage after{};
  getrusage(RUSAGE_SELF, &after);
  // ru_maxrss is the peak resident size in KiB; reading 3 bytes must not raise it by 256 MiB.
  EXPECT_LT(after.ru_maxrss - before.ru_maxrss, 256 * 1024);
}

TEST_F(IdxTest, GzipGarbage) {
  const std::string path = WriteBytes(
      "garbage.gz", {0x1f, 0x8b, 0x08, 0,    0,    0,    0,    0,    0,    3,    0xde, 0xad,
                     0xbe, 0xef, 0xff, 0xff, 0x12, 0x34, 0x56, 0x78, 0x9a, 0xbc, 0xde, 0xf0});
  ExpectDataError(
      [&] { ReadIdx(path); },
      {path + ": corrupt gzip data near offset 0 of the decompressed data: invalid block type"});
}

TEST_F(IdxTest, CountMismatchNamesBothFiles) {
  WriteIdx(Path("img"), IdxArray{{3, 1, 2}, {1, 2, 3, 4, 5, 6}}, false);
  WriteIdx(Path("lab"), IdxArray{{2}, {0, 1}}, false);
  ExpectDataError([&] { LoadIdxDataset(Path("img"), Path("lab")); },
                  {Path("img") + " holds 3 images but " + Path("lab") + " holds 2 labels"});
}

TEST_F(IdxTest, WrongRanksAreNamed) {
  WriteIdx(Path("img"), IdxArray{{2, 1, 2}, {1, 2, 3, 4}}, false);
  WriteIdx(Path("lab"), IdxArray{{2}, {0, 1}}, false);
  ExpectDataError([&] { LoadIdxDataset(Path("lab"), Path("lab")); },
                  {Path("lab") + ": expected images of 3 dimensions", "got 2"});
  ExpectDataError([&] { LoadIdxDataset(Path("img"), Path("img")); },
                  {Path("img") + ": expected labels of 1 dimension", "got 2 x 1 x 2"});
}

TEST(Shard, CoversEveryExampleExactlyOnce) {
  for (int64_t count : {0, 1, 5, 7, 10, 100, 60000}) {
    IdxDataset d;
    d.count = count;
    d.rows = 1;
    d.cols = 2;
    d.num_classes = 3;
    for (int64_t i = 0; i < count; ++i) {
      d.images.push_back(static_cast<float>(i));
      d.images.push_back(static_cast<float>(-i));
      d.labels.push_back(static_cast<int32_t>(i % 3));
    }
    for (int size : {1, 2, 3, 4, 7, 16}) {
      std::vector<float> images;
      std::vector<int32_t> labels;
      int64_t smallest = count, largest = 0;
      for (int rank = 0; rank < size; ++rank) {
        const IdxDataset s = Shard(d, rank, size);
        EXPECT_EQ(s.rows, 1);
        EXPECT_EQ(s.cols, 2);
        EXPECT_EQ(s.num_classes, 3);
        ASSERT_EQ(s.images.size(), static_cast<size_t>(s.count * 2));
        ASSERT_EQ(s.labels.size(), static_cast<size_t>(s.count));
        smallest = std::min(smallest, s.count);
        largest = std::max(largest, s.count);
        images.insert(images.end(), s.images.begin(), s.images.end());
        labels.insert(labels.end(), s.labels.begin(), s.labels.end());
      }
      EXPECT_LE(largest - smallest, 1) << count << " / " << size;
      EXPECT_EQ(images, d.images) << count << " / " << size;
      EXPECT_EQ(labels, d.labels) << count << " / " << size;
    }
  }
}

TEST(Shard, RejectsBadRank) {
  const IdxDataset d = SyntheticDataset(4, 2, 2, 2, 1);
  EXPECT_THROW(Shard(d, 2, 2), std::invalid_argument);
  EXPECT_THROW(Shard(d, -1, 2), std::invalid_argument);
  EXPECT_THROW(Shard(d, 0, 0), std::invalid_argument);
}

TEST(Synthetic, DeterministicPerSeed) {
  const IdxDataset a = SyntheticDataset(50, 4, 5, 3, 42);
  const IdxDataset b = SyntheticDataset(50, 4, 5, 3, 42);
  const IdxDataset c = SyntheticDataset(50, 4, 5, 3, 43);
  EXPECT_EQ(a.images, b.images);
  EXPECT_EQ(a.labels, b.labels);
  EXPECT_NE(a.images, c.images);
  EXPECT_EQ(a.count, 50);
  EXPECT_EQ(a.rows, 4);
  EXPECT_EQ(a.cols, 5);
  EXPECT_EQ(a.num_classes, 3);
  ASSERT_EQ(a.images.size(), 50u * 20);
  for (float p : a.images) {
    EXPECT_GE(p, 0.f);
    EXPECT_LE(p, 1.f);
  }
  for (int32_t l : a.labels) {
    EXPECT_GE(l, 0);
    EXPECT_LT(l, 3);
  }
  EXPECT_THROW(SyntheticDataset(1, 0, 5, 3, 1), std::invalid_argument);
  EXPECT_THROW(SyntheticDataset(1, 5, 5, 0, 1), std::invalid_argument);
  EXPECT_THROW(SyntheticDataset(1, 5, 5, 257, 1), std::invalid_argument);
}

// Class means estimated on the first half classify the second half: the data is learnable.
TEST(Synthetic, LearnableByNearestMean) {
  const int classes = 10;
  const int64_t pixels = 8 * 8;
  const IdxDataset d = SyntheticDataset(2000, 8, 8, classes, 7);
  std::vector<double> mean(static_cast<size_t>(classes * pixels), 0.0);
  std::vector<int> seen(classes, 0);
  for (int64_t i = 0; i < 1000; ++i) {
    const int32_t l = d.labels[static_cast<size_t>(i)];
    ++seen[static_cast<size_t>(l)];
    for (int64_t p = 0; p < pixels; ++p) {
      mean[static_cast<size_t>(l * pixels + p)] += d.images[static_cast<size_t>(i * pixels + p)];
    }
  }
  for (int c = 0; c < classes; ++c) {
    ASSERT_GT(seen[static_cast<size_t>(c)], 0);
    for (int64_t p = 0; p < pixels; ++p) {
      mean[static_cast<size_t>(c * pixels + p)] /= seen[static_cast<size_t>(c)];
    }
  }
  int correct = 0;
  for (int64_t i = 1000; i < 2000; ++i) {
    int best = -1;
    double best_dist = 0;
    for (int c = 0; c < classes; ++c) {
      double dist = 0;
      for (int64_t p = 0; p < pixels; ++p) {
        const double diff = d.images[static_cast<size_t>(i * pixels + p)] -
                            mean[static_cast<size_t>(c * pixels + p)];
        dist += diff * diff;
      }
      if (best < 0 || dist < best_dist) {
        best = c;
        best_dist = dist;
      }
    }
    correct += best == d.labels[static_cast<size_t>(i)];
  }
  EXPECT_GT(correct, 950);
}

TEST(FashionMnist, LoadsTrainAndTest) {
  const std::string dir = DefaultFashionMnistDir();
  if (!fs::exists(dir)) {
    GTEST_SKIP() << dir << " is absent; apt-get install dataset-fashion-mnist to run this test";
  }
  const IdxDataset train = FashionMnistTrain(dir);
  const IdxDataset test = FashionMnistTest(dir);
  for (const IdxDataset* d : {&train, &test}) {
    EXPECT_EQ(d->rows, 28);
    EXPECT_EQ(d->cols, 28);
    EXPECT_EQ(d->num_classes, 10);
    ASSERT_EQ(d->images.size(), static_cast<size_t>(d->count * 28 * 28));
    ASSERT_EQ(d->labels.size(), static_cast<size_t>(d->count));
    const auto [lo, hi] = std::minmax_element(d->images.begin(), d->images.end());
    EXPECT_EQ(*lo, 0.f);
    EXPECT_EQ(*hi, 1.f);
    // Fashion-MNIST is balanced: every class holds a tenth of each split.
    std::vector<int64_t> per_class(10, 0);
    for (int32_t l : d->labels) {
      ASSERT_GE(l, 0);
      ASSERT_LT(l, 10);
      ++per_class[static_cast<size_t>(l)];
    }
    for (int64_t n : per_class) EXPECT_EQ(n, d->count / 10);
  }
  EXPECT_EQ(train.count, 60000);
  EXPECT_EQ(test.count, 10000);
}

}  // namespace
}  // namespace poseidon::kernels
