// kernels/checkpoint.cc: the checkpoint folder (kernels/checkpoint.h): .npy files, the JSON index
// (written here and read back by a small parser of our own: kernels links no JSON or YAML
// library), durable writes and the checks on reading.
#include "kernels/checkpoint.h"

#include <fcntl.h>
#include <unistd.h>
#include <zlib.h>

#include <bit>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <memory>
#include <optional>
#include <set>

#include <fmt/format.h>

namespace poseidon::kernels {
namespace {

namespace fs = std::filesystem;
static_assert(std::endian::native == std::endian::little,
              "the checkpoint writes float32 little-endian by copying memory");

uint32_t Crc32(const std::string& b) {
  uLong c = crc32(0L, Z_NULL, 0);
  size_t off = 0;
  while (off < b.size()) {  // crc32 takes a uInt length
    const size_t n = std::min<size_t>(b.size() - off, 1u << 30);
    c = crc32(c, reinterpret_cast<const Bytef*>(b.data() + off), static_cast<uInt>(n));
    off += n;
  }
  return static_cast<uint32_t>(c);
}

std::string ShapeText(const std::vector<int64_t>& s) {
  std::string t = "[";
  for (size_t i = 0; i < s.size(); ++i) t += (i ? ", " : "") + std::to_string(s[i]);
  return t + "]";
}

// ---- JSON: what the index needs (objects, arrays, strings, numbers, booleans, null) ----------

struct Json {
  enum Kind { kNull, kBool, kNumber, kString, kArray, kObject } kind = kNull;
  bool b = false;
  std::string text;  // number as written, or the string's value
  std::vector<Json> items;
  std::vector<std::pair<std::string, Json>> fields;
  int line = 0, col = 0;  // where the value starts
};

class JsonParser {
 public:
  JsonParser(const std::string& s, const std::string& path) : s_(s), path_(path) {}
  Json Parse() {
    Json v = Value(0);
    Space();
    if (i_ != s_.size()) Fail("unexpected text after the index's closing brace");
    return v;
  }

 private:
  [[noreturn]] void Fail(const std::string& what) const {
    throw CheckpointError(fmt::format("{}:{}:{}: error: {} (not a valid index.json: write the "
                                      "checkpoint again, or pass another folder)",
                                      path_, line_, col_, what));
  }
  void Space() {
    while (i_ < s_.size() && (s_[i_] == ' ' || s_[i_] == '\t' || s_[i_] == '\n' || s_[i_] == '\r')) {
      Advance();
    }
  }
  void Advance() {
    if (s_[i_] == '\n') {
      ++line_;
      col_ = 1;
    } else {
      ++col_;
    }
    ++i_;
  }
  bool Eat(char c) {
    Space();
    if (i_ < s_.size() && s_[i_] == c) {
      Advance();
      return true;
    }
    return false;
  }
  void Expect(char c) {
    if (!Eat(c)) Fail(fmt::format("expected '{}'", c));
  }
  Json Value(int depth) {
    if (depth > 16) Fail("nested too deep");
    Space();
    Json v;
    v.line = line_;
    v.col = col_;
    if (i_ >= s_.size()) Fail("unexpected end of the file (truncated?)");
    const char c = s_[i_];
    if (c == '{') {
      Advance();
      v.kind = Json::kObject;
      if (Eat('}')) return v;
      do {
        Space();
        if (i_ >= s_.size() || s_[i_] != '"') Fail("expected a quoted key");
        std::string key = String();
        Expect(':');
        v.fields.emplace_back(std::move(key), Value(depth + 1));
      } while (Eat(','));
      Expect('}');
    } else if (c == '[') {
      Advance();
      v.kind = Json::kArray;
      if (Eat(']')) return v;
      do {
        v.items.push_back(Value(depth + 1));
      } while (Eat(','));
      Expect(']');
    } else if (c == '"') {
      v.kind = Json::kString;
      v.text = String();
    } else if (s_.compare(i_, 4, "true") == 0 || s_.compare(i_, 5, "false") == 0) {
      v.kind = Json::kBool;
      v.b = s_[i_] == 't';
      for (int k = v.b ? 4 : 5; k > 0; --k) Advance();
    } else if (s_.compare(i_, 4, "null") == 0) {
      for (int k = 0; k < 4; ++k) Advance();
    } else if (c == '-' || (c >= '0' && c <= '9')) {
      v.kind = Json::kNumber;
      while (i_ < s_.size() && std::strchr("+-0123456789.eE", s_[i_]) != nullptr) {
        v.text += s_[i_];
        Advance();
      }
    } else {
      Fail(fmt::format("unexpected character '{}'", c));
    }
    return v;
  }
  std::string String() {
    Advance();  // the opening quote
    std::string out;
    while (true) {
      if (i_ >= s_.size()) Fail("unterminated string (truncated?)");
      const char c = s_[i_];
      if (c == '"') {
        Advance();
        return out;
      }
      if (static_cast<unsigned char>(c) < 0x20) Fail("control character in a string");
      if (c == '\\') {
        Advance();
        if (i_ >= s_.size()) Fail("unterminated string");
        const char e = s_[i_];
        const char* from = "\"\\/bfnrt";
        const char* to = "\"\\/\b\f\n\r\t";
        const char* at = std::strchr(from, e);
        if (e == 'u' || at == nullptr) Fail("unsupported escape in a string");
        out += to[at - from];
      } else {
        out += c;
      }
      Advance();
    }
  }

