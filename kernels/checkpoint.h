// kernels/checkpoint.h: the training checkpoint on disk, a folder that numpy (and so PyTorch) can
// read: one .npy file per parameter blob, its momentum buffer, an opaque training-state file and
// a JSON index. `poseidon train --save/--resume`, `poseidon evaluate` and `poseidon launch --save`
// write and read it; docs/checkpoints.md describes it for users.
//
//   DIR/index.json                       the commit point: written last, atomically (tmp+rename)
//   DIR/iter-00000100/fc1.weight.npy     numpy format 1.0, '<f4', C order, the blob's real shape
//   DIR/iter-00000100/momentum/fc1.weight.npy
//   DIR/iter-00000100/training_state.bin (data stream position, loss window; EncodeTrainerState)
//
// A new checkpoint is written into a fresh iter-N folder (every file fsynced); only then does
// index.json, which names every file with its CRC-32, move to it; the folders of older
// checkpoints are removed after that. A crash or a full disk at any point leaves index.json
// naming a whole checkpoint (the previous one), never a half-written one.
//
//   Checkpoint c;  c.model = model.name();  c.iteration = 100;
//   c.params.assign(net.params(), net.params() + net.num_params());
//   WriteCheckpoint("ckpt", model, c);                  // throws CheckpointError
//   Checkpoint back = ReadCheckpoint("ckpt", model);    // checks model, shapes, sizes, CRCs
//
// Every error is a CheckpointError whose what() starts with the file (and for the index its
// line:column), says what is wrong or differs and what to do. Nothing here keeps state; distinct
// folders may be used from distinct threads.
#pragma once

#include <cstdint>
#include <functional>
#include <stdexcept>
#include <string>
#include <vector>

#include "core/model.h"
#include "kernels/sgd.h"

namespace poseidon::kernels {

class CheckpointError : public std::runtime_error {
 public:
  explicit CheckpointError(const std::string& msg) : std::runtime_error(msg) {}
};

inline constexpr int kCheckpointFormatVersion = 1;

// How the parameters were trained, recorded in the index: `evaluate` takes the batch and backend
// from it (so its accuracy is the trainer's to the bit), `train --resume` compares it with its
// flags.
struct CheckpointTraining {
  std::string written_by;  // "poseidon train" | "poseidon launch"
  std::string backend;     // reference | cpu | cuda
  int64_t batch = 0;       // per replica
  int64_t workers = 1;
  uint64_t seed = 0;
  int64_t iterations = 0;  // the run's planned total (the end of the lr schedule)
  SgdOptions sgd;
};

struct Checkpoint {
  std::string model;  // core::Model::name()
  int64_t iteration = 0;  // iterations done
  CheckpointTraining training;
  // model.total_params() values, blob after blob in Model::param_layers() order (Net::params()).
  std::vector<float> params;
  // SGD's momentum history in the same layout, or empty (none stored: a live job's workers).
  std::vector<float> momentum;
  std::string state;  // opaque training state; may be empty
};

struct CheckpointWriteOptions {
  // Tests: called after each file of the new iter-N folder is written (its path); may throw to
  // play a full disk.
  std::function<void(const std::string& path)> after_file;
};

// Writes `c` as the latest checkpoint in `dir` (created if missing). Throws CheckpointError when
// the sizes do not match `model` or a file cannot be written (the previous checkpoint, if any,
// then stays the latest and the new folder is removed).
void WriteCheckpoint(const std::string& dir, const core::Model& model, const Checkpoint& c,
                     const CheckpointWriteOptions& options = {});

// Creates `dir` if missing and checks that a file can be created in it, so that a run fails at
// its start rather than at its first checkpoint. Throws CheckpointError naming the folder.
void PrepareCheckpointDir(const std::string& dir);

// Reads the latest checkpoint in `dir` for `model`: throws CheckpointError when the index is
// missing or malformed, was written for another model or other blob shapes, or a file is
// missing, truncated, not a '<f4' C-order .npy of the recorded shape, or fails its CRC-32.
Checkpoint ReadCheckpoint(const std::string& dir, const core::Model& model);
// Only the index (model name, iteration, training; params, momentum and state left empty), to
// find the model a checkpoint is for. Throws CheckpointError.
Checkpoint ReadCheckpointIndex(const std::string& dir);

// numpy's .npy format 1.0 of a float32 array: "\x93NUMPY" 1 0, a little-endian u16 header
// length, the header dict padded with spaces to a multiple of 64 bytes and ended by '\n', then
// the values little-endian in C order.
std::string EncodeNpy(const std::vector<int64_t>& shape, const float* values);
// The values of a .npy file holding a '<f4' (or '<f4'-compatible "float32") C-order array of
// format 1.x or 2.x; `shape` gets its shape. Throws CheckpointError naming `path` and the byte
// offset.
std::vector<float> DecodeNpy(const std::string& bytes, const std::string& path,
                             std::vector<int64_t>* shape);

// What `poseidon train` keeps in the training-state file beside the parameters and momentum:
// the data stream's position (BatchSource::SaveState) and the progress window's running loss,
// so that a resumed run prints the same lines as an uninterrupted one.
//   "PSTS" | u32 version (1) | f64 loss sum | i64 loss count | i64 n | n bytes of stream state
struct TrainerState {
  std::string stream;
  double loss_sum = 0;
  int64_t loss_n = 0;
};
std::string EncodeTrainerState(const TrainerState& s);
// Throws CheckpointError naming `path` for bytes that are not a trainer state.
TrainerState DecodeTrainerState(const std::string& bytes, const std::string& path);

// The first layer whose kernel keeps state between iterations that the checkpoint does not hold
// (dropout's generator, batchnorm's running statistics), or nullptr: a resumed run of such a
// model would not continue bit-identically, and batchnorm's test-mode output would change.
const core::Layer* LayerWithUncheckpointedState(const core::Model& model, bool resume);

}  // namespace poseidon::kernels
