// tests/kernels/unsupported_layer_test.cc: a layer form the host backends do not train is refused
// when the Net is built, with one line that names the layer and says why: today the embedding on
// a sequence [S, D] (BERT's token types, which would need a second input of ids the model does
// not have) and the `mul` layer (a squeeze-and-excitation gate, which ONNX imports write; the
// simulator models it, no backend trains it yet). Every other layer type has a reference and a
// cpu kernel (fmnist_vit builds).
#include "kernels/net.h"

#include <string>

#include <gtest/gtest.h>

#include "config/model_loader.h"
#include "core/model.h"

namespace poseidon::kernels {
namespace {

// What building a Net of `m` on backend `b` throws; "" where the backend is not built in.
std::string NetRefusal(const core::Model& m, Backend b) {
  try {
    Net net(m, b, 2, 1);
  } catch (const KernelError& e) {
    const std::string what = e.what();
    return what.find("not built in") != std::string::npos ? "" : what;  // e.g. no oneDNN here
  }
  ADD_FAILURE() << "expected a KernelError";
  return "";
}

TEST(UnsupportedLayerTest, AnEmbeddingOnASequenceIsRefusedNamingTheLayer) {
  core::ModelSpec spec;
  spec.name = "types";
  spec.input_rank = 1, spec.input_c = 1, spec.input_h = 1, spec.input_w = 4;
  core::LayerSpec word;
  word.name = "word_emb", word.kind = core::LayerKind::kEmbedding;
  word.vocab = 10, word.num_output = 8;
  core::LayerSpec type = word;
  type.name = "type_emb", type.vocab = 2;
  spec.layers = {word, type};
  const core::Model m = core::Model::Build(spec);
  for (Backend b : {Backend::kReference, Backend::kCpu}) {
    const std::string what = NetRefusal(m, b);
    if (what.empty()) continue;
    EXPECT_NE(what.find("layer 'type_emb' (embedding): "), std::string::npos) << what;
    EXPECT_NE(what.find("second input of ids"), std::string::npos) << what;
    EXPECT_EQ(what.find('\n'), std::string::npos) << what;
  }
}

TEST(UnsupportedLayerTest, AMulLayerIsRefusedNamingTheLayer) {
  const core::Model m = core::Model::Build(config::LoadModelText(
      "schema_version: 1\ninput: {channels: 4, height: 6, width: 6}\nlayers:\n"
      "  - {name: x, type: relu}\n"
      "  - {name: gap, type: pool, global: true}\n"
      "  - {name: se, type: mul, bottom: [x, gap]}\n",
      "se.yaml"));
  for (Backend b : {Backend::kReference, Backend::kCpu}) {
    const std::string what = NetRefusal(m, b);
    if (what.empty()) continue;
    EXPECT_NE(what.find("layer 'se' (mul): the " + std::string(BackendName(b)) +
                        " backend has no kernel for layer type 'mul'"),
              std::string::npos)
        << what;
    EXPECT_EQ(what.find('\n'), std::string::npos) << what;
  }
}

TEST(UnsupportedLayerTest, EveryTransformerLayerOfFmnistVitHasAKernel) {
  const core::Model m = core::Model::Build(config::LoadModelFile(
      std::string(POSEIDON_SOURCE_DIR) + "/scenarios/models/fmnist_vit.yaml"));
  EXPECT_NO_THROW(Net(m, Backend::kReference, 2, 1));
}

}  // namespace
}  // namespace poseidon::kernels