  const std::string& s_;
  const std::string& path_;
  size_t i_ = 0;
  int line_ = 1, col_ = 1;
};

std::string JsonString(const std::string& s) {
  std::string o = "\"";
  for (const char c : s) {
    if (c == '"' || c == '\\') {
      o += '\\';
      o += c;
    } else if (c == '\n') {
      o += "\\n";
    } else if (static_cast<unsigned char>(c) < 0x20) {
      o += ' ';
    } else {
      o += c;
    }
  }
  return o + "\"";
}

// Typed access to the index, every error located.
class IndexReader {
 public:
  explicit IndexReader(std::string path) : path_(std::move(path)) {}
  [[noreturn]] void Fail(const Json& at, const std::string& what) const {
    throw CheckpointError(fmt::format("{}:{}:{}: error: {}", path_, at.line, at.col, what));
  }
  const Json& Field(const Json& obj, const std::string& key) const {
    if (obj.kind != Json::kObject) Fail(obj, "expected an object");
    for (const auto& [k, v] : obj.fields) {
      if (k == key) return v;
    }
    Fail(obj, fmt::format("'{}' is missing (write the checkpoint again)", key));
  }
  const Json* Maybe(const Json& obj, const std::string& key) const {
    for (const auto& [k, v] : obj.fields) {
      if (k == key) return &v;
    }
    return nullptr;
  }
  std::string Str(const Json& obj, const std::string& key) const {
    const Json& v = Field(obj, key);
    if (v.kind != Json::kString) Fail(v, fmt::format("'{}' must be a string", key));
    return v.text;
  }
  double Num(const Json& v, const std::string& key) const {
    if (v.kind != Json::kNumber) Fail(v, fmt::format("'{}' must be a number", key));
    char* end = nullptr;
    const double d = std::strtod(v.text.c_str(), &end);
    if (end == v.text.c_str() || *end != '\0') Fail(v, fmt::format("'{}': bad number", key));
    return d;
  }
  double Dbl(const Json& obj, const std::string& key) const { return Num(Field(obj, key), key); }
  int64_t IntOf(const Json& v, const std::string& key) const {
    if (v.kind != Json::kNumber || v.text.find_first_of(".eE") != std::string::npos) {
      Fail(v, fmt::format("'{}' must be an integer", key));
    }
    errno = 0;
    char* end = nullptr;
    const long long x = std::strtoll(v.text.c_str(), &end, 10);
    if (errno != 0 || *end != '\0') Fail(v, fmt::format("'{}': bad integer", key));
    return x;
  }
  int64_t Int(const Json& obj, const std::string& key) const { return IntOf(Field(obj, key), key); }
  uint64_t U64(const Json& obj, const std::string& key) const {
    const Json& v = Field(obj, key);
    if (v.kind != Json::kNumber || v.text.find_first_not_of("0123456789") != std::string::npos) {
      Fail(v, fmt::format("'{}' must be a non-negative integer", key));
    }
    errno = 0;
    const unsigned long long x = std::strtoull(v.text.c_str(), nullptr, 10);
    if (errno != 0) Fail(v, fmt::format("'{}': bad integer", key));
    return x;
  }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

// ---- files ------------------------------------------------------------------------------------

std::optional<std::string> ReadFile(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) return std::nullopt;
  std::string b((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  if (f.bad()) return std::nullopt;
  return b;
}

std::string WriteAdvice(int e, const std::string& dir) {
  if (e == ENOSPC || e == EDQUOT) return "free space on the disk of " + dir + " or give another folder";
  if (e == EROFS) return "remount " + dir + " read-write or give another folder";
  if (e == EACCES || e == EPERM) return "give this process write permission to " + dir;
  return "check the folder " + dir;
}

// Writes `bytes` to `path` and fsyncs it. The atomic rename lives in the caller: inside a new
// iter-N folder nothing needs one (index.json is the commit point). real_runtime/atomic_file.h
// does the same for the live runtime's files; kernels/ may not depend on real_runtime/.
void WriteDurably(const std::string& path, const std::string& bytes, const std::string& dir) {
  auto fail = [&](const char* what) {
    const int e = errno;
    throw CheckpointError(fmt::format("{}: error: {}: {}; {}", path, what, std::strerror(e),
                                      WriteAdvice(e, dir)));
  };
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) fail("cannot create the checkpoint file");
  size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      if (n == 0) errno = ENOSPC;
      const int e = errno;
      ::close(fd);
      errno = e;
      fail("cannot write the checkpoint file");
    }
    done += static_cast<size_t>(n);
  }
  if (::fsync(fd) != 0) {
    const int e = errno;
    ::close(fd);
    errno = e;
    fail("fsync failed");
  }
  if (::close(fd) != 0) fail("close failed");
}

void SyncDir(const std::string& dir) {
  const int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd >= 0) {
    ::fsync(dfd);
    ::close(dfd);
  }
}

