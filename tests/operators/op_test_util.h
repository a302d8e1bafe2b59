// OpTest: runs one op on given inputs and checks it. Forward outputs are compared with a
// reference computed by the test; gradients of every float input are checked against central
// finite differences of loss = sum(Out * W) for a fixed random W (so that every output element
// matters with a different weight). The grad ops come from AppendBackward; W is fed as Out@GRAD.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "executor/executor.h"
#include "framework/program_desc.h"

namespace loom::testing {

Tensor Random(DataType dt, DDim dims, uint32_t seed, double lo = -1, double hi = 1);
Tensor Ints(DDim dims, std::vector<int64_t> values);
std::vector<double> Values(const Tensor& t);  // any float/int tensor as doubles

class OpTest {
 public:
  explicit OpTest(std::string type) : type_(std::move(type)) {}
  OpTest& Input(const std::string& slot, Tensor t, bool no_grad = false);
  OpTest& Inputs(const std::string& slot, std::vector<Tensor> ts);  // duplicable slot
  OpTest& Output(const std::string& slot);
  OpTest& Attr(const std::string& name, Attribute value);
  // Where Forward and CheckGrad run (default CPU); feeds and fetches stay on the host.
  OpTest& OnPlace(const Place& place);

  // Runs forward; returns outputs by slot (first var of each slot).
  StatusOr<std::map<std::string, Tensor>> Forward();
  // Checks d(sum(out_slot * W))/d(input) for every float input not marked no_grad.
  // Returns a description of the first mismatch, or "" when all agree.
  std::string CheckGrad(const std::string& out_slot, double eps, double rtol, double atol);
  // Gradients of sum(out_slot * w) for every float input not marked no_grad, in input order.
  StatusOr<std::vector<Tensor>> AnalyticGrads(const std::string& out_slot, const Tensor& w);
  // The one-op program the test builds (for verifier tests).
  ProgramDesc BuildProgram();
  FeedMap Feeds() const;

 private:
  struct In {
    std::string slot;
    std::vector<std::string> vars;
    std::vector<Tensor> values;
    bool no_grad = false;
  };

  std::string type_;
  std::vector<In> inputs_;
  std::vector<std::string> outputs_;
  AttributeMap attrs_;
  Place place_ = Place::CPU();
};

}  // namespace loom::testing
