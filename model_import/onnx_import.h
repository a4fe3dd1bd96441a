// model_import/onnx_import.h: an ONNX model (ModelProto) -> a model file in our schema
// (scenarios/models/README.md), for `poseidon models import MODEL.onnx -o model.yaml`.
//
//   ImportResult r = ImportOnnxFile("resnet.onnx", {});
//   WriteFile("resnet.yaml", r.yaml);      // loads with config::LoadModelFile
//   std::cout << r.Summary() << "\n";      // "63 layers, 11,227,812 parameters, ..."
//
// Operators map to our layer types one to one (Conv, Gemm, BatchNormalization, Relu, ...) or as
// the subgraphs PyTorch 1.13 exports for one module (nn.LayerNorm before opset 17, nn.GELU's
// Erf form, nn.MultiheadAttention: one `attention` layer); ReLU6, HardSwish and HardSigmoid,
// which have no type of their own, as the nearest one (noted in the YAML). Operators with no
// parameters and no cost (Identity, Dropout, Flatten, Reshape, Transpose, zero Pad, shape
// arithmetic, scalar scaling) are folded into their neighbours, and constant subgraphs are
// evaluated. The parameters of the YAML are the weights of the file: its initializers and
// the tensors computed from them that layers use as weights (an Identity copy of an
// initializer, which torch.onnx writes for each of several equal parameters, counts on its own;
// BatchNormalization's running statistics and constants are not weights), plus, where
// torch.onnx's eval export folded a BatchNorm into the conv before it, that BatchNorm's scale:
// the layers are then the module's (conv + batchnorm) and so is the total. The import checks
// that the built model has exactly that many, and refuses otherwise.
//
// Errors: anything that cannot be imported throws ImportError with one line,
// "FILE: error: node 'NAME' (OpType): why; what to do" (or "FILE: error: why; what to do" for
// the file as a whole: missing, not ONNX, truncated, built without ONNX). Deterministic: the
// same file gives byte-identical YAML. Thread-safety: none shared; calls are independent.
#pragma once

#include <cstdint>
#include <map>
#include <stdexcept>
#include <string>

namespace poseidon::model_import {

// One line always: control characters (a name in a damaged file may hold a newline) are
// written as '?'.
class ImportError : public std::runtime_error {
 public:
  explicit ImportError(const std::string& msg) : std::runtime_error(OneLine(msg)) {}

 private:
  static std::string OneLine(std::string s) {
    for (char& c : s) {
      if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) c = '?';
    }
    return s;
  }
};

struct ImportOptions {
  // The model's name in the YAML; empty: the file stem.
  std::string name;
  // Shown in the description and messages instead of the path (tests); empty: the path.
  std::string display_name;
};

struct ImportResult {
  std::string yaml;
  int layers = 0;
  // Parameters of the built model: the ONNX weights, plus the scales of restored BatchNorms.
  int64_t params = 0;
  int64_t other_values = 0;  // initializer values that are not parameters (running stats, ...)
  // BatchNorms restored after the convolutions torch.onnx's eval export had folded them into
  // (a conv whose weight and bias the exporter computed): how many, and the parameters they add
  // that the file no longer holds (each one's scale, C values; its shift is the conv's bias).
  int restored_batchnorm = 0;
  int64_t restored_params = 0;
  // Operators imported as the nearest layer type, which the YAML notes on their lines
  // ("HardSwish as gelu" -> count).
  std::map<std::string, int> approximated;
  // Position tables torch.onnx folded into the rows the sequence reads: counted S x D, the
  // module's table may have had more rows (noted on the layer's line).
  int folded_position_tables = 0;
  int onnx_nodes = 0;
  std::map<std::string, int> folded;    // op type -> nodes folded away
  std::map<std::string, int> patterns;  // "attention", "layernorm", "gelu" -> subgraphs matched
  // 1 when the model input feeds an add or concat directly: our schema then needs a layer in
  // between, and the import adds a `dropout` of ratio 0 named `input` (no parameters).
  int added_pass_through = 0;
  // "63 layers, 11,227,812 parameters (the ONNX weights; ...); subgraphs matched: 2 attention;
  // 1 node folded away (1 Flatten)" (one line).
  std::string Summary() const;
};

// Whether this build reads ONNX (libonnx-dev was found at configure time).
bool OnnxSupported();

ImportResult ImportOnnxFile(const std::string& path, const ImportOptions& options);
// From the file's bytes; `file_name` names it in messages and the description.
ImportResult ImportOnnxBytes(const std::string& bytes, const std::string& file_name,
                             const ImportOptions& options);

}  // namespace poseidon::model_import