// Our own names in a checkpoint folder: iter-N folders (the "-K" suffix when iter-N is the
// committed one) and the index's temporary file. Nothing else is ever removed.
bool IsIterFolder(const std::string& name) {
  return name.size() > 5 && name.compare(0, 5, "iter-") == 0 &&
         name.find_first_not_of("0123456789-", 5) == std::string::npos;
}

std::string BlobFileName(const std::string& blob) {
  std::string f = blob;
  for (char& c : f) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                    c == '.' || c == '_' || c == '-';
    if (!ok) c = '_';
  }
  return f + ".npy";
}

struct BlobSpec {
  const core::Layer* layer;
  const core::ParamBlob* blob;
  int64_t offset;
};

std::vector<BlobSpec> Blobs(const core::Model& model) {
  std::vector<BlobSpec> out;
  int64_t off = 0;
  for (int id : model.param_layers()) {
    const core::Layer& l = model.layers()[static_cast<size_t>(id)];
    for (const core::ParamBlob& b : l.blobs) {
      out.push_back({&l, &b, off});
      off += b.count;
    }
  }
  return out;
}

// The index's training section, as JSON lines.
std::string TrainingJson(const CheckpointTraining& t) {
  const SgdOptions& s = t.sgd;
  return fmt::format(
      "  \"training\": {{\"written_by\": {}, \"backend\": {}, \"batch\": {}, \"workers\": {}, "
      "\"seed\": {}, \"iterations\": {},\n"
      "               \"lr\": {}, \"momentum\": {}, \"weight_decay\": {}, \"lr_policy\": {}, "
      "\"gamma\": {}, \"stepsize\": {}, \"power\": {}, \"max_iter\": {}}},\n",
      JsonString(t.written_by), JsonString(t.backend), t.batch, t.workers, t.seed, t.iterations,
      s.base_lr, s.momentum, s.weight_decay, JsonString(LrPolicyName(s.policy)), s.gamma,
      s.stepsize, s.power, s.max_iter);
}

