// model_import/onnx_constants.cc: what a constant tensor is. torch.onnx folds most constant
// subgraphs, not all: its eval export stores equal tensors once and reads each copy through an
// Identity node (the zero shift of every fresh BatchNorm folded into a conv, the layers of an
// nn.TransformerEncoder, which are clones), and it leaves shape arithmetic (Shape, Gather, Add,
// Div, Mul -> Slice, Reshape) and, where it does not fold, positions (Range -> Gather) in the
// graph. Source follows Identity nodes to the initializer a weight is; Evaluate computes the
// value of a small constant (shapes, indices, bounds) for the operators those exports hold;
// ConstDims gives any constant's shape. A malformed file gives "unknown", never a crash.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <set>
#include <string>
#include <vector>

#include "model_import/onnx_importer.h"

namespace poseidon::model_import::detail {
namespace {

// Values evaluated: shapes, indices and bounds are small; weights are never evaluated.
constexpr int64_t kMaxValues = int64_t{1} << 20;
// Nodes followed back from a tensor; past it the value is unknown (a loop in a bad file).
constexpr int kMaxDepth = 64;

// The product of dims, or -1 if one is negative or it passes kMaxValues.
int64_t Count(const std::vector<int64_t>& dims) {
  int64_t n = 1;
  for (int64_t d : dims) {
    if (d < 0 || (d > 0 && n > kMaxValues / d)) return -1;
    n *= d;
  }
  return n;
}

// Reads `n` little-endian values of T from raw bytes (ONNX's raw_data layout).
template <typename T>
bool Raw(const std::string& raw, int64_t n, std::vector<T>* out) {
  if (static_cast<int64_t>(raw.size()) != n * static_cast<int64_t>(sizeof(T))) return false;
  out->resize(static_cast<size_t>(n));
  if (n > 0) std::memcpy(out->data(), raw.data(), raw.size());
  return true;
}

template <typename From, typename To>
void Append(const std::vector<From>& in, std::vector<To>* out) {
  for (const From& x : in) out->push_back(static_cast<To>(x));
}

bool Decode(const onnx::TensorProto& t, ConstValue* v) {
  v->dims.assign(t.dims().begin(), t.dims().end());
  const int64_t n = Count(v->dims);
  if (n < 0 || t.data_location() == onnx::TensorProto::EXTERNAL) return false;
  const std::string& raw = t.raw_data();
  const bool has_raw = t.has_raw_data();
  auto fixed = [&](auto typed, auto* out_vec, auto repeated) {
    using T = decltype(typed);
    std::vector<T> vals;
    if (has_raw) {
      if (!Raw(raw, n, &vals)) return false;
    } else {
      if (static_cast<int64_t>(repeated.size()) != n) return false;
      for (const auto& x : repeated) vals.push_back(static_cast<T>(x));
    }
    Append(vals, out_vec);
    return true;
  };
  switch (t.data_type()) {
    case onnx::TensorProto::FLOAT:
      return fixed(float{}, &v->floats, t.float_data());
    case onnx::TensorProto::DOUBLE:
      return fixed(double{}, &v->floats, t.double_data());
    case onnx::TensorProto::INT64:
      v->is_int = true;
      return fixed(int64_t{}, &v->ints, t.int64_data());
    case onnx::TensorProto::INT32:
      v->is_int = true;
      return fixed(int32_t{}, &v->ints, t.int32_data());
    case onnx::TensorProto::INT8:
      v->is_int = true;
      return fixed(int8_t{}, &v->ints, t.int32_data());
    case onnx::TensorProto::UINT8:
    case onnx::TensorProto::BOOL:
      v->is_int = true;
      return fixed(uint8_t{}, &v->ints, t.int32_data());
    default:
      return false;
  }
}

ConstValue IntTensor(std::vector<int64_t> dims, std::vector<int64_t> values) {
  ConstValue v;
  v.dims = std::move(dims);
  v.is_int = true;
  v.ints = std::move(values);
  return v;
}

// The flat offsets into a tensor of `in` dims read by each element of its broadcast to `out`
// (numpy's rules: dims aligned on the right, 1 stretches).
std::vector<int64_t> BroadcastOffsets(const std::vector<int64_t>& in,
                                      const std::vector<int64_t>& out) {
  const size_t r = out.size();
  std::vector<int64_t> stride(r, 0);
  int64_t s = 1;
  for (size_t k = 0; k < in.size(); ++k) {
    const size_t a = in.size() - 1 - k;
    stride[r - 1 - k] = in[a] == 1 ? 0 : s;
    s *= in[a];
  }
  std::vector<int64_t> offsets(static_cast<size_t>(Count(out)));
  std::vector<int64_t> idx(r, 0);
  for (int64_t& o : offsets) {
    int64_t off = 0;
    for (size_t k = 0; k < r; ++k) off += idx[k] * stride[k];
    o = off;
    for (size_t k = r; k-- > 0;) {
      if (++idx[k] < out[k]) break;
      idx[k] = 0;
    }
  }
  return offsets;
}

// numpy's broadcast of two shapes; false if they do not broadcast.
bool BroadcastDims(const std::vector<int64_t>& a, const std::vector<int64_t>& b,
                   std::vector<int64_t>* out) {
  const size_t r = std::max(a.size(), b.size());
  out->assign(r, 1);
  for (size_t k = 0; k < r; ++k) {
    const int64_t x = k < a.size() ? a[a.size() - 1 - k] : 1;
    const int64_t y = k < b.size() ? b[b.size() - 1 - k] : 1;
    if (x != y && x != 1 && y != 1) return false;
    (*out)[r - 1 - k] = x == 1 ? y : x;
  }
  return Count(*out) >= 0;
}

// v's values re-read at `offsets` (a gather, a broadcast) under new dims.
ConstValue Pick(const ConstValue& v, std::vector<int64_t> dims,
                const std::vector<int64_t>& offsets) {
  ConstValue out;
  out.dims = std::move(dims);
  out.is_int = v.is_int;
  for (int64_t o : offsets) {
    if (v.is_int) {
      out.ints.push_back(v.ints[static_cast<size_t>(o)]);
    } else {
      out.floats.push_back(v.floats[static_cast<size_t>(o)]);
    }
  }
  return out;
}

// An axis attribute or value, counted from the end when negative; -1 if outside [0, rank).
int64_t Axis(int64_t a, int64_t rank) {
  if (a < 0) a += rank;
  return a >= 0 && a < rank ? a : -1;
}

std::optional<ConstValue> Binary(const std::string& op, const ConstValue& a, const ConstValue& b) {
  std::vector<int64_t> dims;
  if (!BroadcastDims(a.dims, b.dims, &dims)) return std::nullopt;
  const std::vector<int64_t> oa = BroadcastOffsets(a.dims, dims);
  const std::vector<int64_t> ob = BroadcastOffsets(b.dims, dims);
  ConstValue out;
  out.dims = dims;
  out.is_int = a.is_int && b.is_int;
  for (size_t k = 0; k < oa.size(); ++k) {
    if (out.is_int) {
      const int64_t x = a.ints[static_cast<size_t>(oa[k])];
      const int64_t y = b.ints[static_cast<size_t>(ob[k])];
      if (op == "Div" && (y == 0 || (x == std::numeric_limits<int64_t>::min() && y == -1))) {
        return std::nullopt;
      }
      // Shape arithmetic stays far from overflow; wrap (unsigned) rather than trap if a bad
      // file does not.
      const auto ux = static_cast<uint64_t>(x), uy = static_cast<uint64_t>(y);
      out.ints.push_back(op == "Add"   ? static_cast<int64_t>(ux + uy)
                         : op == "Sub" ? static_cast<int64_t>(ux - uy)
                         : op == "Mul" ? static_cast<int64_t>(ux * uy)
                                       : x / y);  // ONNX integer Div truncates
    } else {
      const double x = a.F(oa[k]), y = b.F(ob[k]);
      out.floats.push_back(op == "Add" ? x + y : op == "Sub" ? x - y : op == "Mul" ? x * y : x / y);
    }
  }
  return out;
}

// ONNX Slice on one axis: the first index and count for start, end, step over a dim of size n.
bool SliceRange(int64_t start, int64_t end, int64_t step, int64_t n, int64_t* first,
                int64_t* count) {
  if (step == 0 || n < 0 || n > kMaxValues) return false;
  // Negative positions count from the end; then both are clamped to the dim (ONNX's rules: a
  // backward slice may end at -1, before the first element).
  auto from_end = [n](int64_t x) { return x >= 0 ? x : (x < -n ? -1 : x + n); };
  const int64_t s = step > 0 ? std::clamp<int64_t>(from_end(start), 0, n)
                             : std::clamp<int64_t>(from_end(start), 0, n - 1);
  const int64_t e = step > 0 ? std::clamp<int64_t>(from_end(end), 0, n)
                             : std::clamp<int64_t>(from_end(end), -1, n - 1);
  *first = s;
  // Written so that no step, however large, overflows.
  if (step > 0) {
    *count = e > s ? (e - s - 1) / step + 1 : 0;
  } else {
    if (step == std::numeric_limits<int64_t>::min()) return false;
    *count = s > e ? (s - e - 1) / -step + 1 : 0;
  }
  return true;
}

}  // namespace

const ConstValue* Importer::Evaluate(const std::string& t) const { return Eval(t, 0); }

std::optional<std::vector<int64_t> > Importer::IntsOf(const std::string& t) const {
  const ConstValue* v = Evaluate(t);
  if (v == nullptr || !v->is_int) return std::nullopt;
  return v->ints;
}

const ConstValue* Importer::Eval(const std::string& t, int depth) const {
  auto it = evaluated_.find(t);
  if (it != evaluated_.end()) return it->second ? &*it->second : nullptr;
  std::optional<ConstValue> v;
  if (!t.empty() && IsConst(t) && depth <= kMaxDepth) {
    if (const onnx::TensorProto* init = Init(t)) {
      ConstValue d;
      if (Decode(*init, &d)) v = std::move(d);
    } else if (const int p = Producer(t); p >= 0 && N(p).output(0) == t) {
      v = Compute(p, depth);
    }
  }
  if (v && (Count(v->dims) != v->size())) v.reset();  // a value must fill its shape
  auto& slot = evaluated_[t];
  slot = std::move(v);
  return slot ? &*slot : nullptr;
}

std::optional<ConstValue> Importer::Compute(int i, int depth) const {
  const onnx::NodeProto& n = N(i);
  const std::string& op = n.op_type();
  auto in = [&](int k) -> const ConstValue* {
    return k < n.input_size() && !n.input(k).empty() ? Eval(n.input(k), depth + 1) : nullptr;
  };
  // An int list given as an attribute (older opsets) or as input k (newer).
  auto ints_arg = [&](const std::string& attr, int k) -> std::optional<std::vector<int64_t> > {
    for (const auto& at : n.attribute()) {
      if (at.name() == attr) return std::vector<int64_t>(at.ints().begin(), at.ints().end());
    }
    const ConstValue* v = in(k);
    if (v != nullptr && v->is_int) return v->ints;
    return std::nullopt;
  };

  if (op == "Constant") {
    for (const auto& at : n.attribute()) {
      ConstValue v;
      if (at.name() == "value") {
        if (Decode(at.t(), &v)) return v;
      } else if (at.name() == "value_float") {
        v.floats = {at.f()};
        return v;
      } else if (at.name() == "value_floats") {
        v.dims = {at.floats_size()};
        Append(std::vector<float>(at.floats().begin(), at.floats().end()), &v.floats);
        return v;
      } else if (at.name() == "value_int") {
        return IntTensor({}, {at.i()});
      } else if (at.name() == "value_ints") {
        return IntTensor({at.ints_size()}, {at.ints().begin(), at.ints().end()});
      }
    }
    return std::nullopt;
  }
  if (op == "Shape") {
    // Static here: the input's inferred shape (a constant's own when it is one).
    std::optional<std::vector<int64_t> > d = n.input_size() > 0 ? Dims(n.input(0)) : std::nullopt;
    if (!d && n.input_size() > 0) d = ConstDims(n.input(0));
    if (!d || Count(*d) < 0) return std::nullopt;
    const auto r = static_cast<int64_t>(d->size());
    int64_t start = Int(n, "start").value_or(0), end = Int(n, "end").value_or(r);
    start = std::clamp<int64_t>(start < 0 ? start + r : start, 0, r);
    end = std::clamp<int64_t>(end < 0 ? end + r : end, 0, r);
    std::vector<int64_t> v(d->begin() + start, d->begin() + std::max(start, end));
    const auto len = static_cast<int64_t>(v.size());
    return IntTensor({len}, std::move(v));
  }
  if (op == "Identity") {
    const ConstValue* a = in(0);
    return a ? std::optional<ConstValue>(*a) : std::nullopt;
  }
  if (op == "Cast") {
    const ConstValue* a = in(0);
    if (a == nullptr) return std::nullopt;
    const int64_t to = Int(n, "to").value_or(0);
    ConstValue v;
    v.dims = a->dims;
    if (to == onnx::TensorProto::FLOAT || to == onnx::TensorProto::DOUBLE) {
      for (int64_t k = 0; k < a->size(); ++k) v.floats.push_back(a->F(k));
      return v;
    }
    if (to == onnx::TensorProto::INT64 || to == onnx::TensorProto::INT32 ||
        to == onnx::TensorProto::BOOL) {
      v.is_int = true;
      for (int64_t k = 0; k < a->size(); ++k) {
        const double x = a->F(k);
        if (to == onnx::TensorProto::BOOL) {
          v.ints.push_back(x != 0);
        } else if (a->is_int) {
          v.ints.push_back(a->ints[static_cast<size_t>(k)]);
        } else if (std::isfinite(x) && std::fabs(x) < 9.0e18) {
          v.ints.push_back(static_cast<int64_t>(x));  // truncation, as ONNX's Cast
        } else {
          return std::nullopt;
        }
      }
      return v;
    }
    return std::nullopt;
  }
  if (op == "Add" || op == "Sub" || op == "Mul" || op == "Div") {
    const ConstValue *a = in(0), *b = in(1);
    if (a == nullptr || b == nullptr) return std::nullopt;
    return Binary(op, *a, *b);
  }
  if (op == "Sqrt") {
    const ConstValue* a = in(0);
    if (a == nullptr) return std::nullopt;
    ConstValue v;
    v.dims = a->dims;
    for (int64_t k = 0; k < a->size(); ++k) v.floats.push_back(std::sqrt(a->F(k)));
    return v;
  }
  if (op == "Range") {
    const ConstValue *s = in(0), *l = in(1), *d = in(2);
    if (s == nullptr || l == nullptr || d == nullptr || s->size() != 1 || l->size() != 1 ||
        d->size() != 1 || d->F(0) == 0) {
      return std::nullopt;
    }
    const double count = std::ceil((l->F(0) - s->F(0)) / d->F(0));
    if (!(count <= static_cast<double>(kMaxValues))) return std::nullopt;  // NaN too
    const int64_t m = std::max<int64_t>(0, static_cast<int64_t>(count));
    ConstValue v;
    v.dims = {m};
    v.is_int = s->is_int && l->is_int && d->is_int;
    for (int64_t k = 0; k < m; ++k) {
      if (v.is_int) {
        int64_t x = 0;
        if (__builtin_mul_overflow(k, d->ints[0], &x) ||
            __builtin_add_overflow(x, s->ints[0], &x)) {
          return std::nullopt;  // a bad file's bounds
        }
        v.ints.push_back(x);
      } else {
        v.floats.push_back(s->F(0) + static_cast<double>(k) * d->F(0));
      }
    }
    return v;
  }
  if (op == "Unsqueeze" || op == "Squeeze" || op == "Reshape" || op == "Expand") {
    const ConstValue* a = in(0);
    if (a == nullptr) return std::nullopt;
    std::vector<int64_t> dims;
    if (op == "Expand") {
      const ConstValue* shape = in(1);
      if (shape == nullptr || !shape->is_int || !BroadcastDims(a->dims, shape->ints, &dims)) {
        return std::nullopt;
      }
      return Pick(*a, dims, BroadcastOffsets(a->dims, dims));
    }
    if (op == "Reshape") {
      const ConstValue* shape = in(1);
      if (shape == nullptr || !shape->is_int) return std::nullopt;
      int64_t known = 1, infer = -1;
      for (size_t k = 0; k < shape->ints.size(); ++k) {
        int64_t x = shape->ints[k];
        if (x == 0 && !Int(n, "allowzero").value_or(0)) {
          if (k >= a->dims.size()) return std::nullopt;
          x = a->dims[k];
        }
        if (x == -1) {
          if (infer >= 0) return std::nullopt;
          infer = static_cast<int64_t>(k);
        } else if (x < 0) {
          return std::nullopt;
        } else {
          if (x > 0 && known > kMaxValues / x) return std::nullopt;
          known *= x;
        }
        dims.push_back(x);
      }
      if (infer >= 0) {
        if (known == 0 || a->size() % known != 0) return std::nullopt;
        dims[static_cast<size_t>(infer)] = a->size() / known;
      }
    } else {
      const auto axes = ints_arg("axes", 1);
      const auto out_rank = static_cast<int64_t>(a->dims.size()) +
                            (op == "Unsqueeze" ? static_cast<int64_t>(axes ? axes->size() : 0) : 0);
      std::set<int64_t> at;
      for (int64_t x : axes.value_or(std::vector<int64_t>{})) {
        const int64_t k = Axis(x, out_rank);
        if (k < 0 || !at.insert(k).second) return std::nullopt;
      }
      if (op == "Unsqueeze") {
        if (at.empty()) return std::nullopt;
        for (int64_t k = 0, from = 0; k < out_rank; ++k) {
          dims.push_back(at.count(k) ? 1 : a->dims[static_cast<size_t>(from++)]);
        }
      } else {
        for (int64_t k = 0; k < out_rank; ++k) {
          const int64_t d = a->dims[static_cast<size_t>(k)];
          if (at.empty() ? d == 1 : at.count(k) > 0) {
            if (d != 1) return std::nullopt;
            continue;
          }
          dims.push_back(d);
        }
      }
    }
    if (Count(dims) != a->size()) return std::nullopt;
    ConstValue v = *a;
    v.dims = dims;
    return v;
  }
  if (op == "Gather") {
    const ConstValue *a = in(0), *idx = in(1);
    if (a == nullptr || idx == nullptr || !idx->is_int) return std::nullopt;
    const auto r = static_cast<int64_t>(a->dims.size());
    const int64_t axis = Axis(Int(n, "axis").value_or(0), r);
    if (axis < 0) return std::nullopt;
    const int64_t dim = a->dims[static_cast<size_t>(axis)];
    int64_t outer = 1, inner = 1;
    for (int64_t k = 0; k < axis; ++k) outer *= a->dims[static_cast<size_t>(k)];
    for (int64_t k = axis + 1; k < r; ++k) inner *= a->dims[static_cast<size_t>(k)];
    std::vector<int64_t> dims(a->dims.begin(), a->dims.begin() + axis);
    dims.insert(dims.end(), idx->dims.begin(), idx->dims.end());
    dims.insert(dims.end(), a->dims.begin() + axis + 1, a->dims.end());
    if (Count(dims) < 0) return std::nullopt;
    std::vector<int64_t> offsets;
    for (int64_t o = 0; o < outer; ++o) {
      for (int64_t j : idx->ints) {
        if (j < 0) j += dim;
        if (j < 0 || j >= dim) return std::nullopt;
        for (int64_t k = 0; k < inner; ++k) offsets.push_back((o * dim + j) * inner + k);
      }
    }
    return Pick(*a, dims, offsets);
  }
  if (op == "Concat") {
    std::vector<const ConstValue*> parts;
    for (int k = 0; k < n.input_size(); ++k) {
      parts.push_back(in(k));
      if (parts.back() == nullptr || parts.back()->dims.size() != parts[0]->dims.size()) {
        return std::nullopt;
      }
    }
    if (parts.empty()) return std::nullopt;
    const auto r = static_cast<int64_t>(parts[0]->dims.size());
    const int64_t axis = Axis(Int(n, "axis").value_or(0), r);
    if (axis < 0) return std::nullopt;
    ConstValue v;
    v.dims = parts[0]->dims;
    v.dims[static_cast<size_t>(axis)] = 0;
    v.is_int = true;
    for (const ConstValue* p : parts) {
      for (int64_t k = 0; k < r; ++k) {
        if (k != axis && p->dims[static_cast<size_t>(k)] != v.dims[static_cast<size_t>(k)]) {
          return std::nullopt;
        }
      }
      v.dims[static_cast<size_t>(axis)] += p->dims[static_cast<size_t>(axis)];
      v.is_int = v.is_int && p->is_int;
    }
    if (Count(v.dims) < 0) return std::nullopt;
    int64_t outer = 1;
    for (int64_t k = 0; k < axis; ++k) outer *= v.dims[static_cast<size_t>(k)];
    for (int64_t o = 0; o < outer; ++o) {
      for (const ConstValue* p : parts) {
        const int64_t chunk = outer == 0 ? 0 : p->size() / outer;
        for (int64_t k = o * chunk; k < (o + 1) * chunk; ++k) {
          if (v.is_int) {
            v.ints.push_back(p->ints[static_cast<size_t>(k)]);
          } else {
            v.floats.push_back(p->F(k));
          }
        }
      }
    }
    return v;
  }
  if (op == "Slice") {
    const ConstValue* a = in(0);
    const auto starts = ints_arg("starts", 1), ends = ints_arg("ends", 2);
    if (a == nullptr || !starts || !ends || starts->size() != ends->size()) return std::nullopt;
    const auto r = static_cast<int64_t>(a->dims.size());
    std::vector<int64_t> axes, steps(starts->size(), 1);
    if (auto given = ints_arg("axes", 3)) {
      axes = *given;
    } else {
      for (size_t k = 0; k < starts->size(); ++k) axes.push_back(static_cast<int64_t>(k));
    }
    if (n.input_size() > 4 && !n.input(4).empty()) {
      const ConstValue* s = in(4);
      if (s == nullptr || !s->is_int) return std::nullopt;
      steps = s->ints;
    }
    if (axes.size() != starts->size() || steps.size() != starts->size()) return std::nullopt;
    std::vector<int64_t> first(static_cast<size_t>(r), 0), step(static_cast<size_t>(r), 1);
    std::vector<int64_t> dims = a->dims;
    for (size_t k = 0; k < axes.size(); ++k) {
      const int64_t ax = Axis(axes[k], r);
      if (ax < 0) return std::nullopt;
      const auto u = static_cast<size_t>(ax);
      if (!SliceRange((*starts)[k], (*ends)[k], steps[k], a->dims[u], &first[u], &dims[u])) {
        return std::nullopt;
      }
      step[u] = steps[k];
    }
    std::vector<int64_t> in_stride(static_cast<size_t>(r), 1);
    for (int64_t k = r - 2; k >= 0; --k) {
      in_stride[static_cast<size_t>(k)] =
          in_stride[static_cast<size_t>(k + 1)] * a->dims[static_cast<size_t>(k + 1)];
    }
    std::vector<int64_t> offsets, idx(static_cast<size_t>(r), 0);
    for (int64_t m = Count(dims); m > 0; --m) {
      int64_t off = 0;
      for (size_t k = 0; k < idx.size(); ++k) off += (first[k] + idx[k] * step[k]) * in_stride[k];
      offsets.push_back(off);
      for (size_t k = idx.size(); k-- > 0;) {
        if (++idx[k] < dims[k]) break;
        idx[k] = 0;
      }
    }
    return Pick(*a, dims, offsets);
  }
  return std::nullopt;
}

const onnx::TensorProto* Importer::Source(const std::string& t) const {
  std::string s = t;
  for (int k = 0; k <= kMaxDepth; ++k) {
    if (const onnx::TensorProto* p = Init(s)) return p;
    const int i = Producer(s);
    if (i < 0 || N(i).op_type() != "Identity" || N(i).input_size() < 1) return nullptr;
    s = N(i).input(0);
  }
  return nullptr;
}

std::optional<std::vector<int64_t> > Importer::ConstDims(const std::string& t) const {
  if (t.empty() || !IsConst(t)) return std::nullopt;
  if (const onnx::TensorProto* p = Source(t)) {
    return std::vector<int64_t>(p->dims().begin(), p->dims().end());
  }
  if (const ConstValue* v = Evaluate(t)) return v->dims;
  // A large computed constant (a weight times a folded scale): ONNX's shape inference, every dim
  // known and the size sane (as Index holds initializers to).
  auto d = Dims(t);
  int64_t m = 1;
  for (int64_t x : d.value_or(std::vector<int64_t>{-1})) {
    if (x < 0 || (x > 0 && m > (int64_t{1} << 40) / x)) return std::nullopt;
    m *= x;
  }
  return d;
}

bool Importer::NamedParameter(const std::string& t) const {
  if (Source(t) == nullptr || t.rfind("onnx::", 0) == 0) return false;
  return !std::all_of(t.begin(), t.end(), [](char c) { return c >= '0' && c <= '9'; });
}

bool Importer::TransposedCopy(const onnx::TensorProto& a, const onnx::TensorProto& b) const {
  if (a.data_type() != onnx::TensorProto::FLOAT || b.data_type() != onnx::TensorProto::FLOAT ||
      a.dims_size() != 2 || b.dims_size() != 2 || a.dims(0) != b.dims(1) ||
      a.dims(1) != b.dims(0)) {
    return false;
  }
  const int64_t rows = a.dims(0), cols = a.dims(1), n = rows * cols;
  // Element k of a tensor, raw or typed (no copy: an LM head's table may hold 10^8 values).
  auto usable = [n](const onnx::TensorProto& t) {
    return t.data_location() != onnx::TensorProto::EXTERNAL &&
           (t.has_raw_data() ? static_cast<int64_t>(t.raw_data().size()) == 4 * n
                             : t.float_data_size() == n);
  };
  if (!usable(a) || !usable(b)) return false;
  auto bits = [](const onnx::TensorProto& t, int64_t k) {
    uint32_t u;
    if (t.has_raw_data()) {
      std::memcpy(&u, t.raw_data().data() + 4 * k, 4);
    } else {
      const float f = t.float_data(static_cast<int>(k));
      std::memcpy(&u, &f, 4);
    }
    return u;
  };
  for (int64_t i = 0; i < rows; ++i) {
    for (int64_t j = 0; j < cols; ++j) {
      if (bits(a, i * cols + j) != bits(b, j * rows + i)) return false;
    }
  }
  return true;
}

void Importer::InitializersBehind(const std::string& t, std::set<std::string>* out) const {
  std::vector<std::string> todo = {t};
  std::set<std::string> seen;
  while (!todo.empty()) {
    const std::string s = todo.back();
    todo.pop_back();
    if (s.empty() || !seen.insert(s).second || !IsConst(s)) continue;
    if (Init(s) != nullptr) {
      out->insert(s);
      continue;
    }
    const int p = Producer(s);
    if (p >= 0) todo.insert(todo.end(), N(p).input().begin(), N(p).input().end());
  }
}

}  // namespace poseidon::model_import::detail
