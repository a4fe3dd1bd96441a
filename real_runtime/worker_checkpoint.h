// real_runtime/worker_checkpoint.h: the file a live worker keeps its own state in.
//
// A worker checkpoints the clock of its next batch and its data stream's position (order,
// cursor, generator), so that a restarted worker reads the batches it would have read:
//
//   "PSWK" | u32 format (1) | i64 next batch | i64 n | n bytes of stream state | u32 CRC-32
//
// (little-endian; the CRC covers everything before it).
#pragma once

#include <cstdint>
#include <optional>
#include <string>

namespace poseidon::rt {

struct WorkerCheckpoint {
  int64_t next_batch = 0;
  std::string stream_state;  // kernels::BatchSource::SaveState()
};

std::string EncodeWorkerCheckpoint(const WorkerCheckpoint& c);
// Nothing for a body that is not a whole, intact checkpoint (truncated, corrupt, foreign).
std::optional<WorkerCheckpoint> DecodeWorkerCheckpoint(const std::string& bytes);

}  // namespace poseidon::rt