CheckpointTraining ParseTraining(const IndexReader& r, const Json& t) {
  CheckpointTraining o;
  o.written_by = r.Str(t, "written_by");
  o.backend = r.Str(t, "backend");
  o.batch = r.Int(t, "batch");
  o.workers = r.Int(t, "workers");
  o.seed = r.U64(t, "seed");
  o.iterations = r.Int(t, "iterations");
  o.sgd.base_lr = r.Dbl(t, "lr");
  o.sgd.momentum = r.Dbl(t, "momentum");
  o.sgd.weight_decay = r.Dbl(t, "weight_decay");
  const Json& policy = r.Field(t, "lr_policy");
  if (policy.kind != Json::kString || !LrPolicyFromName(policy.text, &o.sgd.policy)) {
    r.Fail(policy, "'lr_policy' must be one of " + KnownLrPolicies());
  }
  o.sgd.gamma = r.Dbl(t, "gamma");
  o.sgd.stepsize = r.Int(t, "stepsize");
  o.sgd.power = r.Dbl(t, "power");
  o.sgd.max_iter = r.Int(t, "max_iter");
  return o;
}

struct IndexBlob {
  std::string name, layer, file, momentum_file;
  std::vector<int64_t> shape;
  uint32_t crc = 0, momentum_crc = 0;
  const Json* at = nullptr;
};

struct ParsedIndex {
  Checkpoint c;  // model, iteration, training
  std::vector<IndexBlob> blobs;
  std::string state_file;
  uint32_t state_crc = 0;
  Json root;
};

ParsedIndex ParseIndex(const std::string& dir) {
  const std::string path = (fs::path(dir) / "index.json").string();
  const std::optional<std::string> text = ReadFile(path);
  if (!text) {
    throw CheckpointError(fmt::format(
        "{}: error: no checkpoint index here ({}); pass the folder a 'poseidon train --save' or "
        "'launch --save' wrote",
        path, fs::exists(dir) ? "the folder has no readable index.json" : "no such folder"));
  }
  ParsedIndex p;
  p.root = JsonParser(*text, path).Parse();
  IndexReader r(path);
  const Json& root = p.root;
  if (root.kind != Json::kObject) r.Fail(root, "the index must be a JSON object");
  if (r.Str(root, "format") != "poseidon-checkpoint") {
    r.Fail(r.Field(root, "format"), "'format' is not \"poseidon-checkpoint\"");
  }
  const int64_t version = r.Int(root, "format_version");
  if (version != kCheckpointFormatVersion) {
    r.Fail(r.Field(root, "format_version"),
           fmt::format("format_version {} is not the {} this poseidon reads{}", version,
                       kCheckpointFormatVersion,
                       version > kCheckpointFormatVersion ? "; use a newer poseidon" : ""));
  }
  p.c.model = r.Str(root, "model");
  p.c.iteration = r.Int(root, "iteration");
  if (p.c.iteration < 0) r.Fail(r.Field(root, "iteration"), "'iteration' must not be negative");
  p.c.training = ParseTraining(r, r.Field(root, "training"));
  if (const Json* s = r.Maybe(root, "state_file"); s != nullptr && s->kind == Json::kString) {
    p.state_file = s->text;
    p.state_crc = static_cast<uint32_t>(r.U64(root, "state_crc32"));
  }
  const Json& blobs = r.Field(root, "blobs");
  if (blobs.kind != Json::kArray) r.Fail(blobs, "'blobs' must be an array");
  for (const Json& b : blobs.items) {
    IndexBlob ib;
    ib.at = &b;
    ib.name = r.Str(b, "name");
    ib.layer = r.Str(b, "layer");
    ib.file = r.Str(b, "file");
    ib.crc = static_cast<uint32_t>(r.U64(b, "crc32"));
    const Json& shape = r.Field(b, "shape");
    if (shape.kind != Json::kArray) r.Fail(shape, "'shape' must be an array");
    for (const Json& d : shape.items) ib.shape.push_back(r.IntOf(d, "shape"));
    if (const Json* m = r.Maybe(b, "momentum_file"); m != nullptr && m->kind == Json::kString) {
      ib.momentum_file = m->text;
      ib.momentum_crc = static_cast<uint32_t>(r.U64(b, "momentum_crc32"));
    }
    p.blobs.push_back(std::move(ib));
  }
  return p;
}

