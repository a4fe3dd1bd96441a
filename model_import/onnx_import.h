// model_import/onnx_import.h: an ONNX model (ModelProto) -> a model file in our schema
// (scenarios/models/README.md), for `poseidon models import MODEL.onnx -o model.yaml`.
//
//   ImportResult r = ImportOnnxFile("resnet.onnx", {});
//   WriteFile("resnet.yaml", r.yaml);      // loads with config::LoadModelFile
//   std::cout << r.Summary() << "\n";      // "63 layers, 11,227,812 parameters, ..."
//
// Operators map to our layer types one to one (Conv, Gemm, BatchNormalization, Relu, ...) or as
// the subgraphs PyTorch 1.13 exports for one module (nn.LayerNorm before opset 17, nn.GELU's
// Erf form, nn.MultiheadAttention: one `attention` layer). Operators with no parameters and no
// cost (Identity, Dropout, Flatten, Reshape, Transpose, zero Pad, shape arithmetic, scalar
// scaling) are folded into their neighbours. The parameters of the YAML are the ONNX
// initializers that are weights (BatchNormalization's running statistics and constants are not):
// the import checks that the built model has exactly that many, and refuses otherwise.
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
  int64_t params = 0;        // parameters of the built model = the ONNX weights
  int64_t other_values = 0;  // initializer values that are not parameters (running stats, ...)
  int onnx_nodes = 0;
  std::map<std::string, int> folded;    // op type -> nodes folded away
  std::map<std::string, int> patterns;  // "attention", "layernorm", "gelu" -> subgraphs matched
  // 1 when the model input feeds an add or concat directly: our schema then needs a layer in
  // between, and the import adds a `dropout` of ratio 0 named `input` (no parameters).
  int added_pass_through = 0;
  // "63 layers, 11,227,812 parameters; folded 1 Flatten; matched 2 attention" (one line).
  std::string Summary() const;
};

// Whether this build reads ONNX (libonnx-dev was found at configure time).
bool OnnxSupported();

ImportResult ImportOnnxFile(const std::string& path, const ImportOptions& options);
// From the file's bytes; `file_name` names it in messages and the description.
ImportResult ImportOnnxBytes(const std::string& bytes, const std::string& file_name,
                             const ImportOptions& options);

}  // namespace poseidon::model_import
