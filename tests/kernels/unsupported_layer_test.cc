// tests/kernels/unsupported_layer_test.cc: a model with a layer type the kernels do not implement
// yet (the transformer layers, which the simulator models) is refused when the Net is built, with
// one line that names the layer, its type and the backend.
#include "kernels/net.h"

#include <string>

#include <gtest/gtest.h>

#include "config/model_loader.h"
#include "core/model.h"

namespace poseidon::kernels {
namespace {

TEST(UnsupportedLayerTest, ATransformerLayerIsRefusedNamingTheLayerAndType) {
  const core::Model m = core::Model::Build(config::LoadModelFile(
      std::string(POSEIDON_SOURCE_DIR) + "/scenarios/models/fmnist_vit.yaml"));
  for (Backend b : {Backend::kReference, Backend::kCpu}) {
    try {
      Net net(m, b, 2, 1);
      ADD_FAILURE() << "expected a KernelError";
    } catch (const KernelError& e) {
      const std::string what = e.what();
      EXPECT_NE(what.find("layer 'patch' (patch_embed): the "), std::string::npos) << what;
      EXPECT_NE(what.find("backend has no kernel for layer type 'patch_embed'"), std::string::npos)
          << what;
      EXPECT_EQ(what.find('\n'), std::string::npos) << what;
    }
  }
}

}  // namespace
}  // namespace poseidon::kernels
