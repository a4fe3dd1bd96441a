// real_runtime/machine_replica.h: the machine's copy of the parameters of a live worker with
// several devices (ProtocolConfig::devices_per_machine = D > 1: Poseidon's three-level hybrid).
//
// Such a worker process runs one kernels::Net per device (worker_compute.h), each on its own
// threads, and its worker actor is the machine's client: it syncs ONE copy of the parameters with
// the shards and the peer machines. That copy is this object, in host memory (values and
// gradients, blob by blob in the nets' layout), as Poseidon's client library keeps the machine's
// KV-store copy in CPU memory; the LiveWorkerStore syncs it exactly as it syncs a one-device
// worker's net. The core's local tasks move data between it and the devices:
//   Reduce      kLocalReduce, once layer l's backward pass ended on every device: the machine's
//               gradient of l := the mean of the devices' gradients (summed in device order, so
//               runs are bit-reproducible);
//   CopyValues  kLocalBroadcast, once the machine's sync of l reached a new version: a device's
//               values of l := the machine's (the caller holds both layer locks);
//   SetFactors  after device d's backward pass of an SFB layer, on device d's own thread (one
//               thread per Net, also on the GPU): its sufficient factors into rows [d k, (d+1) k)
//               of the machine's D k rows, the output-gradient rows scaled by 1/D, so that a
//               peer's rebuilt gradient dW = top_grad^T bottom is this machine's MEAN gradient;
//   Factors     the whole, as the store sends it (the layout of one Net's factors with D k rows).
//
//   MachineReplica m(device_nets, sfb_layers);  // values from device 0 (every net starts equal)
//   LiveWorkerStore store(m.Replica(...), ...);  // the store syncs m
//   m.Reduce(l);                                 // on the machine's reduce stream
//
// Threads: Reduce writes the machine's gradients of l and reads the devices' (written by their
// backward passes of l, which ended; the devices begin their next clock only once every
// reduction ended); the event loop reads the machine's gradients of l only after the reduction
// ended. Values are guarded by the store's layer lock (machine) and the devices' layer locks.
// SetFactors of clock c+1 runs after the loop thread took Factors of clock c (the devices begin
// c+1 after every reduction of c ended, and the core takes the factors when the reduction ends).
#pragma once

#include <cstdint>
#include <vector>

#include "core/model.h"
#include "core/param_store.h"
#include "kernels/net.h"

namespace poseidon::rt {

class MachineReplica {
 public:
  // `devices`: the machine's nets, all built with the job's seed (so equal); at least two.
  // `sfb_layers[l]`: layer l is synced by sufficient factors (its factors are kept).
  MachineReplica(const std::vector<kernels::Net*>& devices, const std::vector<bool>& sfb_layers);

  // Every parameter blob of the machine's copy (values and gradients in host memory).
  std::vector<kernels::BlobRef> blobs() const { return blobs_; }
  int64_t num_params() const { return static_cast<int64_t>(values_.size()); }
  int devices() const { return static_cast<int>(devices_.size()); }

  void Reduce(int layer);
  void CopyValues(int layer, int device);
  void SetFactors(int layer, int device, const kernels::FcFactors& f);
  // The machine's factors of `layer`: D k x N output-gradient rows, then D k x M input rows.
  core::FloatBuffer Factors(int layer) const;

 private:
  struct FactorRows {
    int64_t k = 0, m = 0, n = 0;      // rows per device, inputs, outputs
    std::vector<float> top, bottom;  // D k x n, D k x m
  };

  std::vector<kernels::Net*> devices_;
  std::vector<float> values_, grads_;             // the nets' layout
  std::vector<kernels::BlobRef> blobs_;           // into values_ / grads_
  std::vector<std::vector<int>> layer_blobs_;     // [layer] -> blob indices
  std::vector<FactorRows> factors_;               // [layer]; empty for non-SFB layers
};

}  // namespace poseidon::rt
