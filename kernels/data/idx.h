// kernels/data/idx.h: reading IDX datasets (MNIST, Fashion-MNIST), sharding them across workers,
// and a seeded synthetic stand-in for tests.
//
// IDX is LeCun's format: two zero bytes, an element-type byte, a dimension-count byte, one
// big-endian uint32 per dimension, then the elements in row-major order. Files may be gzipped
// (as Debian's dataset-fashion-mnist ships them) or plain; the reader sniffs which. Only element
// type 0x08 (unsigned byte) is supported: it is what every image and label file we use holds.
//
//   auto train = kernels::FashionMnistTrain();            // 60000 x 28 x 28, labels 0..9
//   auto mine = kernels::Shard(train, /*rank=*/1, /*size=*/4);
//   float first_pixel = mine.images[0];                   // in [0, 1]
//
// Every malformed input throws DataError naming the file and the byte offset (in the
// decompressed stream for gzipped files) where reading went wrong. Nothing here keeps state
// between calls; all functions are safe to call concurrently.
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

namespace poseidon::kernels {

// A dataset file that is missing, malformed or inconsistent with its partner file.
class DataError : public std::runtime_error {
 public:
  explicit DataError(const std::string& msg) : std::runtime_error(msg) {}
};

// The raw contents of one IDX file of unsigned bytes.
struct IdxArray {
  std::vector<int64_t> dims;  // outermost first, e.g. {60000, 28, 28}
  std::vector<uint8_t> data;  // product(dims) bytes, row-major
};

// Images and their labels, example i being images[i*rows*cols, (i+1)*rows*cols) and labels[i].
struct IdxDataset {
  int64_t count = 0, rows = 0, cols = 0;
  std::vector<float> images;    // count*rows*cols values, pixel/255, so in [0, 1]
  std::vector<int32_t> labels;  // count values in [0, num_classes)
  // 1 + the largest label of the whole dataset (kept, not recomputed, by Shard so that every
  // shard agrees on the width of the classifier); 0 when the dataset is empty.
  int32_t num_classes = 0;
};

// Files larger than this many elements are refused before anything is allocated.
inline constexpr int64_t kMaxIdxElements = int64_t{1} << 31;

// Reads one IDX file (gzipped or plain). Throws DataError.
IdxArray ReadIdx(const std::string& path);
// Writes `array` as IDX, gzipped when `gzip` is true (for tests and for cutting subsets).
// Throws DataError when dims do not match data or the file cannot be written.
void WriteIdx(const std::string& path, const IdxArray& array, bool gzip);

// Reads an image file of dims {count, rows, cols} and a label file of dims {count}.
IdxDataset LoadIdxDataset(const std::string& images_path, const std::string& labels_path);

// The rank-th of `size` contiguous shards: shard sizes differ by at most one and every example
// lies in exactly one shard (the first count % size shards get one extra). Throws
// std::invalid_argument unless 0 <= rank < size.
IdxDataset Shard(const IdxDataset& data, int rank, int size);

// A learnable dataset for tests: each class has a fixed random pattern of dark (0.2) and bright
// (0.8) pixels, and each example is its class's pattern plus uniform noise in [-0.25, 0.25],
// with labels drawn uniformly. Same arguments give identical bytes on every platform (own
// generator, no std:: distributions). Throws std::invalid_argument on negative count,
// non-positive rows/cols, classes outside 1..256, or more than kMaxIdxElements pixels.
IdxDataset SyntheticDataset(int64_t count, int64_t rows, int64_t cols, int classes, uint64_t seed);

// Where Debian's dataset-fashion-mnist package installs the files.
std::string DefaultFashionMnistDir();
// dir/train-images-idx3-ubyte.gz + dir/train-labels-idx1-ubyte.gz (60000 examples).
IdxDataset FashionMnistTrain(const std::string& dir = DefaultFashionMnistDir());
// dir/t10k-images-idx3-ubyte.gz + dir/t10k-labels-idx1-ubyte.gz (10000 examples).
IdxDataset FashionMnistTest(const std::string& dir = DefaultFashionMnistDir());

}  // namespace poseidon::kernels
