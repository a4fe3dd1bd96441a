#include "kernels/data/idx.h"

#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <memory>
#include <stdexcept>

namespace poseidon::kernels {
namespace {

constexpr uint8_t kUnsignedByte = 0x08;

std::string Hex(uint64_t v, int digits) {
  char buf[24];
  std::snprintf(buf, sizeof buf, "0x%0*llx", digits, static_cast<unsigned long long>(v));
  return buf;
}

const char* IdxTypeName(uint8_t type) {
  switch (type) {
    case 0x08:
      return "unsigned byte";
    case 0x09:
      return "signed byte";
    case 0x0B:
      return "short";
    case 0x0C:
      return "int";
    case 0x0D:
      return "float";
    case 0x0E:
      return "double";
    default:
      return "not an IDX element type";
  }
}

std::string DimsToString(const std::vector<int64_t>& dims) {
  std::string s;
  for (size_t i = 0; i < dims.size(); ++i) s += (i ? " x " : "") + std::to_string(dims[i]);
  return s;
}

// Product of dims, or -1 when it overflows or exceeds kMaxIdxElements.
int64_t CheckedCount(const std::vector<int64_t>& dims) {
  int64_t n = 1;
  for (int64_t d : dims) {
    if (d < 0) return -1;
    if (d != 0 && n > kMaxIdxElements / d) return -1;
    n *= d;
  }
  return n;
}

struct GzClose {
  void operator()(gzFile_s* f) const { gzclose(f); }
};

// Sequential reads through zlib, which passes plain (non-gzip) files through unchanged. Tracks
// the offset in the (decompressed) stream so that every error can say where it happened.
class GzReader {
 public:
  explicit GzReader(const std::string& path) : path_(path) {
    errno = 0;
    file_.reset(gzopen(path.c_str(), "rb"));
    if (!file_) {
      const int err = errno;
      throw DataError(path + ": cannot open: " + (err ? std::strerror(err) : "out of memory") +
                      "; is the dataset installed? (apt-get install dataset-fashion-mnist)");
    }
    gzbuffer(file_.get(), 1 << 17);
  }

  // Reads up to n bytes into dst and returns how many were read: fewer only at the end of the
  // data. Throws DataError on read errors and corrupt gzip data.
  int64_t Read(uint8_t* dst, int64_t n) {
    int64_t got = 0;
    while (got < n) {
      const auto chunk = static_cast<unsigned>(std::min<int64_t>(n - got, 1 << 20));
      const int r = gzread(file_.get(), dst + got, chunk);
      if (r <= 0) {
        offset_ += got;
        ThrowIfError();
        if (r < 0) throw DataError(path_ + ": read error at " + Where(offset_));
        return got;
      }
      got += r;
    }
    offset_ += got;
    return got;
  }

  // "offset X" for plain files, "offset X of the decompressed data" for gzipped ones.
  std::string Where(int64_t offset) {
    return "offset " + std::to_string(offset) +
           (gzdirect(file_.get()) ? "" : " of the decompressed data");
  }

  // After a short read: " (the gzip stream is cut short)" when zlib saw the end of a
  // compressed file before the end of its stream, "" otherwise.
  std::string ShortReadNote() {
    int errnum = Z_OK;
    gzerror(file_.get(), &errnum);
    return errnum == Z_BUF_ERROR ? " (the gzip stream is cut short)" : "";
  }

  int64_t offset() const { return offset_; }

 private:
  void ThrowIfError() {
    int errnum = Z_OK;
    const char* msg = gzerror(file_.get(), &errnum);
    if (errnum == Z_OK || errnum == Z_BUF_ERROR) return;  // Z_BUF_ERROR: truncated, reported later
    std::string what = errnum == Z_ERRNO ? std::strerror(errno) : msg;
    // zlib prefixes its messages with the path, which ours already starts with.
    if (what.rfind(path_ + ": ", 0) == 0) what.erase(0, path_.size() + 2);
    throw DataError(path_ + ": " + (errnum == Z_ERRNO ? "read error" : "corrupt gzip data") +
                    " near " + Where(offset_) + ": " + what);
  }

