#include "examples/program_builder.h"

#include <cmath>

#include "framework/verifier.h"

namespace loom::examples {

int ProgramBuilder::InitSeed() {
  // uniform_random treats seed 0 as "draw a fresh seed"; initializers must be reproducible.
  int s = seed_ + counter_++;
  return s != 0 ? s : 0x5eed;
}

std::string ProgramBuilder::NewName(const std::string& prefix) {
  return StrCat(prefix, ".tmp_", counter_++);
}

std::string ProgramBuilder::Data(const std::string& name, std::vector<int64_t> dims,
                                 DataType dtype) {
  dims.insert(dims.begin(), -1);
  VarDesc v = main_->GlobalBlock()->Var(name);
  v.SetDtype(dtype);
  v.SetDims(DDim(dims));
  v.SetStopGradient(true);
  return name;
}

StatusOr<std::string> ProgramBuilder::Param(const std::string& name, std::vector<int64_t> dims,
                                            bool bias) {
  for (ProgramDesc* p : {main_, startup_}) {
    VarDesc v = p->GlobalBlock()->Var(name);
    v.SetDims(DDim(dims));
    v.SetPersistable(true);
    v.SetIsParameter(true);
  }
  BlockDesc* s = startup_->GlobalBlock();
  if (bias) {
    s->AppendOp("fill_constant", {}, {{"Out", {name}}},
                {{"shape", dims}, {"value", 0.0f}, {"dtype", static_cast<int>(proto::FP32)}});
  } else {
    float limit = std::sqrt(6.0f / static_cast<float>(dims[0] + dims[1]));
    s->AppendOp("uniform_random", {}, {{"Out", {name}}},
                {{"shape", dims},
                 {"min", -limit},
                 {"max", limit},
                 {"seed", InitSeed()},
                 {"dtype", static_cast<int>(proto::FP32)}});
  }
  LOOM_RETURN_IF_ERROR(InferShapeAtCompileTime(s, s->OpSize() - 1));
  return name;
}

StatusOr<std::string> ProgramBuilder::Op(
    const std::string& type,
    const std::vector<std::pair<std::string, std::vector<std::string>>>& inputs,
    const std::string& out_slot, const AttributeMap& attrs, const std::string& out_name) {
  std::string out = out_name.empty() ? NewName(type) : out_name;
  BlockDesc* b = main_->GlobalBlock();
  b->Var(out);
  b->AppendOp(type, inputs, {{out_slot, {out}}}, attrs);
  LOOM_RETURN_IF_ERROR(InferShapeAtCompileTime(b, b->OpSize() - 1));
  return out;
}

StatusOr<std::string> ProgramBuilder::FC(const std::string& input, int64_t size,
                                         const std::string& act, const std::string& name) {
  VarDesc in_var = main_->GlobalBlock()->FindVar(input);
  if (!in_var) return NotFound("fc '", name, "': input var '", input, "' is not declared");
  DDim in = in_var.Dims();
  // mul flattens the input to [N, K] with K the product of the dims after the first.
  int64_t k = in.size() >= 2 ? in.product(1, in.size()) : -1;
  if (k <= 0)
    return InvalidArgument("fc '", name, "': input '", input, "' has dims ", in.ToString(),
                           ", need [N, K...] with known K");
  LOOM_ASSIGN_OR_RETURN(std::string w, Param(name + ".w_0", {k, size}, false));
  LOOM_ASSIGN_OR_RETURN(std::string b, Param(name + ".b_0", {size}, true));
  LOOM_ASSIGN_OR_RETURN(std::string xw, Op("mul", {{"X", {input}}, {"Y", {w}}}, "Out"));
  LOOM_ASSIGN_OR_RETURN(std::string out,
                        Op("elementwise_add", {{"X", {xw}}, {"Y", {b}}}, "Out", {{"axis", 1}}));
  if (act.empty()) return out;
  return Op(act, {{"X", {out}}}, "Out");
}

StatusOr<std::string> ProgramBuilder::SoftmaxCrossEntropyLoss(const std::string& logits,
                                                              const std::string& label) {
  BlockDesc* b = main_->GlobalBlock();
  std::string sm = NewName("softmax"), loss = NewName("xent");
  b->Var(sm);
  b->Var(loss);
  b->AppendOp("softmax_with_cross_entropy", {{"Logits", {logits}}, {"Label", {label}}},
              {{"Softmax", {sm}}, {"Loss", {loss}}});
  LOOM_RETURN_IF_ERROR(InferShapeAtCompileTime(b, b->OpSize() - 1));
  return Op("mean", {{"X", {loss}}}, "Out", {}, "loss");
}

StatusOr<std::string> ProgramBuilder::MeanAbsoluteError(const std::string& pred,
                                                        const std::string& label) {
  // |d| = relu(d) + relu(-d) with d = pred - label.
  LOOM_ASSIGN_OR_RETURN(std::string neg_label,
                        Op("scale", {{"X", {label}}}, "Out", {{"scale", -1.0f}}));
  LOOM_ASSIGN_OR_RETURN(std::string diff,
                        Op("elementwise_add", {{"X", {pred}}, {"Y", {neg_label}}}, "Out"));
  LOOM_ASSIGN_OR_RETURN(std::string neg_diff,
                        Op("scale", {{"X", {diff}}}, "Out", {{"scale", -1.0f}}));
  LOOM_ASSIGN_OR_RETURN(std::string pos, Op("relu", {{"X", {diff}}}, "Out"));
  LOOM_ASSIGN_OR_RETURN(std::string neg, Op("relu", {{"X", {neg_diff}}}, "Out"));
  LOOM_ASSIGN_OR_RETURN(std::string abs,
                        Op("elementwise_add", {{"X", {pos}}, {"Y", {neg}}}, "Out"));
  return Op("mean", {{"X", {abs}}}, "Out", {}, "loss");
}

StatusOr<std::vector<ParamGrad>> ProgramBuilder::MinimizeWithSGD(const std::string& loss,
                                                                 float learning_rate) {
  LOOM_ASSIGN_OR_RETURN(std::vector<ParamGrad> pairs, AppendBackward(main_, loss));
  const std::string lr = "learning_rate_0";
  for (ProgramDesc* p : {main_, startup_}) {
    VarDesc v = p->GlobalBlock()->Var(lr);
    v.SetDims({1});
    v.SetPersistable(true);
  }
  startup_->GlobalBlock()->AppendOp("fill_constant", {}, {{"Out", {lr}}},
                                    {{"shape", std::vector<int64_t>{1}},
                                     {"value", learning_rate},
                                     {"dtype", static_cast<int>(proto::FP32)}});
  BlockDesc* b = main_->GlobalBlock();
  for (const auto& pg : pairs) {
    b->AppendOp("sgd", {{"Param", {pg.param}}, {"Grad", {pg.grad}}, {"LearningRate", {lr}}},
                {{"ParamOut", {pg.param}}},
                {{kOpRoleAttr, static_cast<int>(kOpRoleOptimize)},
                 {kOpRoleVarAttr, std::vector<std::string>{pg.param, pg.grad}}});
  }
  LOOM_RETURN_IF_ERROR(VerifyProgram(*main_).WithContext("main program"));
  LOOM_RETURN_IF_ERROR(VerifyProgram(*startup_).WithContext("startup program"));
  return pairs;
}

}  // namespace loom::examples
