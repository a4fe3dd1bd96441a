#include "real_runtime/worker_checkpoint.h"

#include <cstring>

#include "real_runtime/live_stores.h"  // Crc32

namespace poseidon::rt {

std::string EncodeWorkerCheckpoint(const WorkerCheckpoint& c) {
  std::string b = "PSWK";
  auto put = [&](const void* p, size_t n) { b.append(static_cast<const char*>(p), n); };
  const uint32_t format = 1;
  const int64_t n = static_cast<int64_t>(c.stream_state.size());
  put(&format, sizeof format);
  put(&c.next_batch, sizeof c.next_batch);
  put(&n, sizeof n);
  b += c.stream_state;
  const uint32_t crc = Crc32(b.data(), b.size());
  put(&crc, sizeof crc);
  return b;
}

std::optional<WorkerCheckpoint> DecodeWorkerCheckpoint(const std::string& b) {
  if (b.size() < 28 || b.compare(0, 4, "PSWK") != 0) return std::nullopt;
  uint32_t format = 0, crc = 0;
  int64_t next = 0, n = 0;
  std::memcpy(&format, b.data() + 4, 4);
  std::memcpy(&next, b.data() + 8, 8);
  std::memcpy(&n, b.data() + 16, 8);
  std::memcpy(&crc, b.data() + b.size() - 4, 4);
  if (format != 1 || n < 0 || static_cast<size_t>(n) != b.size() - 28 ||
      crc != Crc32(b.data(), b.size() - 4)) {
    return std::nullopt;
  }
  return WorkerCheckpoint{next, b.substr(24, static_cast<size_t>(n))};
}

}  // namespace poseidon::rt
