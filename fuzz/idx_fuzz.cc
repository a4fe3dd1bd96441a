// fuzz/idx_fuzz.cc: the IDX reader (kernels::ReadIdx), plain and gzipped.
//
// Byte 0 chooses the path: bit 0 clear writes the rest of the input as is (plain IDX, or raw
// gzip bytes for the corrupt-stream paths); bit 0 set writes it gzip-compressed, so that the
// fuzzer reaches the IDX checks behind a valid gzip stream. ReadIdx reads paths, so the input
// goes to a temporary file named after the process id. DataError is the clean refusal.
#include <unistd.h>
#include <zlib.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include "fuzz/fuzz_check.h"
#include "fuzz/fuzz_targets.h"
#include "kernels/data/idx.h"

namespace poseidon::fuzz {
namespace {

std::string TempPath() {
  const char* dir = std::getenv("TMPDIR");
  return std::string(dir && *dir ? dir : "/tmp") + "/poseidon-idx-fuzz-" +
         std::to_string(getpid()) + ".idx";
}

}  // namespace

int FuzzIdx(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  static const std::string path = TempPath();
  gzFile f = gzopen(path.c_str(), (data[0] & 1) ? "wb" : "wbT");
  POSEIDON_FUZZ_CHECK(f != nullptr);
  if (size > 1) {
    POSEIDON_FUZZ_CHECK(gzwrite(f, data + 1, static_cast<unsigned>(size - 1)) ==
                        static_cast<int>(size - 1));
  }
  POSEIDON_FUZZ_CHECK(gzclose(f) == Z_OK);
  try {
    const kernels::IdxArray a = kernels::ReadIdx(path);
    int64_t count = 1;
    for (int64_t d : a.dims) {
      POSEIDON_FUZZ_CHECK(d >= 0);
      count *= d;
    }
    POSEIDON_FUZZ_CHECK(!a.dims.empty());
    POSEIDON_FUZZ_CHECK(static_cast<int64_t>(a.data.size()) == count);
  } catch (const kernels::DataError&) {
  }
  std::remove(path.c_str());
  return 0;
}

}  // namespace poseidon::fuzz