  std::string path_;
  std::unique_ptr<gzFile_s, GzClose> file_;
  int64_t offset_ = 0;
};

}  // namespace

IdxArray ReadIdx(const std::string& path) {
  GzReader in(path);
  uint8_t head[4];
  const int64_t got_head = in.Read(head, 4);
  if (got_head >= 2 && (head[0] != 0 || head[1] != 0)) {
    uint64_t magic = 0;
    for (int64_t i = 0; i < got_head; ++i) magic = magic << 8 | head[i];
    throw DataError(path + ": not an IDX file (magic " +
                    Hex(magic, 2 * static_cast<int>(got_head)) + " at offset 0)");
  }
  if (got_head < 4) {
    throw DataError(path + ": truncated header: expected 4 bytes of magic number, got " +
                    std::to_string(got_head) + " (" + in.Where(got_head) + ")" +
                    in.ShortReadNote());
  }
  if (head[2] != kUnsignedByte) {
    throw DataError(path + ": unsupported IDX element type " + Hex(head[2], 2) + " (" +
                    IdxTypeName(head[2]) + ") at offset 2; only 0x08 (unsigned byte) is supported");
  }
  const int ndims = head[3];
  if (ndims == 0) {
    throw DataError(path + ": IDX header declares 0 dimensions at offset 3 (expected 1 or more)");
  }

  std::vector<uint8_t> raw_dims(4 * static_cast<size_t>(ndims));
  const int64_t got_dims = in.Read(raw_dims.data(), static_cast<int64_t>(raw_dims.size()));
  if (got_dims < static_cast<int64_t>(raw_dims.size())) {
    throw DataError(path + ": truncated header: expected " + std::to_string(raw_dims.size()) +
                    " bytes of dimension sizes after offset 4, got " + std::to_string(got_dims) +
                    " (" + in.Where(in.offset()) + ")" + in.ShortReadNote());
  }
  IdxArray out;
  for (int i = 0; i < ndims; ++i) {
    const uint8_t* b = &raw_dims[4 * static_cast<size_t>(i)];
    out.dims.push_back(int64_t{b[0]} << 24 | int64_t{b[1]} << 16 | int64_t{b[2]} << 8 | b[3]);
  }
  const int64_t header_bytes = in.offset();
  const int64_t count = CheckedCount(out.dims);
  if (count < 0) {
    throw DataError(path + ": IDX dimensions " + DimsToString(out.dims) +
                    " (offset 4) hold more than 2^31 elements; refusing to allocate");
  }

  // The buffer grows with the bytes actually read, never ahead of them by more than a doubling:
  // a 16-byte header that declares 2^31 elements must not make us allocate 2 GiB before the
  // (missing) data proves it (found by fuzz/idx_fuzz; see fuzz/regressions/idx_fuzz/).
  int64_t got_data = 0;
  while (got_data < count) {
    const int64_t want = std::min(count, std::max<int64_t>(got_data * 2, int64_t{1} << 20));
    out.data.resize(static_cast<size_t>(want));
    const int64_t n = in.Read(out.data.data() + got_data, want - got_data);
    got_data += n;
    if (got_data < want) break;
  }
  out.data.resize(static_cast<size_t>(got_data));
  if (got_data < count) {
    throw DataError(path + ": truncated: expected " + std::to_string(count) +
                    " bytes of data after the header (dimensions " + DimsToString(out.dims) +
                    "), got " + std::to_string(got_data) + " (" + in.Where(in.offset()) + ")" +
                    in.ShortReadNote());
  }
  uint8_t extra = 0;
  if (in.Read(&extra, 1) != 0) {
    throw DataError(path + ": unexpected bytes after the data (" + in.Where(header_bytes + count) +
                    "): the file is longer than its dimensions " + DimsToString(out.dims) +
                    " declare");
  }
  return out;
}

void WriteIdx(const std::string& path, const IdxArray& array, bool gzip) {
  if (array.dims.empty() || array.dims.size() > 255) {
    throw DataError(path + ": cannot write an IDX file with " + std::to_string(array.dims.size()) +
                    " dimensions (expected 1 to 255)");
  }
  for (int64_t d : array.dims) {
    if (d < 0 || d > int64_t{0xFFFFFFFF}) {
      throw DataError(path + ": dimension " + std::to_string(d) + " does not fit IDX's uint32");
    }
  }
  if (CheckedCount(array.dims) != static_cast<int64_t>(array.data.size())) {
    throw DataError(path + ": dimensions " + DimsToString(array.dims) + " do not match the " +
                    std::to_string(array.data.size()) + " bytes of data");
  }
  std::vector<uint8_t> bytes = {0, 0, kUnsignedByte, static_cast<uint8_t>(array.dims.size())};
  for (int64_t d : array.dims) {
    for (int shift = 24; shift >= 0; shift -= 8) bytes.push_back(static_cast<uint8_t>(d >> shift));
  }
  bytes.insert(bytes.end(), array.data.begin(), array.data.end());

  errno = 0;
  // "T": zlib writes the bytes through uncompressed.
  gzFile f = gzopen(path.c_str(), gzip ? "wb" : "wbT");
  if (f == nullptr) {
    const int err = errno;
    throw DataError(path +
                    ": cannot open for writing: " + (err ? std::strerror(err) : "out of memory"));
  }
  size_t done = 0;
  bool ok = true;
  while (ok && done < bytes.size()) {
    const auto chunk = static_cast<unsigned>(std::min<size_t>(bytes.size() - done, 1 << 20));
    ok = gzwrite(f, bytes.data() + done, chunk) == static_cast<int>(chunk);
    done += chunk;
  }
  if (gzclose(f) != Z_OK || !ok) throw DataError(path + ": write failed");
}

IdxDataset LoadIdxDataset(const std::string& images_path, const std::string& labels_path) {
  IdxArray images = ReadIdx(images_path);
  if (images.dims.size() != 3) {
    throw DataError(images_path + ": expected images of 3 dimensions (count x rows x cols), got " +
                    DimsToString(images.dims));
  }
  IdxArray labels = ReadIdx(labels_path);
  if (labels.dims.size() != 1) {
    throw DataError(labels_path + ": expected labels of 1 dimension (count), got " +
                    DimsToString(labels.dims));
  }
  if (images.dims[0] != labels.dims[0]) {
    throw DataError(images_path + " holds " + std::to_string(images.dims[0]) + " images but " +
                    labels_path + " holds " + std::to_string(labels.dims[0]) +
                    " labels; they must be a matching pair");
  }
  IdxDataset out;
  out.count = images.dims[0];
  out.rows = images.dims[1];
  out.cols = images.dims[2];
  out.images.resize(images.data.size());
  std::transform(images.data.begin(), images.data.end(), out.images.begin(),
                 [](uint8_t p) { return static_cast<float>(p) / 255.f; });
  out.labels.assign(labels.data.begin(), labels.data.end());
  for (int32_t l : out.labels) out.num_classes = std::max(out.num_classes, l + 1);
  return out;
}

IdxDataset Shard(const IdxDataset& data, int rank, int size) {
  if (size < 1 || rank < 0 || rank >= size) {
    throw std::invalid_argument("Shard: rank " + std::to_string(rank) + " of " +
                                std::to_string(size) + " (expected 0 <= rank < size)");
  }
  const int64_t base = data.count / size, extra = data.count % size;
  const int64_t begin = rank * base + std::min<int64_t>(rank, extra);
  const int64_t n = base + (rank < extra ? 1 : 0);
  const int64_t pixels = data.rows * data.cols;
  IdxDataset out;
  out.count = n;
  out.rows = data.rows;
  out.cols = data.cols;
  out.num_classes = data.num_classes;
  out.images.assign(data.images.begin() + begin * pixels,
                    data.images.begin() + (begin + n) * pixels);
  out.labels.assign(data.labels.begin() + begin, data.labels.begin() + begin + n);
  return out;
}

IdxDataset SyntheticDataset(int64_t count, int64_t rows, int64_t cols, int classes, uint64_t seed) {
  if (count < 0 || rows < 1 || cols < 1 || classes < 1 || classes > 256 ||
      CheckedCount({count, rows, cols}) < 0 || CheckedCount({classes, rows, cols}) < 0) {
    throw std::invalid_argument("SyntheticDataset: count " + std::to_string(count) + ", rows " +
                                std::to_string(rows) + ", cols " + std::to_string(cols) +
                                ", classes " + std::to_string(classes) +
                                " (expected count >= 0, rows and cols >= 1, classes 1..256, at "
                                "most 2^31 pixels)");
  }
  // splitmix64: fully specified, unlike std:: distributions, so the bytes match everywhere.
  uint64_t state = seed;
  auto next = [&state] {
    uint64_t z = (state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  };
  auto uniform01 = [&next] { return static_cast<float>(next() >> 40) * (1.f / (1 << 24)); };

  const int64_t pixels = rows * cols;
  std::vector<float> patterns(static_cast<size_t>(classes * pixels));
  for (float& p : patterns) p = (next() & 1) ? 0.8f : 0.2f;

  IdxDataset out;
  out.count = count;
  out.rows = rows;
  out.cols = cols;
  out.num_classes = count > 0 ? classes : 0;
  out.images.resize(static_cast<size_t>(count * pixels));
  out.labels.resize(static_cast<size_t>(count));
  for (int64_t i = 0; i < count; ++i) {
    const auto label = static_cast<int32_t>(next() % static_cast<uint64_t>(classes));
    out.labels[static_cast<size_t>(i)] = label;
    const float* mean = &patterns[static_cast<size_t>(label * pixels)];
    float* image = &out.images[static_cast<size_t>(i * pixels)];
    for (int64_t p = 0; p < pixels; ++p) {
      image[p] = std::clamp(mean[p] + (uniform01() - 0.5f) * 0.5f, 0.f, 1.f);
    }
  }
  return out;
}

std::string DefaultFashionMnistDir() { return "/usr/share/datasets/fashion-mnist"; }

IdxDataset FashionMnistTrain(const std::string& dir) {
  return LoadIdxDataset(dir + "/train-images-idx3-ubyte.gz", dir + "/train-labels-idx1-ubyte.gz");
}

IdxDataset FashionMnistTest(const std::string& dir) {
  return LoadIdxDataset(dir + "/t10k-images-idx3-ubyte.gz", dir + "/t10k-labels-idx1-ubyte.gz");
}

}  // namespace poseidon::kernels
