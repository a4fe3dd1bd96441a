// kernels/kernel.h: one layer's forward and backward pass on one backend.
//
// A LayerKernel computes a core::Layer (shapes, parameter blobs and kind from the same model
// YAML the simulator reads) for a fixed batch size. It works on raw fp32 pointers in its
// backend's memory space (host memory for kReference and kCpu, device memory for kCuda); the
// Net (kernels/net.h) owns every buffer and hands the kernels views. Layouts are NCHW; a
// parameter blob's layout is core::ParamBlob::dims (conv weight {out, in/groups, kh, kw}, fc
// weight {N, M} i.e. out x in, bias {out}, batchnorm scale {C} and shift {C}).
//
// A linear layer with `tie` (core::Layer::tied_to) has no weight blob of its own: its params
// and param_grads start with the tied embedding table and a Net-owned buffer for its gradient of
// that table (which the Net adds to the embedding's gradient), then its own bias if any.
//
// Backward writes the gradient of every parameter blob (overwriting, not accumulating) and,
// where bottom_grads[i] is not null, the gradient with respect to bottom i (overwriting).
// Kernels may keep state between Forward and Backward of one iteration (dropout's mask,
// max-pool's argmax, batchnorm's batch statistics, softmax's probabilities).
//
//   auto k = MakeKernel(Backend::kReference, layer, /*batch=*/32, /*seed=*/1);
//   k->Forward({x}, y, {w, b}, /*train=*/true);
//   k->Backward({x}, y, dy, {dx}, {w, b}, {dw, db});
#pragma once

#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "core/model.h"

namespace poseidon::kernels {

enum class Backend { kReference, kCpu, kCuda };
const char* BackendName(Backend b);
// "reference" | "cpu" | "cuda"; false when unknown.
bool BackendFromName(const std::string& name, Backend* b);

// A backend that cannot run here (no CUDA build, no device) or a layer it cannot compute.
class KernelError : public std::runtime_error {
 public:
  explicit KernelError(const std::string& msg) : std::runtime_error(msg) {}
};

// The one refusal of every backend for a layer type it has no kernel for (the simulator models
// every type; training some is not implemented yet).
[[noreturn]] void ThrowNoKernel(Backend backend, const core::Layer& layer);

class LayerKernel {
 public:
  virtual ~LayerKernel() = default;
  // bottoms[i] has batch * layer.in_shapes[i].count() values; top has batch * layer.out.count().
  virtual void Forward(const std::vector<const float*>& bottoms, float* top,
                       const std::vector<const float*>& params, bool train) = 0;
  virtual void Backward(const std::vector<const float*>& bottoms, const float* top,
                        const float* top_grad, const std::vector<float*>& bottom_grads,
                        const std::vector<const float*>& params,
                        const std::vector<float*>& param_grads) = 0;
  // softmax_loss only: the batch's labels (class indices, in host memory) before Forward, and the
  // mean cross-entropy loss of the last Forward. Its top is the per-class probabilities; its
  // Backward ignores top_grad (the loss is the end of the graph).
  virtual void SetLabels(const int32_t* labels) { (void)labels; }
  virtual double loss() const { return 0; }
};

// Where a backend computes, for a profile's provenance: for cuda the device's name, compute
// capability and memory, and the CUDA runtime, driver and cuDNN versions ("device", "cuda",
// "cudnn"); empty for the host backends (calibration/provenance.h has the CPU's) and when no
// device is usable.
std::vector<std::pair<std::string, std::string>> BackendProvenance(Backend backend);

// Machines with several devices (a live worker running one Net per GPU):
//   VisibleGpus   the GPUs this process may use (cudaGetDeviceCount): 0 without a CUDA build or a
//                 usable device, with the reason in *why when not null;
//   UseGpu        makes GPU `device` the calling thread's current device (cudaSetDevice), so
//                 that a Net built or run on this thread lives on it; throws KernelError naming
//                 the device when that fails, or without a CUDA build.
// A Net uses the device that is current on the thread that builds it, and must then run on
// threads with that same device current.
int VisibleGpus(std::string* why);
void UseGpu(int device);

// Throws KernelError when the backend is not built in or the layer kind is not supported by it.
std::unique_ptr<LayerKernel> MakeKernel(Backend backend, const core::Layer& layer, int64_t batch,
                                        uint64_t seed);

}  // namespace poseidon::kernels
