// A small C++ program builder: the few layers the example bundles need (data, fc, losses, SGD),
// building startup and main programs the way the Python API does.
#pragma once

#include <string>
#include <vector>

#include "framework/backward.h"
#include "framework/program_desc.h"

namespace loom::examples {

class ProgramBuilder {
 public:
  ProgramBuilder(ProgramDesc* main, ProgramDesc* startup, int seed)
      : main_(main), startup_(startup), seed_(seed) {}

  // A feed variable [-1, dims...] (stop_gradient).
  std::string Data(const std::string& name, std::vector<int64_t> dims,
                   DataType dtype = proto::FP32);
  // act(input · W + b) with W ~ Xavier-uniform and b = 0 initialized in startup.
  StatusOr<std::string> FC(const std::string& input, int64_t size, const std::string& act,
                           const std::string& name);
  StatusOr<std::string> Op(
      const std::string& type,
      const std::vector<std::pair<std::string, std::vector<std::string>>>& inputs,
      const std::string& out_slot, const AttributeMap& attrs = {},
      const std::string& out_name = "");
  StatusOr<std::string> SoftmaxCrossEntropyLoss(const std::string& logits,
                                                const std::string& label);
  // Mean absolute error built from elementwise_add, scale, relu and mean.
  StatusOr<std::string> MeanAbsoluteError(const std::string& pred, const std::string& label);
  // Appends backward and one sgd op per parameter (role optimize, op_role_var set).
  StatusOr<std::vector<ParamGrad>> MinimizeWithSGD(const std::string& loss, float learning_rate);

 private:
  std::string NewName(const std::string& prefix);
  // The seed of the next initializer: fixed by the builder's seed, never 0.
  int InitSeed();
  StatusOr<std::string> Param(const std::string& name, std::vector<int64_t> dims, bool bias);

  ProgramDesc* main_;
  ProgramDesc* startup_;
  int seed_;
  int counter_ = 0;
};

}  // namespace loom::examples
