// Small programs shared by the framework tests.
#pragma once

#include <random>

#include "framework/program_desc.h"
#include "framework/scope.h"
#include "framework/tensor.h"

namespace loom::testing {

inline Tensor RandomTensor(DataType dt, DDim dims, uint32_t seed, double lo = -1, double hi = 1) {
  Tensor t(dt, dims);
  std::mt19937 rng(seed);
  std::uniform_real_distribution<double> u(lo, hi);
  if (dt == proto::FP64) {
    double* p = t.mutable_data<double>(Place::CPU());
    for (int64_t i = 0; i < t.numel(); ++i) p[i] = u(rng);
  } else {
    float* p = t.mutable_data<float>(Place::CPU());
    for (int64_t i = 0; i < t.numel(); ++i) p[i] = static_cast<float>(u(rng));
  }
  return t;
}

inline Tensor Labels(int64_t n, int64_t classes, uint32_t seed) {
  Tensor t(proto::INT64, DDim{n, 1});
  int64_t* p = t.mutable_data<int64_t>(Place::CPU());
  std::mt19937 rng(seed);
  for (int64_t i = 0; i < n; ++i) p[i] = static_cast<int64_t>(rng() % classes);
  return t;
}

inline VarDesc DeclareVar(BlockDesc* b, const std::string& name, DDim dims, DataType dt,
                          bool persistable = false) {
  VarDesc v = b->Var(name);
  v.SetDims(dims);
  v.SetDtype(dt);
  v.SetPersistable(persistable);
  if (persistable) v.SetIsParameter(true);
  return v;
}

// x[N,4] -> fc(4->5) -> relu -> fc(5->3) -> softmax_with_cross_entropy(label) -> mean = loss.
// Parameters w1 [4,5], b1 [5], w2 [5,3], b2 [3] are persistable; x and label stop_gradient.
inline ProgramDesc MlpProgram(DataType dt) {
  ProgramDesc p;
  BlockDesc* b = p.GlobalBlock();
  DeclareVar(b, "x", DDim{-1, 4}, dt).SetStopGradient(true);
  DeclareVar(b, "label", DDim{-1, 1}, proto::INT64).SetStopGradient(true);
  DeclareVar(b, "w1", DDim{4, 5}, dt, true);
  DeclareVar(b, "b1", DDim{5}, dt, true);
  DeclareVar(b, "w2", DDim{5, 3}, dt, true);
  DeclareVar(b, "b2", DDim{3}, dt, true);
  for (const char* n : {"h0", "h1", "h2", "o0", "o1", "prob", "xent", "loss"})
    DeclareVar(b, n, DDim{}, dt);
  b->AppendOp("mul", {{"X", {"x"}}, {"Y", {"w1"}}}, {{"Out", {"h0"}}});
  b->AppendOp("elementwise_add", {{"X", {"h0"}}, {"Y", {"b1"}}}, {{"Out", {"h1"}}}, {{"axis", 1}});
  b->AppendOp("relu", {{"X", {"h1"}}}, {{"Out", {"h2"}}});
  b->AppendOp("mul", {{"X", {"h2"}}, {"Y", {"w2"}}}, {{"Out", {"o0"}}});
  b->AppendOp("elementwise_add", {{"X", {"o0"}}, {"Y", {"b2"}}}, {{"Out", {"o1"}}}, {{"axis", 1}});
  b->AppendOp("softmax_with_cross_entropy", {{"Logits", {"o1"}}, {"Label", {"label"}}},
              {{"Softmax", {"prob"}}, {"Loss", {"xent"}}});
  b->AppendOp("mean", {{"X", {"xent"}}}, {{"Out", {"loss"}}});
  return p;
}

}  // namespace loom::testing
