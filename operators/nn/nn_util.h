// Helpers shared by the CNN / normalization / embedding ops: attribute checks for per-axis int
// lists, grad op construction from a slot list, and a row-major GEMM over CBLAS.
#pragma once

#include <algorithm>
#include <initializer_list>
#include <string>
#include <vector>

#include "operators/common.h"
#include "operators/math/blas.h"

namespace loom::ops::nn {

// Check for an INTS attribute holding exactly n values, each >= min_value.
inline std::function<Status(const std::vector<int>&)> IntsOf(int n, int min_value) {
  return [n, min_value](const std::vector<int>& v) {
    if (static_cast<int>(v.size()) != n)
      return InvalidArgument("must hold ", n, " values, got ", v.size());
    for (int x : v)
      if (x < min_value) return InvalidArgument("values must be >= ", min_value, ", got ", x);
    return Status::OK();
  };
}

// Check for an INTS attribute holding exactly n values (any values).
inline std::function<Status(const std::vector<int>&)> IntsOfSize(int n) {
  return [n](const std::vector<int>& v) {
    return static_cast<int>(v.size()) == n
               ? Status::OK()
               : InvalidArgument("must hold ", n, " values, got ", v.size());
  };
}

// Check for a FLOAT attribute in [lo, hi].
inline std::function<Status(const float&)> FloatIn(float lo, float hi) {
  return [lo, hi](const float& v) {
    return v >= lo && v <= hi ? Status::OK()
                              : InvalidArgument("must be in [", lo, ", ", hi, "], got ", v);
  };
}

// Check for a FLOAT attribute > 0.
inline std::function<Status(const float&)> PositiveFloat() {
  return
      [](const float& v) { return v > 0 ? Status::OK() : InvalidArgument("must be > 0, got ", v); };
}

// Check for a STRING attribute that must be one of a fixed set.
inline std::function<Status(const std::string&)> OneOf(std::vector<std::string> allowed) {
  return [allowed](const std::string& v) {
    if (std::find(allowed.begin(), allowed.end(), v) != allowed.end()) return Status::OK();
    std::string list;
    for (const auto& a : allowed) list += (list.empty() ? "'" : ", '") + a + "'";
    return InvalidArgument("must be one of ", list, ", got '", v, "'");
  };
}

// The grad op of fwd ("<type>_grad", attributes copied) reading the forward slots `inputs`
// (forward input or output slot names, or "<OutSlot>@GRAD") and writing "<Slot>@GRAD" for each
// forward input slot in `grads` that the forward op has.
inline proto::OpDesc MakeGradOp(const OpDesc& fwd, std::initializer_list<const char*> inputs,
                                std::initializer_list<const char*> grads) {
  proto::OpDesc g;
  OpDesc op(&g);
  op.SetType(fwd.Type() + "_grad");
  for (const char* slot : inputs) {
    std::string s = slot;
    size_t at = s.find(kGradSuffix);
    if (at != std::string::npos) {
      std::vector<std::string> vars;
      for (const auto& v : fwd.Output(s.substr(0, at))) vars.push_back(GradVarName(v));
      if (!vars.empty()) op.SetInput(s, vars);
    } else if (fwd.HasInput(s)) {
      op.SetInput(s, fwd.Input(s));
    } else if (fwd.HasOutput(s)) {
      op.SetInput(s, fwd.Output(s));
    }
  }
  for (const char* slot : grads) {
    std::vector<std::string> vars;
    for (const auto& v : fwd.Input(slot)) vars.push_back(GradVarName(v));
    if (!vars.empty()) op.SetOutput(GradVarName(slot), vars);
  }
  for (const auto& a : fwd.proto()->attrs()) *g.add_attrs() = a;
  return g;
}

using ops::Gemm;  // operators/math/blas.h

// "[a, b]" for an INTS attribute in messages.
inline std::string IntsToString(const std::vector<int>& v) {
  std::string s = "[";
  for (size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + std::to_string(v[i]);
  return s + "]";
}

}  // namespace loom::ops::nn