// The file an index entry names, inside `dir` only (no absolute paths, no "..").
std::string Inside(const std::string& dir, const std::string& rel, const IndexReader& r,
                   const Json& at) {
  const fs::path p(rel);
  if (rel.empty() || p.is_absolute()) r.Fail(at, "file '" + rel + "' must be relative");
  for (const fs::path& part : p) {
    if (part == "..") r.Fail(at, "file '" + rel + "' must stay inside the checkpoint folder");
  }
  return (fs::path(dir) / p).string();
}

std::vector<float> ReadBlobFile(const std::string& path, uint32_t crc,
                                const std::vector<int64_t>& shape, const std::string& blob) {
  const std::optional<std::string> bytes = ReadFile(path);
  if (!bytes) {
    throw CheckpointError(fmt::format(
        "{}: error: cannot read blob '{}' of the checkpoint (missing?); write the checkpoint "
        "again",
        path, blob));
  }
  std::vector<int64_t> got;
  std::vector<float> v = DecodeNpy(*bytes, path, &got);
  if (got != shape) {
    throw CheckpointError(fmt::format("{}: error: blob '{}' has shape {} but the index says {}",
                                      path, blob, ShapeText(got), ShapeText(shape)));
  }
  if (Crc32(*bytes) != crc) {
    throw CheckpointError(fmt::format(
        "{}: error: blob '{}' fails its CRC-32 check (the file changed or is corrupt); write "
        "the checkpoint again",
        path, blob));
  }
  return v;
}

}  // namespace

// ---- .npy -------------------------------------------------------------------------------------

std::string EncodeNpy(const std::vector<int64_t>& shape, const float* values) {
  int64_t count = 1;
  std::string dims;
  for (size_t i = 0; i < shape.size(); ++i) {
    count *= shape[i];
    dims += (i ? ", " : "") + std::to_string(shape[i]);
  }
  if (shape.size() == 1) dims += ",";
  std::string header = "{'descr': '<f4', 'fortran_order': False, 'shape': (" + dims + "), }";
  // magic (6) + version (2) + length (2) + header + '\n', padded to a multiple of 64.
  const size_t unpadded = 10 + header.size() + 1;
  header.append((64 - unpadded % 64) % 64, ' ');
  header += '\n';
  std::string out = "\x93NUMPY";
  out += '\x01';
  out += '\x00';
  const uint16_t len = static_cast<uint16_t>(header.size());
  out += static_cast<char>(len & 0xff);
  out += static_cast<char>(len >> 8);
  out += header;
  out.append(reinterpret_cast<const char*>(values), static_cast<size_t>(count) * sizeof(float));
  return out;
}

