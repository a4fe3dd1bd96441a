// kernels/kernel.cc: backend names and the kernel factory.
#include "kernels/kernel.h"

#include "kernels/reference/reference_kernels.h"

#ifdef POSEIDON_HAVE_DNNL
#include "kernels/cpu/cpu_kernels.h"
#endif
#ifdef POSEIDON_WITH_CUDA
#include "kernels/cuda/cuda_kernels.h"
#include "kernels/cuda/cuda_util.h"
#endif

namespace poseidon::kernels {

void ThrowNoKernel(Backend backend, const core::Layer& layer) {
  const std::string kind = core::LayerKindName(layer.kind);
  throw KernelError("layer '" + layer.name + "' (" + kind + "): the " + BackendName(backend) +
                    " backend has no kernel for layer type '" + kind +
                    "' (the simulator models it; training it is not implemented yet)");
}

const char* BackendName(Backend b) {
  switch (b) {
    case Backend::kReference:
      return "reference";
    case Backend::kCpu:
      return "cpu";
    case Backend::kCuda:
      return "cuda";
  }
  return "unknown";
}

std::vector<std::pair<std::string, std::string>> BackendProvenance(Backend backend) {
#ifdef POSEIDON_WITH_CUDA
  if (backend == Backend::kCuda) return cuda::DeviceProvenance();
#else
  (void)backend;
#endif
  return {};
}

int VisibleGpus(std::string* why) {
#ifdef POSEIDON_WITH_CUDA
  int count = 0;
  if (!cuda::CudaDeviceAvailable(why)) return 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  return count;
#else
  if (why != nullptr) *why = "this build is not built with CUDA";
  return 0;
#endif
}

void UseGpu(int device) {
#ifdef POSEIDON_WITH_CUDA
  POSEIDON_CUDA_CHECK(cudaSetDevice(device));
#else
  throw KernelError("GPU " + std::to_string(device) +
                    ": this build is not built with CUDA; reconfigure with -DPOSEIDON_WITH_CUDA=ON "
                    "on a machine with nvcc and cuDNN");
#endif
}

bool BackendFromName(const std::string& name, Backend* b) {
  for (Backend c : {Backend::kReference, Backend::kCpu, Backend::kCuda}) {
    if (name == BackendName(c)) {
      *b = c;
      return true;
    }
  }
  return false;
}

std::unique_ptr<LayerKernel> MakeKernel(Backend backend, const core::Layer& layer, int64_t batch,
                                        uint64_t seed) {
  if (batch <= 0) {
    throw KernelError("layer '" + layer.name + "': batch must be positive, got " +
                      std::to_string(batch));
  }
  switch (backend) {
    case Backend::kReference:
      return MakeReferenceKernel(layer, batch, seed);
    case Backend::kCpu:
#ifdef POSEIDON_HAVE_DNNL
      return MakeCpuKernel(layer, batch, seed);
#else
      throw KernelError(
          "the cpu backend (oneDNN) is not built in; install oneDNN (libdnnl-dev) and reconfigure, "
          "or use --backend reference");
#endif
    case Backend::kCuda:
#ifdef POSEIDON_WITH_CUDA
      return MakeCudaKernel(layer, batch, seed);
#else
      throw KernelError(
          "the cuda backend is not available: this build is not built with CUDA; reconfigure with "
          "-DPOSEIDON_WITH_CUDA=ON on a machine with nvcc and cuDNN");
#endif
  }
  throw KernelError("unknown backend");
}

}  // namespace poseidon::kernels
