// kernels/net.h: a trainable network built from the same core::Model the simulator reads.
//
// A Net owns every buffer of one worker's replica for a fixed batch size: the input copy, each
// layer's activations and activation gradients, and all parameters and parameter gradients, the
// latter two each in one contiguous array (blob i is a slice of it, in Model::param_layers()
// order), so that SGD and the sync code can work blob by blob or on the whole. It calls one
// LayerKernel per layer (kernels/kernel.h) in the model's topological order.
//
//   core::Model m = core::Model::Build(config::LoadModelFile("scenarios/models/fmnist_mlp.yaml"));
//   Net net(m, Backend::kReference, /*batch=*/32, /*seed=*/1);
//   double loss = net.Forward(images, labels, /*train=*/true);   // images: batch x C x H x W
//   net.Backward();                       // every blob(i).grad now holds d loss / d value
//   double acc = net.Accuracy();          // top-1 of that forward
//
// Loss: the sum of the mean cross-entropies of every softmax_loss layer; Accuracy() reads the last
// softmax_loss layer in forward order (the main head). An activation consumed by several layers
// gets the sum of their gradients.
//
// Memory: activations, their gradients and the input live in the backend's space
// (kernels/buffers.h: host memory for reference and cpu, device memory for cuda). Parameters and
// their gradients are always available in host memory (params(), param_grads(), blob()), where
// SGD and the sync code work; on the cuda backend they also have device copies: ForwardLayer
// uploads the layer's parameters before it runs (so host changes since the last pass count) and
// BackwardLayer downloads the layer's gradients after it ran, as Poseidon moves parameters
// between GPU and CPU memory around every layer's sync. Accuracy(), activation() and FactorsOf()
// return host memory (downloaded on demand on the cuda backend).
// Thread-safety: one thread at a time per Net; distinct Nets are independent.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/model.h"
#include "kernels/buffers.h"
#include "kernels/kernel.h"

namespace poseidon::kernels {

// One parameter blob as the sync code sees it: `count` contiguous values and gradients.
struct BlobRef {
  int layer = 0;     // core::Layer::id
  int index = 0;     // index in that layer's blobs (0 weight, 1 bias; bn 0 scale, 1 shift)
  std::string name;  // "fc1.weight"
  int64_t count = 0;
  float* value = nullptr;
  float* grad = nullptr;
};

// An FC (or untied linear) layer's sufficient factors of the last Forward/Backward:
// dW = top_grad^T * bottom.
struct FcFactors {
  int64_t k = 0;                    // batch (x fc_rows for linear: core::SfbFactorRows)
  int64_t m = 0;                    // inputs (fc_in)
  int64_t n = 0;                    // outputs (fc_out)
  const float* top_grad = nullptr;  // k x n: gradient of the layer's output
  const float* bottom = nullptr;    // k x m: the layer's input
};

class Net {
 public:
  // Throws KernelError when the backend cannot run here (no CUDA build or device for cuda) or
  // batch is not positive. Parameters are
  // initialised Caffe-like from `seed`: weights Xavier-uniform (+-sqrt(3 / fan_in); conv, fc,
  // linear, patch_embed and attention's projections), biases and batch-norm and layer-norm
  // shifts 0, their scales 1, embedding tables, position embeddings and class tokens uniform
  // with standard deviation 0.02. A linear layer with `tie` reads the embedding's table, and
  // its gradient of the table is added to the embedding's (one blob, synced once).
  Net(const core::Model& model, Backend backend, int64_t batch, uint64_t seed);
  ~Net();
  Net(const Net&) = delete;
  Net& operator=(const Net&) = delete;

  // images: batch x input_shape values (host); labels: batch class indices (host; may be null
  // only when the model has no softmax_loss layer). Returns the loss (0 without a loss layer).
  double Forward(const float* images, const int32_t* labels, bool train);
  // Gradients of the loss of the last Forward with respect to every parameter (overwritten).
  void Backward();

  // The same passes one layer at a time, for hosts that interleave compute with communication
  // (the live worker runs one core ComputeTask per layer):
  //   SetInput(images, labels); ForwardLayer(id) for id = 0..n-1 (Model order);
  //   BeginBackward(); BackwardLayer(id) for id = n-1..0.
  // Forward() and Backward() are exactly these loops. loss() sums the loss layers run so far.
  void SetInput(const float* images, const int32_t* labels);
  void ForwardLayer(int id, bool train);
  void BeginBackward();
  void BackwardLayer(int id);
  double loss() const { return loss_; }
  // Fraction of the last Forward's batch whose highest probability is the label.
  double Accuracy() const;

  int num_blobs() const { return static_cast<int>(blobs_.size()); }
  BlobRef blob(int i) const { return blobs_.at(static_cast<size_t>(i)); }
  // All parameters and their gradients, blob after blob.
  int64_t num_params() const { return static_cast<int64_t>(params_.size()); }
  float* params() { return params_.data(); }
  float* param_grads() { return grads_.data(); }

  // Throws KernelError unless `layer` is the id of an fc layer or a linear layer with its own
  // weight (core::HasSufficientFactors).
  FcFactors FactorsOf(int layer) const;

  const core::Model& model() const { return model_; }
  Backend backend() const { return backend_; }
  int64_t batch() const { return batch_; }
  // Output activations of a layer (batch x out.count()) of the last Forward, in host memory.
  const float* activation(int layer) const;

 private:
  struct LayerState;
  // A layer's output (or its gradient) in host memory: the buffer itself on a host space, else
  // a download into the layer's host mirror.
  const float* HostTop(int layer) const;
  const float* HostTopGrad(int layer) const;
  // `b` in host memory: itself on a host space, else downloaded into `mirror`.
  const float* OnHost(const SpaceBuffer& b, std::vector<float>& mirror) const;
  // Where a kernel reads parameter blob `bid` / writes its gradient (host or device).
  float* SpaceParam(int64_t bid) const;
  float* SpaceGrad(int64_t bid) const;

  core::Model model_;
  Backend backend_;
  int64_t batch_;
  std::unique_ptr<BufferSpace> space_;  // before every SpaceBuffer: it must outlive them
  SpaceBuffer input_;
  std::vector<float> input_host_;  // the last input in host memory, when input_ is not (FactorsOf)
  std::vector<int32_t> labels_;
  std::vector<LayerState> layers_;
  std::vector<float> params_, grads_;  // host memory, blob after blob
  SpaceBuffer space_params_, space_grads_;  // their device copies (empty on a host space)
  std::vector<int64_t> blob_offset_;        // blob i starts at params_[blob_offset_[i]]
  std::vector<BlobRef> blobs_;
  double loss_ = 0;
  bool has_labels_ = false;
};

// dW (N x M) = delta^T (K x N)^T * x (K x M): rebuilds an FC weight gradient from its sufficient
// factors (overwrites dW).
void RebuildFcGradient(const float* delta, const float* x, int64_t k, int64_t m, int64_t n,
                       float* dw);

}  // namespace poseidon::kernels