std::vector<float> DecodeNpy(const std::string& b, const std::string& path,
                             std::vector<int64_t>* shape) {
  auto fail = [&](size_t offset, const std::string& what) -> CheckpointError {
    return CheckpointError(fmt::format("{}: error: at byte {}: {} (not a whole little-endian "
                                       "float32 .npy file; write the checkpoint again)",
                                       path, offset, what));
  };
  if (b.size() < 10 || b.compare(0, 6, "\x93NUMPY") != 0) throw fail(0, "no .npy magic");
  const int major = static_cast<unsigned char>(b[6]);
  size_t header_len = 0, start = 0;
  if (major == 1) {
    header_len = static_cast<unsigned char>(b[8]) | static_cast<size_t>(static_cast<unsigned char>(b[9])) << 8;
    start = 10;
  } else if (major == 2 || major == 3) {
    if (b.size() < 12) throw fail(b.size(), "truncated header");
    for (int k = 3; k >= 0; --k) header_len = header_len << 8 | static_cast<unsigned char>(b[8 + static_cast<size_t>(k)]);
    start = 12;
  } else {
    throw fail(6, fmt::format("format version {} is not 1, 2 or 3", major));
  }
  if (b.size() < start + header_len) throw fail(b.size(), "truncated header");
  const std::string h = b.substr(start, header_len);
  auto value_of = [&](const std::string& key) -> std::string {
    const size_t k = h.find("'" + key + "'");
    if (k == std::string::npos) throw fail(start, "header has no '" + key + "'");
    size_t v = h.find(':', k);
    if (v == std::string::npos) throw fail(start + k, "header: no value for '" + key + "'");
    ++v;
    while (v < h.size() && h[v] == ' ') ++v;
    size_t e = v;
    if (e < h.size() && h[e] == '(') {
      e = h.find(')', e);
      if (e == std::string::npos) throw fail(start + v, "header: unterminated shape");
      return h.substr(v, e + 1 - v);
    }
    while (e < h.size() && h[e] != ',' && h[e] != '}') ++e;
    std::string s = h.substr(v, e - v);
    while (!s.empty() && s.back() == ' ') s.pop_back();
    return s;
  };
  const std::string descr = value_of("descr");
  if (descr != "'<f4'" && descr != "'float32'") {
    throw fail(start, "dtype " + descr + " is not '<f4' (little-endian float32)");
  }
  if (value_of("fortran_order") != "False") throw fail(start, "the array is in Fortran order");
  const std::string dims = value_of("shape");
  shape->clear();
  int64_t count = 1;
  for (size_t i = 1; i + 1 < dims.size();) {
    while (i + 1 < dims.size() && (dims[i] == ' ' || dims[i] == ',')) ++i;
    if (i + 1 >= dims.size()) break;
    size_t j = i;
    while (j + 1 < dims.size() && dims[j] >= '0' && dims[j] <= '9') ++j;
    if (j == i || j - i > 15) throw fail(start, "bad shape " + dims);
    const int64_t d = std::stoll(dims.substr(i, j - i));
    shape->push_back(d);
    if (d != 0 && count > (int64_t{1} << 40) / d) throw fail(start, "shape " + dims + " too large");
    count *= d;
    i = j;
  }
  const size_t data = start + header_len;
  const size_t want = static_cast<size_t>(count) * sizeof(float);
  if (b.size() - data != want) {
    throw fail(b.size(), fmt::format("{} {} bytes of data for shape {}, expected {}",
                                     b.size() - data < want ? "truncated:" : "too long:",
                                     b.size() - data, ShapeText(*shape), want));
  }
  std::vector<float> v(static_cast<size_t>(count));
  std::memcpy(v.data(), b.data() + data, want);
  return v;
}

// ---- the checkpoint folder ----------------------------------------------------------------------

