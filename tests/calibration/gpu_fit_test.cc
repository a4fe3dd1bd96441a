// The cudnn compute model against the published measurements it ships with
// (scenarios/devices/measurements/), and the fit that produced its constants.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <string>

#include "calibration/gpu_fit.h"
#include "config/measurement_loader.h"
#include "config/yaml_reader.h"
#include "cost/framework_model.h"
#include "cost/gpu_kernel_model.h"

namespace poseidon::calibration {
namespace {

const std::string kData = std::string(POSEIDON_SOURCE_DIR) + "/scenarios";

std::vector<GpuCase> Cases(const std::string& file) {
  return LoadGpuCases(config::LoadPublishedTimings(kData + "/devices/measurements/" + file),
                      kData);
}

// The shipped constants are what `poseidon gpu-model fit` gives from the fixed start: nobody
// tuned them by hand after the fit.
TEST(GpuFit, TheShippedConstantsAreTheFitOfTheFitRows) {
  const std::vector<GpuCase> cases = Cases("cnn_benchmarks.yaml");
  const config::KernelModelParams fitted = FitKernelParams(cases, config::KernelModelParams{});
  const config::KernelModelParams shipped = cost::FittedKernelParams();
  config::KernelModelParams a = fitted, b = shipped;
  for (int i = 0; i < config::kNumKernelParams; ++i) {
    SCOPED_TRACE(config::kKernelParamNames[i]);
    const double x = *config::KernelParamField(a, i), y = *config::KernelParamField(b, i);
    EXPECT_NEAR(x, y, 1e-4 * std::max(1.0, std::abs(y)));
  }
}

TEST(GpuFit, TheFitReadsOnlyTheFitRows) {
  std::vector<GpuCase> cases = Cases("cnn_benchmarks.yaml");
  const double before = FitObjective(cases, cost::FittedKernelParams());
  for (GpuCase& c : cases) {
    if (!c.row.fit) c.row.fwd_ms *= 10;  // a held-out row changed beyond recognition
  }
  EXPECT_DOUBLE_EQ(FitObjective(cases, cost::FittedKernelParams()), before);
}

// The framework model's fit: whole-iteration rows marked fit only; a file that says fp32 ran as
// TF32 is priced as tf32 on Ampere and later and as fp32 before.
TEST(GpuFit, TheFrameworkFitReadsOnlyTheFitRowsOfWholeIterations) {
  std::vector<GpuCase> cases = Cases("lambda_pytorch.yaml");
  for (GpuCase& c : Cases("cnn_benchmarks.yaml")) cases.push_back(std::move(c));
  const config::FrameworkModelParams shipped = cost::FittedFrameworkParams();
  const double before = FrameworkObjective(cases, shipped);
  EXPECT_GT(before, 0);
  bool tf32 = false, fp32 = false;
  for (GpuCase& c : cases) {
    if (c.row.iteration_ms > 0 && c.row.precision == config::Precision::kFp32) {
      (c.device.precision == config::Precision::kTf32 ? tf32 : fp32) = true;
      EXPECT_EQ(c.device.precision == config::Precision::kTf32,
                c.device.tensor_flops.count(config::Precision::kTf32) > 0)
          << c.row.device;
    }
    if (!c.row.fit) c.row.iteration_ms *= 10;  // held out: changed beyond recognition
    if (c.row.iteration_ms <= 0) c.row.fwd_ms *= 10;  // per-pass rows: not this model's
  }
  EXPECT_TRUE(tf32 && fp32);
  EXPECT_DOUBLE_EQ(FrameworkObjective(cases, shipped), before);
  // A short fit from the fixed start lowers the objective and never reads a held-out row.
  const config::FrameworkModelParams a = FitFrameworkParams(cases, {}, 80);
  EXPECT_LT(FrameworkObjective(cases, a), FrameworkObjective(cases, {}));
}

// Constants measured elsewhere (a kernel profile) are held at their value while the others fit.
TEST(GpuFit, AHeldFrameworkConstantKeepsItsValue) {
  const std::vector<GpuCase> cases = Cases("lambda_pytorch.yaml");
  config::FrameworkModelParams start{};
  start.memory_efficiency = 0.37;
  start.dispatch_us = 33;
  start.bn_native_nhwc = 2.5;  // measured, so held whether named or not
  const config::FrameworkModelParams a =
      FitFrameworkParams(cases, start, 60, {"memory_efficiency", "dispatch_us"});
  EXPECT_EQ(a.memory_efficiency, 0.37);
  EXPECT_EQ(a.dispatch_us, 33);
  EXPECT_EQ(a.bn_native_nhwc, 2.5);
  EXPECT_NE(a.tensor_efficiency, start.tensor_efficiency);  // the others moved
  EXPECT_LE(FrameworkObjective(cases, a), FrameworkObjective(cases, start));
}

// The framework model on the held-out whole-iteration rows is far closer than the cudnn model,
// which knows neither tensor cores nor half precision (docs/gpu_model.md has the table; the goal
// of the issue, median <= 10% and max <= 25% per precision, is not met yet).
TEST(GpuFit, TheFrameworkModelBeatsTheCudnnModelOnHeldOutIterations) {
  std::vector<GpuCase> cases;
  for (const char* f : {"lambda_pytorch.yaml", "dle_pytorch.yaml", "dle_tensorflow.yaml"}) {
    for (GpuCase& c : Cases(f)) cases.push_back(std::move(c));
  }
  const auto framework = EvaluateCases(cases, cost::FittedKernelParams(),
                                       config::DeviceComputeModel::kFramework);
  const auto cudnn =
      EvaluateCases(cases, cost::FittedKernelParams(), config::DeviceComputeModel::kCudnn);
  const ErrorStats f = Stats(framework, false, 0), c = Stats(cudnn, false, 0);
  EXPECT_GT(f.rows, 30);
  EXPECT_EQ(f.rows, c.rows);
  EXPECT_LT(f.median_abs, 0.25);
  EXPECT_GT(c.median_abs, 2 * f.median_abs);
}

// The fresh set (scenarios/devices/measurements/fresh/, recorded after the model of cfef734 was
// frozen, held out for it: median 13.2%, max 52.0%). Its rows stay marked held out, but the
// framework model of now was fitted with --all-rows on them (docs/gpu_model.md, "v5"): in sample,
// median 15.3%, max 29.4% (v3: 18.3%, 48.1%; v2: 18.6%, 51.6%); a model change that moves these
// must move the docs too.
TEST(GpuFit, TheFreshSetIsPricedAsTheDocsSay) {
  std::vector<GpuCase> cases;
  for (const auto& e : std::filesystem::directory_iterator(kData + "/devices/measurements/fresh")) {
    if (e.path().extension() != ".yaml") continue;
    for (GpuCase& c : LoadGpuCases(config::LoadPublishedTimings(e.path().string()), kData)) {
      EXPECT_FALSE(c.row.fit) << c.row.loc.file << ":" << c.row.loc.line;
      cases.push_back(std::move(c));
    }
  }
  EXPECT_GE(cases.size(), 60u);
  const auto errors = EvaluateCases(cases, cost::FittedKernelParams(),
                                    config::DeviceComputeModel::kFramework);
  const ErrorStats s = Stats(errors, /*fit_rows=*/false, /*which=*/0);
  EXPECT_EQ(s.rows, static_cast<int>(cases.size()));
  EXPECT_NEAR(s.median_abs, 0.1533, 0.0005);
  EXPECT_NEAR(s.max_abs, 0.2935, 0.0005);
}

// The framework model's error over every row of a file of measurements/ (a path below it), each
// row marked held out.
ErrorStats HeldOutSetStats(const std::string& path, size_t rows) {
  const std::string file = kData + "/devices/measurements/" + path;
  std::vector<GpuCase> cases = LoadGpuCases(config::LoadPublishedTimings(file), kData);
  EXPECT_EQ(cases.size(), rows);
  for (const GpuCase& c : cases) EXPECT_FALSE(c.row.fit) << c.row.loc.line;
  const auto errors = EvaluateCases(cases, cost::FittedKernelParams(),
                                    config::DeviceComputeModel::kFramework);
  const ErrorStats s = Stats(errors, /*fit_rows=*/false, /*which=*/0);
  EXPECT_EQ(s.rows, static_cast<int>(rows));
  return s;
}

// HeldOutSetStats, whose median and max |error| are what the docs say (to 0.05 points).
void ExpectSetPricedAs(const std::string& path, size_t rows, double median, double max) {
  SCOPED_TRACE(path);
  const ErrorStats s = HeldOutSetStats(path, rows);
  EXPECT_NEAR(s.median_abs, median, 0.0005);
  EXPECT_NEAR(s.max_abs, max, 0.0005);
}

// The grouped-convolution sets (docs/gpu_model.md, "Grouped convolutions"): DeepLearningExamples'
// ResNeXt rows and timm's RTX 3090 ones, both fitted on by v3 and v5 (--all-rows): in sample,
// median 5.2%, max 22.0%, and 7.5%, 50.3% (v3: 5.1%, 22.8%, and 11.1%, 47.9%; before
// v3: 11.1%, 34.4%, in sample for the tiles spanning groups; 32.1%, 44.0% held out for them). A
// model change that moves these must move the docs too.
TEST(GpuFit, TheGroupedConvolutionSetsArePricedAsTheDocsSay) {
  ExpectSetPricedAs("fresh_2026-12-07/dle_pytorch_resnext.yaml", 24, 0.0519, 0.2199);
  ExpectSetPricedAs("fresh_2026-12-07/timm_rtx3090_resnext.yaml", 22, 0.0754, 0.5027);
}

// The PyTorch 1.10 set (RTX 3090, fp16, NCHW and NHWC; fresh_2026-12-07/), recorded before v3 was
// begun and kept blind until v3 was frozen (8fcd558): held out for it, median 19.3%, max 48.4%
// (v2's constants on the same rows: 27.6%, 49.8%), as docs/gpu_model.md, "v3", says. v5 was
// fitted on it too: in sample, 12.3%, 50.8%.
TEST(GpuFit, ThePyTorch110SetIsPricedAsTheDocsSay) {
  ExpectSetPricedAs("fresh_2026-12-07/timm_rtx3090_pt110.yaml", 30, 0.1235, 0.5082);
}

// The depthwise family (EfficientNet, MobileNet v2; docs/gpu_model.md, "v4"). DeepLearningExamples'
// EfficientNet rows (V100 fp32 and fp16, A100 tf32 and fp16) were recorded before the family's
// model files existed and priced once, after v4 was frozen (edcf2cd): held out for it, median
// 8.1%, max 13.6% (v3: 21.8%, 30.4%). timm's PyTorch 1.10 and 1.12 rows were held out for v3
// (12.4%, 28.1%) and seen by v4's fit of its depthwise rates (4.9%, 14.3%). v5 was fitted on both:
// in sample, 8.4%, 13.0%, and 3.8%, 17.2%.
TEST(GpuFit, TheDepthwiseSetsArePricedAsTheDocsSay) {
  ExpectSetPricedAs("depthwise_2026-12-07/dle_pytorch_efficientnet.yaml", 16, 0.0841, 0.1295);
  ExpectSetPricedAs("depthwise_2026-12-07/timm_rtx3090_pt110_pt112.yaml", 14, 0.0379, 0.1722);
}

// The two families sets (timm, RTX 3090, fp16; docs/gpu_model.md, "v5"), each recorded before its
// model files existed. Wide ResNet, ResNet-D, DenseNet and RegNet were held out for v4 (29.6%,
// 82.5%) and v5 was fitted on them less RegNet's channels-last rows: over all 72, 15.5%, 84.6%.
// VGG-13 and with batch norm, SE-ResNet-50, RepVGG, MnasNet, SemNASNet, SPNASNet and MobileNet v2
// 1.4 were kept blind until v5 was frozen (336044a): held out for it, 10.7%, 36.6%.
TEST(GpuFit, TheFamiliesSetsArePricedAsTheDocsSay) {
  ExpectSetPricedAs("families_2026-12-07/timm_rtx3090_families.yaml", 72, 0.1550, 0.8456);
  ExpectSetPricedAs("families2_2026-12-07/timm_rtx3090_families2.yaml", 66, 0.1072, 0.3661);
}

// The SSD300 set (Lambda's v1 and v2 campaigns, one GPU each of Volta, Turing, Ampere, Ada,
// Hopper and Blackwell, fp32/tf32 and AMP; docs/gpu_model.md, "v5 judged on SSD300"), recorded
// at e6a9097 before the ssd300 model file existed and priced once, with v5 frozen: held out, v1
// campaign median 9.0%, max 41.9%; v2 campaign 16.5%, 19.2%.
TEST(GpuFit, TheSsdSetIsPricedAsTheDocsSay) {
  ExpectSetPricedAs("ssd_2026-12-07/lambda_ssd_v1.yaml", 24, 0.0897, 0.4188);
  ExpectSetPricedAs("ssd_2026-12-07/lambda_ssd_v2.yaml", 12, 0.1647, 0.1922);
}

// The Transformer-XL set (Lambda's v1 campaign, base and large, one GPU each of Volta, Turing,
// Ampere, Ada and Hopper, fp32/tf32 and fp16; docs/gpu_model.md, "v5 judged on Transformer-XL"),
// recorded at eff3e56 before the schema could say its attention and before its model files, and
// priced once with v5 frozen: held out, median 14.9%, max 106.3% (A100's output layer, an
// unaligned GEMM priced on CUDA cores). v6 (unaligned GEMMs on tensor cores) was fitted on it:
// in sample, 8.7%, 36.2%.
TEST(GpuFit, TheTransformerXlSetIsPricedAsTheDocsSay) {
  ExpectSetPricedAs("transformer_xl_2026-12-07/lambda_transformer_xl_v1.yaml", 48, 0.0866, 0.3625);
}

// The v0 campaign's Transformer-XL set (NGC 20.01 / 20.10 / 21.x; docs/gpu_model.md, "v6 judged
// on the v0 campaign's Transformer-XL"), recorded at 94dc6fd after v6 was frozen, its rows'
// cuda_version added before any was priced, and priced once by v6 with cuBLAS 10's rule: held out,
// median 11.5%, max 44.2% (an A40 in TF32, predicted fast).
TEST(GpuFit, TheV0TransformerXlSetIsPricedAsTheDocsSay) {
  ExpectSetPricedAs("transformer_xl_2026-12-07/lambda_transformer_xl_v0.yaml", 50, 0.1147, 0.4421);
}

// The first H200 set (scenarios/devices/measurements/measured/, PyTorch on a lent H200, held out
// for the model of cfef734: median 20.8%, max 63.9%). The model of now was fitted on it too
// (--all-rows): in sample, median 18.8%, max 45.3% (v3: 16.4%, 46.5%; v2: 11.8%, 43.1%), as
// docs/gpu_model.md says.
TEST(GpuFit, TheFirstH200SetIsPricedAsTheDocsSay) {
  ExpectSetPricedAs("measured/h200_pytorch_2026-12-04.yaml", 33, 0.1876, 0.4526);
}

// The second H200 set, measured after the framework model v2 was frozen (f1367c2), held out for it
// (median 14.2%, max 45.9%). v3 and v5 were fitted on it too (--all-rows): in sample, median
// 11.6%, max 43.6% (v3: 11.5%, 48.4%), as docs/gpu_model.md says. Its rows stay marked held out.
TEST(GpuFit, TheSecondH200SetIsPricedAsTheDocsSay) {
  ExpectSetPricedAs("measured/h200_pytorch_blind_2026-12-04.yaml", 32, 0.1163, 0.4359);
}

// The goals of docs/gpu_model.md on the held-out rows, fwd + bwd per row.
TEST(GpuFit, HeldOutErrorsMeetTheGoals) {
  for (const char* file : {"convnet_benchmarks.yaml", "cnn_benchmarks.yaml"}) {
    SCOPED_TRACE(file);
    const std::vector<GpuCase> cases = Cases(file);
    const auto errors =
        EvaluateCases(cases, cost::FittedKernelParams(), config::DeviceComputeModel::kCudnn);
    const ErrorStats s = Stats(errors, /*fit_rows=*/false, /*which=*/0);
    EXPECT_GT(s.rows, 0);
    EXPECT_LE(s.median_abs, 0.10);
    EXPECT_LE(s.max_abs, 0.25);
  }
}

// The roofline it replaces, on the same rows, for comparison: far outside those goals.
TEST(GpuFit, TheRooflineMissesByFarMore) {
  const std::vector<GpuCase> cases = Cases("convnet_benchmarks.yaml");
  const auto errors =
      EvaluateCases(cases, cost::FittedKernelParams(), config::DeviceComputeModel::kRoofline);
  EXPECT_GT(Stats(errors, false, 0).median_abs, 0.5);
}

TEST(PublishedTimings, BadRowsAreLocated) {
  const std::string head = "schema_version: 1\nsource: test\nmeasurements:\n";
  struct Case {
    std::string row, says;
  };
  const Case cases[] = {
      {"  - {model: alexnet, device: k40, batch: 16, fwd_ms: 1, bwd_ms: 2}\n", "has no 'set'"},
      {"  - {model: alexnet, device: k40, batch: 0, fwd_ms: 1, bwd_ms: 2, set: fit}\n",
       "must be a positive integer"},
      {"  - {model: alexnet, device: k40, batch: 16, fwd_ms: 1, bwd_ms: 2, set: train}\n",
       "unknown set 'train'"},
      {"  - {model: alexnet, device: k40, batch: 16, fwd_ms: 1, bwd_ms: 2, bwd_from_total: 4, "
       "set: fit}\n",
       "is not fwd_ms + bwd_ms"},
      {"  - {model: resnet50, device: a100, batch: 256, samples_per_s: 900, memory_format: nhcw, "
       "set: fit}\n",
       "nchw"},
      {"  - {model: resnet50, device: a100, batch: 256, samples_per_s: 900, "
       "batchnorm_fusion: bn_gelu, set: fit}\n",
       "unknown batchnorm_fusion 'bn_gelu'"},
      {"  - {model: resnet50, device: a100, batch: 256, samples_per_s: 900, "
       "cuda_version: eleven, set: fit}\n",
       "cuda_version 'eleven' is not a CUDA release MAJOR.MINOR"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.row);
    try {
      config::ParsePublishedTimings(head + c.row, "m.yaml");
      ADD_FAILURE() << "expected a ConfigError";
    } catch (const config::ConfigError& e) {
      const std::string msg = e.what();
      EXPECT_EQ(msg.rfind("m.yaml:4:", 0), 0u) << msg;
      EXPECT_NE(msg.find(c.says), std::string::npos) << msg;
    }
  }
  // A file with `file_key` at the top and two rows, the second with `row_key` of its own.
  auto two_rows = [](const std::string& file_key, const std::string& row_key) {
    return config::ParsePublishedTimings(
        "schema_version: 1\nsource: test\n" + file_key +
            "\nmeasurements:\n"
            "  - {model: resnet50, device: a100, batch: 256, samples_per_s: 900, set: fit}\n"
            "  - {model: resnet50, device: a100, batch: 256, samples_per_s: 900, " +
            row_key + ", set: fit}\n",
        "m.yaml");
  };
  // memory_format: the file's applies to every row that does not give its own.
  const auto layouts = two_rows("memory_format: nhwc", "memory_format: nchw");
  ASSERT_EQ(layouts.rows.size(), 2u);
  EXPECT_EQ(layouts.rows[0].memory_format, config::MemoryFormat::kNhwc);
  EXPECT_EQ(layouts.rows[1].memory_format, config::MemoryFormat::kNchw);
  // batchnorm_fusion likewise: the file's, or the row's own.
  const auto fused = two_rows("batchnorm_fusion: bn_relu", "batchnorm_fusion: bn_add_relu");
  ASSERT_EQ(fused.rows.size(), 2u);
  EXPECT_EQ(fused.rows[0].batchnorm_fusion, config::BatchNormFusion::kBnRelu);
  EXPECT_EQ(fused.rows[1].batchnorm_fusion, config::BatchNormFusion::kBnAddRelu);
  EXPECT_EQ(layouts.rows[0].batchnorm_fusion, config::BatchNormFusion::kNone);
  // cuda_version likewise (major * 10 + minor); without it a current release (0).
  const auto cuda = two_rows("cuda_version: \"11.2\"", "cuda_version: \"10.2.89\"");
  ASSERT_EQ(cuda.rows.size(), 2u);
  EXPECT_EQ(cuda.rows[0].cuda_version, 112);
  EXPECT_EQ(cuda.rows[1].cuda_version, 102);
  EXPECT_EQ(layouts.rows[0].cuda_version, 0);
  // A row the named release cannot have run (an A100 under CUDA 10.2, a V100 under 8.0), located
  // at its row.
  for (const std::string& row :
       {std::string("{model: resnet50, device: a100, batch: 256, samples_per_s: 900, "
                    "precision: fp16, cuda_version: \"10.2\", set: fit}"),
        std::string("{model: resnet50, device: v100, batch: 256, samples_per_s: 900, "
                    "precision: fp16, cuda_version: \"8.0\", set: fit}")}) {
    SCOPED_TRACE(row);
    try {
      LoadGpuCases(config::ParsePublishedTimings(head + "  - " + row + "\n", "m.yaml"), kData);
      ADD_FAILURE() << "expected a ConfigError";
    } catch (const config::ConfigError& e) {
      const std::string msg = e.what();
      EXPECT_EQ(msg.rfind("m.yaml:4:", 0), 0u) << msg;
      EXPECT_NE(msg.find("needs CUDA"), std::string::npos) << msg;
    }
  }
  // The V100 under CUDA 10.2 at fp16 is a row it can price.
  EXPECT_EQ(LoadGpuCases(config::ParsePublishedTimings(
                             head + "  - {model: resnet50, device: v100, batch: 256, "
                                    "samples_per_s: 900, precision: fp16, cuda_version: \"10.2\", "
                                    "set: fit}\n",
                             "m.yaml"),
                         kData)
                .size(),
            1u);
  EXPECT_THROW(config::ParsePublishedTimings("schema_version: 1\nmeasurements: []\n", "m.yaml"),
               config::ConfigError);  // no source
  const auto t = config::ParsePublishedTimings(
      head + "  - {model: nosuchmodel, device: k40, batch: 16, fwd_ms: 1, bwd_ms: 2, set: fit}\n",
      "m.yaml");
  try {
    LoadGpuCases(t, kData);
    ADD_FAILURE() << "expected a ConfigError";
  } catch (const config::ConfigError& e) {
    EXPECT_EQ(std::string(e.what()).rfind("m.yaml:4:", 0), 0u) << e.what();
  }
}

}  // namespace
}  // namespace poseidon::calibration
