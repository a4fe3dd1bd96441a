// Per-layer forward and backward time of the oneDNN CPU backend (kernels/cpu) against the bare
// oneDNN primitives for the same shapes and plain layouts: the difference is our overhead (the
// LayerKernel interface, set_data_handle, argument maps, Caffe's avg-pool divisor correction).
//
// Layers: AlexNet conv1-5 and fc6-8 at batch 16; CIFAR-10 quick conv, pool, relu and fc at batch
// 50 (scenarios/models/*.yaml). Names read MODEL/LAYER/{ours,bare}/{fwd,bwd}; "bwd" is the weight
// and data gradients. Run:  build/bench/layer_benchmark --benchmark_min_time=0.2
#include <cstdint>
#include <memory>
#include <random>
#include <string>
#include <unordered_map>
#include <vector>

#include <benchmark/benchmark.h>
#include <oneapi/dnnl/dnnl.hpp>

#include "config/model_loader.h"
#include "core/model.h"
#include "kernels/cpu/cpu_kernels.h"

namespace {

using namespace poseidon;
using dnnl::algorithm;
using dnnl::memory;
using dnnl::prop_kind;
using Tag = memory::format_tag;
using Args = std::unordered_map<int, memory>;

std::vector<float> Random(int64_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> u(-1.f, 1.f);
  std::vector<float> v(static_cast<size_t>(n));
  for (float& x : v) x = u(rng);
  return v;
}

// Buffers for one layer at one batch: bottom, top, their gradients, parameters and gradients.
struct Buffers {
  Buffers(const core::Layer& l, int64_t batch)
      : x(Random(batch * l.in_shapes[0].count(), 1)),
        y(static_cast<size_t>(batch * l.out.count())),
        dy(Random(batch * l.out.count(), 2)),
        dx(x.size()) {
    for (const core::ParamBlob& b : l.blobs) {
      p.push_back(Random(b.count, 3));
      dp.emplace_back(static_cast<size_t>(b.count));
    }
  }
  std::vector<float> x, y, dy, dx;
  std::vector<std::vector<float>> p, dp;
};

void Ours(benchmark::State& state, const core::Layer& l, int64_t batch, bool backward) {
  Buffers buf(l, batch);
  auto k = kernels::MakeCpuKernel(l, batch, 1);
  std::vector<const float*> p;
  std::vector<float*> dp;
  for (size_t i = 0; i < buf.p.size(); ++i)
    p.push_back(buf.p[i].data()), dp.push_back(buf.dp[i].data());
  k->Forward({buf.x.data()}, buf.y.data(), p, true);
  for (auto _ : state) {
    if (backward) {
      k->Backward({buf.x.data()}, buf.y.data(), buf.dy.data(), {buf.dx.data()}, p, dp);
    } else {
      k->Forward({buf.x.data()}, buf.y.data(), p, true);
    }
    benchmark::ClobberMemory();
  }
}

// The same computation written directly against oneDNN (plain layouts, primitives made once).
void Bare(benchmark::State& state, const core::Layer& l, int64_t batch, bool backward) {
  Buffers buf(l, batch);
  dnnl::engine eng(dnnl::engine::kind::cpu, 0);
  dnnl::stream strm(eng);
  const core::LayerSpec& s = l.spec;
  const core::Shape& xs = l.in_shapes[0];
  auto md4 = [&](const core::Shape& sh) {
    return memory::desc({batch, sh.c, sh.h, sh.w}, memory::data_type::f32, Tag::nchw);
  };
  auto mem = [&](const memory::desc& md, std::vector<float>& v) {
    return memory(md, eng, v.data());
  };
  std::vector<std::pair<dnnl::primitive, Args>> steps;
  if (l.kind == core::LayerKind::kConv || l.kind == core::LayerKind::kFc) {
    const bool conv = l.kind == core::LayerKind::kConv;
    const int64_t g = s.groups;
    memory::desc src =
        conv ? md4(xs) : memory::desc({batch, l.fc_in}, memory::data_type::f32, Tag::nc);
    memory::desc dst =
        conv ? md4(l.out) : memory::desc({batch, l.fc_out}, memory::data_type::f32, Tag::nc);
    memory::desc w = !conv   ? memory::desc({l.fc_out, l.fc_in}, memory::data_type::f32, Tag::oi)
                     : g > 1 ? memory::desc({g, l.out.c / g, xs.c / g, s.kernel_h, s.kernel_w},
                                            memory::data_type::f32, Tag::goihw)
                             : memory::desc({l.out.c, xs.c, s.kernel_h, s.kernel_w},
                                            memory::data_type::f32, Tag::oihw);
    memory::desc b({l.out.c}, memory::data_type::f32, Tag::x);
    memory x = mem(src, buf.x), y = mem(dst, buf.y), dy = mem(dst, buf.dy), dx = mem(src, buf.dx);
    memory wm = mem(w, buf.p[0]), bm = mem(b, buf.p[1]), dw = mem(w, buf.dp[0]),
           db = mem(b, buf.dp[1]);
    if (conv) {
      memory::dims st{s.stride_h, s.stride_w}, pad{s.pad_h, s.pad_w};
      const auto alg = algorithm::convolution_direct;
      dnnl::convolution_forward::primitive_desc fpd(
          {prop_kind::forward_training, alg, src, w, b, dst, st, pad, pad}, eng);
      if (!backward) {
        steps.push_back(
            {dnnl::convolution_forward(fpd),
             {{DNNL_ARG_SRC, x}, {DNNL_ARG_WEIGHTS, wm}, {DNNL_ARG_BIAS, bm}, {DNNL_ARG_DST, y}}});
      } else {
        dnnl::convolution_backward_weights::primitive_desc wpd({alg, src, w, b, dst, st, pad, pad},
                                                               eng, fpd);
        dnnl::convolution_backward_data::primitive_desc dpd({alg, src, w, dst, st, pad, pad}, eng,
                                                            fpd);
        steps.push_back({dnnl::convolution_backward_weights(wpd),
                         {{DNNL_ARG_SRC, x},
                          {DNNL_ARG_DIFF_DST, dy},
                          {DNNL_ARG_DIFF_WEIGHTS, dw},
                          {DNNL_ARG_DIFF_BIAS, db}}});
        steps.push_back(
            {dnnl::convolution_backward_data(dpd),
             {{DNNL_ARG_DIFF_SRC, dx}, {DNNL_ARG_WEIGHTS, wm}, {DNNL_ARG_DIFF_DST, dy}}});
      }
    } else {
      dnnl::inner_product_forward::primitive_desc fpd({prop_kind::forward_training, src, w, b, dst},
                                                      eng);
      if (!backward) {
        steps.push_back(
            {dnnl::inner_product_forward(fpd),
             {{DNNL_ARG_SRC, x}, {DNNL_ARG_WEIGHTS, wm}, {DNNL_ARG_BIAS, bm}, {DNNL_ARG_DST, y}}});
      } else {
        dnnl::inner_product_backward_weights::primitive_desc wpd({src, w, b, dst}, eng, fpd);
        dnnl::inner_product_backward_data::primitive_desc dpd({src, w, dst}, eng, fpd);
        steps.push_back({dnnl::inner_product_backward_weights(wpd),
                         {{DNNL_ARG_SRC, x},
                          {DNNL_ARG_DIFF_DST, dy},
                          {DNNL_ARG_DIFF_WEIGHTS, dw},
                          {DNNL_ARG_DIFF_BIAS, db}}});
        steps.push_back(
            {dnnl::inner_product_backward_data(dpd),
             {{DNNL_ARG_DIFF_SRC, dx}, {DNNL_ARG_WEIGHTS, wm}, {DNNL_ARG_DIFF_DST, dy}}});
      }
    }
  } else if (l.kind == core::LayerKind::kPool) {
    memory::desc src = md4(xs), dst = md4(l.out);
    const algorithm alg = s.pool == core::PoolMethod::kMax ? algorithm::pooling_max
                                                           : algorithm::pooling_avg_include_padding;
    memory::dims st{s.stride_h, s.stride_w}, k{s.kernel_h, s.kernel_w}, pl{s.pad_h, s.pad_w};
    memory::dims pr{(l.out.h - 1) * s.stride_h + s.kernel_h - xs.h - s.pad_h,
                    (l.out.w - 1) * s.stride_w + s.kernel_w - xs.w - s.pad_w};
    dnnl::pooling_forward::primitive_desc fpd(
        {prop_kind::forward_training, alg, src, dst, st, k, pl, pr}, eng);
    memory ws = fpd.workspace_desc().get_size() > 0 ? memory(fpd.workspace_desc(), eng) : memory();
    Args fa{{DNNL_ARG_SRC, mem(src, buf.x)}, {DNNL_ARG_DST, mem(dst, buf.y)}};
    Args ba{{DNNL_ARG_DIFF_SRC, mem(src, buf.dx)}, {DNNL_ARG_DIFF_DST, mem(dst, buf.dy)}};
    if (ws) fa[DNNL_ARG_WORKSPACE] = ws, ba[DNNL_ARG_WORKSPACE] = ws;
    dnnl::pooling_forward fwd(fpd);
    if (backward) {
      fwd.execute(strm, fa);  // fills the workspace
      steps.push_back({dnnl::pooling_backward(dnnl::pooling_backward::primitive_desc(
                           {alg, src, dst, st, k, pl, pr}, eng, fpd)),
                       ba});
    } else {
      steps.push_back({fwd, fa});
    }
  } else {  // relu
    memory::desc md = md4(xs);
    dnnl::eltwise_forward::primitive_desc fpd(
        {prop_kind::forward_training, algorithm::eltwise_relu, md, 0.f, 0.f}, eng);
    if (backward) {
      steps.push_back({dnnl::eltwise_backward(dnnl::eltwise_backward::primitive_desc(
                           {algorithm::eltwise_relu, md, md, 0.f, 0.f}, eng, fpd)),
                       {{DNNL_ARG_SRC, mem(md, buf.x)},
                        {DNNL_ARG_DIFF_DST, mem(md, buf.dy)},
                        {DNNL_ARG_DIFF_SRC, mem(md, buf.dx)}}});
    } else {
      steps.push_back({dnnl::eltwise_forward(fpd),
                       {{DNNL_ARG_SRC, mem(md, buf.x)}, {DNNL_ARG_DST, mem(md, buf.y)}}});
    }
  }
  strm.wait();
  for (auto _ : state) {
    for (auto& [prim, args] : steps) prim.execute(strm, args);
    strm.wait();
    benchmark::ClobberMemory();
  }
}

void Register(const std::string& model, int64_t batch, const std::vector<std::string>& names) {
  // Layers are copied into the lambdas: the Model does not outlive this function.
  const core::Model m = core::Model::Build(config::LoadModelFile(
      std::string(POSEIDON_SOURCE_DIR) + "/scenarios/models/" + model + ".yaml"));
  for (const std::string& name : names) {
    const core::Layer l = *m.FindLayer(name);
    for (const bool bwd : {false, true}) {
      const std::string suffix = bwd ? "/bwd" : "/fwd";
      benchmark::RegisterBenchmark(
          (model + "/" + name + "/ours" + suffix).c_str(),
          [l, batch, bwd](benchmark::State& st) { Ours(st, l, batch, bwd); })
          ->Unit(benchmark::kMicrosecond)
          ->UseRealTime();
      benchmark::RegisterBenchmark(
          (model + "/" + name + "/bare" + suffix).c_str(),
          [l, batch, bwd](benchmark::State& st) { Bare(st, l, batch, bwd); })
          ->Unit(benchmark::kMicrosecond)
          ->UseRealTime();
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  Register("alexnet", 16, {"conv1", "conv2", "conv3", "conv4", "conv5", "fc6", "fc7", "fc8"});
  Register("cifar10_quick", 50,
           {"conv1", "pool1", "relu1", "conv2", "relu2", "pool2", "conv3", "relu3", "pool3", "ip1",
            "ip2"});
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