void WriteCheckpoint(const std::string& dir, const core::Model& model, const Checkpoint& c,
                     const CheckpointWriteOptions& options) {
  const std::vector<BlobSpec> blobs = Blobs(model);
  const auto n = static_cast<size_t>(model.total_params());
  if (c.params.size() != n || (!c.momentum.empty() && c.momentum.size() != n)) {
    throw CheckpointError(fmt::format(
        "{}: error: {} parameters and {} momentum values to save, but model '{}' has {}", dir,
        c.params.size(), c.momentum.size(), model.name(), n));
  }
  PrepareCheckpointDir(dir);
  std::error_code ec;
  // A fresh folder for this checkpoint: iter-N, or iter-N-K when iter-N is the committed one.
  std::string committed;
  if (fs::exists(fs::path(dir) / "index.json")) {
    try {
      const ParsedIndex old = ParseIndex(dir);
      if (!old.blobs.empty()) committed = fs::path(old.blobs[0].file).begin()->string();
    } catch (const CheckpointError&) {
      // A damaged index is replaced below; its folders are cleaned up after the commit.
    }
  }
  std::string name = fmt::format("iter-{:08d}", c.iteration);
  for (int k = 2; name == committed; ++k) name = fmt::format("iter-{:08d}-{}", c.iteration, k);
  const fs::path sub = fs::path(dir) / name;
  fs::remove_all(sub, ec);  // a folder a crash left half-written
  fs::create_directories(sub / "momentum", ec);
  if (ec) {
    throw CheckpointError(fmt::format("{}: error: cannot create the folder: {}; {}", sub.string(),
                                      ec.message(), WriteAdvice(ec.value(), dir)));
  }
  std::string blobs_json;
  std::string state_json;
  try {
    auto write = [&](const fs::path& rel, const std::string& bytes) {
      const std::string path = (fs::path(dir) / rel).string();
      WriteDurably(path, bytes, dir);
      if (options.after_file) options.after_file(path);
      return Crc32(bytes);
    };
    for (size_t i = 0; i < blobs.size(); ++i) {
      const BlobSpec& s = blobs[i];
      const fs::path rel = fs::path(name) / BlobFileName(s.blob->name);
      const uint32_t crc = write(rel, EncodeNpy(s.blob->dims, c.params.data() + s.offset));
      std::string entry = fmt::format(
          "    {{\"name\": {}, \"layer\": {}, \"layer_id\": {}, \"shape\": {}, \"dtype\": "
          "\"<f4\", \"file\": {}, \"crc32\": {}",
          JsonString(s.blob->name), JsonString(s.layer->name), s.layer->id,
          ShapeText(s.blob->dims), JsonString(rel.generic_string()), crc);
      if (!c.momentum.empty()) {
        const fs::path mrel = fs::path(name) / "momentum" / BlobFileName(s.blob->name);
        const uint32_t mcrc = write(mrel, EncodeNpy(s.blob->dims, c.momentum.data() + s.offset));
        entry += fmt::format(",\n     \"momentum_file\": {}, \"momentum_crc32\": {}",
                             JsonString(mrel.generic_string()), mcrc);
      }
      blobs_json += entry + (i + 1 < blobs.size() ? "},\n" : "}\n");
    }
    if (!c.state.empty()) {
      const fs::path rel = fs::path(name) / "training_state.bin";
      const uint32_t crc = write(rel, c.state);
      state_json = fmt::format("  \"state_file\": {}, \"state_crc32\": {},\n",
                               JsonString(rel.generic_string()), crc);
    }
    SyncDir((sub / "momentum").string());
    SyncDir(sub.string());
    // The commit: index.json moves to the new folder in one rename.
    const std::string index = fmt::format(
        "{{\n  \"format\": \"poseidon-checkpoint\",\n  \"format_version\": {},\n  \"model\": {},\n"
        "  \"iteration\": {},\n  \"total_params\": {},\n{}{}  \"blobs\": [\n{}  ]\n}}\n",
        kCheckpointFormatVersion, JsonString(c.model), c.iteration, model.total_params(),
        TrainingJson(c.training), state_json, blobs_json);
    const std::string path = (fs::path(dir) / "index.json").string();
    const std::string tmp = path + ".tmp";
    WriteDurably(tmp, index, dir);
    if (::rename(tmp.c_str(), path.c_str()) != 0) {
      const int e = errno;
      throw CheckpointError(fmt::format("{}: error: cannot rename over {}: {}; {}", tmp, path,
                                        std::strerror(e), WriteAdvice(e, dir)));
    }
    SyncDir(dir);
  } catch (...) {
    fs::remove_all(sub, ec);
    fs::remove(fs::path(dir) / "index.json.tmp", ec);
    throw;
  }
  // Older checkpoints (and folders a crash left) go only now that the new one is committed.
  for (const fs::directory_entry& e : fs::directory_iterator(dir, ec)) {
    const std::string f = e.path().filename().string();
    if (f != name && IsIterFolder(f)) fs::remove_all(e.path(), ec);
  }
}

void PrepareCheckpointDir(const std::string& dir) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec || !fs::is_directory(dir)) {
    throw CheckpointError(fmt::format(
        "{}: error: cannot create the checkpoint folder: {}; give --save a folder this process "
        "can write",
        dir, ec ? ec.message() : "a file of that name is in the way"));
  }
  const std::string probe = (fs::path(dir) / ".poseidon-write-probe").string();
  const int fd = ::open(probe.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) {
    const int e = errno;
    throw CheckpointError(fmt::format("{}: error: cannot create a file in the checkpoint folder: "
                                      "{}; {}",
                                      dir, std::strerror(e), WriteAdvice(e, dir)));
  }
  ::close(fd);
  ::unlink(probe.c_str());
}

Checkpoint ReadCheckpointIndex(const std::string& dir) { return ParseIndex(dir).c; }

Checkpoint ReadCheckpoint(const std::string& dir, const core::Model& model) {
  ParsedIndex p = ParseIndex(dir);
  const std::string index = (fs::path(dir) / "index.json").string();
  const IndexReader r(index);
  if (p.c.model != model.name()) {
    throw CheckpointError(fmt::format(
        "{}: error: the checkpoint is of model '{}', not '{}'; pass --model {} or a checkpoint "
        "of '{}'",
        index, p.c.model, model.name(), p.c.model, model.name()));
  }
  const std::vector<BlobSpec> blobs = Blobs(model);
  if (p.blobs.size() != blobs.size()) {
    throw CheckpointError(fmt::format(
        "{}: error: the checkpoint has {} parameter blobs but model '{}' has {}; the model file "
        "changed since it was written",
        index, p.blobs.size(), model.name(), blobs.size()));
  }
  p.c.params.assign(static_cast<size_t>(model.total_params()), 0.f);
  const bool momentum = !p.blobs.empty() && !p.blobs[0].momentum_file.empty();
  if (momentum) p.c.momentum.assign(p.c.params.size(), 0.f);
  for (size_t i = 0; i < blobs.size(); ++i) {
    const IndexBlob& ib = p.blobs[i];
    const core::ParamBlob& mb = *blobs[i].blob;
    if (ib.name != mb.name || ib.shape != mb.dims) {
      r.Fail(*ib.at, fmt::format("blob {} is '{}' of shape {} but model '{}' has '{}' of shape "
                                 "{} there; the model file changed since the checkpoint was "
                                 "written",
                                 i, ib.name, ShapeText(ib.shape), model.name(), mb.name,
                                 ShapeText(mb.dims)));
    }
    if (ib.momentum_file.empty() == momentum) {
      r.Fail(*ib.at, "momentum files are given for some blobs only");
    }
    const std::vector<float> v =
        ReadBlobFile(Inside(dir, ib.file, r, *ib.at), ib.crc, ib.shape, ib.name);
    std::copy(v.begin(), v.end(), p.c.params.begin() + blobs[i].offset);
    if (momentum) {
      const std::vector<float> m = ReadBlobFile(Inside(dir, ib.momentum_file, r, *ib.at),
                                                ib.momentum_crc, ib.shape, ib.name + " momentum");
      std::copy(m.begin(), m.end(), p.c.momentum.begin() + blobs[i].offset);
    }
  }
  if (!p.state_file.empty()) {
    const std::string path = Inside(dir, p.state_file, r, r.Field(p.root, "state_file"));
    const std::optional<std::string> s = ReadFile(path);
    if (!s || Crc32(*s) != p.state_crc) {
      throw CheckpointError(fmt::format(
          "{}: error: the training state is {}; write the checkpoint again", path,
          s ? "corrupt (fails its CRC-32 check)" : "missing"));
    }
    p.c.state = *s;
  }
  return p.c;
}

// ---- the trainer's state ----------------------------------------------------------------------

std::string EncodeTrainerState(const TrainerState& s) {
  std::string b = "PSTS";
  auto put = [&](const void* p, size_t n) { b.append(static_cast<const char*>(p), n); };
  const uint32_t version = 1;
  const int64_t n = static_cast<int64_t>(s.stream.size());
  put(&version, sizeof version);
  put(&s.loss_sum, sizeof s.loss_sum);
  put(&s.loss_n, sizeof s.loss_n);
  put(&n, sizeof n);
  b += s.stream;
  return b;
}

TrainerState DecodeTrainerState(const std::string& b, const std::string& path) {
  TrainerState s;
  uint32_t version = 0;
  int64_t n = -1;
  constexpr size_t kHead = 4 + 4 + 8 + 8 + 8;
  if (b.size() >= kHead && b.compare(0, 4, "PSTS") == 0) {
    std::memcpy(&version, b.data() + 4, 4);
    std::memcpy(&s.loss_sum, b.data() + 8, 8);
    std::memcpy(&s.loss_n, b.data() + 16, 8);
    std::memcpy(&n, b.data() + 24, 8);
  }
  if (version != 1 || n < 0 || static_cast<size_t>(n) != b.size() - kHead || s.loss_n < 0) {
    throw CheckpointError(fmt::format(
        "{}: error: not a 'poseidon train' training state (written by another program, or "
        "damaged); resume from a checkpoint 'poseidon train --save' wrote",
        path));
  }
  s.stream = b.substr(kHead);
  return s;
}

const core::Layer* LayerWithUncheckpointedState(const core::Model& model, bool resume) {
  for (const core::Layer& l : model.layers()) {
    if (l.kind == core::LayerKind::kBatchNorm || (resume && l.kind == core::LayerKind::kDropout)) {
      return &l;
    }
  }
  return nullptr;
}

}  // namespace poseidon::kernels
